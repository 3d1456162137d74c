"""Seeds a long epoch history straight into the tables (shared by the history bench and the
round-trip tests): 1,000,000 epochs take seconds this way instead of hours of real scales."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.dev.long_history import LongStreamGrower

# --- a long epoch history, written straight into the tables ------------------------------------
#
# The stream must exist (created through the API, so every per-stream row is there), be at
# epoch 0 and have exactly two segments: low [a, m) and high [m, b). Epoch e (1..N) seals the
# segment on side (e - 1) % 2 (0 = low, 1 = high) and creates one segment with the same range,
# numbered as a real scale would number it (one above the highest so far), one ms after the
# epoch before. So for e >= 2 the active set of epoch e is {id(e - 1), id(e)}, and id(e) is sealed
# in epoch e + 2. The rows are those `pgcontroller dev seed --one-stream-epochs` grows
# (app/dev/long_history.py), the segment store's rows aside (left as the API made them).


@dataclass(frozen=True)
class SeededHistory:
    """Ids of the history `seed_replacement_history` wrote; `segment(e)` is the one epoch e created."""

    stream_id: int
    epochs: int
    first_number: int
    originals: tuple[int, int]  # epoch-0 segments, low then high

    def segment(self, epoch: int) -> int:
        if epoch == 0:
            raise ValueError("epoch 0 created two segments; see `originals`")
        return (epoch << 32) | (self.first_number + epoch - 1)

    def active(self, epoch: int) -> tuple[int, int]:
        """The two segments of `epoch`."""
        if epoch == 0:
            return self.originals
        if epoch == 1:
            return self.originals[1], self.segment(1)
        return self.segment(epoch - 1), self.segment(epoch)

    def sealed_in(self, segment_epoch: int) -> int | None:
        """Epoch that sealed the segment created in `segment_epoch` (None while it is active)."""
        sealed = segment_epoch + 2
        return sealed if sealed <= self.epochs else None


async def seed_replacement_history(conn: Any, scope: str, stream: str, epochs: int) -> SeededHistory:
    """Writes epochs 1..`epochs` (see above) and moves the stream's current epoch to the last one,
    in one transaction. `conn` is an asyncpg connection."""
    grower = LongStreamGrower(conn)
    async with conn.transaction():
        history, current, _ = await grower.load(scope, stream, lambda _t0: 1)
        if current != 0:
            raise ValueError(f"{scope}/{stream} must be at epoch 0")
        # Through the pointer's notifying trigger, so a running controller drops its cached view.
        await grower.grow_chunk(scope, stream, history, 1, epochs, store_rows=False)
    return SeededHistory(history.stream_id, epochs, history.first_number, (history.low, history.high))
