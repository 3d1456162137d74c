"""The advisory-lock port: session locks held on one dedicated connection, the basis of bucket
ownership and leadership; losing the session loses every lock at once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol


class AdvisoryLocks(Protocol):
    """Session-level locks on one dedicated connection: losing it loses every lock at once."""

    async def open(self) -> None:
        """Connects the session if it is not connected (it then holds no locks); raises
        StoreUnavailable when it cannot."""
        ...

    async def try_lock(self, namespace: int, key: int) -> bool:
        """Raises StoreUnavailable when the session is gone: only `open` starts a new one."""
        ...

    async def unlock(self, namespace: int, key: int) -> None:
        """Raises StoreUnavailable when the session is gone."""
        ...

    async def check_alive(self) -> None:
        """Raises StoreUnavailable when the session (and with it every lock) is gone."""
        ...

    async def reset(self) -> None:
        """Drops the session; the next `open` starts a new one holding no locks."""
        ...

    def on_session_lost(self, callback: Callable[[], None]) -> None:
        """`callback()` the moment the session's connection is seen to close, so owners can
        stop work at once instead of at their next check."""
        ...
