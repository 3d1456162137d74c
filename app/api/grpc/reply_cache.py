"""Hot replies (getCurrentSegments, getSegments at the head, getStreamConfiguration, getURI, and
createTransaction's segments) as bytes, reused while what they were built from is the same.

Invariant: a cached body is a pure function of its key (method, scope, stream) and of the source
it was built from (the segments, the head, the configuration, the endpoint); every call still
reads its source as before (the record cache, invalidated by NOTIFY, or the database) and reuses
bytes only when the source equals the one they were built from, so this cache never answers what
an uncached call would not, whatever changed (scale, seal, update, truncate, delete and re-create).
Nothing per caller is cached: a delegation token is encoded on each call and appended (protobuf
fields of one message concatenate).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from google.protobuf.message import Message

from app.api.grpc.convert import add_segment_ranges, stream_config_to_proto
from app.api.grpc.preencoded import PreEncoded
from app.api.grpc.proto import controller_pb2 as pb
from app.domain.records import SegmentRecord, StreamConfig
from app.metrics.registry import counter

# Bounds: this many bodies, and this much source weight (segments, head entries) across all of
# them (a segment is some 80 bytes of body, so the bound is tens of MB at most).
MAX_ENTRIES = 30_000
MAX_WEIGHT = 200_000

_LOOKUPS = counter("pgcontroller_cache_requests")
_HIT, _MISS = _LOOKUPS.labels("reply", "hit"), _LOOKUPS.labels("reply", "miss")

_Key = tuple[str, str, str]


@dataclass(frozen=True, slots=True)
class _Entry:
    source: Hashable
    weight: int
    body: bytes


class ReplyCache:
    def __init__(self, max_entries: int = MAX_ENTRIES, max_weight: int = MAX_WEIGHT) -> None:
        self._max_entries = max_entries
        self._max_weight = max_weight
        self._weight = 0
        self._entries: OrderedDict[_Key, _Entry] = OrderedDict()

    # --- the replies ------------------------------------------------------------------------

    async def segment_ranges(self, scope: str, stream: str, segments: Sequence[SegmentRecord]) -> bytes:
        """The SegmentRanges body (ranges, no token) of getCurrentSegments."""
        return await self._ranges(
            "getCurrentSegments", pb.SegmentRanges, "segmentRanges", scope, stream, segments
        )

    async def active_segments(self, scope: str, stream: str, segments: Sequence[SegmentRecord]) -> bytes:
        """The CreateTxnResponse body of createTransaction with only its activeSegments (the
        transaction's epoch's segments): the caller's txnId and token are its own."""
        return await self._ranges(
            "createTransaction", pb.CreateTxnResponse, "activeSegments", scope, stream, segments
        )

    async def _ranges(
        self,
        method: str,
        message_type: type[Message],
        field: str,
        scope: str,
        stream: str,
        segments: Sequence[SegmentRecord],
    ) -> bytes:
        key = (method, scope, stream)
        source = tuple(segments)
        body = self._hit(key, source)
        if body is None:
            response = message_type()
            await add_segment_ranges(getattr(response, field), scope, stream, source)
            body = self._put(key, source, len(source), response.SerializeToString())
        return body

    def segments_at_head(self, scope: str, stream: str, head: dict[int, int]) -> bytes:
        """The SegmentsAtTime body (locations, no token) of getSegments."""
        key = ("getSegments", scope, stream)
        source = tuple(sorted(head.items()))
        body = self._hit(key, source)
        if body is None:
            info = pb.StreamInfo(scope=scope, stream=stream)
            response = pb.SegmentsAtTime(
                segments=[
                    pb.SegmentsAtTime.SegmentLocation(
                        segmentId=pb.SegmentId(streamInfo=info, segmentId=segment), offset=offset
                    )
                    for segment, offset in source
                ]
            )
            body = self._put(key, source, len(source), response.SerializeToString())
        return body

    def stream_config(self, scope: str, stream: str, config: StreamConfig) -> bytes:
        key = ("getStreamConfiguration", scope, stream)
        body = self._hit(key, config)
        if body is None:
            encoded = stream_config_to_proto(scope, stream, config).SerializeToString()
            body = self._put(key, config, 1, encoded)
        return body

    def node_uri(self, host: str, port: int) -> bytes:
        key = ("getURI", host, str(port))
        body = self._hit(key, (host, port))
        if body is None:
            body = self._put(key, (host, port), 1, pb.NodeUri(endpoint=host, port=port).SerializeToString())
        return body

    # --- the store --------------------------------------------------------------------------

    def _hit(self, key: _Key, source: Hashable) -> bytes | None:
        entry = self._entries.get(key)
        # Tuple equality checks identity first: segments served from the record cache are the
        # very objects the entry holds, so a hit costs a pointer comparison per segment.
        if entry is not None and entry.source == source:
            self._entries.move_to_end(key)
            _HIT.inc()
            return entry.body
        _MISS.inc()
        return None

    def _put(self, key: _Key, source: Hashable, weight: int, body: bytes) -> bytes:
        old = self._entries.pop(key, None)
        if old is not None:
            self._weight -= old.weight
        if weight > self._max_weight:
            return body  # larger than the whole cache: built per call, as without it
        self._entries[key] = _Entry(source, weight, body)
        self._weight += weight
        while len(self._entries) > self._max_entries or self._weight > self._max_weight:
            _, evicted = self._entries.popitem(last=False)
            self._weight -= evicted.weight
        return body

    def __len__(self) -> int:
        return len(self._entries)


def with_token(body: bytes, message_type: type[Message], token: str) -> PreEncoded:
    """`body` with this caller's delegation token appended (nothing when it is empty)."""
    if token:
        body += message_type(delegationToken=token).SerializeToString()
    return PreEncoded(body, message_type)
