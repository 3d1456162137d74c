"""The start-up check of a chunk store: a probe object written, read back and deleted, so a
wrong endpoint, credentials, bucket or directory stops `serve` in one line instead of being found
by the first flush."""

from __future__ import annotations

import uuid

from app.chunks.contract import ChunkStore, ChunkStoreMisconfigured, ChunkStoreUnavailable

PROBE_PREFIX = "probes/"


async def check_chunk_store(store: ChunkStore, setting: str) -> None:
    """Raises ChunkStoreMisconfigured naming the setting to fix; an unreachable store is one too
    at start-up (`setting` names where it points)."""
    name = f"{PROBE_PREFIX}{uuid.uuid4().hex}"
    payload = name.encode()
    try:
        await store.put(name, [payload])
        back = await store.get(name, 0, len(payload))
        await store.delete(name)
    except ChunkStoreUnavailable as exc:
        raise ChunkStoreMisconfigured(setting, f"{store.description} cannot be reached: {exc}") from exc
    if back != payload:
        raise ChunkStoreMisconfigured(setting, f"{store.description} returned other bytes than were written")
