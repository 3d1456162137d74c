"""Transactions, end to end, through gRPC against a real `pgcontroller serve` subprocess on a
throwaway embedded PostgreSQL, each figure next to a bare asyncpg insert-and-commit baseline
measured in the same run, on the same database, at the same concurrency.

    .venv/bin/python bench/txns.py [--seconds 10] [--in-flight 32] [--commit-txns 5000]
        [--commit-in-flight 64] [--streams 8] [--paced-rate 200] [--paced-seconds 10]
        [--poll-ms 10] [--skip baseline,echo,create,ping,commit,commit-multi,paced] [--statements]

baseline      --in-flight asyncpg connections, each inserting one row (autocommit) into a
              scratch table back to back for --seconds: rate, p50, p99.
echo          a bare grpclib server answering from a constant (bench/_echo_server.py), called
              with --in-flight in flight for --seconds over one channel, as create and ping
              are: the gRPC transport's own ceiling on this machine, next to the PostgreSQL one.
create        createTransaction (lease 60 s) on a 4-segment stream, --in-flight in flight,
              closed loop for --seconds.
ping          pingTransaction (lease 60 s) round-robin over the transactions `create` opened
              (at least 1,000 of them), --in-flight in flight, closed loop for --seconds.
commit        --commit-txns transactions opened beforehand on one 4-segment stream, then
              commitTransaction for all of them, --commit-in-flight in flight; committed/s is
              measured until `completed_txns` holds every one of them as COMMITTED (a watcher
              on its own connection polling every --poll-ms; no load on the server). Each
              commitTransaction queues a request; the part also waits until the server has
              worked off every one of them (reported), so the next part starts on a quiet server.
commit-multi  the same, the transactions spread round-robin over --streams streams.
paced         --paced-rate x --paced-seconds transactions opened beforehand, then committed
              at a steady --paced-rate (open loop: each commit is sent on schedule, whatever
              the earlier ones are doing); latency from sending commitTransaction until the
              watcher sees the transaction COMMITTED, and until its completion_time.

--statements  the cluster runs pg_stat_statements; each commit part then lists every SQL
              statement the server ran (the segment store's included) from the first
              commitTransaction until its queue was empty, per transaction and per batch (the
              watcher's own polls left out). Its bookkeeping slows the parts after it too (pings
              fell from about 3,200/s to 966/s in one run): take rates from a run without it.

The parts run in the order baseline, commit, commit-multi, paced, create, ping so that the
transactions `create` leaves open (thousands; 60 s leases) expire after the run, not during
the commit measurements. Targets (from the issue): create >= 1,000/s and ping >= 2,000/s at
p99 < 20 ms; >= 500 committed/s; p99 < 1 s from commit request to COMMITTED at 200/s.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import asyncpg
from grpclib.client import Channel

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.testing.ports import free_port
from app.testing.served import start_served
from bench._common import (
    LoadResult,
    closed_loop,
    create_fixed_stream,
    percentile,
    preload_statements,
    throwaway_cluster,
)

SCOPE = "bench"
SEGMENTS = 4
LEASE_MS = 60_000
PING_POOL_MIN = 1_000
COMMIT_TIMEOUT_S = 300.0
# Marks the bench's own SQL, which the statement count leaves out.
WATCHER = "/* bench-watcher */"
SUCCESS = pb.TxnStatus.SUCCESS
PING_OK = pb.PingTxnStatus.OK


@dataclass
class Failures:
    lines: list[str] = field(default_factory=list)

    def add(self, line: str) -> None:
        self.lines.append(line)


def info_of(stream: str) -> pb.StreamInfo:
    return pb.StreamInfo(scope=SCOPE, stream=stream)


async def create_stream(stub: ControllerServiceStub, stream: str) -> None:
    await create_fixed_stream(stub, info_of(stream), SEGMENTS)


async def open_txn(stub: ControllerServiceStub, stream: str) -> pb.TxnId:
    reply = await stub.createTransaction(pb.CreateTxnRequest(streamInfo=info_of(stream), lease=LEASE_MS))
    assert len(reply.activeSegments) == SEGMENTS, reply
    txn: pb.TxnId = reply.txnId
    return txn


async def open_many(
    stub: ControllerServiceStub, streams: Sequence[str], count: int, in_flight: int
) -> tuple[list[tuple[str, pb.TxnId]], float]:
    """`count` transactions spread round-robin over `streams`; also the seconds it took."""
    gate = asyncio.Semaphore(in_flight)

    async def one(i: int) -> tuple[str, pb.TxnId]:
        stream = streams[i % len(streams)]
        async with gate:
            return stream, await open_txn(stub, stream)

    began = time.perf_counter()
    txns = await asyncio.gather(*(one(i) for i in range(count)))
    return list(txns), time.perf_counter() - began


def summary(label: str, values: list[float]) -> str:
    if not values:
        return f"{label:<42} (no samples)"
    return (
        f"{label:<42} p50 {percentile(values, 0.50):7.1f} ms  p99 {percentile(values, 0.99):7.1f} ms  "
        f"max {max(values):7.1f} ms  (n={len(values)})"
    )


def verdict(ok: bool, target: str) -> str:
    return f"target {target}: {'met' if ok else 'MISSED'}"


# --- baseline ---------------------------------------------------------------------------------


async def baseline(url: str, in_flight: int, seconds: float) -> LoadResult:
    setup = await asyncpg.connect(url)
    try:
        await setup.execute(
            "CREATE TABLE IF NOT EXISTS bench_baseline"
            " (id bigserial PRIMARY KEY, at bigint NOT NULL, payload text NOT NULL)"
        )
    finally:
        await setup.close()
    pool = await asyncpg.create_pool(url, min_size=in_flight, max_size=in_flight)
    try:

        async def insert() -> None:
            await pool.execute(
                "INSERT INTO bench_baseline (at, payload) VALUES ($1, $2)", time.time_ns(), "bench"
            )

        return await closed_loop("bare asyncpg insert+commit", insert, in_flight, seconds)
    finally:
        await pool.close()


# --- echo: the gRPC transport's own ceiling -----------------------------------------------------


async def echo_load(in_flight: int, seconds: float) -> list[LoadResult]:
    """createTransaction and pingTransaction against the bare grpclib echo, one channel each,
    the way create and ping call the controller."""
    root = Path(__file__).resolve().parents[1]
    port = free_port()
    echo = await asyncio.create_subprocess_exec(
        sys.executable,
        str(root / "bench" / "_echo_server.py"),
        str(port),
        stdout=asyncio.subprocess.PIPE,
        cwd=str(root),
        env={"PYTHONPATH": str(root)},
    )
    assert echo.stdout is not None
    await echo.stdout.readline()
    channel = Channel("127.0.0.1", port)
    try:
        stub = ControllerServiceStub(channel)
        create_ask = pb.CreateTxnRequest(streamInfo=info_of("create"), lease=LEASE_MS)
        ping_ask = pb.PingTxnRequest(
            streamInfo=info_of("create"), txnId=pb.TxnId(highBits=1, lowBits=2), lease=LEASE_MS
        )

        async def create() -> None:
            await stub.createTransaction(create_ask)

        async def ping() -> None:
            await stub.pingTransaction(ping_ask)

        return [
            await closed_loop("echo createTransaction (bare grpclib)", create, in_flight, seconds),
            await closed_loop("echo pingTransaction (bare grpclib)", ping, in_flight, seconds),
        ]
    finally:
        channel.close()
        echo.terminate()
        await echo.wait()


# --- create and ping --------------------------------------------------------------------------


async def create_load(
    stub: ControllerServiceStub, in_flight: int, seconds: float, failures: Failures
) -> tuple[LoadResult, list[pb.TxnId]]:
    await create_stream(stub, "create")
    info = info_of("create")
    opened: list[pb.TxnId] = []

    async def call() -> None:
        reply = await stub.createTransaction(pb.CreateTxnRequest(streamInfo=info, lease=LEASE_MS))
        if len(reply.activeSegments) != SEGMENTS:
            failures.add(f"createTransaction answered {len(reply.activeSegments)} segments")
        opened.append(reply.txnId)

    result = await closed_loop("pgcontroller createTransaction", call, in_flight, seconds)
    return result, opened


async def ping_load(
    stub: ControllerServiceStub, txns: list[pb.TxnId], in_flight: int, seconds: float, failures: Failures
) -> LoadResult:
    info = info_of("create")
    if len(txns) < PING_POOL_MIN:
        more, _ = await open_many(stub, ["create"], PING_POOL_MIN - len(txns), in_flight)
        txns = txns + [t for _, t in more]
    # The most recent ones, so none is near its lease expiry; round-robin, so no two pings of
    # one transaction are in flight at once (they would conflict on its version).
    pool = txns[-max(PING_POOL_MIN, 100 * in_flight) :]
    requests = [pb.PingTxnRequest(streamInfo=info, txnId=t, lease=LEASE_MS) for t in pool]
    turn = 0

    async def call() -> None:
        nonlocal turn
        request = requests[turn % len(requests)]
        turn += 1
        reply = await stub.pingTransaction(request)
        if reply.status != PING_OK:
            failures.add(f"pingTransaction: {pb.PingTxnStatus.Status.Name(reply.status)}")

    return await closed_loop(f"pgcontroller pingTransaction ({len(pool)} txns)", call, in_flight, seconds)


# --- commit pipeline --------------------------------------------------------------------------


async def stream_ids(conn: asyncpg.Connection, streams: Sequence[str]) -> list[int]:
    rows = await conn.fetch(
        f"{WATCHER} SELECT id FROM streams WHERE scope = $1 AND name = ANY($2::text[])", SCOPE, streams
    )
    assert len(rows) == len(streams)
    return [r["id"] for r in rows]


async def completed_counts(conn: asyncpg.Connection, ids: list[int]) -> tuple[int, int]:
    row = await conn.fetchrow(
        f"{WATCHER} SELECT count(*) FILTER (WHERE status = 'COMMITTED') AS committed,"
        " count(*) FILTER (WHERE status = 'ABORTED') AS aborted"
        " FROM completed_txns WHERE stream_id = ANY($1::bigint[])",
        ids,
    )
    return row["committed"], row["aborted"]


async def queue_drained(conn: asyncpg.Connection, began: float, poll_s: float, failures: Failures) -> float:
    """Seconds after `began` (perf_counter) at which no commit request is queued any more."""
    while True:
        left = await conn.fetchval(f"{WATCHER} SELECT count(*) FROM requests WHERE processor = 'commits'")
        now = time.perf_counter() - began
        if left == 0:
            return now
        if now > COMMIT_TIMEOUT_S:
            failures.add(f"{left} commit requests still queued after {COMMIT_TIMEOUT_S:.0f} s")
            return float("nan")
        await asyncio.sleep(poll_s)


@dataclass
class Statement:
    text: str
    calls: int
    mean_ms: float


@dataclass
class Statements:
    """What pg_stat_statements recorded over one part: every statement the server ran."""

    rows: list[Statement]

    @property
    def batches(self) -> int:
        # end_commit_batch runs once per batch (its CTE `emptied` names it).
        return sum(r.calls for r in self.rows if "emptied AS" in r.text)

    @property
    def calls(self) -> int:
        return sum(r.calls for r in self.rows)


def cpu_seconds(pid: int | None) -> float:
    """User plus system CPU seconds of process `pid` so far (NaN without one): a figure other
    load on the machine hardly moves, unlike a rate."""
    if pid is None:
        return float("nan")
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def reset_statements(admin_url: str | None) -> None:
    if admin_url is None:
        return
    conn = await asyncpg.connect(admin_url)
    try:
        await conn.execute(f"{WATCHER} SELECT pg_stat_statements_reset()")
    finally:
        await conn.close()


async def read_statements(admin_url: str | None) -> Statements | None:
    if admin_url is None:
        return None
    conn = await asyncpg.connect(admin_url)
    try:
        rows = await conn.fetch(
            f"{WATCHER} SELECT query, calls, mean_exec_time FROM pg_stat_statements"
            " WHERE query NOT LIKE '%bench-watcher%' ORDER BY calls DESC, query"
        )
    finally:
        await conn.close()
    return Statements(
        [Statement(" ".join(r["query"].split()), r["calls"], r["mean_exec_time"]) for r in rows]
    )


@dataclass
class PipelineResult:
    streams: int
    txns: int
    open_s: float  # opening the transactions beforehand
    requests_s: float  # first commitTransaction sent .. last one answered
    committed_s: float  # first commitTransaction sent .. every one COMMITTED in the database
    committed: int
    aborted: int
    ack_ms: list[float]
    first_committed_s: float  # first commitTransaction sent .. the first one COMMITTED
    drained_s: float  # first commitTransaction sent .. no commit request left in the queue
    statements: Statements | None = None
    cpu_s: float = float("nan")  # the serve process's CPU seconds over the same span

    @property
    def rate(self) -> float:
        return self.committed / self.committed_s


async def pipeline(
    stub: ControllerServiceStub,
    url: str,
    prefix: str,
    n_streams: int,
    count: int,
    in_flight: int,
    poll_s: float,
    failures: Failures,
    admin_url: str | None = None,
    serve_pid: int | None = None,
) -> PipelineResult:
    streams = [f"{prefix}-{i}" for i in range(n_streams)]
    for stream in streams:
        await create_stream(stub, stream)
    txns, open_s = await open_many(stub, streams, count, 32)
    conn = await asyncpg.connect(url)
    try:
        ids = await stream_ids(conn, streams)
        gate = asyncio.Semaphore(in_flight)
        acks: list[float] = []

        async def commit(stream: str, txn: pb.TxnId) -> None:
            async with gate:
                began = time.perf_counter()
                reply = await stub.commitTransaction(pb.TxnRequest(streamInfo=info_of(stream), txnId=txn))
                acks.append((time.perf_counter() - began) * 1000)
            if reply.status != SUCCESS:
                failures.add(f"commitTransaction: {pb.TxnStatus.Status.Name(reply.status)}")

        async def send_all() -> None:
            await asyncio.gather(*(commit(s, t) for s, t in txns))

        await reset_statements(admin_url)
        cpu_began = cpu_seconds(serve_pid)
        began = time.perf_counter()
        sending = asyncio.create_task(send_all())
        requests_s = float("nan")
        first = float("nan")
        committed = aborted = 0
        while True:
            committed, aborted = await completed_counts(conn, ids)
            now = time.perf_counter() - began
            if committed and first != first:
                first = now
            if sending.done() and requests_s != requests_s:
                sending.result()
                requests_s = now
            if committed + aborted >= count:
                break
            if now > COMMIT_TIMEOUT_S:
                failures.add(f"{prefix}: only {committed}/{count} committed after {COMMIT_TIMEOUT_S:.0f} s")
                break
            await asyncio.sleep(poll_s)
        committed_s = time.perf_counter() - began
        await sending
        if requests_s != requests_s:
            requests_s = time.perf_counter() - began
        if aborted:
            failures.add(f"{prefix}: {aborted} transactions ABORTED instead of committed")
        # Every commitTransaction queued a request; those left once all are COMMITTED find
        # nothing to do, but the next part must not run while the server still works them off.
        drained_s = await queue_drained(conn, began, poll_s, failures)
        cpu_s = cpu_seconds(serve_pid) - cpu_began
        statements = await read_statements(admin_url)
    finally:
        await conn.close()
    return PipelineResult(
        n_streams,
        count,
        open_s,
        requests_s,
        committed_s,
        committed,
        aborted,
        acks,
        first,
        drained_s,
        statements,
        cpu_s,
    )


# --- paced commit latency ---------------------------------------------------------------------


@dataclass
class PacedResult:
    rate: float
    sent: int
    achieved_rate: float  # commits actually sent per second
    ack_ms: list[float]
    observed_ms: list[float]  # sending commitTransaction .. the watcher saw COMMITTED
    completion_ms: list[float]  # sending commitTransaction (wall clock) .. completion_time
    missing: int
    drained_s: float  # first commit sent .. no commit request left in the queue


async def paced(
    stub: ControllerServiceStub,
    url: str,
    rate: float,
    seconds: float,
    poll_s: float,
    failures: Failures,
) -> PacedResult:
    stream = "paced"
    await create_stream(stub, stream)
    count = int(rate * seconds)
    txns = [t for _, t in (await open_many(stub, [stream], count, 32))[0]]
    info = info_of(stream)
    loop = asyncio.get_running_loop()
    conn = await asyncpg.connect(url)
    try:
        (sid,) = await stream_ids(conn, [stream])
        sent: dict[int, tuple[float, float]] = {}  # txn low -> (loop time, wall ms) when sent
        seen: dict[int, tuple[float, int]] = {}  # txn low -> (loop time seen, completion_time)
        acks: list[float] = []
        all_sent = asyncio.Event()

        async def commit(txn: pb.TxnId) -> None:
            began = loop.time()
            sent[txn.lowBits] = (began, time.time_ns() / 1e6)
            reply = await stub.commitTransaction(pb.TxnRequest(streamInfo=info, txnId=txn))
            acks.append((loop.time() - began) * 1000)
            if reply.status != SUCCESS:
                failures.add(f"paced commitTransaction: {pb.TxnStatus.Status.Name(reply.status)}")

        async def watch() -> None:
            deadline = None
            while True:
                pending = [low for low in sent if low not in seen]
                if pending:
                    rows = await conn.fetch(
                        "SELECT txn_low, status, completion_time FROM completed_txns"
                        " WHERE stream_id = $1 AND txn_low = ANY($2::bigint[])",
                        sid,
                        pending,
                    )
                    now = loop.time()
                    for row in rows:
                        seen[row["txn_low"]] = (now, row["completion_time"])
                        if row["status"] != "COMMITTED":
                            failures.add(f"paced: a transaction ended {row['status']}")
                if all_sent.is_set():
                    if len(seen) >= len(sent):
                        return
                    deadline = deadline or loop.time() + COMMIT_TIMEOUT_S
                    if loop.time() > deadline:
                        failures.add(
                            f"paced: {len(sent) - len(seen)} not committed after {COMMIT_TIMEOUT_S:.0f} s"
                        )
                        return
                await asyncio.sleep(poll_s)

        watcher = asyncio.create_task(watch())
        tasks = []
        start = loop.time()
        began = time.perf_counter()
        for i, txn in enumerate(txns):
            delay = start + i / rate - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(commit(txn)))
        sending_s = loop.time() - start
        await asyncio.gather(*tasks)
        all_sent.set()
        await watcher
        drained_s = await queue_drained(conn, began, poll_s, failures)
    finally:
        await conn.close()
    observed = [(seen[low][0] - sent[low][0]) * 1000 for low in seen]
    completion = [float(seen[low][1]) - sent[low][1] for low in seen]
    return PacedResult(
        rate,
        len(sent),
        len(sent) / max(sending_s, 1e-9),
        acks,
        observed,
        completion,
        len(sent) - len(seen),
        drained_s,
    )


# --- report -----------------------------------------------------------------------------------


def ratio_line(what: str, value: float, base: LoadResult | None) -> str:
    if base is None:
        return ""
    return f"    ratio {what:<34} {value / base.throughput:6.1%} of the bare baseline's rate"


def print_pipeline(label: str, result: PipelineResult, base: LoadResult | None, in_flight: int) -> None:
    print(
        f"{label}: {result.txns} transactions on {result.streams} stream(s) of {SEGMENTS} segments, "
        f"commitTransaction {in_flight} in flight"
    )
    print(
        f"    opened beforehand in {result.open_s:.1f} s ({result.txns / result.open_s:.0f}/s, 32 in flight)"
    )
    print(
        f"    all commitTransaction answered after {result.requests_s:.2f} s "
        f"({result.txns / result.requests_s:.0f} req/s); "
        f"first COMMITTED after {result.first_committed_s:.2f} s"
    )
    print(
        f"    {result.committed} COMMITTED ({result.aborted} ABORTED) after {result.committed_s:.2f} s: "
        f"{result.rate:.0f} committed/s"
    )
    print(f"    commit request queue empty after {result.drained_s:.2f} s (one request per commit)")
    print(
        f"    serve process CPU until then: {result.cpu_s:.2f} s, "
        f"{result.cpu_s / result.txns * 1e6:.0f} us per committed transaction"
    )
    print("    " + summary("commitTransaction RPC", result.ack_ms))
    line = ratio_line("committed/s", result.rate, base)
    if line:
        print(line)
    print("    " + verdict(result.rate >= 500 and result.committed == result.txns, ">= 500 committed/s"))
    if result.statements is not None:
        print_statements(result.statements, result.txns)


def print_statements(stats: Statements, txns: int) -> None:
    batches = max(stats.batches, 1)
    print(
        f"    SQL statements (pg_stat_statements, server and segment store): {stats.calls} in all, "
        f"{stats.calls / txns:.2f} per transaction, {stats.calls / batches:.1f} per batch "
        f"({stats.batches} batches, {txns / batches:.1f} transactions each)"
    )
    print(f"    {'calls':>7} {'/txn':>6} {'/batch':>7} {'mean ms':>8}  statement")
    for row in stats.rows:
        text = re.sub(r"^(--[^$]*?)(?=WITH|SELECT|INSERT|UPDATE|DELETE)", "", row.text)
        shares = f"{row.calls:>7} {row.calls / txns:>6.2f} {row.calls / batches:>7.2f} {row.mean_ms:>8.2f}"
        print(f"    {shares}  {text[:100]}")


async def run(
    stub: ControllerServiceStub,
    url: str,
    admin_url: str | None,
    pid: int,
    args: argparse.Namespace,
    failures: Failures,
) -> None:
    skip = set(filter(None, args.skip.split(",")))
    poll_s = args.poll_ms / 1000
    base = create = ping = None
    echo: list[LoadResult] = []
    single = multi = paced_result = None
    timings: dict[str, float] = {}

    def timed(name: str, began: float) -> None:
        timings[name] = time.perf_counter() - began

    began = time.perf_counter()
    if "baseline" not in skip:
        base = await baseline(url, args.in_flight, args.seconds)
        timed("baseline", began)
    if "echo" not in skip:
        began = time.perf_counter()
        echo = await echo_load(args.in_flight, args.seconds)
        timed("echo", began)
    if "commit" not in skip:
        began = time.perf_counter()
        single = await pipeline(
            stub, url, "commit", 1, args.commit_txns, args.commit_in_flight, poll_s, failures, admin_url, pid
        )
        timed("commit", began)
    if "commit-multi" not in skip:
        began = time.perf_counter()
        multi = await pipeline(
            stub,
            url,
            "multi",
            args.streams,
            args.commit_txns,
            args.commit_in_flight,
            poll_s,
            failures,
            admin_url,
            pid,
        )
        timed("commit-multi", began)
    if "paced" not in skip:
        began = time.perf_counter()
        paced_result = await paced(stub, url, args.paced_rate, args.paced_seconds, poll_s, failures)
        timed("paced", began)
    opened: list[pb.TxnId] = []
    if "create" not in skip:
        began = time.perf_counter()
        create, opened = await create_load(stub, args.in_flight, args.seconds, failures)
        timed("create", began)
    if "ping" not in skip:
        began = time.perf_counter()
        if "create" in skip:
            await create_stream(stub, "create")
        ping = await ping_load(stub, opened, args.in_flight, args.seconds, failures)
        timed("ping", began)

    print(
        f"in flight: {args.in_flight}, measured seconds per closed loop: {args.seconds:g}, "
        f"lease {LEASE_MS} ms"
    )
    if base is not None:
        print(base.line())
    for bare_result in echo:
        print(bare_result.line())
    echo_of = {r.name.split()[1]: r for r in echo}
    for result in (create, ping):
        if result is None:
            continue
        print(result.line())
        what = result.name.split()[1]
        line = ratio_line(what, result.throughput, base)
        if line:
            print(line)
        bare = echo_of.get(what)
        if bare is not None:
            print(f"    ratio {what:<34} {result.throughput / bare.throughput:6.1%} of the bare echo's rate")
    if create is not None:
        ok = create.throughput >= 1000 and create.percentile(0.99) < 20
        print("    " + verdict(ok, "createTransaction >= 1,000/s at p99 < 20 ms"))
    if ping is not None:
        ok = ping.throughput >= 2000 and ping.percentile(0.99) < 20
        print("    " + verdict(ok, "pingTransaction >= 2,000/s at p99 < 20 ms"))
    if single is not None:
        print_pipeline("commit pipeline", single, base, args.commit_in_flight)
    if multi is not None:
        print_pipeline("commit pipeline", multi, base, args.commit_in_flight)
    if paced_result is not None:
        r = paced_result
        print(
            f"commit latency at a steady {r.rate:g} commits/s: {r.sent} commits sent "
            f"at {r.achieved_rate:.0f}/s "
            f"on one stream of {SEGMENTS} segments; watcher polls every {args.poll_ms:g} ms"
        )
        print("    " + summary("commitTransaction RPC", r.ack_ms))
        print("    " + summary("until the watcher saw COMMITTED", r.observed_ms))
        print("    " + summary("until completion_time (server clock)", r.completion_ms))
        if r.missing:
            print(f"    {r.missing} never seen COMMITTED")
        print(f"    commit request queue empty {r.drained_s:.2f} s after the first commit was sent")
        ok = not r.missing and bool(r.observed_ms) and percentile(r.observed_ms, 0.99) < 1000
        print("    " + verdict(ok, "p99 < 1 s from commit request to COMMITTED at 200/s"))
    print("wall time per part: " + ", ".join(f"{k} {v:.1f} s" for k, v in timings.items()))


@asynccontextmanager
async def controller(
    statements: bool,
) -> AsyncIterator[tuple[str, str | None, ControllerServiceStub, int]]:
    """A throwaway cluster (with pg_stat_statements preloaded when `statements`), a `pgcontroller
    serve` subprocess on it with default settings, and a stub with the bench scope created:
    (database URL, superuser URL when counting, stub, serve's pid)."""
    async with throwaway_cluster() as cluster:
        admin_url = cluster.admin_url()
        if statements:
            await preload_statements(cluster)
        with tempfile.TemporaryDirectory() as work:
            served = await start_served(Path(work), "--db-url", admin_url)
            channel = Channel("127.0.0.1", served.grpc_port)
            try:
                stub = ControllerServiceStub(channel)
                await stub.createScope(pb.ScopeInfo(scope=SCOPE))
                yield admin_url, admin_url if statements else None, stub, served.process.pid
            finally:
                channel.close()
                await served.stop()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--seconds", type=float, default=10.0, help="baseline, create, ping: measured seconds"
    )
    parser.add_argument("--in-flight", type=int, default=32, help="baseline, create, ping: calls in flight")
    parser.add_argument("--commit-txns", type=int, default=5000, help="commit, commit-multi: transactions")
    parser.add_argument("--commit-in-flight", type=int, default=64, help="commit, commit-multi: in flight")
    parser.add_argument("--streams", type=int, default=8, help="commit-multi: streams")
    parser.add_argument("--paced-rate", type=float, default=200.0, help="paced: commits per second")
    parser.add_argument("--paced-seconds", type=float, default=10.0, help="paced: seconds of commits")
    parser.add_argument("--poll-ms", type=float, default=10.0, help="watcher: pause between SQL polls")
    parser.add_argument("--skip", default="", help="comma-separated parts to skip (see the docstring)")
    parser.add_argument(
        "--statements", action="store_true", help="commit parts: count SQL statements (pg_stat_statements)"
    )
    args = parser.parse_args()
    failures = Failures()

    async with controller(args.statements) as (url, admin_url, stub, pid):
        await run(stub, url, admin_url, pid, args, failures)
    print(f"unexpected answers: {len(failures.lines)}")
    for line in failures.lines[:10]:
        print(f"    {line}")


if __name__ == "__main__":
    asyncio.run(main())
