"""The account record and the store protocol authentication reads it through; the rules for a
name (no ':', Pravega's separator in password files and in Basic credentials).

Invariant: an Account's `repr` never shows its password hash.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

MAX_NAME_CHARS = 256


@dataclass(frozen=True, slots=True)
class Account:
    name: str
    password_hash: str = field(repr=False)
    acl: str
    version: int
    created_at_ms: int
    updated_at_ms: int


class AccountStore(Protocol):
    async def get(self, name: str) -> Account | None: ...

    async def update(
        self,
        name: str,
        expected_version: int,
        now_ms: int,
        *,
        password_hash: str | None = None,
        acl: str | None = None,
    ) -> int: ...


def check_account_name(name: str) -> None:
    """Raises ValueError for a name no Basic credential or password file could carry."""
    if not name or len(name) > MAX_NAME_CHARS:
        raise ValueError(f"account name must be 1..{MAX_NAME_CHARS} characters")
    if ":" in name or any(ch.isspace() or ord(ch) < 32 for ch in name):
        raise ValueError("account name must not contain ':', spaces or control characters")
