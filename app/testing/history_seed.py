"""Seeds a long epoch history straight into the tables (shared by the history bench and the
round-trip tests): 1,000,000 epochs take seconds this way instead of hours of real scales."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# --- a long epoch history, written straight into the tables ------------------------------------
#
# The stream must exist (created through the API, so every per-stream row is there), be at
# epoch 0 and have exactly two segments: low [a, m) and high [m, b). Epoch e (1..N) seals the
# segment on side (e - 1) % 2 (0 = low, 1 = high) and creates one segment with the same range,
# numbered as a real scale would number it (one above the highest so far). So for e >= 2 the
# active set of epoch e is {id(e - 1), id(e)}, and id(e) is sealed in epoch e + 2. Rows are
# what `insert_epoch` would write: segments kept first, then the created one.

_SEED_EPOCHS = """
INSERT INTO epochs (stream_id, epoch, reference_epoch, creation_time, splits, merges, segment_ids,
    key_starts, key_ends, segment_creation_times, sealed_segments, created_segments)
SELECT $1::bigint, e, e, $3::bigint + e, 0, 0,
       ARRAY[kept_id, new_id],
       CASE side WHEN 0 THEN ARRAY[$9::float8, $8::float8] ELSE ARRAY[$8::float8, $9::float8] END,
       CASE side WHEN 0 THEN ARRAY[$10::float8, $9::float8] ELSE ARRAY[$9::float8, $10::float8] END,
       ARRAY[kept_time, $3::bigint + e],
       ARRAY[sealed_id],
       ARRAY[new_id]
FROM (
    SELECT e,
           (e - 1) % 2 AS side,
           (e::bigint << 32) | ($6::int + e - 1)::bigint AS new_id,
           CASE WHEN e = 1 THEN $5::bigint
                ELSE ((e - 1)::bigint << 32) | ($6::int + e - 2)::bigint END AS kept_id,
           CASE WHEN e = 1 THEN $7::bigint ELSE $3::bigint + e - 1 END AS kept_time,
           CASE WHEN e = 1 THEN $4::bigint WHEN e = 2 THEN $5::bigint
                ELSE ((e - 2)::bigint << 32) | ($6::int + e - 3)::bigint END AS sealed_id
    FROM generate_series(1, $2::int) AS e
) AS h
"""

_SEED_SEGMENTS = """
INSERT INTO segments (stream_id, segment_id, number, creation_epoch, creation_time, key_start, key_end,
    sealed_epoch)
SELECT $1::bigint, (e::bigint << 32) | ($3::int + e - 1)::bigint, $3::int + e - 1, e, $4::bigint + e,
       CASE (e - 1) % 2 WHEN 0 THEN $5::float8 ELSE $6::float8 END,
       CASE (e - 1) % 2 WHEN 0 THEN $6::float8 ELSE $7::float8 END,
       CASE WHEN e + 2 <= $2::int THEN e + 2 END
FROM generate_series(1, $2::int) AS e
"""


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
    async with conn.transaction():
        row = await conn.fetchrow(
            "SELECT s.id, e.creation_time, e.segment_ids, e.key_starts, e.key_ends, e.segment_creation_times,"
            " ce.epoch AS current"
            " FROM streams s JOIN epochs e ON e.stream_id = s.id AND e.epoch = 0"
            " JOIN stream_current_epochs ce ON ce.stream_id = s.id"
            " WHERE s.scope = $1 AND s.name = $2",
            scope,
            stream,
        )
        if row is None or row["current"] != 0 or len(row["segment_ids"]) != 2:
            raise ValueError(f"{scope}/{stream} must exist, be at epoch 0 and have two segments")
        columns = ("key_starts", "key_ends", "segment_ids", "segment_creation_times")
        low, high = sorted(zip(*(row[c] for c in columns), strict=True))
        (low_start, low_end, low_id, _), (high_start, high_end, high_id, high_time) = low, high
        if low_end != high_start:
            raise ValueError("the two segments must be adjacent")
        stream_id, t0 = row["id"], row["creation_time"]
        first_number = max(low_id, high_id) % (1 << 32) + 1
        await conn.execute(
            _SEED_EPOCHS,
            stream_id,
            epochs,
            t0,
            low_id,
            high_id,
            first_number,
            high_time,
            low_start,
            low_end,
            high_end,
        )
        await conn.execute(_SEED_SEGMENTS, stream_id, epochs, first_number, t0, low_start, low_end, high_end)
        await conn.execute(
            "UPDATE segments SET sealed_epoch = CASE segment_id WHEN $2 THEN 1 ELSE 2 END,"
            " version = version + 1 WHERE stream_id = $1 AND segment_id = ANY($3::bigint[])",
            stream_id,
            low_id,
            [low_id] if epochs == 1 else [low_id, high_id],
        )
        # Through the notifying trigger, so a running controller drops its cached view.
        await conn.execute(
            "UPDATE stream_current_epochs SET epoch = $2, version = version + 1 WHERE stream_id = $1",
            stream_id,
            epochs,
        )
    return SeededHistory(stream_id, epochs, first_number, (low_id, high_id))
