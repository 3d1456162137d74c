"""Opening the stream the options name, and the cuts they give, with the checks that make a bad
option one clear error before any data moves."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from app.segmentstore.client.connections import ConnectionPool
from app.streamclient import (
    StreamController,
    StreamCut,
    StreamNotFound,
    StreamSegments,
    check_cut,
    head_cut,
    parse_cut,
    tail_cut,
)
from spark.datasource.options import EARLIEST, LATEST, SourceOptions

REQUEST_TIMEOUT_S = 30.0
_DELETED = "was deleted while the query ran"


@contextlib.asynccontextmanager
async def open_stream(
    options: SourceOptions, *, write: bool = False, running: bool = False
) -> AsyncIterator[StreamSegments]:
    """The stream's segments; StreamNotFound if the stream does not exist (`running`: saying it
    was deleted under the running query), AccessRefused if the credentials are refused,
    StreamUnavailable if the controller cannot be reached."""
    tls = options.tls()
    controller = StreamController(options.controller, tls=tls, credentials=options.credentials)
    try:
        if not await controller.stream_exists(options.scope, options.stream):
            gone = _DELETED if running else "does not exist"
            raise StreamNotFound(f"stream {options.scope}/{options.stream} {gone}")
        token = await controller.token(options.scope, options.stream, write=write)
        segments = StreamSegments(
            controller,
            options.scope,
            options.stream,
            token=token,
            write=write,
            pool=ConnectionPool(timeout_s=REQUEST_TIMEOUT_S, tls=tls),
        )
        try:
            yield segments
        except StreamNotFound as exc:
            # Deleted between the check above and a call of the block (a planning's, a read's):
            # said the same way whichever call found it.
            if (
                not running
                or _DELETED in str(exc)
                or await controller.stream_exists(options.scope, options.stream)
            ):
                raise
            raise StreamNotFound(f"stream {options.scope}/{options.stream} {_DELETED} ({exc})") from exc
        finally:
            await segments.close()
    finally:
        controller.close()


async def resolve_cut(segments: StreamSegments, text: str, what: str) -> StreamCut:
    """`earliest` (the head), `latest` (the tail now) or a cut in either textual form, checked."""
    if text.lower() == EARLIEST:
        return await head_cut(segments)
    if text.lower() == LATEST:
        return await tail_cut(segments)
    cut = parse_cut(text, segments.scope, segments.stream)
    await check_cut(segments, cut, f"option {what!r}:")
    return cut


async def check_stream(options: SourceOptions, *, write: bool = False) -> None:
    """Everything the options name exists and answers: the controller, the credentials, the
    stream, and the cuts (a reader's)."""
    async with open_stream(options, write=write) as segments:
        if not write:
            await resolve_cut(segments, options.start_cut, "start_stream_cut")
            if options.end_cut.lower() != EARLIEST:
                await resolve_cut(segments, options.end_cut, "end_stream_cut")
