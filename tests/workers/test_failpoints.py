"""The failpoints crash tests arm: `pause_when:PATH` passes while the file is absent and parks
once it exists (a test arms a point mid-run, e.g. between an append's commit and its ack), and,
when the file holds a pattern, only for hits whose detail matches it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from workers import failpoints
from workers.failpoints import FailpointError, failpoint, failpoint_hook

POINT = "test.point"


async def test_pause_when_passes_until_its_file_exists_then_parks(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    armed = tmp_path / "armed"
    monkeypatch.setitem(failpoints._ENABLED, POINT, f"pause_when:{armed}")
    await asyncio.wait_for(failpoint(POINT), 5)
    armed.touch()
    parked = asyncio.create_task(failpoint(POINT))
    done, _ = await asyncio.wait({parked}, timeout=0.2)
    parked.cancel()
    assert not done, "an armed point let the caller through"


async def test_pause_when_with_a_pattern_parks_only_hits_whose_detail_matches(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    armed = tmp_path / "armed"
    monkeypatch.setitem(failpoints._ENABLED, POINT, f"pause_when:{armed}")
    armed.write_text("of ([4-9]|\\d\\d+) writers\n")
    await asyncio.wait_for(failpoint(POINT, "3 appends of 3 writers on 3 segments"), 5)
    parked = asyncio.create_task(failpoint(POINT, "5 appends of 4 writers on 3 segments"))
    done, _ = await asyncio.wait({parked}, timeout=0.2)
    parked.cancel()
    assert not done, "a matching hit was let through"


async def test_an_unnamed_point_passes() -> None:
    await asyncio.wait_for(failpoint("test.not.configured"), 5)


async def test_a_hook_is_none_for_a_point_that_is_off_and_the_point_itself_when_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert failpoint_hook(POINT) is None
    monkeypatch.setitem(failpoints._ENABLED, POINT, "raise")
    hook = failpoint_hook(POINT)
    assert hook is not None
    with pytest.raises(FailpointError):
        await hook("a detail")
