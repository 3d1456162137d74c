"""REST view of where a stream's bytes are (our extension): each of its segments with its bytes
in PostgreSQL and in the long-term tier, and the stream's totals. Read-only."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from app.services.stream_storage import StreamStorageQuery

STREAM_STORAGE = web.AppKey("stream_storage", StreamStorageQuery)
STORAGE_PATH = "/v1/scopes/{scopeName}/streams/{streamName}/storage"


async def get_stream_storage(request: web.Request) -> web.Response:
    scope, name = request.match_info["scopeName"], request.match_info["streamName"]
    segments = await request.app[STREAM_STORAGE].segments(scope, name)
    return web.json_response(
        {
            "postgresBytes": sum(s.postgres_bytes for s in segments),
            "tieredBytes": sum(s.tiered_bytes for s in segments),
            "segments": [
                {
                    "segment": s.segment,
                    "kind": s.kind,
                    "startOffset": s.start_offset,
                    "length": s.length,
                    "sealed": s.sealed,
                    "postgresBytes": s.postgres_bytes,
                    "postgresChunks": s.postgres_chunks,
                    "tieredBytes": s.tiered_bytes,
                    "tieredChunks": s.tiered_chunks,
                }
                for s in segments
            ],
        }
    )


ROUTES = [web.get(STORAGE_PATH, get_stream_storage, allow_head=False)]


def extension(query: StreamStorageQuery) -> Callable[[web.Application], None]:
    """For `create_app(..., extensions=[extension(query)])`."""

    def extend(app: web.Application) -> None:
        app[STREAM_STORAGE] = query
        app.add_routes(ROUTES)

    return extend
