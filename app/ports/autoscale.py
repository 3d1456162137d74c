"""The auto-scaling ports (adapters: app/store/autoscale.py, app/services/autoscale.py,
app/segmentstore/autoscaler.py): segment stores' traffic reports become AUTO_SCALE requests, and a
DOWN report marks its segment cold so that cold neighbours can merge."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from app.domain.autoscale import ReportResult, ScaleDirection
from app.domain.records import Versioned
from app.domain.requests import NewRequest


class AutoScaleStore(Protocol):
    """The report intake and the cold-segment markers: a marker holds its segment cold until a
    time, and a DOWN report merges only segments that are cold."""

    async def check_segment(self, scope: str, name: str, segment_id: int) -> None:
        """NotFound for a missing stream or a segment the stream never had."""
        ...

    async def enqueue_report(self, request: NewRequest, segment_id: int) -> int:
        """Queues the AUTO_SCALE request after the same check as check_segment."""
        ...

    async def cold_markers(self, scope: str, name: str) -> dict[int, Versioned[int]]:
        """segment id -> (cold until, version)."""
        ...

    async def put_cold_marker(
        self, scope: str, name: str, segment_id: int, until: int, expected_version: int | None
    ) -> int:
        """Creates (None) or rewrites the marker at its version; WriteConflict on a lost race,
        NotFound for a missing stream."""
        ...

    async def delete_cold_markers(self, scope: str, name: str, markers: Mapping[int, int]) -> None:
        """All of them (segment id -> version read) or none (WriteConflict)."""
        ...


class ScaleReportSink(Protocol):
    """Where segment-store traffic reports go (Pravega's writer to `_requeststream`)."""

    async def report(
        self,
        scope: str,
        stream: str,
        segment_id: int,
        direction: ScaleDirection | str,
        timestamp: int,
        num_of_splits: int,
        silent: bool,
    ) -> ReportResult: ...
