"""Each attack of issue 32 beside a baseline: a legitimate client's calls on the gRPC, REST and
segment-store ports of a real `pgcontroller serve`, timed before, during and after the attack, with
serve's resident memory and its PostgreSQL's.

    .venv/bin/python -m bench.hostile [--window-s 5] [--quick]

Three `serve` subprocesses, one after the other, at their default limits:
- on a throwaway PostgreSQL, with the soft RLIMIT_NOFILE at 1024 (the issue's `ulimit -n 1024`):
  HTTP/2 rapid reset, PING and SETTINGS floods on the gRPC port; stalled 16 MiB frames, clients
  that never read and a flood of silent connections on the store port; slowloris and a flood of
  idle connections on the REST port; a flood of idle connections on the gRPC port;
- with `--auth-enabled` on the same database: password guessing from another loopback address;
- on its own embedded PostgreSQL (`--data-dir`): SIGKILL of the postmaster.

Each attacker is a process of its own (bench/_attacks.py), so its CPU is not the probe's loop; the
machine's cores are shared all the same, as they would be by an attacker on the same host.

Per phase the table gives, per port, the successful calls' p50/p99 (nearest rank) and the calls
that failed (an error, or no answer within CALL_TIMEOUT_S); serve's VmRSS and the PostgreSQL's
(the sum of its processes' proportional set sizes, so shared buffers count once) as the phase's
maximum and its last sample. "during" runs from the attacker's start until --window-s after it is
under way (its connections open, its frames sent), so the attack's opening burst is in it.
At the end every append the store acknowledged is read back.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import shutil
import signal
import struct
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiohttp
from grpclib.client import Channel

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.embedded_pg import EmbeddedPostgres
from app.security.passwords import hash_password
from app.segmentstore.wire import commands as wc
from app.segmentstore.wire.codec import encode, read_command
from app.store.accounts import PgAccountStore
from app.store.pool import create_pool
from app.testing.served import ServedProcess, start_served
from bench._attacks import BIG_SEGMENT, GUESSED_ACCOUNT
from bench._common import percentile, throwaway_cluster
from tests.support.hostile import rss_kb

REPO_ROOT = Path(__file__).resolve().parents[1]
CALL_TIMEOUT_S = 5.0
PROBE_PAUSE_S = 0.02
# The issue's `ulimit -n 1024`, under which 1,100 idle connections used to exhaust serve.
NOFILE = 1024
STREAM = pb.StreamInfo(scope="hostile", stream="probe")
PROBE_SEGMENT = "hostile/probe/0.#epoch.0"
ACL = "prn::*,READ_UPDATE"
# How long a killed postmaster may take to be back before the bench gives up on it.
RESTART_LIMIT_S = 60.0


# --- the legitimate client ----------------------------------------------------------------------


class WireClient:
    """One connection to the store port speaking the project's codec, one request at a time."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self._request_ids = iter(range(1, 1 << 62))

    @classmethod
    async def connect(cls, port: int) -> WireClient:
        client = cls(*await asyncio.open_connection("127.0.0.1", port))
        reply = await client.call(wc.Hello(wc.WIRE_VERSION, wc.OLDEST_COMPATIBLE_VERSION))
        assert isinstance(reply, wc.Hello), reply
        return client

    def rid(self) -> int:
        return next(self._request_ids)

    async def call(self, command: wc.Command) -> wc.Command:
        self.writer.write(encode(command))
        await self.writer.drain()
        return await read_command(self.reader)

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError):
            await self.writer.wait_closed()


def framed_event(payload: bytes) -> bytes:
    """One event as a writer frames it inside append data: type 0, length, payload."""
    return struct.pack(">ii", 0, len(payload)) + payload


