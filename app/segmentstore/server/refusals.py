"""The one table from a storage refusal to the wire reply that reports it.

Invariant: every expected refusal (a `StorageError` subclass) has exactly one reply builder here,
and every reply carries the request's id and an empty stack trace; an exception missing from the
table is unexpected and closes the connection instead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from app.segmentstore import storage as st
from app.segmentstore.wire import commands as wc

# ErrorMessage codes: -1 unspecified, 0 illegal argument.
ILLEGAL_ARGUMENT: Final = 0


@dataclass(frozen=True, slots=True)
class RefusalContext:
    """What a reply needs from the request beyond the refusal itself: the id to echo, the offset
    the reply reports (a read's or truncation's offset, an append's event number, else -1), and
    for conditional appends the writer and its event number."""

    request_id: int
    offset: int = -1
    writer_id: int = 0
    event_number: int = -1


Builder = Callable[[RefusalContext, st.StorageError], wc.Command]


def _truncated(ctx: RefusalContext, exc: st.StorageError) -> wc.Command:
    start = exc.start_offset if isinstance(exc, st.SegmentTruncated) else 0
    return wc.SegmentIsTruncated(ctx.request_id, exc.segment, start, "", ctx.offset)


def illegal_argument(request_id: int, segment: str, message: str) -> wc.ErrorMessage:
    """Pravega's answer to an IllegalArgumentException: the request is wrong, the connection
    is not (the client fails that request once, and the connection serves the next)."""
    return wc.ErrorMessage(request_id, segment, message, ILLEGAL_ARGUMENT)


def _illegal_argument(ctx: RefusalContext, exc: st.StorageError) -> wc.Command:
    return illegal_argument(ctx.request_id, exc.segment, str(exc))


# A table operation on a stream segment (or the reverse) makes Java's segment store fail the
# request with an internal error and close the connection. We answer ErrorMessage with the
# illegal-argument code instead: the request is wrong, not the connection, and a closed
# connection makes a Rust client retry the same request forever, while an error reply fails it
# once and visibly.
REFUSALS: Final[dict[type[st.StorageError], Builder]] = {
    st.NoSuchSegment: lambda ctx, exc: wc.NoSuchSegment(ctx.request_id, exc.segment, "", ctx.offset),
    st.SegmentAlreadyExists: lambda ctx, exc: wc.SegmentAlreadyExists(ctx.request_id, exc.segment, ""),
    st.SegmentSealed: lambda ctx, exc: wc.SegmentIsSealed(ctx.request_id, exc.segment, "", ctx.offset),
    st.SegmentTruncated: _truncated,
    st.OffsetBeyondEnd: _illegal_argument,
    st.ConditionalCheckFailed: lambda ctx, exc: wc.ConditionalCheckFailed(
        ctx.writer_id, ctx.event_number, ctx.request_id
    ),
    st.AttributeCheckFailed: lambda ctx, exc: wc.SegmentAttributeUpdated(ctx.request_id, False),
    st.WrongSegmentKind: _illegal_argument,
    st.TableKeyBadVersion: lambda ctx, exc: wc.TableKeyBadVersion(ctx.request_id, exc.segment, ""),
    st.TableKeyDoesNotExist: lambda ctx, exc: wc.TableKeyDoesNotExist(ctx.request_id, exc.segment, ""),
    st.TableSegmentNotEmpty: lambda ctx, exc: wc.TableSegmentNotEmpty(ctx.request_id, exc.segment, ""),
    st.TooLarge: _illegal_argument,
    st.ContainerMoved: lambda ctx, exc: wc.WrongHost(ctx.request_id, exc.segment, "", ""),
}


def refusal_reply(ctx: RefusalContext, exc: st.StorageError) -> wc.Command | None:
    """The reply for `exc`, or None when it is not an expected refusal (the caller closes)."""
    for kind in type(exc).__mro__:
        builder = REFUSALS.get(kind)
        if builder is not None:
            return builder(ctx, exc)
    return None
