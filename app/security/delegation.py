"""What the controller puts in the `delegationToken` field of its answers: a token signed for the
stream, granting what the caller may do there (Pravega's GrpcAuthHelper), or "" with auth off.

Invariant: a token never grants more than the caller's own permission, as the ACL lookup
(`permission_of`, the principal of the call being answered) reports it; a signer always comes
with a lookup, so no permission is ever assumed.
"""

from __future__ import annotations

from collections.abc import Callable

from app.domain.segment_names import kvt_stream_name
from app.security import acl
from app.security.acl import Permission
from app.security.tokens import TokenSigner, stream_resource

# The caller's permission on a resource string (`prn::/scope:X/stream:Y`), looked up in the ACL of
# the principal of the call being answered (`app.security.authn.caller_permission` in `serve`).
PermissionOf = Callable[[str], Permission]

NO_TOKEN = ""


class DelegationTokens:
    def __init__(self, signer: TokenSigner | None, permission_of: PermissionOf | None = None) -> None:
        """`signer` None: authentication is off and every token is "" (as Pravega's). With a
        signer, `permission_of` is required: it is what caps every token."""
        if signer is not None and permission_of is None:
            raise ValueError("delegation tokens need the caller's ACL lookup when they are signed")
        self._signer = signer
        self._permission_of = permission_of

    @property
    def enabled(self) -> bool:
        return self._signer is not None

    def authorize_with(self, permission_of: PermissionOf) -> None:
        """Replaces the ACL lookup (tests grant fixed permissions this way)."""
        self._permission_of = permission_of

    def for_stream(self, scope: str, stream: str, wanted: Permission) -> str:
        """A token for `scope/stream` granting `wanted`, or as much of it as the caller has
        (READ of a wanted READ_UPDATE); "" when the caller has nothing there. A reader group's
        or mark stream is authorized as its owner (StreamAuthParams), and its writes need only
        what Pravega's `requiredPermissionForWrites` asks there; the claim stays the stream's,
        which is what the store matches segment names against."""
        claim = stream_resource(scope, stream)
        if not stream.startswith(acl.INTERNAL_PREFIX):
            return self._token(claim, claim, wanted)
        return self._token(
            acl.of_stream_or_internal(scope, stream), claim, wanted, acl.permission_for_writes(stream)
        )

    def for_table(self, scope: str, kvt: str, wanted: Permission) -> str:
        """A token for a key-value table: authorized on the table's own resource, claimed on
        the stream its segments live under (so the store's matching covers them), as Pravega
        claims reader groups' streams."""
        claim = stream_resource(scope, kvt_stream_name(kvt))
        return self._token(acl.of_key_value_table(scope, kvt), claim, wanted)

    def _token(
        self, resource: str, claim: str, wanted: Permission, for_writes: Permission = Permission.READ_UPDATE
    ) -> str:
        if self._signer is None or self._permission_of is None:
            return NO_TOKEN
        held = self._permission_of(resource)
        # Holding what writes need there (READ on a reader group's stream) is holding READ_UPDATE.
        if held is not Permission.NONE and held >= for_writes:
            held = Permission.READ_UPDATE
        granted = min(wanted, held)
        if granted is Permission.NONE:
            return NO_TOKEN
        return self._signer.issue(claim, granted)