class StoreWriter:
    """A legitimate writer on the store port: one acknowledged append per call, reconnecting (and
    setting its append up again) after a failure; it remembers what was acknowledged."""

    def __init__(self, port: int, segment: str, token: str) -> None:
        self.port, self.segment, self.token = port, segment, token
        self.writer_id = int.from_bytes(os.urandom(16), "big")
        self.acknowledged: list[bytes] = []
        self._client: WireClient | None = None
        self._event_number = 0

    async def append(self) -> None:
        if self._client is None:
            client = await WireClient.connect(self.port)
            setup = await client.call(wc.SetupAppend(client.rid(), self.writer_id, self.segment, self.token))
            assert isinstance(setup, wc.AppendSetup), setup
            self._event_number = max(self._event_number, setup.last_event_number)
            self._client = client
        self._event_number += 1
        payload = f"probe {self.writer_id:x} {self._event_number}".encode()
        data = framed_event(payload)
        client = self._client
        reply = await client.call(
            wc.AppendBlockEnd(self.writer_id, len(data), data, 1, self._event_number, client.rid())
        )
        assert isinstance(reply, wc.DataAppended), reply
        self.acknowledged.append(payload)

    async def reset(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            with contextlib.suppress(Exception):
                await client.close()

    async def lost(self) -> int:
        """Acknowledged events not found when the segment is read back from its start."""
        client = await WireClient.connect(self.port)
        try:
            stored = b""
            while True:
                reply = await client.call(wc.ReadSegment(self.segment, len(stored), 1 << 20, self.token))
                assert isinstance(reply, wc.SegmentRead), reply
                if not reply.data:
                    break
                stored += reply.data
                if reply.at_tail:
                    break
        finally:
            await client.close()
        found = set()
        position = 0
        while position + 8 <= len(stored):
            _, length = struct.unpack_from(">ii", stored, position)
            found.add(stored[position + 8 : position + 8 + length])
            position += 8 + length
        return sum(payload not in found for payload in self.acknowledged)


@dataclass
class Probe:
    """One port's legitimate call, made back to back (PROBE_PAUSE_S apart) while a phase runs."""

    port_name: str
    call: Callable[[], Awaitable[object]]
    on_failure: Callable[[], Awaitable[None]] | None = None
    latencies_ms: list[float] = field(default_factory=list)
    failed: int = 0
    # When the latest call that succeeded began, if the latest call succeeded.
    last_ok_since: float | None = None

    async def run(self, stop: asyncio.Event) -> None:
        self.latencies_ms, self.failed = [], 0
        while not stop.is_set():
            began, started = time.monotonic(), time.perf_counter()
            try:
                await asyncio.wait_for(self.call(), CALL_TIMEOUT_S)
            except Exception:
                self.failed += 1
                self.last_ok_since = None
                if self.on_failure is not None:
                    await self.on_failure()
            else:
                self.latencies_ms.append((time.perf_counter() - started) * 1000)
                self.last_ok_since = began
            await asyncio.sleep(PROBE_PAUSE_S)

    def cell(self) -> str:
        if not self.latencies_ms:
            return f"{'-':>7} {'-':>7} {self.failed:>4}"
        p50, p99 = percentile(self.latencies_ms, 0.50), percentile(self.latencies_ms, 0.99)
        return f"{p50:7.1f} {p99:7.1f} {self.failed:>4}"


def grpc_probe(stub: ControllerServiceStub, metadata: dict[str, str] | None) -> Probe:
    async def call() -> None:
        answer = await stub.getCurrentSegments(STREAM, metadata=metadata)
        assert len(answer.segmentRanges) == 1, answer

    return Probe("gRPC", call)


def rest_probe(http: aiohttp.ClientSession, served: ServedProcess, headers: dict[str, str]) -> Probe:
    async def call() -> None:
        async with http.get(f"{served.rest_base}/v1/scopes", headers=headers) as response:
            assert response.status == 200, response.status
            await response.read()

    return Probe("REST", call)


def store_probe(writer: StoreWriter) -> Probe:
    return Probe("store", writer.append, writer.reset)


# --- memory -------------------------------------------------------------------------------------


def _pss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def postgres_kb(cluster: EmbeddedPostgres) -> int:
    """The proportional set sizes of the cluster's postmaster and its children, summed."""
    postmaster = cluster.server_pid()
    if postmaster is None:
        return 0
    total = _pss_kb(postmaster)
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry.name}/stat").read_text()
        except OSError:
            continue
        if int(stat.rpartition(")")[2].split()[1]) == postmaster:
            total += _pss_kb(int(entry.name))
    return total


