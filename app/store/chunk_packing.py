"""How an append block's bytes are kept in `segment_chunks.data` (migration 0026): packed as one
LZ4 block when that makes them at least an eighth smaller (`lz4_length` then holds their unpacked
size), as they came otherwise (`lz4_length` NULL; so are all rows written before 0026, which
PostgreSQL itself may have TOAST-compressed and decompresses on reading).

Why here and not in PostgreSQL's TOAST, which did the same compression until 0026: PostgreSQL
decompresses a value before it sends it, so every byte a catch-up read asked for crossed the
loopback socket uncompressed, 8 KB per `send` on PostgreSQL's side and as many receives on ours,
and that was most of the read's CPU (bench/beside_pravega.py's 1 GB catch-up: PostgreSQL spent
about 1.3 µs per 1 KiB event read). Packed here, a chunk crosses as it is stored and is unpacked
once, where the reply is built. A block under PACK_FROM bytes is left as it came: PostgreSQL did
not compress a row that small either, and an ack of a lone event skips the attempt.

LZ4 blocks decode at GB/s, but a read must unpack a packed chunk whole even for a few of its bytes;
the store's reads are of up to 2 MiB (reads.py) and its chunks are the clients' append blocks (up
to about 1 MiB), so a read unpacks at most one chunk's worth it does not send.
"""

from __future__ import annotations

from typing import Final

import lz4.block

from app.domain.errors import StoreUnavailable
from app.store.db import Row

PACK_FROM: Final = 2048


def pack(data: bytes | bytearray | memoryview) -> tuple[bytes | bytearray | memoryview, int | None]:
    """What to store for `data`, and its unpacked size if that is packed (None: stored as it came)."""
    size = len(data)
    if size < PACK_FROM:
        return data, None
    packed: bytes = lz4.block.compress(data, store_size=False)
    if len(packed) > size - size // 8:
        # Random or already-compressed bytes: lz4 gives up on them at about the cost of a copy.
        return data, None
    return packed, size


def unpacked(segment: str, chunk_start: int, stored: bytes, lz4_length: int | None) -> bytes:
    """The chunk's bytes as they were appended."""
    if lz4_length is None:
        return stored
    try:
        data: bytes = lz4.block.decompress(stored, uncompressed_size=lz4_length)
    except lz4.block.LZ4BlockError as exc:
        raise StoreUnavailable(f"{segment}: the chunk at {chunk_start} does not unpack: {exc}") from exc
    if len(data) != lz4_length:
        raise StoreUnavailable(
            f"{segment}: the chunk at {chunk_start} unpacks to {len(data)} bytes, not {lz4_length}"
        )
    return data


def unpacked_slice(
    segment: str, chunk_start: int, stored: bytes, lz4_length: int, offset: int, max_length: int
) -> bytes:
    """The part of a packed chunk inside [offset, offset + max_length): what PostgreSQL's substring
    returns for a chunk stored as it came (sql/queries/segment_data.sql `read`)."""
    data = unpacked(segment, chunk_start, stored, lz4_length)
    begin = max(offset - chunk_start, 0)
    stop = min(lz4_length, offset + max_length - chunk_start)
    if begin == 0 and stop == lz4_length:
        return data
    return data[begin : max(begin, stop)]


def read_slice(segment: str, row: Row, offset: int, max_length: int) -> bytes:
    """A row of sql/queries/segment_data.sql `read`: its bytes inside [offset, offset +
    max_length), sliced by PostgreSQL or, for a packed chunk, here (empty for a tiered chunk's row)."""
    stored = row["data"]
    if stored is None:
        return b""
    lz4_length = row["lz4_length"]
    if lz4_length is None:
        return bytes(stored)
    return unpacked_slice(segment, int(row["chunk_start"]), stored, int(lz4_length), offset, max_length)
