"""Reader groups wired over a `running_controller(..., workers=False)`: the store, the service,
the subscriber service, and the request handlers (reader groups' and the streams' own) behind
a runner that tests either drive step by step (`run_pending`) or leave to a real dispatcher
polling every request bucket (`rig(..., workers=True)`)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from app.api.grpc.proto import controller_pb2 as pb
from app.domain.requests import Processor, RequestKind
from app.ports import Clock
from app.services.readergroups import ReaderGroupService
from app.services.retention import SubscriberService
from app.store.readergroups import PgReaderGroupStore
from app.store.retention import PgRetentionStore
from app.testing.controller import TEST_SETTINGS, Services
from workers.dispatcher import RequestDispatcher
from workers.handlers import stream_request_handlers
from workers.handlers.common import WorkflowDeps
from workers.handlers.readergroups import ReaderGroupDeps, reader_group_handlers
from workers.runner import RequestHandler, RequestRunner

ZERO_ID = "00000000-0000-0000-0000-000000000000"


@dataclass
class Rig:
    s: Services
    store: PgReaderGroupStore
    service: ReaderGroupService
    subscribers: SubscriberService
    deps: ReaderGroupDeps
    handlers: dict[RequestKind, RequestHandler]
    runner: RequestRunner
    buckets: list[int]


@asynccontextmanager
async def rig(
    s: Services, *, workers: bool, clock: Clock | None = None, completion_timeout_s: float = 20.0
) -> AsyncIterator[Rig]:
    clock = clock or s.clock
    store = PgReaderGroupStore(s.pool)
    subscribers = SubscriberService(s.stream_store, PgRetentionStore(s.pool), clock)
    workflow = WorkflowDeps(s.stream_store, s.scope_store, s.segment_store, clock, s.txn_store)
    handlers = {
        **stream_request_handlers(workflow),
        **reader_group_handlers(workflow, store, subscribers),
    }
    runner = RequestRunner(
        s.requests,
        handlers,
        clock,
        retry_first_s=0.02,
        retry_cap_s=0.2,
        max_failures=TEST_SETTINGS.request_max_failures,
    )
    settings = await s.cluster_store.get_settings()
    buckets = list(range(settings.counts.requests))
    built = Rig(
        s,
        store,
        ReaderGroupService(
            store, s.scope_store, clock, s.requests, completion_timeout_s=completion_timeout_s
        ),
        subscribers,
        ReaderGroupDeps(workflow, store, subscribers),
        handlers,
        runner,
        buckets,
    )
    if not workers:
        yield built
        return
    dispatcher = RequestDispatcher(
        s.requests,
        runner,
        lambda: frozenset(buckets),
        ceiling=TEST_SETTINGS.request_concurrency,
        poll_s=0.02,
    )
    task = asyncio.create_task(dispatcher.run())
    try:
        yield built
    finally:
        await dispatcher.stop(5)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def run_pending(r: Rig) -> int:
    """One attempt for each queued request, oldest first; how many finished."""
    finished = 0
    for request in await r.s.requests.pending(Processor.REQUESTS, r.buckets, [], 1000):
        if await r.runner.attempt(dataclasses.replace(request, not_before=0)) is None:
            finished += 1
    return finished


def stream_cut(scope: str, stream: str, cut: dict[int, int] | None = None) -> pb.StreamCut:
    return pb.StreamCut(streamInfo=pb.StreamInfo(scope=scope, stream=stream), cut=cut or {})


def rg_config(
    scope: str,
    name: str,
    streams: list[pb.StreamCut],
    *,
    retention: int = 0,
    generation: int = 0,
    rg_id: str = ZERO_ID,
    ending: list[pb.StreamCut] | None = None,
    max_outstanding: int = 3,
) -> pb.ReaderGroupConfiguration:
    return pb.ReaderGroupConfiguration(
        scope=scope,
        readerGroupName=name,
        groupRefreshTimeMillis=3_000,
        automaticCheckpointIntervalMillis=30_000,
        maxOutstandingCheckpointRequest=max_outstanding,
        retentionType=retention,
        generation=generation,
        readerGroupId=rg_id,
        startingStreamCuts=streams,
        endingStreamCuts=ending or [],
        rolloverSizeBytes=0,
    )