@dataclass
class Memory:
    """A phase's samples of serve's and the database's memory, in KiB."""

    serve: list[int] = field(default_factory=list)
    database: list[int] = field(default_factory=list)
    # serve's open file descriptors (the idle floods' target under RLIMIT_NOFILE).
    descriptors: list[int] = field(default_factory=list)

    def cell(self, samples: list[int]) -> str:
        if not samples:
            return f"{'-':>11}"
        return f"{max(samples) / 1024:5.0f}/{samples[-1] / 1024:<5.0f}"


async def sample_memory(
    served: ServedProcess, cluster: EmbeddedPostgres, memory: Memory, stop: asyncio.Event
) -> None:
    while True:
        with contextlib.suppress(OSError, AssertionError):
            memory.serve.append(rss_kb(served.process.pid))
            memory.descriptors.append(len(os.listdir(f"/proc/{served.process.pid}/fd")))
        memory.database.append(await asyncio.to_thread(postgres_kb, cluster))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.5)
        if stop.is_set():
            return


# --- phases -------------------------------------------------------------------------------------


@dataclass
class Target:
    """What is attacked, and who watches it."""

    served: ServedProcess
    cluster: EmbeddedPostgres
    probes: list[Probe]


HEADER = (
    f"{'attack':<28} {'phase':<7}"
    + "".join(f" | {name + ' p50/p99 ms fail':>20}" for name in ("gRPC", "REST", "store"))
    + f" | {'serve RSS MB':>11} | {'PG PSS MB':>11} | {'fds':>5}"
)


def print_row(attack: str, phase: str, target: Target, memory: Memory) -> None:
    cells = {probe.port_name: probe.cell() for probe in target.probes}
    blank = f"{'-':>7} {'-':>7} {'-':>4}"
    print(
        f"{attack:<28} {phase:<7}"
        + "".join(f" | {cells.get(name, blank):>20}" for name in ("gRPC", "REST", "store"))
        + f" | {memory.cell(memory.serve)} | {memory.cell(memory.database)}"
        + f" | {max(memory.descriptors, default=0):>5}",
        flush=True,
    )


@contextlib.asynccontextmanager
async def phase(attack: str, name: str, target: Target) -> AsyncIterator[None]:
    """The probes and the memory sampler run for the block; its row is printed after."""
    stop = asyncio.Event()
    memory = Memory()
    tasks = [asyncio.create_task(probe.run(stop)) for probe in target.probes]
    tasks.append(asyncio.create_task(sample_memory(target.served, target.cluster, memory, stop)))
    try:
        yield
    finally:
        stop.set()
        await asyncio.gather(*tasks)
    print_row(attack, name, target, memory)


async def attack_process(name: str, port: int, scale: float) -> asyncio.subprocess.Process:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench._attacks", name, str(port), "--scale", str(scale),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, cwd=REPO_ROOT,
    )  # fmt: skip
    return process


async def attacked(label: str, attack: str, port: int, target: Target, window_s: float, scale: float) -> None:
    """Baseline, then the attack (a process of bench/_attacks.py), then after it: one row each,
    and what the server did to the attacker."""
    async with phase(label, "before", target):
        await asyncio.sleep(window_s)
    async with phase(label, "during", target):
        process = await attack_process(attack, port, scale)
        assert process.stdin is not None and process.stdout is not None
        ready = await asyncio.wait_for(process.stdout.readline(), 120)
        assert ready == b"ready\n", ready
        await asyncio.sleep(window_s)
        process.stdin.close()
        output = await asyncio.wait_for(process.stdout.read(), 120)
        await process.wait()
    async with phase(label, "after", target):
        await asyncio.sleep(window_s)
    outcome = json.loads(output) if output.strip() else {"attacker exit": process.returncode}
    print(f"{'':<28} {'':<7}   the attacker: {', '.join(f'{k} {v}' for k, v in outcome.items())}", flush=True)


