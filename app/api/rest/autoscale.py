"""REST intake of auto-scale reports (our extension; Pravega's segment stores write AutoScaleEvents
into its internal request stream instead): how external segment stores, or operators, report a
segment's traffic. A report is validated and queued, or answered as expired; it never scales
synchronously, so the answer is 202."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web

from app.api.rest.http import read_json_object
from app.domain.errors import InvalidInput
from app.services.autoscale import AutoScaleIntake

SCALE_REPORTS = web.AppKey("scale_reports", AutoScaleIntake)

_REQUIRED = ("segmentId", "direction", "timestamp")
_OPTIONAL: dict[str, Any] = {"numOfSplits": 0, "silent": False}


async def post_scale_report(request: web.Request) -> web.Response:
    """400 for a malformed body, 404 for an unknown stream or segment, 202 otherwise (accepted, or
    not because it expired)."""
    scope, name = request.match_info["scopeName"], request.match_info["streamName"]
    body = await read_json_object(request)
    unknown = sorted(set(body) - set(_REQUIRED) - set(_OPTIONAL))
    if unknown:
        raise InvalidInput(f"unknown member(s) in the scale report: {', '.join(unknown)}")
    missing = [field for field in _REQUIRED if field not in body]
    if missing:
        raise InvalidInput(f"the scale report lacks {', '.join(missing)}")
    if not isinstance(body["direction"], str):
        # The service also takes Pravega's byte codes; JSON callers spell the direction out.
        raise InvalidInput(f"direction must be UP or DOWN, got {body['direction']!r}")
    result = await request.app[SCALE_REPORTS].report(
        scope,
        name,
        body["segmentId"],
        body["direction"],
        body["timestamp"],
        body.get("numOfSplits", _OPTIONAL["numOfSplits"]),
        body.get("silent", _OPTIONAL["silent"]),
    )
    answer: dict[str, Any] = {"accepted": result.accepted}
    if result.reason is not None:
        answer["reason"] = result.reason
    return web.json_response(answer, status=202)


SCALE_REPORTS_PATH = "/v1/scopes/{scopeName}/streams/{streamName}/scale-reports"

ROUTES = [web.post(SCALE_REPORTS_PATH, post_scale_report)]


def extension(intake: AutoScaleIntake) -> Callable[[web.Application], None]:
    def extend(app: web.Application) -> None:
        app[SCALE_REPORTS] = intake
        app.add_routes(ROUTES)

    return extend
