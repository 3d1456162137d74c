"""What the storage writer and the read path ask of a long-term chunk store.

Invariant: `put` returns only once the object is durable under its final name and complete (a
reader never sees a partial object, a crash never leaves one under that name); names are never
overwritten (each chunk gets a fresh unique name), so there is no "which version" question.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Protocol


class ChunkStoreError(Exception):
    """Base of the chunk stores' failures; the message is safe to log and to show an operator."""


class ChunkMissing(ChunkStoreError):
    """The object does not exist (garbage collected after a truncation, or never written)."""


class ChunkStoreUnavailable(ChunkStoreError):
    """The store did not answer or failed: retryable, the data is not lost."""


class ChunkStoreMisconfigured(ChunkStoreError):
    """The store refused us for a reason retrying will not fix (credentials, a missing bucket or
    directory, no permission): `setting` names what the operator has to change."""

    def __init__(self, setting: str, reason: str) -> None:
        super().__init__(f"{setting}: {reason}")
        self.setting = setting
        self.reason = reason


class ChunkStore(Protocol):
    @property
    def description(self) -> str:
        """Where the chunks go, for logs and health ("s3 http://host:9000 bucket/prefix")."""
        ...

    async def put(self, name: str, pieces: Sequence[bytes]) -> None:
        """Stores `pieces` joined as object `name`, durably, before returning."""
        ...

    async def get(self, name: str, offset: int, length: int) -> bytes:
        """Bytes [offset, offset + length) of object `name` (fewer only past its end)."""
        ...

    async def delete(self, name: str) -> None:
        """Removes object `name`; removing one that is not there is not an error."""
        ...

    def names(self, prefix: str = "") -> AsyncIterator[str]:
        """Every object name under `prefix` (for the tests and for an operator's audit)."""
        ...

    async def close(self) -> None: ...