async def postmaster_killed(label: str, target: Target, window_s: float) -> None:
    """SIGKILL of the embedded postmaster; "during" lasts until it is back and every probe has
    been answered again, and at least `window_s`."""
    cluster = target.cluster
    async with phase(label, "before", target):
        await asyncio.sleep(window_s)
    killed = cluster.server_pid()
    assert killed is not None
    restarted_s: float | None = None
    async with phase(label, "during", target):
        started = time.monotonic()
        os.kill(killed, signal.SIGKILL)
        while (now := time.monotonic()) - started < RESTART_LIMIT_S:
            back = cluster.server_pid()
            if restarted_s is None and back not in (None, killed) and cluster.is_running():
                restarted_s = now - started
            answered = restarted_s is not None and all(
                (since := probe.last_ok_since) is not None and since > started + restarted_s
                for probe in target.probes
            )
            if answered and now - started >= window_s:
                break
            await asyncio.sleep(0.1)
        during_s = time.monotonic() - started
    async with phase(label, "after", target):
        await asyncio.sleep(window_s)
    restart = f"{restarted_s:.1f} s" if restarted_s is not None else f"not within {RESTART_LIMIT_S:.0f} s"
    state = "running" if target.served.process.returncode is None else "exited"
    print(
        f"{'':<28} {'':<7}   postmaster {killed} killed: a new one up after {restart}, "
        f"phase {during_s:.1f} s, serve {state}",
        flush=True,
    )


# --- the served processes -----------------------------------------------------------------------


async def until_containers_served(served: ServedProcess) -> None:
    deadline = time.monotonic() + 60
    while "segment containers rebalanced" not in served.log():
        assert time.monotonic() < deadline, served.log()[-4000:]
        await asyncio.sleep(0.1)


async def create_probe_stream(stub: ControllerServiceStub, metadata: dict[str, str] | None) -> None:
    await stub.createScope(pb.ScopeInfo(scope=STREAM.scope), metadata=metadata)
    config = pb.StreamConfig(
        streamInfo=STREAM,
        scalingPolicy=pb.ScalingPolicy(scaleType=pb.ScalingPolicy.FIXED_NUM_SEGMENTS, minNumSegments=1),
    )
    await stub.createStream(config, metadata=metadata)


async def fill_big_segment(port: int) -> None:
    """8 MiB for the slow readers to ask for, written before their baseline."""
    client = await WireClient.connect(port)
    try:
        reply = await client.call(wc.CreateSegment(client.rid(), BIG_SEGMENT, 0, 0, ""))
        assert isinstance(reply, wc.SegmentCreated | wc.SegmentAlreadyExists), reply
        writer_id = int.from_bytes(os.urandom(16), "big")
        setup = await client.call(wc.SetupAppend(client.rid(), writer_id, BIG_SEGMENT, ""))
        assert isinstance(setup, wc.AppendSetup), setup
        for n in range(4):
            data = framed_event(bytes([n]) * ((2 << 20) - 8))
            reply = await client.call(wc.AppendBlockEnd(writer_id, len(data), data, 1, n + 1, client.rid()))
            assert isinstance(reply, wc.DataAppended), reply
    finally:
        await client.close()


