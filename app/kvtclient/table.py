"""A key-value table of a pgcontroller (or Pravega) cluster, as Pravega's KeyValueTableImpl
offers it: opened by scope and name through the controller's gRPC (configuration, current
segments, and getURI per segment), keys routed to table segments by their primary key, updates
and removals with Pravega's version conditions, reads, and iteration in key order.

Invariant: a key only ever goes to the segment `KvtSegments` names for its primary key, and a
version is only ever sent to the segment it came from (a version of another segment is refused
here as BadKeyVersion, as Java's client refuses it); a batch is one wire request to one segment,
so it is applied all or none.
"""

from __future__ import annotations

import asyncio
import heapq
import ssl
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Final

import jwt
from grpclib.client import Channel

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.domain.hosts import HostAddress
from app.domain.kvtables import kvt_stream_name, table_segment_name
from app.kvtclient.controller import CONTROLLER_TIMEOUT_S, ask_controller, controller_tls, open_channel
from app.kvtclient.errors import BadKeyVersion, InvalidKey, TableNotFound, TableUnavailable
from app.kvtclient.model import (
    NO_SEGMENT_ID,
    WIRE_NO_VERSION,
    WIRE_NOT_EXISTS,
    Change,
    EntryPage,
    Insert,
    KeyLayout,
    KeyPage,
    Put,
    Remove,
    TableEntry,
    TableKey,
    Version,
    check_value,
    successor,
)
from app.kvtclient.routing import KvtSegments, SegmentRange
from app.kvtclient.segment import Resolve, TableSegment
from app.segmentstore.client.connections import ConnectionPool

# KeyValueTableIteratorImpl.Builder's default maxIterationSize.
DEFAULT_PAGE_SIZE: Final = 10
# The wire's suggested count is a 32-bit int (the segment store caps a page at 2 MiB anyway).
_MAX_PAGE_SIZE: Final = (1 << 31) - 1
# The Rust client's DEFAULT_REFRESH_THRESHOLD_SECONDS: a token this close to expiry is renewed.
TOKEN_REFRESH_THRESHOLD_S: Final = 5


@dataclass
class _Cursor:
    """One segment's place in a merged iteration: the page in hand and where the next starts."""

    segment: TableSegment
    next_from: bytes | None
    items: list[tuple[bytes, bytes, int]] = field(default_factory=list)
    index: int = 0


