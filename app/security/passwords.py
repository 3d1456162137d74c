"""Account password hashes: Argon2id for every hash we write, and verification of the PBKDF2
digests Pravega's password files hold (so imported accounts keep their passwords).

Invariant: no function here logs, returns or raises with a password or a digest in its text.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import secrets
from dataclasses import dataclass

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

# argon2-cffi's defaults (RFC 9106's second recommended option: 64 MiB, 3 passes, 4 lanes).
_HASHER = PasswordHasher()
ARGON2_PREFIX = "$argon2id$"

# Pravega's StrongPasswordProcessor: PBKDF2WithHmacSHA256, 512-bit key; the iteration count and
# the salt travel in the digest, which is hex("<iterations>:<hex salt>:<hex hash>").
_PBKDF2_DIGEST = "sha256"
_PBKDF2_KEY_BYTES = 64
# A digest naming more iterations than this is refused rather than run: a crafted file must not
# make each login burn seconds of CPU.
_PBKDF2_MAX_ITERATIONS = 1_000_000


class BadPasswordHash(ValueError):
    """A stored digest in neither of the two known forms."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """`ok`: the password matches. `rehash`: it matched a weaker or older hash, and the caller
    should store `hash_password(password)` in its place."""

    ok: bool
    rehash: bool = False


def hash_password(password: str) -> str:
    return _HASHER.hash(password)


def verify_password(stored: str, password: str) -> Verdict:
    """Checks `password` against an Argon2id hash or a Pravega PBKDF2 digest (constant-time
    comparison for both). Raises BadPasswordHash for a digest in neither form."""
    if stored.startswith(ARGON2_PREFIX):
        try:
            _HASHER.verify(stored, password)
        except VerifyMismatchError:
            return Verdict(False)
        except (VerificationError, InvalidHashError) as exc:
            raise BadPasswordHash("the stored Argon2id hash is malformed") from exc
        return Verdict(True, rehash=_HASHER.check_needs_rehash(stored))
    iterations, salt, expected = parse_pravega_digest(stored)
    actual = hashlib.pbkdf2_hmac(_PBKDF2_DIGEST, password.encode("utf-8"), salt, iterations, len(expected))
    ok = hmac.compare_digest(actual, expected)
    return Verdict(ok, rehash=ok)


def verify_in_equal_time(stored: str | None, password: str) -> Verdict:
    """`verify_password`, taking at least an Argon2id check's time whatever the reason for a
    refusal: a name with no account (`stored` None), an unreadable hash, or a wrong password for a
    faster Pravega digest is also checked against a decoy hash, so the time of a refusal does not
    tell which names exist. Raises BadPasswordHash as `verify_password` does."""
    if stored is None:
        _check_decoy(password)
        return Verdict(False)
    try:
        verdict = verify_password(stored, password)
    except BadPasswordHash:
        _check_decoy(password)
        raise
    if not verdict.ok and not stored.startswith(ARGON2_PREFIX):
        _check_decoy(password)
    return verdict


@functools.cache
def _decoy_hash() -> str:
    # Made on first need, not at import: hashing costs as much as a check.
    return hash_password(secrets.token_urlsafe(32))


def _check_decoy(password: str) -> None:
    try:
        _HASHER.verify(_decoy_hash(), password)
    except VerificationError:
        return


def parse_pravega_digest(stored: str) -> tuple[int, bytes, bytes]:
    """(iterations, salt, hash) of a StrongPasswordProcessor digest."""
    try:
        inner = bytes.fromhex(stored).decode("ascii")
        count, salt_hex, hash_hex = inner.split(":")
        iterations = int(count)
        salt, expected = bytes.fromhex(salt_hex), bytes.fromhex(hash_hex)
    except ValueError as exc:  # UnicodeDecodeError is a ValueError too
        raise BadPasswordHash("not an Argon2id hash nor a Pravega PBKDF2 digest") from exc
    if not 0 < iterations <= _PBKDF2_MAX_ITERATIONS or not salt or not expected:
        raise BadPasswordHash("Pravega PBKDF2 digest out of range")
    return iterations, salt, expected


def pravega_digest(password: str, salt: bytes, iterations: int = 5000) -> str:
    """The digest Pravega's StrongPasswordProcessor (and its PasswordCreatorTool) writes; used to
    make password files for tests and migrations, never stored by us."""
    key = hashlib.pbkdf2_hmac(_PBKDF2_DIGEST, password.encode("utf-8"), salt, iterations, _PBKDF2_KEY_BYTES)
    return f"{iterations}:{salt.hex()}:{key.hex()}".encode("ascii").hex()