@contextlib.asynccontextmanager
async def watched(
    served: ServedProcess, cluster: EmbeddedPostgres, authorization: str | None
) -> AsyncIterator[tuple[Target, StoreWriter]]:
    """The three probes on their own connections, opened before any attack."""
    metadata = {"authorization": authorization} if authorization else None
    channel = Channel("127.0.0.1", served.grpc_port)
    try:
        stub = ControllerServiceStub(channel)
        await until_containers_served(served)
        await create_probe_stream(stub, metadata)
        answer = await stub.getCurrentSegments(STREAM, metadata=metadata)
        assert served.segment_store_port is not None
        writer = StoreWriter(served.segment_store_port, PROBE_SEGMENT, answer.delegationToken)
        async with aiohttp.ClientSession() as http:
            probes = [
                grpc_probe(stub, metadata),
                rest_probe(http, served, {"Authorization": authorization} if authorization else {}),
                store_probe(writer),
            ]
            yield Target(served, cluster, probes), writer
    finally:
        channel.close()


async def stop_served(served: ServedProcess) -> str:
    try:
        code = await served.stop()
    except AssertionError as exc:  # it hung: stop() killed it; the bench reports, not fails
        return f"did not stop: {str(exc).splitlines()[0]}"
    return f"exit {code}"


async def report_end(name: str, served: ServedProcess, writer: StoreWriter) -> None:
    try:
        lost = await asyncio.wait_for(writer.lost(), 30)
        read_back = f"{len(writer.acknowledged)} acknowledged appends, {lost} lost"
    except Exception as exc:
        read_back = f"read-back failed: {exc!r}"
    stopped = await stop_served(served)
    errors = raised(served.log())
    listed = "; ".join(f"{count} x {error}" for error, count in errors.items()) or "none"
    print(f"{name}: {read_back}; serve {stopped}; tracebacks in its log: {listed}", flush=True)


def raised(log: str) -> dict[str, int]:
    """Each distinct exception a traceback in `log` ends with (its line, shortened), counted."""
    counts: dict[str, int] = {}
    lines = log.splitlines()
    for number, line in enumerate(lines):
        if not line.startswith("Traceback"):
            continue
        for later in lines[number + 1 :]:
            if later and not later.startswith((" ", "Traceback", "During handling", "The above", "^")):
                error = later[:140]
                counts[error] = counts.get(error, 0) + 1
                break
    return counts


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


# (label, bench/_attacks.py's attack, the port it is aimed at) on the plain serve.
PLAIN_ATTACKS = (
    ("h2 rapid reset", "rapid-reset", "grpc"),
    ("h2 PING flood", "ping-flood", "grpc"),
    ("h2 SETTINGS flood", "settings-flood", "grpc"),
    ("store stalled 16 MiB frames", "stalled-frames", "store"),
    ("store slow readers", "slow-readers", "store"),
    ("REST slowloris", "slowloris", "rest"),
    ("REST idle flood", "idle-flood", "rest"),
    ("store idle flood", "idle-flood", "store"),
    ("gRPC idle flood", "idle-flood", "grpc"),
    ("h2 CONTINUATION flood", "continuation-flood", "grpc"),
    ("h2 zero window (listScopes replies never taken)", "zero-window", "grpc"),
)
PASSWORD_GUESSING = "password guessing"
POSTMASTER_KILL = "postmaster SIGKILL"


@dataclass
class Run:
    window_s: float
    scale: float
    only: list[str]
    keep_logs: Path | None

    def selected(self, label: str) -> bool:
        return not self.only or any(part.lower() in label.lower() for part in self.only)

    def keep(self, served: ServedProcess, name: str) -> None:
        if self.keep_logs is not None:
            self.keep_logs.mkdir(parents=True, exist_ok=True)
            shutil.copy(served.log_path, self.keep_logs / f"{name}.log")


def port_of(served: ServedProcess, which: str) -> int:
    port = {"grpc": served.grpc_port, "rest": served.rest_port, "store": served.segment_store_port}[which]
    assert port is not None
    return port


async def plain_serve(run: Run, cluster: EmbeddedPostgres, work: Path) -> None:
    """The attacks needing no credentials, on one serve under the issue's `ulimit -n 1024`."""
    attacks = [attack for attack in PLAIN_ATTACKS if run.selected(attack[0])]
    if not attacks:
        return
    work.mkdir()
    served = await start_served(
        work, "--db-url", cluster.admin_url(), "--container-rebalance-delay-s", "0", nofile=NOFILE
    )
    async with watched(served, cluster, None) as (target, writer):
        await fill_big_segment(port_of(served, "store"))
        for label, attack, which in attacks:
            await attacked(label, attack, port_of(served, which), target, run.window_s, run.scale)
        await report_end("plain serve", served, writer)
    run.keep(served, "plain")


