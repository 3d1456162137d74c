"""The layers of an acknowledgement, measured in one run on this machine, rounds alternating:

- `insert`: one connection, an `INSERT` of a 1 KiB row committed on its own (autocommit), through
  asyncpg: the floor of any ack that means "committed to PostgreSQL's WAL on disk" here (the
  baseline).
- `append`: the segment store's append statement (sql/queries/segment_data.sql `append`, fenced
  as serve runs it) of a 1 KiB block to a segment of its own, alone in its transaction: what
  PostgreSQL does for one lone acknowledged append, without serve.
- `serve`: Pravega's Python client writing one 1 KiB event and flushing it, to `serve --processes
  1` (what bench/beside_pravega.py's `ack` part measures against Pravega).

All three on the one throwaway PostgreSQL serve runs on, its durability on (a second cluster on
the same disk would flush its own writes during the other layers' rounds).

Each line gives p50 / p99 / p99.9 in ms and the server CPU per call: serve's PostgreSQL and serve
(idle during the first two layers: about 3% of a core).

    .venv/bin/python bench/ack_floor.py [--count 3000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.store import queries
from bench._beside_servers import Target, serve
from bench._common import percentile
from bench.beside_pravega import KIB, ours

APPEND = queries.load("segment_data")["append"]
SEGMENT = "floor/acks/0.#epoch.0"
# The fence's container: serve's store owns every container, so the map names it.
CONTAINER = 0
WARM_UP = 200

Figures = tuple[list[float], float]  # latencies in ms, server CPU seconds per call


async def _timed(count: int, one: Callable[[], Awaitable[object]], cpu: Callable[[], float]) -> Figures:
    for _ in range(WARM_UP):
        await one()
    latencies: list[float] = []
    used = cpu()
    for _ in range(count):
        began = time.perf_counter_ns()
        await one()
        latencies.append((time.perf_counter_ns() - began) / 1e6)
    return latencies, (cpu() - used) / count


async def _acks_of_serve(target: Target, count: int, stream: str) -> Figures:
    await target.create_stream(stream)
    try:
        before = target.cpu()
        result = await ours("ack", target, stream=stream, count=count, skip=WARM_UP, size=KIB)
        # The worker's set-up (connections, the warm-up writes) counts too: a small share.
        return result["latencies_ms"], target.cpu_used_since(before) / (count + WARM_UP)
    finally:
        await target.delete_stream(stream)


def _line(name: str, figures: Figures) -> str:
    latencies, cpu = figures
    p50, p99, p999 = (percentile(latencies, q) for q in (0.50, 0.99, 0.999))
    return (
        f"  {name:8s} p50 {p50:5.2f}  p99 {p99:5.2f}  p99.9 {p999:6.2f} ms"
        f"   server CPU {cpu * 1e3:.3f} ms/call"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=3000, help="calls per round and layer")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ack-floor-") as work:
        async with serve(Path(work), "on") as target:
            # No memory samples: reading PostgreSQL's smaps delays its commits (Target.unsampled).
            target.stop_sampling()
            conn = await asyncpg.connect(target.db_url)
            try:
                await conn.execute("CREATE TABLE floor_rows (id bigserial PRIMARY KEY, data bytea NOT NULL)")
                # The fence as serve's store passes it for this container: the map's row, which
                # the leader writes a moment after start.
                fence = None
                for _ in range(300):
                    fence = await conn.fetchrow(
                        "SELECT host, port FROM container_map WHERE container = $1", CONTAINER
                    )
                    if fence is not None:
                        break
                    await asyncio.sleep(0.1)
                if fence is None:
                    raise RuntimeError(
                        f"serve's container_map has no row for container {CONTAINER} after 30 s"
                    )
                host, port = fence["host"], fence["port"]
                await conn.execute(
                    "INSERT INTO embedded_segments (name, kind, created_at, last_modified)"
                    " VALUES ($1, 'stream', 0, 0)",
                    SEGMENT,
                )
                insert = await conn.prepare("INSERT INTO floor_rows (data) VALUES ($1)")
                append = await conn.prepare(APPEND)
                writer, data, event_number = uuid.uuid4(), b"a" * KIB, 0

                def server() -> float:
                    return sum(target.cpu().values())  # serve's PostgreSQL, and serve (idle)

                async def one_append() -> None:
                    nonlocal event_number
                    event_number += 1
                    row = await append.fetchrow(
                        SEGMENT, writer, data, event_number, None, 0, CONTAINER, host, port
                    )
                    if row is None or row["new_length"] is None:
                        raise RuntimeError(f"the append was refused: {row}")

                layers: dict[str, Callable[[int], Awaitable[Figures]]] = {
                    "insert": lambda r: _timed(args.count, lambda: insert.fetch(data), server),
                    "append": lambda r: _timed(args.count, one_append, server),
                    "serve": lambda r: _acks_of_serve(target, args.count, f"floor-{r}"),
                }
                print(
                    f"ack_floor: {args.count} calls per round and layer, {args.rounds} rounds, alternating;"
                    " 1 KiB each; PostgreSQL durable (synchronous_commit on, fsync on)",
                    flush=True,
                )
                for index in range(args.rounds):
                    order = list(layers) if index % 2 == 0 else list(reversed(layers))
                    print(f"round {index + 1}", flush=True)
                    for name in order:
                        print(_line(name, await layers[name](index)), flush=True)
            finally:
                await conn.close()


if __name__ == "__main__":
    asyncio.run(main())
