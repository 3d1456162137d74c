"""`pgcontroller readergroup list|create|info|delete` and `request list` against a served
controller, in a separate process."""

from __future__ import annotations

import asyncio
import json

from app.domain.records import ScalingPolicy, StreamConfig
from app.services.stream_updates import UpdateOutcome
from tests.admin_cli.conftest import Served


async def test_a_reader_group_from_creation_to_deletion(served: Served) -> None:
    await served.services.scopes.create_scope("sc")
    await served.run("stream", "create", "sc/a")
    await served.run("stream", "create", "sc/b")
    created = await served.run(
        "readergroup", "create", "sc/rg", "--stream", "sc/a", "--stream", "sc/b", "--json"
    )
    assert created.code == 0, created
    group_id = json.loads(created.out)["readerGroupId"]

    listed = await served.run("readergroup", "list", "sc")
    assert [line.strip() for line in listed.out.splitlines()] == ["READER GROUP", "rg"]
    info = json.loads((await served.run("readergroup", "info", "sc/rg", "--json")).out)
    assert info["readerGroupId"] == group_id and info["generation"] == 0
    assert info["retentionType"] == "NONE"
    assert [c["stream"] for c in info["startingStreamCuts"]] == ["sc/a", "sc/b"]
    human = await served.run("readergroup", "info", "sc/rg")
    assert human.code == 0 and group_id in human.out and "sc/a from head" in human.out

    again = await served.run("readergroup", "create", "sc/rg", "--stream", "sc/a")
    assert (again.code, again.err) == (1, "pgcontroller: create reader group sc/rg: already exists\n")

    deleted = await served.run("readergroup", "delete", "sc/rg")
    assert (deleted.code, deleted.out) == (0, "reader group sc/rg deleted\n"), deleted
    assert (await served.run("readergroup", "list", "sc", "--json")).out.count("rg") == 0


async def test_reader_group_failures_are_one_line_with_their_exit_code(served: Served) -> None:
    await served.services.scopes.create_scope("sc")
    cases = [
        (
            ("readergroup", "create", "nope/rg", "--stream", "nope/s"),
            1,
            "create reader group nope/rg: not found",
        ),
        (
            ("readergroup", "create", "sc/bad name", "--stream", "sc/s"),
            2,
            "create reader group sc/bad name: invalid",
        ),
        (("readergroup", "info", "sc/absent"), 1, "reader group sc/absent: not found"),
        (("readergroup", "delete", "sc/absent"), 1, "delete reader group sc/absent: not found"),
        (("readergroup", "list", "nope"), 1, "list reader groups of scope nope: not found"),
        (("readergroup", "info", "no-slash"), 2, "a reader group is named scope/name"),
    ]
    results = await asyncio.gather(*(served.run(*argv) for argv, _, _ in cases))
    for (argv, code, start), result in zip(cases, results, strict=True):
        assert (result.code, result.out) == (code, ""), (argv, result)
        assert result.err.startswith("pgcontroller: " + start) and result.err.count("\n") == 1, (
            argv,
            result.err,
        )


async def test_request_list_shows_the_parked_requests(served: Served) -> None:
    empty = await served.run("request", "list")
    assert (empty.code, empty.out, empty.err) == (0, "", "0 parked request(s)\n")
    # A truncation the segment store refuses (beyond the segment's length) is parked.
    await served.services.scopes.create_scope("sc")
    await served.services.streams.create_stream("sc", "s", StreamConfig(ScalingPolicy.fixed(1)))
    assert (
        await served.services.lifecycle.truncation.truncate_stream("sc", "s", {0: 100})
        is UpdateOutcome.FAILURE
    )
    listed = await served.run("request", "list", "--json")
    assert listed.code == 0, listed
    [row] = json.loads(listed.out)["requests"]
    assert (row["kind"], row["scope"], row["stream"]) == ("truncate_stream", "sc", "s")
    table = await served.run("request", "list")
    assert table.out.startswith(f"{row['id']}\ttruncate_stream\tsc/s\t"), table
