"""Delegation tokens as Pravega's controller signs them and its segment store checks them."""

from __future__ import annotations

import base64
import json
import re

import jwt
import pytest

from app.security.tokens import (
    DEFAULT_TTL_S,
    Outcome,
    Permission,
    TokenSigner,
    TokenVerifier,
    stream_resource,
)

KEY = b"a shared secret basis, as long as pyjwt likes HS512 keys to be: 64 bytes or more."
NOW = 1_700_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


def body(token: str) -> dict[str, object]:
    part = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))  # type: ignore[no-any-return]


def test_a_token_has_pravegas_header_and_claims() -> None:
    token = TokenSigner(KEY, now=lambda: NOW).issue(stream_resource("sc", "st"), Permission.READ_UPDATE)
    assert jwt.get_unverified_header(token)["alg"] == "HS512"
    assert body(token) == {
        "sub": "segmentstoreresource",
        "aud": "segmentstore",
        "iat": int(NOW),
        "exp": int(NOW) + DEFAULT_TTL_S,
        "prn::/scope:sc/stream:st": "READ_UPDATE",
    }
    # The Rust client reads the expiry with this pattern from the decoded body.
    match = re.search(r'"exp":\s?(\d+)', base64.b64decode(token.split(".")[1] + "==").decode())
    assert match is not None and int(match.group(1)) == int(NOW) + DEFAULT_TTL_S


def test_the_master_token_grants_everything_and_never_expires() -> None:
    clock = Clock()
    master = TokenSigner(KEY, now=clock).master()
    assert body(master)["*"] == "READ_UPDATE" and "exp" not in body(master)
    clock.now += 10 * 365 * 86400
    verdict = TokenVerifier(KEY, now=clock).verify(master, "_system/_tables/anything", Permission.READ_UPDATE)
    assert verdict.ok and verdict.expires_at is None


@pytest.mark.parametrize(
    "segment",
    ["sc/st/0.#epoch.0", "sc/st/3.#epoch.2#transaction.00000000000000000000000000000001"],
)
def test_a_stream_token_covers_its_segments_and_transaction_segments(segment: str) -> None:
    token = TokenSigner(KEY, now=lambda: NOW).issue(stream_resource("sc", "st"), Permission.READ)
    assert TokenVerifier(KEY, now=lambda: NOW).verify(token, segment, Permission.READ).outcome is Outcome.OK


@pytest.mark.parametrize(
    "segment", ["sc/other/0.#epoch.0", "sc/st2/0.#epoch.0", "sc/_MARKst/0.#epoch.0", "other/st/0"]
)
def test_a_stream_token_does_not_cover_other_streams(segment: str) -> None:
    token = TokenSigner(KEY, now=lambda: NOW).issue(stream_resource("sc", "st"), Permission.READ_UPDATE)
    verdict = TokenVerifier(KEY, now=lambda: NOW).verify(token, segment, Permission.READ)
    assert verdict.outcome is Outcome.INSUFFICIENT


def test_a_scope_claim_covers_the_scope() -> None:
    token = TokenSigner(KEY, now=lambda: NOW).issue("prn::/scope:sc", Permission.READ)
    verifier = TokenVerifier(KEY, now=lambda: NOW)
    assert verifier.verify(token, "sc/any/0.#epoch.0", Permission.READ).ok
    assert not verifier.verify(token, "scx/any/0.#epoch.0", Permission.READ).ok


def test_a_read_token_does_not_allow_an_update() -> None:
    token = TokenSigner(KEY, now=lambda: NOW).issue(stream_resource("sc", "st"), Permission.READ)
    verdict = TokenVerifier(KEY, now=lambda: NOW).verify(token, "sc/st/0.#epoch.0", Permission.READ_UPDATE)
    assert verdict.outcome is Outcome.INSUFFICIENT


def test_expiry_is_checked_on_every_use_even_once_verified() -> None:
    clock = Clock()
    token = TokenSigner(KEY, ttl_s=3, now=clock).issue(stream_resource("sc", "st"), Permission.READ)
    verifier = TokenVerifier(KEY, now=clock)
    first = verifier.verify(token, "sc/st/0.#epoch.0", Permission.READ)
    assert first.ok and not verifier.expired(first)
    clock.now += 3
    assert verifier.expired(first)
    assert verifier.verify(token, "sc/st/0.#epoch.0", Permission.READ).outcome is Outcome.EXPIRED


def tamper(token: str, **claims: object) -> str:
    header, _, signature = token.split(".")
    changed = {**body(token), **claims}
    payload = base64.urlsafe_b64encode(json.dumps(changed).encode()).rstrip(b"=").decode()
    return f"{header}.{payload}.{signature}"


@pytest.mark.parametrize(
    "make",
    [
        lambda t: tamper(t, **{"prn::/scope:sc/stream:st": "READ_UPDATE"}),
        lambda t: tamper(t, exp=int(NOW) + 10**6),
        lambda t: TokenSigner(b"another key", now=lambda: NOW).issue(
            stream_resource("sc", "st"), Permission.READ
        ),
        lambda t: jwt.encode(
            {"aud": "segmentstore", "prn::/scope:sc/stream:st": "READ"}, KEY, algorithm="HS256"
        ),
        lambda t: jwt.encode(
            {"aud": "someone-else", "prn::/scope:sc/stream:st": "READ"}, KEY, algorithm="HS512"
        ),
        lambda t: t[:-4],
        lambda t: "not.a.token",
        lambda t: "",
    ],
    ids=[
        "raised-permission",
        "extended-expiry",
        "other-key",
        "other-algorithm",
        "other-audience",
        "cut",
        "junk",
        "empty",
    ],
)
def test_forged_tampered_and_malformed_tokens_are_invalid(make: object) -> None:
    good = TokenSigner(KEY, now=lambda: NOW).issue(stream_resource("sc", "st"), Permission.READ)
    bad = make(good)  # type: ignore[operator]
    verdict = TokenVerifier(KEY, now=lambda: NOW).verify(bad, "sc/st/0.#epoch.0", Permission.READ)
    assert verdict.outcome is Outcome.INVALID


def test_an_empty_key_or_a_nonpositive_ttl_is_refused() -> None:
    with pytest.raises(ValueError):
        TokenSigner(b"")
    with pytest.raises(ValueError):
        TokenSigner(KEY, ttl_s=0)
    with pytest.raises(ValueError):
        TokenVerifier(b"")


def test_a_short_key_as_pravegas_standalone_uses_works() -> None:
    token = TokenSigner(b"secret", now=lambda: NOW).issue(stream_resource("sc", "st"), Permission.READ)
    assert TokenVerifier(b"secret", now=lambda: NOW).verify(token, "sc/st/0.#epoch.0", Permission.READ).ok
