"""What the tests of grouped transaction statements share (creates, pings, moves): a controller
without workers whose scope holds fixed-size streams, and an OPEN transaction on one of them."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable

from app.domain.records import ScalingPolicy, StreamConfig
from app.domain.txns import TxnId
from app.testing.controller import Services, running_controller

LEASE_MS = 10_000


@contextlib.asynccontextmanager
async def controller_with_streams(
    db_url: str, scope: str, streams: Iterable[str], segments: int = 1
) -> AsyncIterator[Services]:
    async with running_controller(db_url, workers=False) as services:
        await services.scopes.create_scope(scope)
        for name in streams:
            await services.streams.create_stream(scope, name, StreamConfig(ScalingPolicy.fixed(segments)))
        yield services


async def open_txn(services: Services, scope: str, stream: str) -> TxnId:
    return (await services.transactions.create(scope, stream, LEASE_MS)).txn
