"""What wakes a dispatcher to read the request queue: the NOTIFY of an insert names the request's
stream, and the commits dispatcher, which runs one request per stream at a time (that run covers
what is pending on the stream), does not read the queue for a stream it already has in hand. It
reads it when that run ends, and for any other stream or a notification in the old form."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import pytest

from app.domain.cluster import DEFAULT_COUNTS
from app.domain.records import ScalingPolicy, StreamConfig
from app.domain.requests import NewRequest, Processor, Request, RequestKind
from app.store.notifications import REQUESTS_CHANNEL
from app.testing.controller import TEST_SETTINGS, Services, running_controller
from workers.dispatcher import RequestDispatcher
from workers.runner import MarkStarted, RequestRunner

ALL_BUCKETS = frozenset(range(DEFAULT_COUNTS.requests))


class CountedReads:
    """The real queue; `reads` counts the dispatcher's reads of pending requests."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.reads = 0

    async def pending(self, *args: Any, **kwargs: Any) -> Sequence[Request]:
        self.reads += 1
        result: Sequence[Request] = await self._inner.pending(*args, **kwargs)
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@dataclass
class HeldRuns:
    release: asyncio.Event = field(default_factory=asyncio.Event)
    runs: list[str] = field(default_factory=list)

    async def handle(self, request: Request, mark_started: MarkStarted) -> None:
        self.runs.append(request.stream)
        await self.release.wait()


@pytest.fixture
async def services(db_url: str) -> AsyncIterator[Services]:
    async with running_controller(db_url, workers=False) as services:
        await services.scopes.create_scope("sc")
        for name in ("s", "t"):
            await services.streams.create_stream("sc", name, StreamConfig(ScalingPolicy.fixed(1)))
        yield services


async def test_a_commit_request_of_a_stream_in_hand_is_read_when_its_run_ends_not_on_its_notify(
    services: Services, db_url: str
) -> None:
    heard: asyncio.Queue[str] = asyncio.Queue()
    listening = await asyncpg.connect(db_url)
    await listening.add_listener(REQUESTS_CHANNEL, lambda *args: heard.put_nowait(args[-1]))
    queue = CountedReads(services.requests)
    held = HeldRuns()
    runner = RequestRunner(
        queue, {RequestKind.COMMIT_TXNS: held}, services.clock, processor=Processor.COMMITS,
        barrier=False, max_failures=TEST_SETTINGS.request_max_failures,
    )  # fmt: skip
    dispatcher = RequestDispatcher(
        queue, runner, lambda: ALL_BUCKETS, processor=Processor.COMMITS, one_per_key=True,
        ceiling=TEST_SETTINGS.request_concurrency, poll_s=60,
    )  # fmt: skip
    running = asyncio.create_task(dispatcher.run())

    async def commit_request(stream: str) -> str:
        """Files one and hands its notification to the dispatcher, as the listener does."""
        now = services.clock.now_ms()
        commits = Processor.COMMITS
        await queue.enqueue(NewRequest(RequestKind.COMMIT_TXNS, "sc", stream, now, processor=commits))
        payload = await asyncio.wait_for(heard.get(), 10)
        dispatcher.wake(payload)
        return payload

    async def until(check: Any, what: str) -> None:
        for _ in range(200):
            if check():
                return
            await asyncio.sleep(0.02)
        raise AssertionError(f"timed out waiting for {what}")

    try:
        await until(lambda: queue.reads == 1, "the first read")
        first = await commit_request("s")
        assert first.startswith("commits:") and first.endswith(":sc/s"), first
        await until(lambda: held.runs == ["s"], "s's run")
        reads = queue.reads
        await commit_request("s")
        await asyncio.sleep(0.3)
        assert queue.reads == reads, "read the queue for a stream whose run was in hand"
        # Any other stream, and the form a server before migration 0024 sends, are read at once.
        await commit_request("t")
        await until(lambda: held.runs == ["s", "t"], "t's run")
        reads = queue.reads
        dispatcher.wake(first.rsplit(":", 1)[0])
        await until(lambda: queue.reads == reads + 1, "a read on the old form")
        # The run ends: the queue is read, and s's second request runs.
        held.release.set()
        await until(lambda: held.runs == ["s", "t", "s"], "s's second run")
        await until(lambda: dispatcher.in_flight == 0, "every run done")
    finally:
        await dispatcher.stop(2)
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
        await listening.close()
