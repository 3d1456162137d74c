"""When a paced writer's acknowledgements resumed after an event (a kill, a freeze, a cut), told
from its progress reports' emission times ("at", this host's monotonic clock): reports queued
before the event and read after it must not count as writes after it."""

from __future__ import annotations

from tests.support.dataplane import ClientProcess


async def writes_resumed_after(writer: ClientProcess, since: float, more: int, timeout_s: float) -> float:
    """Seconds from `since` until the writer reported `more` acknowledgements past those it had
    reported by `since`."""
    acked_by_then: int | None = None

    def resumed(report: dict[str, float]) -> bool:
        nonlocal acked_by_then
        if report["at"] <= since:
            acked_by_then = int(report["acked"])
            return False
        if acked_by_then is None:
            # The first report is after `since`: count from the acks it had when `since` came,
            # which are at most its own less one report's worth.
            acked_by_then = int(report["acked"])
        return report["acked"] >= acked_by_then + more

    report = await writer.until(resumed, timeout_s=timeout_s)
    return float(report["at"]) - since
