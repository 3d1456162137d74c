"""The long-term storage tier of a segment store, composed from settings: the chunk store
(filesystem or S3), checked before the store listens, and the storage writer and garbage
collector that run beside it. A misconfigured tier stops the process with one line naming the
setting; a database that holds tiered data refuses to start without a tier (no silent fallback)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from app.chunks.contract import ChunkStore, ChunkStoreMisconfigured
from app.chunks.filesystem import FileChunkStore
from app.chunks.probe import check_chunk_store
from app.domain.containers import container_for_segment
from app.ports import Clock
from app.settings import Settings
from app.store.chunk_collector import ChunkCollector
from app.store.db import Database
from app.store.storage_writer import StorageWriter
from app.store.tier_throttle import TierThrottle
from app.store.tiering import PgTiering
from workers.failpoints import failpoint_hook


class TierRefused(ValueError):
    """The tier's settings cannot work; the message is the operator's one line."""


@dataclass
class Tier:
    chunks: ChunkStore
    writer: StorageWriter
    collector: ChunkCollector
    throttle: TierThrottle


def tier_directory(settings: Settings) -> Path:
    return (
        settings.tier_directory
        if str(settings.tier_directory) not in ("", ".")
        else settings.data_dir / "chunks"
    )


def _chunk_store(settings: Settings) -> tuple[ChunkStore, str]:
    if settings.tier == "filesystem":
        store = FileChunkStore(tier_directory(settings))
        store.prepare()
        return store, "--tier-directory"
    if not settings.tier_s3_bucket:
        raise TierRefused("--tier s3 needs --tier-s3-bucket")
    # Imported only for --tier s3: obstore's native library (tens of MB) stays out of the others.
    from app.chunks.s3 import S3ChunkStore, S3Location

    location = S3Location(
        bucket=settings.tier_s3_bucket,
        prefix=settings.tier_s3_prefix,
        endpoint=settings.tier_s3_endpoint,
        region=settings.tier_s3_region,
        access_key_id=settings.tier_s3_access_key_id,
        secret_access_key=settings.tier_s3_secret_access_key,
    )
    try:
        return S3ChunkStore(location), "--tier-s3-endpoint"
    except Exception as exc:  # obstore refuses a malformed configuration at construction
        raise TierRefused(f"--tier s3: {exc}") from exc


async def open_tier(settings: Settings, pool: Database, clock: Clock) -> Tier | None:
    """The tier, checked end to end (a probe object written, read back and deleted), or None
    with --tier none; raises TierRefused for any setting that cannot work."""
    tiering = PgTiering(pool, clock)
    if settings.tier == "none":
        if await tiering.anything_tiered():
            raise TierRefused(
                "this database's segments have bytes in a long-term storage tier, but --tier is none: "
                "start with the --tier settings they were written with"
            )
        return None
    try:
        chunks, setting = _chunk_store(settings)
        await check_chunk_store(chunks, setting)
    except ChunkStoreMisconfigured as exc:
        raise TierRefused(f"long-term storage tier ({settings.tier}): {exc}") from exc

    def container_of(segment: str) -> int:
        return container_for_segment(segment, settings.container_count)

    throttle = TierThrottle(settings.tier_throttle_bytes, settings.tier_throttle_max_delay_s, container_of)
    writer = StorageWriter(
        tiering,
        chunks,
        chunk_bytes=settings.tier_chunk_bytes,
        interval_s=settings.tier_flush_interval_s,
        max_age_s=settings.tier_flush_age_s,
        container_of=container_of,
        throttle=throttle,
        before_record=failpoint_hook("segmentstore.tier.before_record"),
        renew_every_s=settings.tier_gc_grace_s / 3,
    )
    collector = ChunkCollector(
        tiering,
        chunks,
        grace_ms=int(settings.tier_gc_grace_s * 1000),
        interval_s=settings.tier_flush_interval_s,
    )
    return Tier(chunks, writer, collector, throttle)
