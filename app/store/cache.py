"""Process-wide caches of stream records, so hot reads do not hit PostgreSQL on every RPC.

Immutable records (epoch records; a segment's sealed-in epoch once set) are cached forever
under the stream's id, which is never reused. Mutable ones (a stream's state and current
epoch) are cached only while a LISTEN connection is up ("trusted"), and are dropped when a
NOTIFY says they changed; a read that raced with an invalidation is not stored (generation).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from app.domain.records import EpochRecord, StreamState
from app.metrics.registry import counter

# The epoch cache holds at most this many segments in all (a few hundred MB at most): a hundred
# epochs of the largest size, or far more of the usual few segments each.
MAX_CACHED_SEGMENTS = 1_000_000

K = TypeVar("K")
V = TypeVar("V")


# Hits and misses per cache (the ratio is hits / (hits + misses)); children made once.
_LOOKUPS = counter("pgcontroller_cache_requests")
_VIEW_HIT, _VIEW_MISS = _LOOKUPS.labels("stream_view", "hit"), _LOOKUPS.labels("stream_view", "miss")
_EPOCH_HIT, _EPOCH_MISS = _LOOKUPS.labels("epoch", "hit"), _LOOKUPS.labels("epoch", "miss")


class _Lru(Generic[K, V]):
    """At most `capacity` items and, when `weigh` is given, at most `max_weight` in total weight
    (an epoch weighs its segment count: a count of epochs alone does not bound memory when one
    epoch may hold 10,000 segments)."""

    def __init__(self, capacity: int, weigh: Callable[[V], int] | None = None, max_weight: int = 0) -> None:
        self._capacity = capacity
        self._weigh = weigh
        self._max_weight = max_weight
        self._weight = 0
        self._items: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        self.pop(key)
        self._items[key] = value
        self._weight += self._weight_of(value)
        while len(self._items) > self._capacity or (
            self._weigh is not None and self._weight > self._max_weight
        ):
            _, evicted = self._items.popitem(last=False)
            self._weight -= self._weight_of(evicted)

    def pop(self, key: K) -> V | None:
        value = self._items.pop(key, None)
        if value is not None:
            self._weight -= self._weight_of(value)
        return value

    def clear(self) -> None:
        self._items.clear()
        self._weight = 0

    @property
    def weight(self) -> int:
        return self._weight

    def _weight_of(self, value: V) -> int:
        return 0 if self._weigh is None else self._weigh(value)

    def __len__(self) -> int:
        return len(self._items)


@dataclass(frozen=True, slots=True)
class StreamView:
    """The mutable facts a hot read needs: which stream row, its state, its current epoch."""

    stream_id: int
    state: StreamState
    epoch: int


class RecordCache:
    def __init__(
        self,
        max_streams: int = 10_000,
        max_epochs: int = 100_000,
        max_epoch_segments: int = MAX_CACHED_SEGMENTS,
    ) -> None:
        self._views: _Lru[tuple[str, str], StreamView] = _Lru(max_streams)
        self._names_by_id: dict[int, tuple[str, str]] = {}
        self._epochs: _Lru[tuple[int, int], EpochRecord] = _Lru(
            max_epochs, lambda record: len(record.segments), max_epoch_segments
        )
        self._sealed_in: _Lru[tuple[int, int], int] = _Lru(max_epochs)
        self._generation = 0
        self._trusted = False

    # --- trust follows the LISTEN connection ---------------------------------------------------

    @property
    def trusted(self) -> bool:
        return self._trusted

    def trust(self) -> None:
        """Called once LISTEN is in place: anything cached before may have missed a change."""
        self._drop_views()
        self._trusted = True

    def distrust(self) -> None:
        self._trusted = False
        self._drop_views()

    # --- mutable views ------------------------------------------------------------------------

    @property
    def generation(self) -> int:
        """Read before a database read; pass to `remember_view` so a raced read is not kept."""
        return self._generation

    def view(self, scope: str, name: str) -> StreamView | None:
        if not self._trusted:
            _VIEW_MISS.inc()
            return None
        found = self._views.get((scope, name))
        (_VIEW_MISS if found is None else _VIEW_HIT).inc()
        return found

    def remember_view(self, scope: str, name: str, view: StreamView, read_generation: int) -> None:
        if not self._trusted or read_generation != self._generation:
            return
        self._views.put((scope, name), view)
        self._names_by_id[view.stream_id] = (scope, name)
        if len(self._names_by_id) > 2 * len(self._views) + 1024:
            self._names_by_id = {v.stream_id: k for k, v in self._views._items.items()}

    def invalidate_stream(self, stream_id: int) -> None:
        self._generation += 1
        key = self._names_by_id.pop(stream_id, None)
        if key is not None:
            self._views.pop(key)

    def invalidate_name(self, scope: str, name: str) -> None:
        """After a local write commits, before its NOTIFY arrives."""
        self._generation += 1
        view = self._views.pop((scope, name))
        if view is not None:
            self._names_by_id.pop(view.stream_id, None)

    def _drop_views(self) -> None:
        self._generation += 1
        self._views.clear()
        self._names_by_id.clear()

    # --- immutable records --------------------------------------------------------------------

    def epoch(self, stream_id: int, epoch: int) -> EpochRecord | None:
        found = self._epochs.get((stream_id, epoch))
        (_EPOCH_MISS if found is None else _EPOCH_HIT).inc()
        return found

    @property
    def cached_epoch_segments(self) -> int:
        return self._epochs.weight

    def remember_epoch(self, stream_id: int, record: EpochRecord) -> None:
        self._epochs.put((stream_id, record.epoch), record)

    def sealed_in(self, stream_id: int, segment: int) -> int | None:
        return self._sealed_in.get((stream_id, segment))

    def remember_sealed_in(self, stream_id: int, segment: int, epoch: int) -> None:
        self._sealed_in.put((stream_id, segment), epoch)
