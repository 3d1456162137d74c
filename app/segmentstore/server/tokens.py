"""The store's check of delegation tokens, with authentication on: which permission each request
needs on which segments, and the AuthTokenCheckFailed it answers otherwise.

Invariant: a request naming segments is served only if its token grants the needed permission on
every segment it names (each field its declaration marks `Names.SEGMENT`); one naming a segment
without carrying a token at all is refused. A refusal names only the request id and Pravega's
error code (never the token). Requests that name no segment and carry no token (Hello, KeepAlive,
the append blocks of a set-up writer) are not checked here: a writer's token was checked at its
SetupAppend.
"""

from __future__ import annotations

from typing import Final

from app.security.tokens import Outcome, Permission, TokenVerifier, Verdict
from app.segmentstore.wire import commands as wc

# WireCommands.AuthTokenCheckFailed.ErrorCode.
TOKEN_CHECK_FAILED: Final = 0
TOKEN_EXPIRED: Final = 1

# Requests that only look. Everything else that carries a token changes data and needs
# READ_UPDATE (stricter than Pravega's store, which asks only READ of most of them: see
# docs/security.md).
_READS: Final[frozenset[type[wc.Command]]] = frozenset(
    {
        wc.ReadSegment,
        wc.GetStreamSegmentInfo,
        wc.GetSegmentAttribute,
        wc.LocateOffset,
        wc.GetTableSegmentInfo,
        wc.ReadTable,
        wc.ReadTableKeys,
        wc.ReadTableEntries,
        wc.ReadTableEntriesDelta,
    }
)


def needed_permission(cmd: wc.Command) -> Permission:
    return Permission.READ if type(cmd) in _READS else Permission.READ_UPDATE


class TokenGate:
    def __init__(self, verifier: TokenVerifier) -> None:
        self.verifier = verifier

    def check(self, cmd: wc.Command) -> Verdict | None:
        """The verdict on a request carrying a token or naming a segment; None for a request
        that does neither."""
        segments = wc.segments_named(cmd)
        token = getattr(cmd, "delegation_token", None)
        if not isinstance(token, str):
            # A command naming a segment but declared without a token: refused, never unchecked.
            return Verdict(Outcome.INVALID) if segments else None
        needed = needed_permission(cmd)
        verdict = Verdict(Outcome.INVALID)
        # A request naming no segment (the admin FlushToStorage) needs the master token's "*".
        for segment in segments or ("",):
            verdict = self.verifier.verify(token, segment, needed)
            if not verdict.ok:
                return verdict
        return verdict

    def still_valid(self, verdict: Verdict) -> bool:
        return not self.verifier.expired(verdict)


def refusal(request_id: int, verdict: Verdict) -> wc.AuthTokenCheckFailed:
    code = TOKEN_EXPIRED if verdict.outcome is Outcome.EXPIRED else TOKEN_CHECK_FAILED
    return wc.AuthTokenCheckFailed(request_id, "", code)
