"""Reader groups (Pravega's ReaderGroupConfiguration): the configuration the controller keeps for a group, its
validation, its states, and the names derived from it (its subscriber name, its `_RG` stream).

Pure. A configuration that passes `validate` is one Pravega's ReaderGroupConfig builder accepts;
everything the controller later does with it (subscriptions, the state stream) relies on that.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from app.domain.errors import InvalidInput
from app.domain.limits import MAX_DURATION_MS, MAX_SEGMENTS_PER_EPOCH
from app.domain.names import READER_GROUP_STREAM_PREFIX, is_valid_user_name
from app.domain.validation import check_range

# ReaderGroupConfig.DEFAULT_UUID: "no id yet, assign one".
DEFAULT_READER_GROUP_ID = uuid.UUID(int=0)
# StreamMetadataTasks.READER_GROUP_SEGMENT_ROLLOVER_SIZE_BYTES for the `_RG` stream's segment.
READER_GROUP_STREAM_ROLLOVER_BYTES = 4 * 1024 * 1024

# The client's defaults (ReaderGroupConfig.builder()).
DEFAULT_GROUP_REFRESH_TIME_MS = 3_000
DEFAULT_AUTOMATIC_CHECKPOINT_INTERVAL_MS = 30_000
DEFAULT_MAX_OUTSTANDING_CHECKPOINT_REQUEST = 3

Cut = Mapping[int, int]


class StreamDataRetention(enum.IntEnum):
    """ReaderGroupConfig.StreamDataRetention; the wire carries the ordinal."""

    NONE = 0
    MANUAL_RELEASE_AT_USER_STREAMCUT = 1
    AUTOMATIC_RELEASE_AT_LAST_CHECKPOINT = 2

    @classmethod
    def of(cls, ordinal: int) -> StreamDataRetention:
        try:
            return cls(ordinal)
        except ValueError as exc:
            raise InvalidInput(f"unknown reader-group retention type {ordinal}") from exc


class ReaderGroupState(enum.Enum):
    """UNKNOWN is "no record" and is never stored."""

    CREATING = "CREATING"
    ACTIVE = "ACTIVE"
    DELETING = "DELETING"


@dataclass(frozen=True, slots=True, order=True)
class ScopedStream:
    scope: str
    stream: str

    def __str__(self) -> str:
        return f"{self.scope}/{self.stream}"

    @classmethod
    def parse(cls, scoped: str) -> ScopedStream:
        """ "scope/stream", as Pravega's Stream.of(scopedName) reads it."""
        scope, sep, stream = scoped.partition("/")
        if not sep or not scope or not stream or "/" in stream:
            raise InvalidInput(f"not a scoped stream name: {scoped!r}")
        return cls(scope, stream)


@dataclass(frozen=True, slots=True)
class ReaderGroupConfig:
    """What a group reads and how; an empty cut means "unbounded" (the head or the tail).
    Stream order is kept as given (it is how the configuration is answered back)."""

    starting_stream_cuts: Mapping[ScopedStream, Cut]
    ending_stream_cuts: Mapping[ScopedStream, Cut] = field(default_factory=dict)
    group_refresh_time_ms: int = DEFAULT_GROUP_REFRESH_TIME_MS
    automatic_checkpoint_interval_ms: int = DEFAULT_AUTOMATIC_CHECKPOINT_INTERVAL_MS
    max_outstanding_checkpoint_request: int = DEFAULT_MAX_OUTSTANDING_CHECKPOINT_REQUEST
    retention: StreamDataRetention = StreamDataRetention.NONE

    @property
    def streams(self) -> tuple[ScopedStream, ...]:
        return tuple(self.starting_stream_cuts)

    @property
    def is_subscriber(self) -> bool:
        """A group with retention opts its streams into consumption-based retention (as a subscriber)."""
        return self.retention is not StreamDataRetention.NONE

    def validate(self) -> None:
        """ReaderGroupConfigBuilder#build's checks, in its order."""
        if not self.starting_stream_cuts:
            raise InvalidInput("a reader group must read at least one stream (no starting stream cuts)")
        for stream in (*self.starting_stream_cuts, *self.ending_stream_cuts):
            if not stream.scope or not stream.stream:
                raise InvalidInput(f"a stream cut names no scope or no stream: {stream}")
        for stream, end in self.ending_stream_cuts.items():
            if not end:
                continue
            if stream not in self.starting_stream_cuts:
                raise InvalidInput(f"ending stream cut for {stream}, which has no starting stream cut")
            start = self.starting_stream_cuts[stream]
            if start:
                _check_start_before_end(stream, start, end)
        if self.max_outstanding_checkpoint_request <= 0:
            raise InvalidInput(
                "maxOutstandingCheckpointRequest must be greater than zero, "
                f"got {self.max_outstanding_checkpoint_request}"
            )
        # Bounds beyond Java's builder: intervals the clock arithmetic can carry, and cuts no
        # larger than an epoch (a cut names at most one segment per key range of an epoch).
        check_range("groupRefreshTimeMillis", self.group_refresh_time_ms, -MAX_DURATION_MS, MAX_DURATION_MS)
        check_range(
            "automaticCheckpointIntervalMillis",
            self.automatic_checkpoint_interval_ms,
            -MAX_DURATION_MS,
            MAX_DURATION_MS,
        )
        for stream, cut in (*self.starting_stream_cuts.items(), *self.ending_stream_cuts.items()):
            if len(cut) > MAX_SEGMENTS_PER_EPOCH:
                raise InvalidInput(
                    f"the stream cut of {stream} names {len(cut)} segments; at most {MAX_SEGMENTS_PER_EPOCH}"
                )


