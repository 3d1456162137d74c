"""What a key-value table operation can fail with, named after Pravega's client exceptions.

Invariant: every failure the client reports is a `KvtError`; a refused condition is a
`ConditionalTableUpdateError` (BadKeyVersion or NoSuchKey), so a caller can retry a lost race
without catching anything else by mistake.
"""

from __future__ import annotations


class KvtError(Exception):
    """Any failure of a key-value table operation."""


class TableNotFound(KvtError):
    """The controller knows no such key-value table, or its segments are gone (it was deleted)."""


class ConditionalTableUpdateError(KvtError):
    """A conditional update or removal was refused; nothing of its batch was applied
    (Pravega's ConditionalTableUpdateException)."""

    def __init__(self, segment: str, message: str) -> None:
        super().__init__(f"{message} (table segment {segment})")
        self.segment = segment


class BadKeyVersion(ConditionalTableUpdateError):
    """The key exists with another version than the one the update was conditioned on, or an
    insert found the key present (Pravega's BadKeyVersionException, reply TableKeyBadVersion)."""


class NoSuchKey(ConditionalTableUpdateError):
    """The update or removal was conditioned on a version of a key that does not exist
    (Pravega's NoSuchKeyException, reply TableKeyDoesNotExist)."""


class InvalidKey(KvtError, ValueError):
    """A key or value the table cannot hold: wrong primary or secondary key length, a value over
    Pravega's limit, a batch mixing primary keys. Refused before anything is sent."""


class ScopeNotFound(KvtError):
    """A table was to be created in a scope that does not exist (or is being deleted)."""


class InvalidTable(KvtError, ValueError):
    """A table name or configuration the controller refuses (INVALID_TABLE_NAME, a key length or
    partition count out of bounds)."""


class TableUnavailable(KvtError):
    """The controller or the segment store did not answer, or answered something unexpected,
    after the client's retries."""
