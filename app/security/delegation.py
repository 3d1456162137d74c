"""What the controller puts in the `delegationToken` field of its answers: a token signed for the
stream, granting what the caller may do there (Pravega's GrpcAuthHelper), or "" with auth off.

Invariant: a token never grants more than the caller's own permission on the stream, as the
injected ACL lookup (`permission_of`) reports it; with no lookup injected, no token is signed at
all (the store then refuses the caller's requests), so no permission is ever assumed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from app.security.tokens import Permission, TokenSigner, stream_resource

# NameUtils.KVTABLE_SUFFIX: a key-value table's segments live under the stream "<kvt>_kvtable".
_KVTABLE_SUFFIX = "_kvtable"

log = logging.getLogger(__name__)

# The caller's permission on a resource string (`prn::/scope:X/stream:Y`), looked up in the ACL of
# the principal of the call being answered (the authentication layer knows who that is, e.g.
# from a context variable it sets per call).
PermissionOf = Callable[[str], Permission]

NO_TOKEN = ""


class DelegationTokens:
    def __init__(self, signer: TokenSigner | None) -> None:
        """`signer` None: authentication is off and every token is "" (as Pravega's)."""
        self._signer = signer
        self._permission_of: PermissionOf | None = None
        self._warned = False

    @property
    def enabled(self) -> bool:
        return self._signer is not None

    def authorize_with(self, permission_of: PermissionOf) -> None:
        """THE seam for authorization: the ACL lookup of the current call's principal."""
        self._permission_of = permission_of

    def for_stream(self, scope: str, stream: str, wanted: Permission) -> str:
        """A token for `scope/stream` granting `wanted`, or as much of it as the caller has
        (READ of a wanted READ_UPDATE); "" when the caller has nothing there."""
        resource = stream_resource(scope, stream)
        return self._token(resource, resource, wanted)

    def for_table(self, scope: str, kvt: str, wanted: Permission) -> str:
        """A token for a key-value table: authorized on the table's own resource, claimed on
        the stream its segments live under (so the store's matching covers them), as Pravega
        claims reader groups' streams."""
        claim = stream_resource(scope, kvt + _KVTABLE_SUFFIX)
        return self._token(f"prn::/scope:{scope}/key-value-table:{kvt}", claim, wanted)

    def _token(self, resource: str, claim: str, wanted: Permission) -> str:
        if self._signer is None:
            return NO_TOKEN
        if self._permission_of is None:
            if not self._warned:
                self._warned = True
                log.warning("authentication is on but no ACL lookup is wired: delegation tokens stay empty")
            return NO_TOKEN
        granted = min(wanted, self._permission_of(resource), key=lambda p: p.value)
        if granted is Permission.NONE:
            return NO_TOKEN
        return self._signer.issue(claim, granted)
