"""ReadAhead's bookkeeping (app/segmentstore/server/read_ahead.py): only the exact range answers,
one entry per segment, the byte budget (the oldest goes), a failed fetch answers nothing (the
reader reads afresh), a reader going away leaves the fetch to end, and clear() cancels."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Awaitable, Callable

import pytest

from app.domain.errors import StoreUnavailable
from app.segmentstore.server.read_ahead import ReadAhead
from app.segmentstore.storage import ReadResult


class Reads:
    """Fetches that end when the test says so, recording what was asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, int, int]] = []
        self.release = asyncio.Event()
        self.release.set()
        self.ended = 0

    def of(
        self, segment: str, offset: int, size: int, fail: bool = False
    ) -> Callable[[], Awaitable[ReadResult]]:
        async def read() -> ReadResult:
            self.asked.append((segment, offset, size))
            try:
                await self.release.wait()
                if fail:
                    raise StoreUnavailable("the database went away")
                return ReadResult(offset, (b"x" * size,), 10_000, 0, False)
            finally:
                self.ended += 1

        return read


async def test_only_the_exact_range_answers_and_a_range_elsewhere_is_dropped() -> None:
    reads, ahead = Reads(), ReadAhead(1000)
    ahead.start("s", 100, 50, reads.of("s", 100, 50))
    assert await ahead.answer("s", 100, 40) is None  # another size: the reader went elsewhere
    assert len(ahead) == 0 and ahead.held_bytes == 0
    ahead.start("s", 100, 50, reads.of("s", 100, 50))
    assert await ahead.answer("other", 100, 50) is None
    result = await ahead.answer("s", 100, 50)
    assert result is not None and result.offset == 100 and result.size == 50
    assert await ahead.answer("s", 100, 50) is None  # answered once
    assert len(ahead) == 0


async def test_one_entry_per_segment_and_the_budget_drops_the_oldest() -> None:
    reads, ahead = Reads(), ReadAhead(100)
    ahead.start("a", 0, 40, reads.of("a", 0, 40))
    ahead.start("a", 40, 40, reads.of("a", 40, 40))
    assert len(ahead) == 1 and ahead.held_bytes == 40
    ahead.start("b", 0, 40, reads.of("b", 0, 40))
    ahead.start("c", 0, 40, reads.of("c", 0, 40))
    assert ahead.held_bytes == 80 and len(ahead) == 2
    assert await ahead.answer("a", 40, 40) is None  # the oldest went
    assert await ahead.answer("b", 0, 40) is not None
    assert await ahead.answer("c", 0, 40) is not None
    ahead.start("d", 0, 101, reads.of("d", 0, 101))  # larger than the whole budget: not fetched
    assert len(ahead) == 0
    assert ReadAhead(0).held_bytes == 0


async def test_a_failed_fetch_answers_nothing_and_is_not_reported_as_an_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reads, ahead = Reads(), ReadAhead(1000)
    ahead.start("s", 0, 10, reads.of("s", 0, 10, fail=True))
    assert await ahead.answer("s", 0, 10) is None
    ahead.start("t", 0, 10, reads.of("t", 0, 10, fail=True))
    await asyncio.sleep(0.01)
    ahead.invalidate("t")
    await asyncio.sleep(0.01)
    gc.collect()  # asyncio reports an unretrieved exception when the task is collected
    assert "exception was never retrieved" not in caplog.text


async def test_a_reader_going_away_leaves_the_fetch_to_end_and_clear_cancels_the_rest() -> None:
    reads, ahead = Reads(), ReadAhead(1000)
    reads.release.clear()
    ahead.start("s", 0, 10, reads.of("s", 0, 10))
    waiting = asyncio.create_task(ahead.answer("s", 0, 10))
    await asyncio.sleep(0.01)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    ahead.start("u", 0, 10, reads.of("u", 0, 10))
    await asyncio.sleep(0.01)
    ahead.invalidate("u")  # dropped while fetching: it too ends on its own
    reads.release.set()
    await asyncio.sleep(0.01)
    assert reads.ended == 2
    reads.release.clear()
    ahead.start("t", 0, 10, reads.of("t", 0, 10))
    await asyncio.sleep(0.01)
    ahead.clear()
    await asyncio.sleep(0.01)
    assert reads.ended == 3 and len(ahead) == 0 and ahead.held_bytes == 0