class KeyValueTable:
    """Open with `await KeyValueTable.open(controller, scope, name)`; close with `await
    table.close()`, or use it as `async with await KeyValueTable.open(...) as table:`."""

    def __init__(
        self,
        scope: str,
        name: str,
        layout: KeyLayout,
        segments: KvtSegments,
        channel: Channel,
        *,
        request_timeout_s: float = 30.0,
        token: str = "",
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.scope = scope
        # The delegation token of getCurrentSegmentsKeyValueTable ("" with auth off), renewed
        # from the controller before it expires or when a store says it has.
        self._delegation_token = token
        self._token_renewal = asyncio.Lock()
        self.name = name
        self.layout = layout
        self._segments = segments
        self._channel = channel
        self._stub = ControllerServiceStub(channel)
        self._pool = ConnectionPool(timeout_s=request_timeout_s, tls=tls)
        self._endpoints: dict[int, HostAddress] = {}
        self._by_id = {
            r.segment_id: TableSegment(
                table_segment_name(scope, name, r.segment_id),
                r.segment_id,
                self._pool,
                self._resolver(r.segment_id),
                self._current_token,
            )
            for r in segments.ranges
        }

    @classmethod
    async def open(
        cls,
        controller: str,
        scope: str,
        name: str,
        *,
        request_timeout_s: float = 30.0,
        tls: ssl.SSLContext | None = None,
    ) -> KeyValueTable:
        """The table as the controller describes it now: TableNotFound if it does not exist,
        TableUnavailable if the controller cannot be reached or cannot describe it yet (a table
        still being created has no segments to give). With `tls` (or a `tls://` controller
        address), the controller and the segment stores are reached over TLS, verified."""
        tls = tls if tls is not None else controller_tls(controller)
        channel = open_channel(controller, tls)
        try:
            stub = ControllerServiceStub(channel)
            info = pb.KeyValueTableInfo(scope=scope, kvtName=name)
            config = await ask_controller(
                f"the configuration of {scope}/{name}",
                stub.getKeyValueTableConfiguration(info, timeout=CONTROLLER_TIMEOUT_S),
            )
            if config.status == pb.KeyValueTableConfigResponse.TABLE_NOT_FOUND:
                raise TableNotFound(f"key-value table {scope}/{name} does not exist")
            if config.status != pb.KeyValueTableConfigResponse.SUCCESS:
                raise TableUnavailable(f"the controller failed to read key-value table {scope}/{name}")
            ranges = await ask_controller(
                f"the segments of {scope}/{name}",
                stub.getCurrentSegmentsKeyValueTable(info, timeout=CONTROLLER_TIMEOUT_S),
            )
            try:
                segments = KvtSegments(
                    [SegmentRange(r.segmentId.segmentId, r.minKey, r.maxKey) for r in ranges.segmentRanges]
                )
            except ValueError as exc:
                raise TableUnavailable(f"the controller described {scope}/{name} oddly: {exc}") from exc
            if len(segments.ranges) != config.config.partitionCount:
                # KeyValueTableImpl's precondition: a table never changes its segments.
                raise TableUnavailable(
                    f"{scope}/{name} has {config.config.partitionCount} partitions but "
                    f"{len(segments.ranges)} segments"
                )
            layout = KeyLayout(config.config.primaryKeyLength, config.config.secondaryKeyLength)
        except BaseException:
            channel.close()
            raise
        return cls(
            scope,
            name,
            layout,
            segments,
            channel,
            request_timeout_s=request_timeout_s,
            token=ranges.delegationToken,
            tls=tls,
        )

    async def close(self) -> None:
        await self._pool.close()
        self._channel.close()

    async def __aenter__(self) -> KeyValueTable:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- reads ---------------------------------------------------------------------------------

    async def get(self, key: TableKey) -> TableEntry | None:
        """The key's entry, or None when it does not exist."""
        return (await self.get_all([key]))[0]

    async def get_all(self, keys: Sequence[TableKey]) -> list[TableEntry | None]:
        """One answer per key, in order; the keys may lie in any segments."""
        groups: dict[int, list[int]] = {}
        serialized = [self.layout.serialize(k) for k in keys]
        for i, key in enumerate(keys):
            groups.setdefault(self._segment_for(key.primary).segment_id, []).append(i)
        result: list[TableEntry | None] = [None] * len(keys)

        async def read(segment_id: int, ordinals: list[int]) -> None:
            segment = self._by_id[segment_id]
            found = await segment.get([serialized[i] for i in ordinals])
            for i, (data, value, version) in zip(ordinals, found, strict=True):
                if version != WIRE_NOT_EXISTS:
                    result[i] = TableEntry(self.layout.deserialize(data), value, Version(segment_id, version))

        await asyncio.gather(*(read(s, ordinals) for s, ordinals in groups.items()))
        return result

    async def exists(self, key: TableKey) -> bool:
        return await self.get(key) is not None

    # --- updates -------------------------------------------------------------------------------

    async def put(self, key: TableKey, value: bytes, version: Version | None = None) -> Version:
        """Sets the value: unconditionally when `version` is None, else only while the key has
        that version (BadKeyVersion if it has another or none: a key-value table's segments answer
        a missing key as Pravega's do)."""
        return (await self.update([Put(key, value, version)]))[0]

    async def insert(self, key: TableKey, value: bytes) -> Version:
        """Sets the value only if the key does not exist (BadKeyVersion if it does)."""
        return (await self.update([Insert(key, value)]))[0]

    async def remove(self, key: TableKey, version: Version | None = None) -> None:
        """Removes the key: unconditionally when `version` is None (an absent key is fine), else
        only while the key has that version (BadKeyVersion otherwise)."""
        await self.update([Remove(key, version)])

    async def update(self, changes: Sequence[Change]) -> list[Version]:
        """Applies `changes` atomically: all or none. They must share one primary key (so they
        are in one segment), and removals cannot be mixed with puts and inserts, as in Pravega.
        Returns the new versions of the puts and inserts, in order (none for removals)."""
        if not changes:
            return []
        primary = changes[0].key.primary
        removal = isinstance(changes[0], Remove)
        for change in changes:
            if change.key.primary != primary:
                raise InvalidKey("all the keys of one update must have the same primary key")
            if isinstance(change, Remove) != removal:
                raise InvalidKey("an update cannot mix removals with puts or inserts")
        segment = self._by_id[self._segment_for(primary).segment_id]
        if removal:
            keys = [
                (self.layout.serialize(c.key), self._wire_version(segment, c.version))
                for c in changes
                if isinstance(c, Remove)
            ]
            await segment.remove(keys)
            return []
        entries: list[tuple[bytes, bytes, int]] = []
        for change in changes:
            if isinstance(change, Put):
                wire = self._wire_version(segment, change.version)
            elif isinstance(change, Insert):
                wire = WIRE_NOT_EXISTS
            else:  # pragma: no cover - excluded by the mixing check above
                raise InvalidKey("an update cannot mix removals with puts or inserts")
            check_value(change.value)
            entries.append((self.layout.serialize(change.key), change.value, wire))
        versions = await segment.put(entries)
        return [Version(segment.segment_id, v) for v in versions]

    # --- iteration -----------------------------------------------------------------------------

    async def entries(
        self,
        *,
        page_size: int = DEFAULT_PAGE_SIZE,
        primary_key: bytes | None = None,
        continuation: bytes = b"",
    ) -> AsyncIterator[EntryPage]:
        """Every entry of the table (or of one primary key), in key order, in pages of at most
        `page_size`; a page's `continuation` given back here resumes right after that page."""
        async for items, token in self._pages(page_size, primary_key, continuation):
            yield EntryPage(
                [TableEntry(self.layout.deserialize(k), v, Version(sid, ver)) for k, v, ver, sid in items],
                token,
            )

    async def keys(
        self,
        *,
        page_size: int = DEFAULT_PAGE_SIZE,
        primary_key: bytes | None = None,
        continuation: bytes = b"",
    ) -> AsyncIterator[KeyPage]:
        """Like `entries`, keys and their versions only."""
        async for items, token in self._pages(page_size, primary_key, continuation, keys_only=True):
            yield KeyPage(
                [self.layout.deserialize(k) for k, _, _, _ in items],
                [Version(sid, ver) for _, _, ver, sid in items],
                token,
            )

    async def _pages(
        self, page_size: int, primary_key: bytes | None, continuation: bytes, keys_only: bool = False
    ) -> AsyncIterator[tuple[list[tuple[bytes, bytes, int, int]], bytes]]:
        """KeyValueTableIteratorImpl: each segment read from `from_key` to `to_key` (both
        inclusive, full-length keys), the next read starting at the successor of the last key
        returned, and the segments merged in key order."""
        if not 0 < page_size <= _MAX_PAGE_SIZE:
            raise ValueError(f"page_size must be 1 to {_MAX_PAGE_SIZE}, not {page_size}")
        secondary = self.layout.secondary_length
        if primary_key is None:
            from_key = bytes(self.layout.length)
            to_key = b"\xff" * self.layout.length
            segments = list(self._by_id.values())
        else:
            self.layout.check_primary(primary_key)
            from_key = primary_key + bytes(secondary)
            to_key = primary_key + b"\xff" * secondary
            segments = [self._by_id[self._segment_for(primary_key).segment_id]]
        if continuation:
            if len(continuation) != self.layout.length or not from_key <= continuation <= to_key:
                raise InvalidKey("the continuation token is not one of this iteration's")
            resumed = successor(continuation)
            if resumed is None or resumed > to_key:
                return
            from_key = resumed
        cursors = [_Cursor(s, from_key) for s in segments]
        heap: list[tuple[bytes, int]] = []

        async def advance(i: int) -> None:
            """Moves cursor i to its next item (fetching a page when its page is used up) and
            puts it back on the heap unless its segment has no more."""
            cursor = cursors[i]
            cursor.index += 1
            if cursor.index >= len(cursor.items):
                if cursor.next_from is None:
                    return
                if keys_only:
                    got = await cursor.segment.read_keys(cursor.next_from, to_key, page_size)
                    cursor.items = [(k, b"", v) for k, v in got]
                else:
                    cursor.items = await cursor.segment.read_entries(cursor.next_from, to_key, page_size)
                cursor.index = 0
                if not cursor.items:
                    cursor.next_from = None
                    return
                after = successor(cursor.items[-1][0])
                cursor.next_from = after if after is not None and after <= to_key else None
            heapq.heappush(heap, (cursor.items[cursor.index][0], i))

        for cursor in cursors:
            cursor.index = -1
        await asyncio.gather(*(advance(i) for i in range(len(cursors))))
        while heap:
            page: list[tuple[bytes, bytes, int, int]] = []
            while heap and len(page) < page_size:
                _, i = heapq.heappop(heap)
                cursor = cursors[i]
                key, value, version = cursor.items[cursor.index]
                page.append((key, value, version, cursor.segment.segment_id))
                await advance(i)
            yield page, page[-1][0]

    # --- plumbing ------------------------------------------------------------------------------

    def _segment_for(self, primary: bytes) -> SegmentRange:
        self.layout.check_primary(primary)
        return self._segments.segment_for(primary)

    def _wire_version(self, segment: TableSegment, version: Version | None) -> int:
        """TableEntryHelper.validateKeyVersionSegment, then the version the wire carries."""
        if version is None:
            return WIRE_NO_VERSION
        if version.segment_id not in (NO_SEGMENT_ID, segment.segment_id):
            raise BadKeyVersion(segment.name, f"version {version} belongs to another table segment")
        return version.segment_version

    async def _current_token(self, expired: bool) -> str:
        token = self._delegation_token
        if not token or not (expired or _expires_soon(token)):
            return token
        async with self._token_renewal:
            if self._delegation_token == token:
                info = pb.KeyValueTableInfo(scope=self.scope, kvtName=self.name)
                ranges = await ask_controller(
                    f"a delegation token for {self.scope}/{self.name}",
                    self._stub.getCurrentSegmentsKeyValueTable(info, timeout=CONTROLLER_TIMEOUT_S),
                )
                self._delegation_token = ranges.delegationToken
            return self._delegation_token

    def _resolver(self, segment_id: int) -> Resolve:
        async def resolve(refresh: bool) -> HostAddress:
            known = self._endpoints.get(segment_id)
            if known is not None and not refresh:
                return known
            # The pseudo-stream of the table segments, as Java's client parses it back out of the
            # segment's qualified name (Segment.fromScopedName) for getURI.
            request = pb.SegmentId(
                streamInfo=pb.StreamInfo(scope=self.scope, stream=kvt_stream_name(self.name)),
                segmentId=segment_id,
            )
            uri = await ask_controller(
                f"the segment store of {self.scope}/{self.name} segment {segment_id}",
                self._stub.getURI(request, timeout=CONTROLLER_TIMEOUT_S),
            )
            endpoint = HostAddress(uri.endpoint, uri.port)
            self._endpoints[segment_id] = endpoint
            return endpoint

        return resolve


def _expires_soon(token: str) -> bool:
    """Read without the key (a client has none), as the Rust client reads `exp`."""
    try:
        exp = jwt.decode(token, options={"verify_signature": False}).get("exp")
    except jwt.PyJWTError:
        return False
    return isinstance(exp, int | float) and time.time() + TOKEN_REFRESH_THRESHOLD_S >= exp
