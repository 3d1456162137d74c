"""The layers of an acknowledgement, measured in one run on this machine, rounds alternating:

- `insert`: one connection, an `INSERT` of a 1 KiB row committed on its own (autocommit), through
  asyncpg, on a throwaway PostgreSQL with its durability on: the floor of any ack that means
  "committed to PostgreSQL's WAL on disk" here (the baseline).
- `append`: the segment store's append statement (sql/queries/segment_data.sql `append`, fenced
  as serve runs it) of a 1 KiB block, alone in its transaction, on that same PostgreSQL: what
  PostgreSQL does for one lone acknowledged append, without serve.
- `serve`: Pravega's Python client writing one 1 KiB event and flushing it, to `serve --processes
  1` on a throwaway PostgreSQL of its own (what bench/beside_pravega.py's `ack` part measures
  against Pravega).

Each line gives p50 / p99 / p99.9 in ms and the server CPU per call: PostgreSQL's processes, and
for `serve` serve's too.

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
from bench._common import percentile, throwaway_cluster
from bench.beside_pravega import KIB, ours
from bench.dataplane import postgres_cpu

APPEND = queries.load("segment_data")["append"]
SEGMENT = "floor/acks/0.#epoch.0"
# The fence's arguments as serve passes them: the segment's container and this store's address,
# which the container's row in container_map names.
CONTAINER, HOST, PORT = 0, "127.0.0.1", 1
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
        async with throwaway_cluster() as cluster, serve(Path(work), "on") as target:
            conn = await asyncpg.connect(cluster.url())
            try:
                await conn.execute("CREATE TABLE floor_rows (id bigserial PRIMARY KEY, data bytea NOT NULL)")
                await conn.execute(
                    "INSERT INTO container_map (container, host, port) VALUES ($1, $2, $3)",
                    CONTAINER,
                    HOST,
                    PORT,
                )
                await conn.execute(
                    "INSERT INTO embedded_segments (name, kind, created_at, last_modified)"
                    " VALUES ($1, 'stream', 0, 0)",
                    SEGMENT,
                )
                insert = await conn.prepare("INSERT INTO floor_rows (data) VALUES ($1)")
                append = await conn.prepare(APPEND)
                writer, data, event_number = uuid.uuid4(), b"a" * KIB, 0

                def postgres() -> float:
                    return sum(postgres_cpu(cluster).values())

                async def one_append() -> None:
                    nonlocal event_number
                    event_number += 1
                    row = await append.fetchrow(
                        SEGMENT, writer, data, event_number, None, 0, CONTAINER, HOST, PORT
                    )
                    if row is None or row["new_length"] is None:
                        raise RuntimeError(f"the append was refused: {row}")

                layers: dict[str, Callable[[int], Awaitable[Figures]]] = {
                    "insert": lambda r: _timed(args.count, lambda: insert.fetch(data), postgres),
                    "append": lambda r: _timed(args.count, one_append, postgres),
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