def _check_start_before_end(stream: ScopedStream, start: Cut, end: Cut) -> None:
    for segment in start.keys() & end.keys():
        begin, finish = start[segment], end[segment]
        if begin == -1:
            if finish != -1:
                raise InvalidInput(f"{stream}: segment {segment} starts at the tail but ends at {finish}")
        elif finish != -1 and begin > finish:
            raise InvalidInput(f"{stream}: segment {segment} starts at {begin}, after its end {finish}")
    if min(start) > min(end) or max(start) > max(end):
        raise InvalidInput(f"{stream}: the starting stream cut must precede the ending stream cut")


def unique_cuts(cuts: Iterable[tuple[ScopedStream, Cut]], what: str) -> dict[ScopedStream, Cut]:
    """Cuts by stream; a stream named twice is an error (Java's Collectors.toMap throws)."""
    result: dict[ScopedStream, Cut] = {}
    for stream, cut in cuts:
        if stream in result:
            raise InvalidInput(f"{what} name stream {stream} twice")
        result[stream] = dict(cut)
    return result


@dataclass(frozen=True, slots=True)
class ReaderGroupRecord:
    """The stored group. `generation` counts configuration updates (0 at creation); `updating`
    is set while an update's subscriber changes are being applied."""

    scope: str
    name: str
    id: uuid.UUID
    generation: int
    state: ReaderGroupState
    config: ReaderGroupConfig
    updating: bool = False
    created_at: int = 0

    @property
    def subscriber(self) -> str:
        return subscriber_name(self.scope, self.name)

    @property
    def state_stream(self) -> str:
        return reader_group_stream(self.name)


def subscriber_name(scope: str, reader_group: str) -> str:
    """NameUtils.getScopedReaderGroupName: what the group is called on the streams it reads."""
    return f"{scope}/{reader_group}"


def reader_group_stream(reader_group: str) -> str:
    """NameUtils.getStreamForReaderGroup: the group's state-synchronizer stream."""
    return f"{READER_GROUP_STREAM_PREFIX}{reader_group}"


def is_valid_reader_group_name(name: str) -> bool:
    return is_valid_user_name(name)


def parse_reader_group_id(text: str) -> uuid.UUID:
    """The wire's id string; a malformed one is an error (UUID.fromString throws in Java)."""
    try:
        return uuid.UUID(text)
    except ValueError as exc:
        raise InvalidInput(f"reader group id {text!r} is not a UUID") from exc


# --- updates ----------------------------------------------------------------------------------


def is_subscriber_transition(old: ReaderGroupConfig, new: ReaderGroupConfig) -> bool:
    """isTransitionToOrFromSubscriber: anything but NONE -> NONE touches subscriptions."""
    return old.is_subscriber or new.is_subscriber


def streams_to_unsubscribe(old: ReaderGroupConfig, new: ReaderGroupConfig) -> tuple[ScopedStream, ...]:
    """getStreamsToBeUnsubscribed: none when becoming a subscriber, every old stream when
    ceasing to be one, else the streams the new configuration no longer reads."""
    if not old.is_subscriber and new.is_subscriber:
        return ()
    if old.is_subscriber and not new.is_subscriber:
        return old.streams
    return tuple(s for s in old.streams if s not in new.starting_stream_cuts)
