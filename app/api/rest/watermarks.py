"""REST view of a stream's emitted watermarks (our extension; Pravega keeps them in the
stream's `_MARK` stream, which its REST API does not show). Read-only, newest first."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from aiohttp import web

from app.domain.errors import InvalidInput
from app.ports import StoredWatermark
from app.services.watermarks import LIST_DEFAULT_LIMIT, LIST_MAX_LIMIT, WatermarkService

WATERMARKS = web.AppKey("watermarks", WatermarkService)
WATERMARKS_PATH = "/v1/scopes/{scopeName}/streams/{streamName}/watermarks"
_DIGITS = re.compile(r"[0-9]{1,9}")


def watermark_json(stored: StoredWatermark) -> dict[str, Any]:
    watermark = stored.watermark
    return {
        "sequence": stored.seq,
        "lowerTimeBound": watermark.lower_time_bound,
        "upperTimeBound": watermark.upper_time_bound,
        "createdAt": stored.created_at,
        "streamCut": [
            {"segmentId": s.segment, "offset": offset, "keyStart": s.low, "keyEnd": s.high}
            for s, offset in sorted(watermark.stream_cut.items(), key=lambda e: e[0].segment)
        ],
    }


def _limit(request: web.Request) -> int:
    raw = request.query.get("limit")
    if raw is None:
        return LIST_DEFAULT_LIMIT
    if not _DIGITS.fullmatch(raw) or not 0 < int(raw) <= LIST_MAX_LIMIT:
        raise InvalidInput(f"limit must be an integer within 1..{LIST_MAX_LIMIT}, got {raw!r}")
    return int(raw)


async def list_watermarks(request: web.Request) -> web.Response:
    """A missing stream is 404, a bad `limit` 400; a stream without watermarks an empty list."""
    limit = _limit(request)
    scope, name = request.match_info["scopeName"], request.match_info["streamName"]
    found = await request.app[WATERMARKS].list_watermarks(scope, name, limit)
    return web.json_response({"watermarks": [watermark_json(w) for w in found]})


def extension(watermarks: WatermarkService) -> Callable[[web.Application], None]:
    def extend(app: web.Application) -> None:
        app[WATERMARKS] = watermarks
        app.add_routes([web.get(WATERMARKS_PATH, list_watermarks, allow_head=False)])

    return extend
