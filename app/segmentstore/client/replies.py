"""How the controller reads a segment store's reply: the command's success, or one domain error.

Invariant: every reply that is not one of the command's successes becomes exactly one exception:
StoreUnavailable for what passes by itself (a refused token, for now), the domain error the
in-process store raised for the same case (NotFound, IllegalState, NotEmpty, InvalidInput), and
FinalFailure, naming the command and the reply, for anything else. Every one but those domain
outcomes (a WrongHost, a refused token, an unexpected reply) is logged as a warning with the
command's wire request id and the caller's request id (tracing.py).
"""

from __future__ import annotations

from typing import TypeVar

from app.domain.errors import (
    AlreadyExists,
    FinalFailure,
    IllegalState,
    InvalidInput,
    NotEmpty,
    NotFound,
    StoreUnavailable,
)
from app.segmentstore.client import tracing
from app.segmentstore.wire import commands as wc

R = TypeVar("R", bound=wc.Command)

# ErrorMessage.error_code: Java's IllegalArgumentException family (a bad segment type, an offset
# past the end of a sealed segment); -1 is "unspecified".
ERROR_CODE_ILLEGAL_ARGUMENT = 0


class WrongHostReply(Exception):
    """The asked host does not own the segment's container; the caller asks the locator again."""

    def __init__(self, reply: wc.WrongHost) -> None:
        super().__init__(f"segment {reply.segment}: wrong host, the server names {reply.correct_host!r}")
        self.reply = reply


def describe(command: wc.Command) -> str:
    """The command's name and the (first) segment it names, for messages."""
    segments = wc.segments_named(command)
    if segments:
        return f"{type(command).__name__}({segments[0]})"
    return type(command).__name__


def failure(command: wc.Command, reply: wc.Command) -> Exception:
    """The exception standing for `reply` when it is not one of `command`'s successes."""
    asked = describe(command)
    match reply:
        case wc.WrongHost():
            return WrongHostReply(reply)
        case wc.AuthTokenCheckFailed():
            # Retryable: a store whose key differs from the controller's is a misconfigured cluster
            # (an outage to fix), not a refusal of the operation itself.
            return StoreUnavailable(f"{asked}: the segment store refused the token (code {reply.error_code})")
        case wc.NoSuchSegment():
            return NotFound(f"segment {reply.segment} does not exist")
        case wc.SegmentIsSealed():
            return IllegalState(f"segment {reply.segment} is sealed ({asked})")
        case wc.SegmentAlreadyExists():
            return AlreadyExists(f"segment {reply.segment} exists already ({asked})")
        case wc.TableSegmentNotEmpty():
            return NotEmpty(f"table segment {reply.segment} is not empty")
        case wc.SegmentIsTruncated():
            return InvalidInput(
                f"{asked}: segment {reply.segment} is truncated at {reply.start_offset} "
                f"(offset {reply.offset})"
            )
        case wc.ErrorMessage() if reply.error_code == ERROR_CODE_ILLEGAL_ARGUMENT:
            return InvalidInput(f"{asked} refused: {reply.message}")
    return FinalFailure(f"{asked}: unexpected reply {type(reply).__name__} from the segment store: {reply}")


def expect(command: wc.Command, reply: wc.Command, success: type[R] | tuple[type[R], ...]) -> R:
    """`reply` when it is one of the successes, else raises what `failure` names."""
    if isinstance(reply, success):
        return reply
    refused = failure(command, reply)
    if isinstance(refused, (WrongHostReply, StoreUnavailable, FinalFailure)):
        tracing.refused(describe(command), getattr(command, "request_id", None), refused)
    raise refused
