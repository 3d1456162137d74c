"""Customized state views at 100 hosts x 1,000 partitions: from a state report to the updated
view as a listener sees it, and the aggregation cost per changed partition.

    .venv/bin/python bench/views.py [--hosts 100] [--partitions 1000] [--single 300] [--bulk 30]

Everything runs in this process on one event loop and one pool, as in `pgcontroller serve`: the
aggregator loop is woken by `pgc_states` notifications through the PgListener, and the
"listener" is a `pgc_views` callback on the same PgListener. One round: a host reports (a
merge of one partition, or a replacement of its whole 1,000-partition map with every state
changed); the time runs from just before the report call to the moment the callback sees a
view version above the one before the report. The baseline, measured the same way in the same
process, is a bare INSERT + pg_notify in one transaction seen by a LISTEN connection: the floor
any notification-driven design pays.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import asyncpg

from app.clock import SystemClock
from app.domain.state_views import parse_view_payload
from app.services.state_views import AggregationSummary, StateViewService, ViewAggregation
from app.store.cache import RecordCache
from app.store.notifications import PgListener
from app.store.pool import asyncpg_dsn, create_pool
from app.store.state_views import PgStateViewStore
from bench._common import percentile, throwaway_database
from workers.state_views import StateViewAggregator

S, R = "SERVING", "db"
STATES = ("LEADER", "STANDBY", "OFFLINE")


class TimedAggregation(ViewAggregation):
    """Counts the time spent in passes and the partitions they recomputed."""

    def __init__(self, store: PgStateViewStore, clock: SystemClock) -> None:
        super().__init__(store, clock)
        self.seconds = 0.0
        self.partitions = 0
        self.passes: list[AggregationSummary] = []

    async def run(self, term: int) -> AggregationSummary:
        began = time.perf_counter()
        summary = await super().run(term)
        self.seconds += time.perf_counter() - began
        self.partitions += summary.partitions
        self.passes.append(summary)
        return summary

    def reset(self) -> None:
        self.seconds, self.partitions, self.passes = 0.0, 0, []


class ViewWatcher:
    """The listener: the latest version seen per view, and waiters for a version above N."""

    def __init__(self) -> None:
        self.latest = 0
        self._waiters: list[tuple[int, asyncio.Future[float]]] = []

    def changed(self, payload: str) -> None:
        parsed = parse_view_payload(payload)
        if parsed is None or parsed[0] != (S, R) or parsed[1] is None:
            return
        now = time.perf_counter()
        self.latest = max(self.latest, parsed[1])
        for after, future in list(self._waiters):
            if parsed[1] > after and not future.done():
                future.set_result(now)

    def above(self, after: int) -> asyncio.Future[float]:
        future: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self._waiters = [(a, f) for a, f in self._waiters if not f.done()]
        self._waiters.append((after, future))
        return future


def line(name: str, values_ms: list[float]) -> str:
    return (
        f"{name:<44} p50 {percentile(values_ms, 0.50):7.1f} ms  p99 {percentile(values_ms, 0.99):7.1f} ms  "
        f"max {max(values_ms):7.1f} ms  (n={len(values_ms)})"
    )


async def baseline(url: str, rounds: int) -> list[float]:
    """INSERT + pg_notify in one transaction -> a LISTEN callback, in milliseconds."""
    writer = await asyncpg.connect(asyncpg_dsn(url))
    reader = await asyncpg.connect(asyncpg_dsn(url))
    await writer.execute("CREATE TABLE bench_baseline (id bigserial PRIMARY KEY, payload text NOT NULL)")
    seen: dict[str, asyncio.Future[float]] = {}

    def on(_conn: object, _pid: int, _channel: str, payload: str) -> None:
        future = seen.get(payload)
        if future is not None and not future.done():
            future.set_result(time.perf_counter())

    await reader.add_listener("bench_baseline", on)
    latencies = []
    try:
        for i in range(rounds):
            key = str(i)
            arrived = seen[key] = asyncio.get_running_loop().create_future()
            began = time.perf_counter()
            async with writer.transaction():
                await writer.execute("INSERT INTO bench_baseline (payload) VALUES ($1)", key)
                await writer.execute("SELECT pg_notify('bench_baseline', $1)", key)
            latencies.append((await asyncio.wait_for(arrived, 10) - began) * 1000)
            del seen[key]
    finally:
        await writer.close()
        await reader.close()
    return latencies


async def seed(service: StateViewService, hosts: list[str], partitions: int) -> float:
    began = time.perf_counter()
    for h, host in enumerate(hosts):
        await service.report(
            host, S, R, {f"p{p}": STATES[(h + p) % 3] for p in range(partitions)}, merge=False
        )
    return time.perf_counter() - began


async def rounds(
    service: StateViewService,
    watcher: ViewWatcher,
    hosts: list[str],
    partitions: int,
    count: int,
    *,
    bulk: bool,
) -> tuple[list[float], list[float]]:
    """(report -> view observed, the report call alone), in milliseconds."""
    rng = random.Random(11)
    to_view, report_only = [], []
    for i in range(count):
        host = rng.choice(hosts)
        after = watcher.latest
        seen = watcher.above(after)
        began = time.perf_counter()
        if bulk:
            # Every state changes: the host's whole map is replaced.
            states = {f"p{p}": f"{STATES[(i + p) % 3]}#{i}" for p in range(partitions)}
            await service.report(host, S, R, states, merge=False)
        else:
            await service.report(host, S, R, {f"p{rng.randrange(partitions)}": f"S{i}"}, merge=True)
        report_only.append((time.perf_counter() - began) * 1000)
        to_view.append((await asyncio.wait_for(seen, 30) - began) * 1000)
        await asyncio.sleep(0.01)  # rounds do not overlap in the aggregator
    return to_view, report_only


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--single", type=int, default=300, help="single-partition rounds")
    parser.add_argument("--bulk", type=int, default=30, help="whole-resource rounds")
    args = parser.parse_args()

    async with throwaway_database() as url:
        base = await baseline(url, args.single)
        pool = await create_pool(url, min_size=2, max_size=10)
        try:
            clock = SystemClock()
            store = PgStateViewStore(pool)
            service = StateViewService(store, clock)
            aggregation = TimedAggregation(store, clock)
            aggregator = StateViewAggregator(aggregation, lambda: True, lambda: 1)
            await pool.execute(
                "INSERT INTO cluster_leader (id, controller_id, term, since) VALUES (1, 'bench', 1, 0)"
            )
            hosts = [f"10.0.{h // 250}.{h % 250}:12345" for h in range(args.hosts)]

            seeded = await seed(service, hosts, args.partitions)
            entries = args.hosts * args.partitions
            print(f"set-up: {args.hosts} hosts x {args.partitions} partitions reported in {seeded:.1f}s")
            await aggregator.run_once()  # the state name is not aggregated yet: the log drains
            drained = aggregation.seconds
            aggregation.reset()
            config = await service.config()
            await service.set_config([S], config.version)
            await aggregator.run_once()
            built = aggregation.seconds
            view = await store.get_view(S, R)
            assert len(view.partitions) == args.partitions
            assert all(len(v) == args.hosts for v in view.partitions.values())
            print(f"draining {entries:,} log entries of a state name not aggregated: {drained * 1000:.0f} ms")
            print(
                f"full build (config adds the name): {built * 1000:.0f} ms for {args.partitions} partitions"
                f" x {args.hosts} hosts = {built * 1e6 / entries:.1f} us per state"
            )

            watcher = ViewWatcher()
            watcher.latest = view.version
            listener = PgListener(url, RecordCache())
            listener.on_state_change(aggregator.wake)
            listener.on_view_change(watcher.changed)
            tasks = [asyncio.create_task(listener.run()), asyncio.create_task(aggregator.run())]
            try:
                await asyncio.wait_for(listener.connected.wait(), 10)
                await asyncio.sleep(0.2)
                aggregation.reset()
                single, single_report = await rounds(
                    service, watcher, hosts, args.partitions, args.single, bulk=False
                )
                single_cost = (aggregation.seconds, aggregation.partitions, len(aggregation.passes))
                aggregation.reset()
                bulk, bulk_report = await rounds(
                    service, watcher, hosts, args.partitions, args.bulk, bulk=True
                )
                bulk_cost = (aggregation.seconds, aggregation.partitions, len(aggregation.passes))
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
            final = await store.get_view(S, R)
            assert all(len(v) == args.hosts for v in final.partitions.values())
        finally:
            await pool.close()

    print(line("baseline: INSERT + NOTIFY -> LISTEN", base))
    print(line("1 partition: report -> view seen", single))
    print(line("1 partition: the report call alone", single_report))
    print(line(f"{args.partitions} partitions: report -> view seen", bulk))
    print(line(f"{args.partitions} partitions: the report call alone", bulk_report))
    print(
        f"ratio to baseline, 1 partition:  p50 {percentile(single, 0.5) / percentile(base, 0.5):5.1f}x  "
        f"p99 {percentile(single, 0.99) / percentile(base, 0.99):5.1f}x"
    )
    bulk_p50, bulk_p99 = (
        percentile(bulk, 0.5) / percentile(base, 0.5),
        percentile(bulk, 0.99) / percentile(base, 0.99),
    )
    print(f"ratio to baseline, {args.partitions} partitions: p50 {bulk_p50:5.1f}x  p99 {bulk_p99:5.1f}x")
    for name, (seconds, partitions, passes) in (("1 partition", single_cost), ("bulk", bulk_cost)):
        print(
            f"aggregation cost, {name:<11}: {seconds * 1000:8.1f} ms over {passes} passes, "
            f"{partitions} partitions recomputed = {seconds * 1e6 / max(partitions, 1):8.1f} us "
            f"per changed partition ({args.hosts} states each)"
        )


if __name__ == "__main__":
    asyncio.run(main())
