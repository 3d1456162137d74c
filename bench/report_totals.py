"""What the reporting totals' triggers (migration 0019) cost the writes, A/B in one run on a
throwaway embedded PostgreSQL: triggers enabled vs disabled (ALTER TABLE ... DISABLE TRIGGER
USER), interleaved so other load on the machine hits both alike.

    .venv/bin/python bench/report_totals.py SINGLES BLOCK

SINGLES epochs one per transaction (the rows a scale writes: its epoch, its new segment, the
seal of an old one, its shard's upsert, the pointer) and four chunks of BLOCK epochs (seeding),
each way, through the long-history grower.
"""

import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import asyncpg

import pgurl
from app.dev.history_gen import SeedSpec
from app.dev.long_history import LongStreamGrower, seed_long_stream
from bench._common import throwaway_cluster

END = 1_800_000_000_000
DAY = 86_400_000
TRIGGERS = "ALTER TABLE segments {0} TRIGGER USER; ALTER TABLE sealed_size_shards {0} TRIGGER USER"
STREAMS = ("on", "off", "bon", "boff")  # b: the chunked ones; "on" ones have the triggers
CHECK = """SELECT bool_and(t.segments_created = (SELECT count(*) FROM segments x
                                                 WHERE x.stream_id = t.stream_id))
FROM stream_report_totals t JOIN streams s ON s.id = t.stream_id WHERE s.scope IN ('on0', 'bon0')"""


async def main() -> None:
    singles, block = int(sys.argv[1]), int(sys.argv[2])
    async with throwaway_cluster() as cluster:
        admin = await asyncpg.connect(cluster.admin_url())
        await admin.execute("CREATE DATABASE totals")
        url = pgurl.parse(cluster.admin_url()).with_database("totals").to_url()
        for p in STREAMS:
            spec = SeedSpec(
                streams=1, epochs_per_stream=1, scope_prefix=p, start_ms=END - 1000 * DAY, span_ms=1000 * DAY
            )
            await seed_long_stream(url, spec, 1, analyze=False)
        db = await asyncpg.connect(url)
        grower = LongStreamGrower(db)
        history = {p: (await grower.load(f"{p}0", "stream0", lambda _t: 1000))[0] for p in STREAMS}
        current = dict.fromkeys(STREAMS, 0)
        spent = dict.fromkeys(STREAMS, 0.0)

        async def grow(p: str, n: int) -> None:
            await db.execute(TRIGGERS.format("ENABLE" if p in ("on", "bon") else "DISABLE"))
            began = time.perf_counter()
            async with db.transaction():
                await grower.grow_chunk(f"{p}0", "stream0", history[p], current[p] + 1, current[p] + n, False)
            spent[p] += time.perf_counter() - began
            current[p] += n

        for r in range(singles // 20):
            for p in ("on", "off") if r % 2 else ("off", "on"):
                for _ in range(20):
                    await grow(p, 1)
        for r in range(4):
            for p in ("bon", "boff") if r % 2 else ("boff", "bon"):
                await grow(p, block)
        await db.execute(TRIGGERS.format("ENABLE"))
        on, off = spent["on"] / singles * 1000, spent["off"] / singles * 1000
        print(f"one epoch a transaction ({singles} each): triggers on {on:.2f} ms, off {off:.2f} ms")
        on, off = (spent[p] / (4 * block) * 1e6 for p in ("bon", "boff"))
        print(f"chunks of {block:,} epochs (4 each): triggers on {on:.2f} us/epoch, off {off:.2f} us/epoch")
        print("totals equal the counts where the triggers ran:", await db.fetchval(CHECK))
        await db.close()
        await admin.close()


if __name__ == "__main__":
    asyncio.run(main())
