"""Delegation tokens: the JWTs the controller signs and the segment stores check, as Pravega's.

Invariant: a token is accepted only if its HS512 signature verifies with the shared key, its
audience is "segmentstore", it has not expired, and one of its claims grants at least the needed
permission on a resource the segment name falls under (Pravega's TokenVerifierImpl matching).
"""

from __future__ import annotations

import contextlib
import enum
import re
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

import jwt
from jwt.warnings import InsecureKeyLengthWarning

# The claims' permissions are the ACLs' (one type, Pravega's names); re-exported for the store.
from app.security.acl import Permission as Permission

# JsonWebToken / GrpcAuthHelper: HS512, subject "segmentstoreresource", audience "segmentstore".
ALGORITHM: Final = "HS512"
SUBJECT: Final = "segmentstoreresource"
AUDIENCE: Final = "segmentstore"
DEFAULT_TTL_S: Final = 600
# The controller's own token for its calls to the stores: every resource, no expiry.
MASTER_CLAIM: Final = "*"
# Verified tokens kept per verifier, so an append stream does not pay an HMAC per request.
_CACHE_SIZE: Final = 4096

# TokenVerifierImpl.RESOURCE_PARTS_TO_REPLACE: a claim key minus these is a segment-name prefix.
_RESOURCE_PARTS = re.compile(r"prn::|/scope:|stream:")
_STANDARD_CLAIMS: Final = frozenset({"sub", "aud", "iat", "exp", "nbf", "iss", "jti"})


def stream_resource(scope: str, stream: str) -> str:
    """AuthResourceRepresentation of a stream, the claim key of its tokens."""
    return f"prn::/scope:{scope}/stream:{stream}"


class Outcome(enum.Enum):
    OK = "ok"
    EXPIRED = "expired"
    INVALID = "invalid"  # bad signature, malformed, wrong audience, empty
    INSUFFICIENT = "insufficient"  # valid, but no claim grants the permission on the segment


@dataclass(frozen=True, slots=True)
class Verdict:
    outcome: Outcome
    # Seconds since the epoch after which the token is expired; None: it never expires.
    expires_at: float | None = None

    @property
    def ok(self) -> bool:
        return self.outcome is Outcome.OK


@dataclass(frozen=True, slots=True)
class _Checked:
    expires_at: float | None
    grants: tuple[tuple[str, Permission], ...]  # (normalized claim key, permission)


class TokenSigner:
    """Signs Pravega's delegation tokens with the shared key."""

    def __init__(self, key: bytes, ttl_s: int = DEFAULT_TTL_S, now: Callable[[], float] = time.time) -> None:
        if not key:
            raise ValueError("the token signing key must not be empty")
        if ttl_s <= 0:
            raise ValueError(f"the token TTL must be positive, got {ttl_s}")
        self._key = key
        self._ttl_s = ttl_s
        self._now = now

    def issue(self, resource: str, permission: Permission) -> str:
        """A token granting `permission` on `resource`, valid for the TTL from now."""
        issued = int(self._now())
        return self._sign({resource: permission.name}, issued, issued + self._ttl_s)

    def master(self) -> str:
        """GrpcAuthHelper.retrieveMasterToken: "*" -> READ_UPDATE, never expires."""
        return self._sign({MASTER_CLAIM: Permission.READ_UPDATE.name}, int(self._now()), None)

    def _sign(self, grants: Mapping[str, str], issued: int, expires: int | None) -> str:
        claims: dict[str, Any] = {"sub": SUBJECT, "aud": AUDIENCE, "iat": issued, **grants}
        if expires is not None:
            claims["exp"] = expires
        with _short_keys_allowed():
            return jwt.encode(claims, self._key, algorithm=ALGORITHM)


class TokenVerifier:
    """Checks tokens for one request each; signatures are verified once per distinct token."""

    def __init__(self, key: bytes, now: Callable[[], float] = time.time) -> None:
        if not key:
            raise ValueError("the token signing key must not be empty")
        self._key = key
        self._now = now
        self._checked: OrderedDict[str, _Checked | None] = OrderedDict()

    def verify(self, token: str, segment: str, needed: Permission) -> Verdict:
        """May the bearer of `token` do what needs `needed` on `segment`?"""
        checked = self._parse(token)
        if checked is None:
            return Verdict(Outcome.INVALID)
        if checked.expires_at is not None and self._now() >= checked.expires_at:
            return Verdict(Outcome.EXPIRED, checked.expires_at)
        for key, granted in checked.grants:
            if granted.includes(needed) and _matches(key, segment):
                return Verdict(Outcome.OK, checked.expires_at)
        return Verdict(Outcome.INSUFFICIENT, checked.expires_at)

    def expired(self, verdict: Verdict) -> bool:
        """Has a token accepted earlier expired since (the cheap re-check per append block)?"""
        return verdict.expires_at is not None and self._now() >= verdict.expires_at

    def _parse(self, token: str) -> _Checked | None:
        if not token:
            return None
        if token in self._checked:
            self._checked.move_to_end(token)
            return self._checked[token]
        checked = self._decode(token)
        self._checked[token] = checked
        if len(self._checked) > _CACHE_SIZE:
            self._checked.popitem(last=False)
        return checked

    def _decode(self, token: str) -> _Checked | None:
        try:
            # Expiry is checked by `verify` on every use (also of a cached token), with our clock.
            with _short_keys_allowed():
                claims = jwt.decode(
                    token,
                    self._key,
                    algorithms=[ALGORITHM],
                    audience=AUDIENCE,
                    options={"verify_exp": False, "verify_iat": False, "verify_nbf": False},
                )
        except jwt.PyJWTError:
            return None
        exp = claims.get("exp")
        if exp is not None and not isinstance(exp, int | float):
            return None
        grants = []
        for key, value in claims.items():
            if key in _STANDARD_CLAIMS or not isinstance(value, str):
                continue
            try:
                permission = Permission[value]
            except KeyError:
                continue
            grants.append((_RESOURCE_PARTS.sub("", key), permission))
        return _Checked(None if exp is None else float(exp), tuple(grants))


@contextlib.contextmanager
def _short_keys_allowed() -> Iterator[None]:
    """Pravega's keys are any text (its standalone uses "secret"); the key an operator gives is
    used as is, so both sides agree, and pyjwt's advice about short keys is not a failure."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InsecureKeyLengthWarning)
        yield


def _matches(key: str, segment: str) -> bool:
    """TokenVerifierImpl.resourceMatchesClaimKey: "scope/stream" covers "scope/stream/<segment>"
    (and so its transaction segments), "scope/" every segment of the scope, "*" everything."""
    return (
        segment == key
        or (key.endswith("/") and segment.startswith(key))
        or segment.startswith(key + "/")
        or key == MASTER_CLAIM
    )
