"""Which call a wire command to a segment store serves, in the controller's log lines: the caller's
request id beside the command's wire request id.

Pravega's controller (0.13, SegmentHelper) never sends its caller's request id (clientRequestId)
on the wire: each command's requestId is its own connection's flow id (a flow number and a
sequence number), distinct from every other command in flight on that connection, since the store
echoes it and the client finds a command's reply by it. The caller's id travels beside it in the
controller's log lines only (TagLogger's `[requestId=...]` tag on the flow id's line: sent, then
answered at debug, failures and odd replies at warning), and the store tags its own lines with the
wire id; the controller's line is where the two meet.

We do the same. The wire id comes from one process-wide counter (`connections.next_request_id`),
so it is distinct from every other command of this process, on any connection. The caller's id
(the gRPC or REST call's, or the queued request's, from app/observability/context.py) is set on
each line's record as its `request_id`, the field every log line of the call carries, and the
message names the wire id: a line per command answered at debug, a warning per failure or timeout
and per reply that is neither a success nor a plain domain refusal. The embedded store's lines for
the command carry the same wire id as their request_id.

The wire id is not derived from the caller's: one call sends several commands, concurrently and
pipelined on one pooled connection (a transaction's creates, 64 to a send), and two calls may
bring the same id (a client chooses its own, any printable text up to 64 characters, and repeats
it on a retry), so derived ids would collide where the client matches replies by id.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from app.observability.context import current_request_id
from app.observability.logs import number_ranges

log = logging.getLogger("app.segmentstore.client")


def _caller() -> dict[str, object]:
    # On the record itself: the line carries the caller's id whatever handler formats it.
    return {"request_id": current_request_id()}


def answered(where: str, asked: str, wire_id: int | None, reply: str) -> None:
    """Debug: the command `asked` (replies.describe) with wire id `wire_id` got `reply`."""
    if log.isEnabledFor(logging.DEBUG):
        log.debug(
            "segment store %s: %s wire request %s answered %s", where, asked, wire_id, reply, extra=_caller()
        )


def failed(where: str, wire_ids: Sequence[int], failure: BaseException) -> None:
    """Warning: the exchange of the commands `wire_ids` ended in `failure` (no reply in time, a
    lost connection, a malformed or unexpected reply); with no ids, the store was not reached."""
    ids = f", wire request{'s' if len(wire_ids) > 1 else ''} {number_ranges(wire_ids)}" if wire_ids else ""
    log.warning("%s (at %s%s)", failure, where, ids, extra=_caller())


def refused(asked: str, wire_id: int | None, failure: BaseException) -> None:
    """Warning: the command's reply stands for `failure`, a store's refusal to look into (not a
    domain outcome such as NotFound, which its caller handles)."""
    log.warning("%s wire request %s refused: %s", asked, wire_id, failure, extra=_caller())