async def authenticated_serve(run: Run, cluster: EmbeddedPostgres, work: Path) -> None:
    if not run.selected(PASSWORD_GUESSING):
        return
    pool = await create_pool(cluster.admin_url(), min_size=1, max_size=1)
    try:
        accounts = PgAccountStore(pool)
        for name in ("ops", GUESSED_ACCOUNT):
            await accounts.add(name, hash_password(f"{name}-pw"), ACL, 1)
    finally:
        await pool.close()
    work.mkdir()
    served = await start_served(
        work, "--db-url", cluster.admin_url(), "--auth-enabled", "--container-rebalance-delay-s", "0"
    )
    async with watched(served, cluster, basic("ops", "ops-pw")) as (target, writer):
        grpc_port = served.grpc_port
        await attacked(PASSWORD_GUESSING, "password-guessing", grpc_port, target, run.window_s, run.scale)
        await report_end("serve --auth-enabled", served, writer)
    run.keep(served, "auth")


async def embedded_serve(run: Run) -> None:
    """A serve with its own embedded PostgreSQL, whose postmaster is killed."""
    if not run.selected(POSTMASTER_KILL):
        return
    root = Path(tempfile.mkdtemp(prefix="pgcontroller-hostile-db-", dir="/tmp"))
    # Searchable: as root, the embedded server runs as `nobody`, which must reach the cluster.
    os.chmod(root, 0o755)
    embedded = EmbeddedPostgres(root / "data")
    try:
        served = await start_served(
            root, "--data-dir", str(root / "data"), "--container-rebalance-delay-s", "0"
        )
        try:
            async with watched(served, embedded, None) as (target, writer):
                await postmaster_killed(POSTMASTER_KILL, target, run.window_s)
                await report_end("serve --data-dir", served, writer)
        finally:
            if served.process.returncode is None:
                await stop_served(served)
            run.keep(served, "embedded")
    finally:
        with contextlib.suppress(Exception):
            await asyncio.to_thread(embedded.stop)
        shutil.rmtree(root, ignore_errors=True)


async def main(run: Run) -> None:
    started = time.monotonic()
    print(
        f"legitimate calls per phase of {run.window_s:g} s (gRPC getCurrentSegments, REST GET /v1/scopes, "
        f"store port acknowledged appends); p50/p99 of the calls that succeeded, ms; fail = error or "
        f"no answer in {CALL_TIMEOUT_S:g} s; memory max/last of the phase, MB; fds: serve's most open "
        "descriptors"
    )
    print(HEADER)
    async with throwaway_cluster() as cluster:
        with tempfile.TemporaryDirectory(prefix="pgcontroller-hostile-") as work:
            await plain_serve(run, cluster, Path(work) / "plain")
            await authenticated_serve(run, cluster, Path(work) / "auth")
    await embedded_serve(run)
    print(f"bench took {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window-s", type=float, default=5.0, help="each phase's length")
    parser.add_argument(
        "--scale", type=float, default=1.0, help="attack connections, as a share of the tests'"
    )
    parser.add_argument(
        "--quick", action="store_true", help="a short smoke run: 1.5 s phases, a tenth of the connections"
    )
    parser.add_argument(
        "--only", action="append", default=[], metavar="WORDS", help="only the attacks whose label has WORDS"
    )
    parser.add_argument("--keep-logs", type=Path, metavar="DIR", help="copy each serve's log into DIR")
    args = parser.parse_args()
    if args.quick:
        args.window_s, args.scale = 1.5, 0.1
    asyncio.run(main(Run(args.window_s, args.scale, args.only, args.keep_logs)))
