"""One table segment of a key-value table over Pravega's wire protocol: what Pravega's
TableSegmentImpl does (UpdateTableEntries and RemoveTableKeys with offset -1, ReadTable,
ReadTableKeys/ReadTableEntries bounded by fromKey/toKey).

Invariant: every reply that is not the command's success becomes exactly one KvtError, and a
refused condition is always BadKeyVersion or NoSuchKey (never retried: the caller decides). Only
what cannot have been decided by the server's reply is retried (app/segmentstore/client/retried.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, TypeVar

from app.kvtclient.errors import (
    BadKeyVersion,
    InvalidKey,
    KvtError,
    NoSuchKey,
    TableNotFound,
    TableUnavailable,
)
from app.kvtclient.model import MAX_BATCH_KEYS
from app.segmentstore.client.connections import ConnectionPool
from app.segmentstore.client.retried import ATTEMPTS, Build, NoAnswer, Resolve, Token, request_retried
from app.segmentstore.wire import commands as wc

R = TypeVar("R", bound=wc.Command)

# TableSegmentImpl.MAX_GET_KEY_BATCH_SIZE: keys per ReadTable so the reply (each value up to
# ~1 MiB) stays under the wire's command size.
MAX_GET_BATCH: Final = (wc.MAX_WIRECOMMAND_SIZE - 8192) // (8192 + 1024 * 1024 - 8192)
# TableSegment.MAXIMUM_BATCH_LENGTH: the most one batch's keys and values may take on the wire.
MAX_BATCH_BYTES: Final = wc.MAX_WIRECOMMAND_SIZE - 8192
# What a key and a value take on the wire besides their bytes: each a payload length and a data
# length, and the key's version.
_ENTRY_OVERHEAD: Final = 4 + 4 + 8 + 4 + 4
# ErrorMessage.error_code of Java's IllegalArgumentException (a key of the wrong length).
_ILLEGAL_ARGUMENT: Final = 0

__all__ = ["ATTEMPTS", "Resolve", "TableSegment", "Token"]


async def _no_token(refresh: bool) -> str:
    return ""


class TableSegment:
    """Requests about one table segment; `resolve(refresh)` names the host that owns it."""

    def __init__(
        self, name: str, segment_id: int, pool: ConnectionPool, resolve: Resolve, token: Token = _no_token
    ) -> None:
        self.name = name
        self.segment_id = segment_id
        self._pool = pool
        self._resolve = resolve
        self._token = token

    async def put(self, entries: Sequence[tuple[bytes, bytes, int]]) -> list[int]:
        """(key, value, wire version) items, applied all or none; their new versions in order."""
        _check_batch(len(entries), sum(len(k) + len(value) + _ENTRY_OVERHEAD for k, value, _ in entries))
        wire_entries = tuple((wc.TableKey(k, v), wc.TableValue(value)) for k, value, v in entries)
        reply = await self._call(
            lambda rid, token: wc.UpdateTableEntries(rid, self.name, token, wire_entries),
            wc.TableEntriesUpdated,
        )
        if len(reply.versions) != len(entries):
            raise TableUnavailable(
                f"{self.name}: {len(entries)} entries updated, {len(reply.versions)} versions returned"
            )
        return list(reply.versions)

    async def remove(self, keys: Sequence[tuple[bytes, int]]) -> None:
        """(key, wire version) items, removed all or none."""
        _check_batch(len(keys), sum(len(k) + _ENTRY_OVERHEAD for k, _ in keys))
        wire_keys = tuple(wc.TableKey(k, v) for k, v in keys)
        await self._call(
            lambda rid, token: wc.RemoveTableKeys(rid, self.name, token, wire_keys), wc.TableKeysRemoved
        )

    async def get(self, keys: Sequence[bytes]) -> list[tuple[bytes, bytes, int]]:
        """(key, value, wire version) per key, in order; an absent key has version NOT_EXISTS."""
        result: list[tuple[bytes, bytes, int]] = []
        for start in range(0, len(keys), MAX_GET_BATCH):
            batch = tuple(
                wc.TableKey(k, wc.TABLE_KEY_NO_VERSION) for k in keys[start : start + MAX_GET_BATCH]
            )
            reply = await self._read_table(batch)
            if len(reply.entries) != len(batch):
                raise TableUnavailable(
                    f"{self.name}: {len(batch)} keys read, {len(reply.entries)} entries returned"
                )
            result.extend((k.data, v.data, k.key_version) for k, v in reply.entries)
        return result

    async def _read_table(self, keys: tuple[wc.TableKey, ...]) -> wc.TableRead:
        return await self._call(lambda rid, token: wc.ReadTable(rid, self.name, token, keys), wc.TableRead)

    async def read_entries(
        self, from_key: bytes, to_key: bytes, count: int
    ) -> list[tuple[bytes, bytes, int]]:
        """Up to `count` entries with keys in [from_key, to_key], in key order."""
        reply = await self._call(
            lambda rid, token: wc.ReadTableEntries(rid, self.name, token, count, b"", b"", from_key, to_key),
            wc.TableEntriesRead,
        )
        return [(k.data, v.data, k.key_version) for k, v in reply.entries]

    async def read_keys(self, from_key: bytes, to_key: bytes, count: int) -> list[tuple[bytes, int]]:
        """Up to `count` keys in [from_key, to_key], in key order, with their versions."""
        reply = await self._call(
            lambda rid, token: wc.ReadTableKeys(rid, self.name, token, count, b"", b"", from_key, to_key),
            wc.TableKeysRead,
        )
        return [(k.data, k.key_version) for k in reply.keys]

    async def _call(self, build: Build, success: type[R]) -> R:
        try:
            (command,), (reply,) = await request_retried(self._pool, self._resolve, self._token, [build])
        except NoAnswer as exc:
            raise TableUnavailable(f"{self.name}: {exc}") from None
        if isinstance(reply, success):
            return reply
        raise self._failure(command, reply)

    def _failure(self, command: wc.Command, reply: wc.Command) -> KvtError:
        asked = type(command).__name__
        match reply:
            case wc.TableKeyBadVersion():
                return BadKeyVersion(self.name, f"{asked} refused: a key's version is not the one expected")
            case wc.TableKeyDoesNotExist():
                return NoSuchKey(self.name, f"{asked} refused: a key conditioned on a version does not exist")
            case wc.NoSuchSegment():
                return TableNotFound(f"table segment {self.name} does not exist (was the table deleted?)")
            case wc.AuthTokenCheckFailed():
                return TableUnavailable(
                    f"{asked} on {self.name}: the segment store refused the delegation token"
                )
            case wc.ErrorMessage() if reply.error_code == _ILLEGAL_ARGUMENT:
                return InvalidKey(f"{asked} on {self.name} refused: {reply.message}")
        return TableUnavailable(f"{asked} on {self.name}: unexpected reply {reply}")


def _check_batch(count: int, size: int) -> None:
    """TableSegmentImpl.checkBatchSize: refused before anything is sent."""
    if count > MAX_BATCH_KEYS:
        raise InvalidKey(f"one batch carries at most {MAX_BATCH_KEYS} keys, not {count}")
    if size > MAX_BATCH_BYTES:
        raise InvalidKey(f"one batch carries at most {MAX_BATCH_BYTES} bytes, not {size}")
