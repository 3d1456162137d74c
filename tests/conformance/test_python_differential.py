"""Every scenario of Pravega's Python client that the end-to-end tests run
(tests/support/client_scenarios.py), run against `serve` and against Pravega 0.13 standalone, one
after the other on both in the same order (so listings see the same scopes): each key of a
scenario's result must be the same on both, unless docs/compatibility.md lists `scenario.key`
under "Python client conformance" with the reason."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from app.testing.served import ServedProcess
from tests.conformance.java_suite import SUMMARIES
from tests.conformance.listed import listed_differences
from tests.conformance.pravega_standalone import Standalone
from tests.support.client import run_client
from tests.support.client_scenarios import SCENARIOS

pytestmark = [pytest.mark.interop, pytest.mark.timeout(900)]

# Values that differ by nature from run to run (ids the server generates, timings).
VARYING = {"commit_and_abort": {"committed_id", "aborted_id", "seconds"}}
CLIENT_TIMEOUT_S = 100.0


def comparable(value: Any) -> Any:
    """What the comparison looks at: that a call failed, not its message (each server words its
    errors its own way); listings as sets (neither server promises an order)."""
    if isinstance(value, dict):
        if set(value) == {"error"}:
            return "error"
        return {key: comparable(item) for key, item in value.items()}
    if isinstance(value, list):
        items = [comparable(item) for item in value]
        return sorted(items) if all(isinstance(item, str) for item in items) else items
    return value


def as_fields(result: Any) -> dict[str, Any]:
    """A scenario's result as named fields: a script whose result is one value has one, `result`."""
    return result if isinstance(result, dict) else {"result": result}


def differences(scenario: str, ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    skipped = VARYING.get(scenario, set())
    return {
        f"{scenario}.{key}": (comparable(ours.get(key)), comparable(theirs.get(key)))
        for key in sorted((set(ours) | set(theirs)) - skipped)
        if comparable(ours.get(key)) != comparable(theirs.get(key))
    }


async def test_python_client_scenarios_answer_on_serve_as_on_pravega(
    servers: tuple[ServedProcess, Standalone],
) -> None:
    served, oracle = servers
    listed = listed_differences("Python client conformance")
    found: dict[str, tuple[Any, Any]] = {}
    compared = 0
    for scenario, script in SCENARIOS.items():
        ours, theirs = await asyncio.gather(
            run_client(served.grpc_uri, script, timeout_s=CLIENT_TIMEOUT_S),
            run_client(oracle.controller_uri, script, timeout_s=CLIENT_TIMEOUT_S),
        )
        ours, theirs = as_fields(ours), as_fields(theirs)
        compared += len(set(ours) | set(theirs))
        found.update(differences(scenario, ours, theirs))
    unlisted = {name: pair for name, pair in found.items() if name not in listed}
    summary = (
        f"python conformance: {len(SCENARIOS)} scenarios, {compared} results compared, "
        f"{len(found) - len(unlisted)} differ from Pravega (listed), {len(unlisted)} differ unlisted"
    )
    SUMMARIES.mkdir(parents=True, exist_ok=True)
    (SUMMARIES / "python.txt").write_text(summary + "\n")
    stale = sorted(set(listed) - set(found))
    assert not unlisted, summary + "".join(
        f"\n{name}: serve {ours!r}, pravega {theirs!r}" for name, (ours, theirs) in unlisted.items()
    )
    assert not stale, f"listed in docs/compatibility.md but the same on both servers now: {stale}"


def test_comparable_keeps_what_matters() -> None:
    assert comparable({"error": "INVALID_ARGUMENT: bad"}) == "error"
    assert comparable({"ok": True}) == {"ok": True}
    assert comparable(["b", "a"]) == ["a", "b"]
    assert comparable([3, 1]) == [3, 1]
    assert differences("s", {"a": ["x", "y"], "b": 1}, {"a": ["y", "x"], "b": 2}) == {"s.b": (1, 2)}
    assert differences("commit_and_abort", {"seconds": 1}, {"seconds": 2}) == {}


def test_listed_differences_reads_the_section_table(tmp_path: Path) -> None:
    document = tmp_path / "compatibility.md"
    document.write_text(
        "## Other\n| `x.y` | a |\n"
        "## Python client conformance\n\n| case | a |\n|---|---|\n| `s.k` | p | q |\n"
    )
    assert listed_differences("python client conformance", document) == {"s.k"}
