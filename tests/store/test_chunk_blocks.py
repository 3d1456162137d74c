"""Reads of chunk objects in aligned blocks with the next one read ahead: byte-exact for any
range, one fetch per block however many readers ask, a failed fetch forgotten at once."""

from __future__ import annotations

import asyncio
import os
import random
from pathlib import Path

import pytest

from app.chunks.contract import ChunkMissing
from app.chunks.filesystem import FileChunkStore
from app.store.chunk_blocks import ChunkBlocks

BLOCK = 1000


@pytest.fixture
def store(tmp_path: Path) -> FileChunkStore:
    files = FileChunkStore(tmp_path / "chunks")
    files.prepare()
    return files


async def test_any_range_reads_back_byte_exact(store: FileChunkStore) -> None:
    data = os.urandom(7 * BLOCK + 123)
    await store.put("chunks/aa/x", [data])
    blocks = ChunkBlocks(store, block_bytes=BLOCK, max_blocks=3)
    rng = random.Random(5)
    for _ in range(200):
        offset = rng.randrange(len(data))
        length = rng.randint(1, 3 * BLOCK)
        assert await blocks.read("chunks/aa/x", len(data), offset, length) == data[offset : offset + length]


async def test_a_sequential_reader_fetches_each_block_once_and_the_next_ahead(store: FileChunkStore) -> None:
    data = os.urandom(6 * BLOCK)
    await store.put("chunks/aa/seq", [data])
    blocks = ChunkBlocks(store, block_bytes=BLOCK, max_blocks=4)
    assert await blocks.read("chunks/aa/seq", len(data), 0, 300) == data[:300]
    await asyncio.sleep(0.05)
    assert blocks.fetches == 2  # the block read, and the next one ahead
    for offset in range(300, len(data), 300):
        assert await blocks.read("chunks/aa/seq", len(data), offset, 300) == data[offset : offset + 300]
    assert blocks.fetches == 6
    # Readers of one block at once share its fetch.
    again = ChunkBlocks(store, block_bytes=BLOCK, max_blocks=4)
    results = await asyncio.gather(*(again.read("chunks/aa/seq", len(data), 10 * i, 50) for i in range(20)))
    assert results == [data[10 * i : 10 * i + 50] for i in range(20)]
    assert again.fetches == 2


async def test_a_failed_fetch_is_not_kept(store: FileChunkStore) -> None:
    blocks = ChunkBlocks(store, block_bytes=BLOCK, max_blocks=4)
    with pytest.raises(ChunkMissing):
        await blocks.read("chunks/aa/late", 500, 0, 100)
    await store.put("chunks/aa/late", [b"y" * 500])
    assert await blocks.read("chunks/aa/late", 500, 0, 100) == b"y" * 100
