"""The auto-scale report intake (the AutoScaleEvents Pravega's segment stores send on hot or cold segments).

A report is checked, dropped if it is already stale, and otherwise made durable as an AUTO_SCALE
request of its stream, so the stream's serial request processor applies it after whatever is
queued before it. Nothing else is written here: the cold mark and the scale happen in the handler.
"""

from __future__ import annotations

import logging

from app.domain.autoscale import ACCEPTED, EXPIRED, ReportResult, ScaleDirection, ScaleReport
from app.domain.names import require_present
from app.domain.requests import NewRequest, RequestKind
from app.domain.scale_rules import auto_scale_event_expired
from app.ports import AutoScaleStore, Clock

log = logging.getLogger("pgcontroller.autoscale")


class AutoScaleIntake:
    """Implements ScaleReportSink: the segment stores' auto-scalers and the REST intake both report here."""

    def __init__(self, store: AutoScaleStore, clock: Clock) -> None:
        self._store = store
        self._clock = clock

    async def report(
        self,
        scope: str,
        stream: str,
        segment_id: int,
        direction: ScaleDirection | str,
        timestamp: int,
        num_of_splits: int,
        silent: bool,
    ) -> ReportResult:
        """InvalidInput for a malformed report, NotFound for an unknown stream or segment; an
        expired one is answered, not queued (the handler would drop it anyway)."""
        require_present("scope", scope)
        require_present("stream", stream)
        report = ScaleReport.build(segment_id, direction, timestamp, num_of_splits, silent)
        now = self._clock.now_ms()
        request = NewRequest(RequestKind.AUTO_SCALE, scope, stream, now, payload=report.to_payload())
        if auto_scale_event_expired(report.timestamp, now):
            # A wrong name is still an error, even in an old report.
            await self._store.check_segment(scope, stream, report.segment_id)
            log.info(
                "expired %s report for %s/%s segment %d dropped",
                report.direction.value,
                scope,
                stream,
                segment_id,
            )
            return EXPIRED
        await self._store.enqueue_report(request, report.segment_id)
        return ACCEPTED
