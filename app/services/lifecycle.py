"""The stream-lifecycle use cases the API layers call, bundled for wiring."""

from __future__ import annotations

from dataclasses import dataclass

from app.ports import Clock, RequestQueue, ScopeStore, StreamStore
from app.services.deletion import Deletion
from app.services.history import HistoryQueries
from app.services.scaling import Scaling
from app.services.sealing import Sealing
from app.services.stream_updates import StreamUpdates
from app.services.stream_workflow import StreamWorkflows
from app.services.truncation import Truncation


@dataclass(frozen=True, slots=True)
class StreamLifecycle:
    updates: StreamUpdates
    scaling: Scaling
    truncation: Truncation
    sealing: Sealing
    deletion: Deletion
    history: HistoryQueries

    @staticmethod
    def build(
        scopes: ScopeStore,
        streams: StreamStore,
        requests: RequestQueue,
        clock: Clock,
        *,
        completion_timeout_s: float,
        seal_busy_first_s: float,
    ) -> StreamLifecycle:
        workflows = StreamWorkflows(streams, clock, requests, completion_timeout_s)
        return StreamLifecycle(
            updates=StreamUpdates(workflows),
            scaling=Scaling(streams, clock, requests),
            truncation=Truncation(workflows),
            sealing=Sealing(workflows, busy_first_s=seal_busy_first_s),
            deletion=Deletion(scopes, workflows),
            history=HistoryQueries(streams),
        )
