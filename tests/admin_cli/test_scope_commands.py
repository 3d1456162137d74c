"""`pgcontroller scope list|create|delete` against a served controller, in a separate process."""

from __future__ import annotations

import asyncio
import json

from tests.admin_cli.conftest import Served


async def test_create_list_and_delete_a_scope(served: Served) -> None:
    created = await served.run("scope", "create", "ops")
    assert (created.code, created.out, created.err) == (0, "scope ops created\n", "")
    assert await served.services.scopes.scope_exists("ops")

    table = await served.run("scope", "list")
    assert table.code == 0
    lines = table.out.splitlines()
    assert lines[0].strip() == "SCOPE" and "ops" in [line.strip() for line in lines[1:]]
    listed = await served.run("scope", "list", "--json")
    assert listed.code == 0 and "ops" in json.loads(listed.out)["scopes"]

    described = await served.run("scope", "info", "ops", "--json")
    assert (described.code, json.loads(described.out)) == (0, {"scopeName": "ops"})

    deleted = await served.run("scope", "delete", "ops", "--json")
    assert deleted.code == 0 and json.loads(deleted.out) == {"deleted": True, "scope": "ops"}
    assert not await served.services.scopes.scope_exists("ops")


async def test_scope_failures_are_one_line_with_their_exit_code(served: Served) -> None:
    await served.services.scopes.create_scope("busy")
    await served.run("stream", "create", "busy/s")
    cases = [
        (("scope", "create", "busy"), 1, "pgcontroller: create scope busy: already exists"),
        (("scope", "create", "bad name!"), 2, "pgcontroller: create scope bad name!: invalid input:"),
        (("scope", "delete", "absent"), 1, "pgcontroller: delete scope absent: not found"),
        (("scope", "info", "absent"), 1, "pgcontroller: scope absent: not found"),
        (("scope", "delete", "busy"), 1, "pgcontroller: delete scope busy: the scope is not empty"),
    ]
    # Each case is independent of the others: run at once, they cost one process start's time.
    results = await asyncio.gather(*(served.run(*argv) for argv, _, _ in cases))
    for (argv, code, start), result in zip(cases, results, strict=True):
        assert (result.code, result.out) == (code, ""), (argv, result)
        assert result.err.startswith(start) and result.err.count("\n") == 1, (argv, result.err)
    assert await served.services.scopes.scope_exists("busy")

    # --recursive seals and deletes what the scope holds, then the scope.
    recursive = await served.run("scope", "delete", "busy", "--recursive")
    assert recursive.code == 0, recursive
    assert not await served.services.scopes.scope_exists("busy")
