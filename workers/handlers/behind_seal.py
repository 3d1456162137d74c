"""Requests queued before a seal that can no longer run as asked: a SEALING stream only moves
to SEALED, so an update, truncation or scale found behind a seal ends at once instead of
being postponed forever at the head of the stream's queue, where it would hold back the seal
(and every later request of the stream) too."""

from __future__ import annotations

from app.domain.records import StreamState
from app.ports import StreamStore

CLOSED_BY_SEAL = frozenset({StreamState.SEALING, StreamState.SEALED})


async def closed_by_seal(streams: StreamStore, scope: str, name: str) -> bool:
    """Whether a seal was requested or done: the state can then never become ACTIVE again."""
    return (await streams.get_state(scope, name)).value in CLOSED_BY_SEAL
