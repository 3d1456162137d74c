"""The REST intake of auto-scale reports (our extension) over the real services: what is queued,
what is refused and how, every answer checked against the served OpenAPI document; and a report
made over REST that the real request handler turns into a split."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.api.rest import autoscale as autoscale_rest
from app.clock import SystemClock
from app.domain.autoscale import ScaleDirection, ScaleReport
from app.domain.ids import segment_id as seg
from app.domain.requests import RequestKind
from app.services.autoscale import AutoScaleIntake
from app.store.autoscale import PgAutoScaleStore
from app.testing.controller import TEST_SETTINGS, running_controller
from tests.api.conftest import Served, serve
from tests.api.test_rest import assert_error, make_scope, make_stream
from workers.handlers import stream_request_handlers
from workers.handlers.common import WorkflowDeps
from workers.runner import RequestRunner

REPORTS = "/v1/scopes/sc/streams/s/scale-reports"
MINUTE = 60_000
RATE_POLICY = {"type": "BY_RATE_IN_EVENTS_PER_SEC", "targetRate": 10, "scaleFactor": 2, "minSegments": 2}


@pytest.fixture
async def served(db_url: str) -> AsyncIterator[Served[PgAutoScaleStore]]:
    """No workers: a queued report stays queued, so the tests can read it."""
    async with running_controller(db_url, workers=False) as services:
        store = PgAutoScaleStore(services.pool)
        intake = autoscale_rest.extension(AutoScaleIntake(store, services.clock))
        async with serve(services, store, rest_extensions=[intake]) as served:
            await make_scope(served.api, "sc")
            await make_stream(served.api, "sc", "s", scalingPolicy=RATE_POLICY)
            yield served


def now() -> int:
    return SystemClock().now_ms()


def body(**changes: Any) -> dict[str, Any]:
    report: dict[str, Any] = {"segmentId": 1, "direction": "UP", "timestamp": now(), "numOfSplits": 2}
    report.update(changes)
    return {k: v for k, v in report.items() if v is not ...}


async def queued(s: Served[PgAutoScaleStore]) -> list[ScaleReport]:
    requests = await s.services.requests.list_requests(0, 100)
    assert all(r.kind is RequestKind.AUTO_SCALE and (r.scope, r.stream) == ("sc", "s") for r in requests)
    return [ScaleReport.from_payload(r.payload) for r in requests]


async def test_a_report_is_queued_and_answered_202(served: Served[PgAutoScaleStore]) -> None:
    at = now()
    status, answer = await served.api.call("POST", REPORTS, json_body=body(timestamp=at))
    assert (status, answer) == (202, {"accepted": True})
    assert await queued(served) == [ScaleReport(1, ScaleDirection.UP, at, 2, False)]


async def test_optional_members_default_and_down_reports_carry_silent(
    served: Served[PgAutoScaleStore],
) -> None:
    at = now()
    status, _ = await served.api.call(
        "POST", REPORTS, json_body={"segmentId": 0, "direction": "DOWN", "timestamp": at}
    )
    assert status == 202
    status, _ = await served.api.call(
        "POST", REPORTS, json_body={"segmentId": 1, "direction": "DOWN", "timestamp": at, "silent": True}
    )
    assert status == 202
    assert await queued(served) == [
        ScaleReport(0, ScaleDirection.DOWN, at, 0, False),
        ScaleReport(1, ScaleDirection.DOWN, at, 0, True),
    ]


async def test_an_expired_report_is_answered_but_not_queued(served: Served[PgAutoScaleStore]) -> None:
    status, answer = await served.api.call("POST", REPORTS, json_body=body(timestamp=now() - 10 * MINUTE))
    assert (status, answer) == (202, {"accepted": False, "reason": "expired"})
    assert await queued(served) == []


@pytest.mark.parametrize(
    ("report", "fragment"),
    [
        (body(direction="SIDEWAYS"), "direction must be UP or DOWN"),
        (body(direction=0), "direction must be UP or DOWN"),
        (body(segmentId=-1), "segmentId must be within"),
        (body(segmentId="1"), "segmentId must be an integer"),
        (body(timestamp=1.5), "timestamp must be an integer"),
        (body(numOfSplits=-2), "numOfSplits must be within"),
        (body(silent="no"), "silent must be a boolean"),
        (body(timestamp=...), "lacks timestamp"),
        (body(segmentId=..., direction=...), "lacks segmentId, direction"),
        (body(extra=1), "unknown member(s) in the scale report: extra"),
    ],
)
async def test_malformed_reports_are_400_and_queue_nothing(
    served: Served[PgAutoScaleStore], report: dict[str, Any], fragment: str
) -> None:
    status, answer = await served.api.call("POST", REPORTS, json_body=report)
    assert_error(status, answer, 400)
    assert fragment in answer["message"]
    assert await queued(served) == []


async def test_bodies_that_are_not_json_objects(served: Served[PgAutoScaleStore]) -> None:
    status, answer = await served.api.call("POST", REPORTS, json_body=[1, 2])
    assert_error(status, answer, 400)
    status, answer = await served.api.call(
        "POST", REPORTS, data=b"segmentId=1", headers={"Content-Type": "text/plain"}
    )
    assert_error(status, answer, 415)


@pytest.mark.parametrize(
    ("path", "segment", "fragment"),
    [
        ("/v1/scopes/sc/streams/missing/scale-reports", 0, "stream sc/missing not found"),
        ("/v1/scopes/nope/streams/s/scale-reports", 0, "stream nope/s not found"),
        (REPORTS, 7, "segment 7 of stream sc/s not found"),
        (REPORTS, seg(0, 1), f"segment {seg(0, 1)} of stream sc/s not found"),
    ],
)
async def test_unknown_streams_and_segments_are_404(
    served: Served[PgAutoScaleStore], path: str, segment: int, fragment: str
) -> None:
    status, answer = await served.api.call("POST", path, json_body=body(segmentId=segment))
    assert_error(status, answer, 404)
    assert fragment in answer["message"]
    # Even an expired report about something that does not exist is an error, not "expired".
    status, answer = await served.api.call("POST", path, json_body=body(segmentId=segment, timestamp=0))
    assert_error(status, answer, 404)


async def test_only_post_is_served(served: Served[PgAutoScaleStore]) -> None:
    status, answer = await served.api.call("GET", REPORTS)
    assert_error(status, answer, 405)


async def test_a_report_over_rest_splits_the_segment(served: Served[PgAutoScaleStore]) -> None:
    s = served.services
    status, _ = await served.api.call("POST", REPORTS, json_body=body(segmentId=1, numOfSplits=5))
    assert status == 202
    deps = WorkflowDeps(s.stream_store, s.scope_store, s.segment_store, s.clock, s.txn_store)
    runner = RequestRunner(
        s.requests,
        stream_request_handlers(deps, cold_markers=served.subject),
        s.clock,
        max_failures=TEST_SETTINGS.request_max_failures,
    )
    (request,) = await s.requests.list_requests(0, 10)
    assert await runner.attempt(request) is None
    _state, active = await s.stream_store.get_active_epoch("sc", "s")
    # scaleFactor 2 caps the five pieces asked for at two.
    assert {x.id: (x.key_start, x.key_end) for x in active.segments} == {
        0: (0.0, 0.5),
        seg(2, 1): (0.5, 0.75),
        seg(3, 1): (0.75, 1.0),
    }
