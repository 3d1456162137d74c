"""Reads of chunk objects in large aligned blocks, with the next block fetched ahead: a catch-up
reader asks for 2 MiB at a time, one request in flight per segment, and a request to an object
store per read would leave its round trip on every reply. A block is read once (readers of the
same block share the fetch), kept in a small LRU (objects never change, so a cached block is
never stale), and reading a block starts the fetch of the one after it.

Invariant: at most `max_blocks` blocks are kept or being fetched; a fetch that failed is
forgotten at once, so the next read asks the store again."""

from __future__ import annotations

import asyncio
import functools
from collections import OrderedDict

from app.chunks.contract import ChunkStore

BLOCK_BYTES = 8 * 1024 * 1024
MAX_BLOCKS = 8


class ChunkBlocks:
    def __init__(
        self, chunks: ChunkStore, block_bytes: int = BLOCK_BYTES, max_blocks: int = MAX_BLOCKS
    ) -> None:
        self.chunks = chunks
        self._block = block_bytes
        self._max = max_blocks
        self._blocks: OrderedDict[tuple[str, int], asyncio.Future[bytes]] = OrderedDict()
        self.fetches = 0

    async def read(self, name: str, object_length: int, offset: int, length: int) -> bytes:
        """Bytes [offset, offset + length) of object `name`, `object_length` long."""
        end = min(offset + length, object_length)
        parts: list[bytes] = []
        position = offset
        while position < end:
            index = position // self._block
            block = await self._get(name, object_length, index)
            start = position - index * self._block
            take = min(end - position, len(block) - start)
            if take <= 0:  # the object is shorter than the index says: the caller's check fails
                break
            parts.append(block[start : start + take])
            position += take
        following = (max(end, offset + 1) - 1) // self._block + 1
        if following * self._block < object_length:
            self._ensure(name, object_length, following)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    async def _get(self, name: str, object_length: int, index: int) -> bytes:
        future = self._ensure(name, object_length, index)
        self._blocks.move_to_end((name, index))
        return await asyncio.shield(future)

    def _ensure(self, name: str, object_length: int, index: int) -> asyncio.Future[bytes]:
        key = (name, index)
        future = self._blocks.get(key)
        if future is None:
            start = index * self._block
            future = asyncio.ensure_future(
                self.chunks.get(name, start, min(self._block, object_length - start))
            )
            self.fetches += 1
            future.add_done_callback(functools.partial(self._settled, key))
            self._blocks[key] = future
            while len(self._blocks) > self._max:
                self._blocks.popitem(last=False)
        return future

    def _settled(self, key: tuple[str, int], done: asyncio.Future[bytes]) -> None:
        failed = done.cancelled() or done.exception() is not None
        if failed and self._blocks.get(key) is done:
            del self._blocks[key]
