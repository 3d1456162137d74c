"""`pgcontroller stream list|create|info|scale|seal|delete` against a served controller, in a
separate process: what each prints, and that the controller holds what it says."""

from __future__ import annotations

import asyncio
import json

from tests.admin_cli.conftest import Served


async def test_a_stream_from_creation_to_deletion(served: Served) -> None:
    await served.services.scopes.create_scope("sc")
    created = await served.run(
        "stream", "create", "sc/orders", "--segments", "2", "--retention-time-ms", "86400000", "--tag", "gold"
    )
    assert (created.code, created.out) == (0, "stream sc/orders created\n"), created
    await served.run("stream", "create", "sc/other")

    listed = await served.run("stream", "list", "sc", "--json")
    assert json.loads(listed.out) == {"scope": "sc", "streams": ["orders", "other"]}
    internal = await served.run("stream", "list", "sc", "--internal", "--json")
    assert json.loads(internal.out)["streams"] == ["_MARKorders", "_MARKother", "orders", "other"]
    tagged = await served.run("stream", "list", "sc", "--tag", "gold")
    assert [line.strip() for line in tagged.out.splitlines()] == ["STREAM", "orders"]

    info = json.loads((await served.run("stream", "info", "sc/orders", "--json")).out)
    assert info["scalingPolicy"] == {
        "scaleType": "FIXED_NUM_SEGMENTS",
        "targetRate": 0,
        "scaleFactor": 0,
        "minNumSegments": 2,
    }
    assert info["retentionPolicy"]["retentionType"] == "TIME"
    assert info["retentionPolicy"]["retentionParam"] == 86400000
    assert info["tags"] == ["gold"]
    assert [(s["number"], s["epoch"], s["minKey"], s["maxKey"]) for s in info["currentSegments"]] == [
        (0, 0, 0.0, 0.5),
        (1, 0, 0.5, 1.0),
    ]
    human = await served.run("stream", "info", "sc/orders")
    assert human.code == 0 and "FIXED_NUM_SEGMENTS min 2" in human.out and "SEGMENT" in human.out

    # Three equal segments replace both; the command returns once the scale is done.
    scaled = await served.run("stream", "scale", "sc/orders", "--segments", "3")
    assert (scaled.code, scaled.out) == (0, "stream sc/orders scaled: epoch 1, 3 new segment(s)\n"), scaled
    after = json.loads((await served.run("stream", "info", "sc/orders", "--json")).out)["currentSegments"]
    assert [(s["number"], s["epoch"]) for s in after] == [(2, 1), (3, 1), (4, 1)]
    # An explicit scale: seal one segment, split its range in two.
    last = after[-1]
    explicit = await served.run(
        "stream",
        "scale",
        "sc/orders",
        "--seal",
        str(last["segmentId"]),
        "--range",
        f"{last['minKey']}-0.9",
        "--range",
        f"0.9-{last['maxKey']}",
        "--json",
    )
    assert explicit.code == 0, explicit
    assert json.loads(explicit.out)["epoch"] == 2

    refused = await served.run("stream", "delete", "sc/orders")
    assert (refused.code, refused.err) == (
        1,
        "pgcontroller: delete stream sc/orders: the stream is not sealed (seal it first)\n",
    )
    assert (await served.run("stream", "seal", "sc/orders")).out == "stream sc/orders sealed\n"
    assert (await served.run("stream", "delete", "sc/orders")).out == "stream sc/orders deleted\n"
    assert not await served.services.streams.stream_exists("sc", "orders")


async def test_stream_failures_are_one_line_with_their_exit_code(served: Served) -> None:
    await served.services.scopes.create_scope("sc")
    await served.run("stream", "create", "sc/s")
    cases = [
        (("stream", "create", "sc/s"), 1, "pgcontroller: create stream sc/s: already exists"),
        (("stream", "create", "nope/s"), 1, "pgcontroller: create stream nope/s: not found: no scope nope"),
        (("stream", "create", "sc/bad name"), 2, "pgcontroller: create stream sc/bad name: invalid input"),
        (("stream", "create", "no-slash"), 2, "pgcontroller: a stream is named scope/name"),
        (
            ("stream", "create", "sc/t", "--segments", "0"),
            2,
            "pgcontroller: create stream sc/t: invalid input",
        ),
        (("stream", "list", "nope"), 1, "pgcontroller: list streams of scope nope: not found"),
        (("stream", "info", "sc/absent"), 1, "pgcontroller: stream sc/absent: not found"),
        (("stream", "seal", "sc/absent"), 1, "pgcontroller: seal stream sc/absent: not found"),
        (("stream", "delete", "sc/absent"), 1, "pgcontroller: delete stream sc/absent: not found"),
        (
            ("stream", "scale", "sc/s", "--seal", "7", "--range", "0-1"),
            1,
            "pgcontroller: scale stream sc/s: refused",
        ),
        (
            ("stream", "scale", "sc/s", "--seal", "0", "--range", "x"),
            2,
            "pgcontroller: scale stream sc/s: invalid",
        ),
    ]
    # Each case is independent of the others: run at once, they cost one process start's time.
    results = await asyncio.gather(*(served.run(*argv) for argv, _, _ in cases))
    for (argv, code, start), result in zip(cases, results, strict=True):
        assert (result.code, result.out) == (code, ""), (argv, result)
        assert result.err.startswith(start) and result.err.count("\n") == 1, (argv, result.err)
    assert not await served.services.streams.stream_exists("sc", "t")
