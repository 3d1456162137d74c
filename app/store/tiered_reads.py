"""The part of a read that lies in the long-term tier: each tiered chunk the `read` statement
named is read by the range the reply needs (in large blocks, read ahead: app/store/chunk_blocks.py),
all at once, and placed in offset order among the slices PostgreSQL returned.

An outage of the chunk store is StoreUnavailable (retryable: the connection closes and the client
reads again), never a short or empty read, which a reader would take for the tail."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from app.chunks.contract import ChunkMissing, ChunkStoreError
from app.domain.errors import StoreUnavailable
from app.store.chunk_blocks import ChunkBlocks
from app.store.chunk_packing import read_slice
from app.store.db import Row

UNAVAILABLE = "the long-term storage tier is unavailable; retry"
NOT_CONFIGURED = "bytes of this segment are in a long-term storage tier this store is not configured with"


async def tiered_pieces(
    blocks: ChunkBlocks | None, name: str, rows: Sequence[Row], offset: int, max_length: int
) -> tuple[bytes, ...]:
    if blocks is None:
        raise StoreUnavailable(NOT_CONFIGURED)
    end = offset + max_length
    fetches: list[asyncio.Future[bytes] | bytes] = []
    starts: list[int] = []
    wanted: list[int] = []
    for row in rows:
        chunk_start = int(row["chunk_start"]) if row["chunk_start"] is not None else offset
        if row["object"] is not None:
            chunk_length = int(row["object_length"])
            begin = max(offset, chunk_start) - chunk_start
            stop = min(end, chunk_start + chunk_length) - chunk_start
            fetches.append(
                asyncio.ensure_future(blocks.read(str(row["object"]), chunk_length, begin, stop - begin))
            )
            wanted.append(stop - begin)
            starts.append(chunk_start)
        elif in_postgres := read_slice(name, row, offset, max_length):
            fetches.append(in_postgres)
            wanted.append(len(in_postgres))
            starts.append(chunk_start)
    try:
        pieces = [await piece if isinstance(piece, asyncio.Future) else piece for piece in fetches]
    except ChunkMissing:
        raise
    except ChunkStoreError as exc:
        raise StoreUnavailable(UNAVAILABLE) from exc
    finally:
        for piece in fetches:
            if isinstance(piece, asyncio.Future) and not piece.done():
                piece.cancel()
    _check_tiling(name, starts, offset, pieces, wanted)
    return tuple(piece for piece in pieces if piece)


def _check_tiling(
    name: str, starts: Sequence[int], offset: int, pieces: Sequence[bytes], wanted: Sequence[int]
) -> None:
    """The tiers must tile the range with no gap, overlap or short object: a reply built across a
    gap would hand a reader bytes at the wrong offsets, so one is a loud failure instead."""
    position = offset
    for chunk_start, piece, size in zip(starts, pieces, wanted, strict=True):
        if max(chunk_start, offset) != position or len(piece) != size:
            raise StoreUnavailable(f"{name}: the stored chunks do not tile the read at {position}")
        position += len(piece)
