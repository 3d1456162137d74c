"""Issue 32, item 9: the embedded PostgreSQL's data directory on a small filesystem (a 128 MiB tmpfs)
that a filler file fills while the real Pravega client writes. Writers learn of it at once (the
store closes their connection after a short pause, as Pravega's store closes on a failure it has no
reply for, and the client reconnects and resends), one line per interval is logged instead of a
traceback per append, reads and read-only controller calls answer as before, a controller write
answers UNAVAILABLE naming the disk space, nothing is half-written, and once the filler is deleted
the writes resume without a restart: every acknowledged event is read back exactly once.

Needs root (mount); CI runs as root."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import pathlib
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator

import aiohttp
import asyncpg
import pytest
from grpclib.client import Channel
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.domain.names import MAX_TAG_LENGTH, MAX_TAGS
from app.embedded_pg import EmbeddedPostgres
from app.segmentstore.wire import commands as wc
from app.segmentstore.wire.codec import read_command
from app.testing.served import ServedProcess, start_served
from tests.segmentstore.server_harness import Client, event, rid, wid
from tests.support.dataplane import ClientProcess, check_exactly_once_in_key_order, read_events
from tests.support.hostile import p99, rss_kb

pytestmark = [pytest.mark.interop, pytest.mark.timeout(180)]

# The cluster takes about 45 MB after start; the rest is what the filler takes.
FILESYSTEM_SIZE = "128m"
PROBE_P99_BOUND_S = 1.0
RSS_BOUND_KB = 100 * 1024
# The store's pause before it closes (1 s), and a loaded 2-core machine's lateness.
WRITER_ERROR_WITHIN_S = 5.0
CONTROLLER_ERROR_WITHIN_S = 5.0
FULL_FOR_S = 6.0
EVENTS, KEYS, EVENT_BYTES = 2000, 4, 8000
# The raw writer's appends once the disk is full: 256 KiB each, at most 64 (16 MiB) before one
# must find no room.
FILL_EVENT_BYTES, MOST_APPENDS_TO_FILL = 256 * 1024, 64
# Before the fix: 2,730 tracebacks and 1,364 getURI calls in 8.6 s of a full disk (one writer of
# two segments reconnecting and resending without a pause). The pause bounds the writer's retries
# to about one per second per segment; the bound leaves room for a loaded machine.
GET_URI_PER_S_BOUND = 4.0
STORAGE_FAILURE_LINES_BOUND = 4
SCOPE = "full"
RAW_SEGMENT = f"{SCOPE}/raw/0.#epoch.0"


@pytest.fixture
def small_fs() -> Iterator[pathlib.Path]:
    # Failed, not skipped: a disk-full check that does not run says nothing; CI runs as root.
    assert os.geteuid() == 0, "this test mounts a size-limited tmpfs, which needs root"
    # Under /tmp and searchable: as root the server runs as `nobody`, which must reach the cluster.
    root = pathlib.Path(tempfile.mkdtemp(dir="/tmp", prefix="pgc-disk-full-"))
    root.chmod(0o755)
    mount = root / "fs"
    mount.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={FILESYSTEM_SIZE},mode=0755", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        pytest.fail(f"cannot mount a size-limited tmpfs here: {mounted.stderr.strip()}")
    try:
        yield mount
    finally:
        (mount / "filler").unlink(missing_ok=True)
        with contextlib.suppress(Exception):
            EmbeddedPostgres(mount / "data").stop()
        if subprocess.run(["umount", str(mount)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mount)], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


def _fill(path: pathlib.Path) -> int:
    """Writes zeros to `path` until the filesystem has no byte left; the bytes written."""
    written = 0
    with path.open("wb", buffering=0) as filler:
        for chunk in (b"\0" * (1 << 20), b"\0" * 4096, b"\0"):
            while True:
                try:
                    written += filler.write(chunk)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC, exc
                    break
    return written


async def _raw_writer(address: tuple[str, int]) -> tuple[Client, int]:
    """A connection with a writer set up on RAW_SEGMENT, once the store serves its container."""
    deadline = time.monotonic() + 30
    while True:
        client = await Client.connect(address)
        writer_id = wid()
        reply = await client.call(wc.SetupAppend(rid(), writer_id, RAW_SEGMENT, ""))
        if isinstance(reply, wc.AppendSetup):
            return client, writer_id
        await client.close()
        assert isinstance(reply, wc.WrongHost), reply
        assert time.monotonic() < deadline, "the store never served the segment"
        await asyncio.sleep(0.2)


async def _acknowledged_or_closed(client: Client) -> float | None:
    """None when the store acknowledged the append just sent; else the seconds until it closed
    `client`'s connection without answering."""
    started = time.monotonic()
    try:
        reply = await asyncio.wait_for(read_command(client.reader), WRITER_ERROR_WITHIN_S)
    except (ConnectionError, asyncio.IncompleteReadError):
        return time.monotonic() - started
    assert isinstance(reply, wc.DataAppended), f"the store answered an append with {reply!r}"
    return None


async def _append_until_refused(
    client: Client, writer_id: int, first: int
) -> tuple[int, bytes, float, bytes]:
    """Appends events numbered from `first` until the store closes the connection instead of
    acknowledging one: PostgreSQL extends a busy relation by many pages at once, so the first
    appends after the disk filled may still find room. Returns the refused event's number and
    bytes, the seconds until the close, and the bytes acknowledged before it."""
    acknowledged = b""
    for number in range(first, first + MOST_APPENDS_TO_FILL):
        # Incompressible, so stored out of line in pages of their own.
        data = event(f"raw {number}|".encode() + os.urandom(FILL_EVENT_BYTES))
        await client.send(wc.AppendBlockEnd(writer_id, len(data), data, 1, number, rid()))
        closed_after_s = await _acknowledged_or_closed(client)
        if closed_after_s is not None:
            return number, data, closed_after_s, acknowledged
        acknowledged += data
    raise AssertionError(f"{MOST_APPENDS_TO_FILL} appends acknowledged on a full disk")


def _tagged_stream(name: str) -> pb.StreamConfig:
    # About 32 KB of configuration: its row needs new pages, which a full disk cannot give.
    tags = pb.Tags(tag=[secrets.token_hex(MAX_TAG_LENGTH // 2) for _ in range(MAX_TAGS)])
    return pb.StreamConfig(
        streamInfo=pb.StreamInfo(scope=SCOPE, stream=name),
        scalingPolicy=pb.ScalingPolicy(minNumSegments=1),
        tags=tags,
    )


async def _switch_wal(data_dir: pathlib.Path) -> None:
    """Starts a fresh 16 MiB WAL segment while there is room for it: what the full disk refuses in
    the test is then the growth of data files (SQLSTATE 53100, one statement's failure), never a
    new WAL segment (a PANIC and crash recovery, which the embedded database keeper handles)."""
    admin = await asyncpg.connect(EmbeddedPostgres(data_dir).admin_url())
    try:
        await admin.execute("SELECT pg_switch_wal()")
        # The next segment's file is made by the first record written after the switch.
        await admin.execute("CHECKPOINT")
    finally:
        await admin.close()


async def _create_stream(stub: ControllerServiceStub, name: str, segments: int) -> None:
    config = pb.StreamConfig(
        streamInfo=pb.StreamInfo(scope=SCOPE, stream=name),
        scalingPolicy=pb.ScalingPolicy(minNumSegments=segments),
    )
    assert (await stub.createStream(config)).status == pb.CreateStreamStatus.SUCCESS


async def _probe_reads(
    stub: ControllerServiceStub, http: aiohttp.ClientSession, served: ServedProcess, reader: Client
) -> float:
    """One round of read-only calls (gRPC, REST, a segment read): its seconds."""
    started = time.monotonic()
    config = await stub.getStreamConfiguration(pb.StreamInfo(scope=SCOPE, stream="s"), timeout=10)
    assert config.streamInfo.stream == "s"
    scopes = await stub.listScopes(pb.ScopesRequest(), timeout=10)
    assert SCOPE in scopes.scopes
    async with http.get(f"{served.rest_base}/v1/scopes") as response:
        assert response.status == 200
    read = await reader.read(RAW_SEGMENT, 0, 1024)
    assert isinstance(read, wc.SegmentRead) and read.data, read
    return time.monotonic() - started


async def test_a_full_disk_fails_writes_retryably_and_they_resume_once_space_is_freed(
    small_fs: pathlib.Path,
) -> None:
    data_dir = small_fs / "data"
    work = small_fs.parent
    served = await start_served(work, "--data-dir", str(data_dir), "--container-rebalance-delay-s", "0")
    channel = Channel("127.0.0.1", served.grpc_port)
    stub = ControllerServiceStub(channel)
    writer: ClientProcess | None = None
    try:
        assert served.segment_store_port is not None
        address = ("127.0.0.1", served.segment_store_port)
        await stub.createScope(pb.ScopeInfo(scope=SCOPE))
        await _create_stream(stub, "s", 2)
        await _create_stream(stub, "raw", 1)

        raw, raw_writer = await _raw_writer(address)
        acknowledged = b""
        for number in range(1, 6):
            data = event(f"raw {number}|".encode() + os.urandom(EVENT_BYTES))
            reply = await raw.append(raw_writer, data, number)
            assert isinstance(reply, wc.DataAppended), reply
            acknowledged += data
        reader = await Client.connect(address)

        writer = await ClientProcess.start(
            "write",
            work,
            uri=served.grpc_uri,
            scope=SCOPE,
            stream="s",
            count=EVENTS,
            keys=KEYS,
            size=EVENT_BYTES,
            progress_every=100,
            inflight=100,
            rate=400,
        )
        await writer.until(lambda report: report.get("acked", 0) >= 300, 60)
        rss_before = rss_kb(served.process.pid)
        await _switch_wal(data_dir)
        log_before = len(served.log())
        filler = small_fs / "filler"
        _fill(filler)
        full_since = time.monotonic()

        # A writer learns of it quickly, by the close Pravega's store answers a failed append with.
        failing_number, failing, closed_after_s, filled = await _append_until_refused(raw, raw_writer, 6)
        acknowledged += filled
        await raw.close()

        # A controller write says why, and the client may retry it.
        started = time.monotonic()
        with pytest.raises(GRPCError) as refused:
            await stub.createStream(_tagged_stream("tagged"), timeout=CONTROLLER_ERROR_WITHIN_S)
        controller_error_s = time.monotonic() - started
        assert refused.value.status is Status.UNAVAILABLE, refused.value
        assert "out of disk space" in (refused.value.message or ""), (refused.value, served.log()[-4000:])

        # Reads answer as before while the real client's writer retries.
        latencies: list[float] = []
        async with aiohttp.ClientSession() as http:
            while time.monotonic() - full_since < FULL_FOR_S:
                latencies.append(await _probe_reads(stub, http, served, reader))
                await asyncio.sleep(0.05)
        full_for_s = time.monotonic() - full_since
        rss_during = rss_kb(served.process.pid)
        during = served.log()[log_before:]
        assert served.process.returncode is None, served.log()[-4000:]
        assert writer.process.returncode is None

        filler.unlink()
        # Not half-written: the refused event is absent, and the client's resend of it is stored,
        # then deduplicated when sent again (by its event number).
        for resend in range(2):
            raw = await _raw_writer_as(address, raw_writer, expect_last=failing_number - 1 + resend)
            reply = await raw.append(raw_writer, failing, failing_number)
            assert isinstance(reply, wc.DataAppended), reply
            await raw.close()
        acknowledged += failing
        assert (await reader.info(RAW_SEGMENT)).write_offset == len(acknowledged)
        stored = b""
        while len(stored) < len(acknowledged):
            read = await reader.read(RAW_SEGMENT, len(stored))
            assert isinstance(read, wc.SegmentRead) and read.data, read
            stored += read.data
        assert stored == acknowledged

        # The real client's writer finishes on its own once space is back, and the controller
        # writes again.
        result = await writer.result(90)
        assert result["written"] == EVENTS
        assert (await stub.createStream(_tagged_stream("tagged"))).status == pb.CreateStreamStatus.SUCCESS
        assert (await stub.sealStream(pb.StreamInfo(scope=SCOPE, stream="s"))).status == (
            pb.UpdateStreamStatus.SUCCESS
        )
        out = work / "events.json"
        read_all = await ClientProcess.start(
            "read", work, uri=served.grpc_uri, scope=SCOPE, stream="s", group="g", out=str(out), deadline_s=60
        )
        assert (await read_all.result(90))["ended"]
        check_exactly_once_in_key_order(read_events(out), "e", EVENTS, KEYS)
        await reader.close()
    finally:
        if writer is not None:
            await writer.kill()
        channel.close()
        (small_fs / "filler").unlink(missing_ok=True)
        code = await served.stop()
    log = served.log()
    assert code == 0, log[-4000:]

    print(
        f"writer's close {closed_after_s:.2f} s, controller's UNAVAILABLE {controller_error_s:.2f} s, "
        f"probe p99 {p99(latencies):.3f} s over {len(latencies)} rounds, RSS {rss_before} -> "
        f"{rss_during} KiB, {len(during.splitlines())} log lines ({len(during)} bytes) in "
        f"{full_for_s:.1f} s full"
    )
    assert closed_after_s <= WRITER_ERROR_WITHIN_S
    assert controller_error_s <= CONTROLLER_ERROR_WITHIN_S
    assert p99(latencies) <= PROBE_P99_BOUND_S, latencies
    assert rss_during - rss_before <= RSS_BOUND_KB
    # One line per interval, not a traceback per append; the writer retries at a pace.
    assert "Traceback" not in during, during[-6000:]
    failures = [line for line in during.splitlines() if "segment store request failed" in line]
    assert 1 <= len(failures) <= STORAGE_FAILURE_LINES_BOUND, failures
    assert "out of disk space" in failures[0] and "No space left on device" in failures[0], failures[0]
    get_uri = sum("getURI" in line for line in during.splitlines())
    assert get_uri <= GET_URI_PER_S_BOUND * full_for_s, f"{get_uri} getURI calls in {full_for_s:.1f} s"


async def _raw_writer_as(address: tuple[str, int], writer_id: int, expect_last: int) -> Client:
    """`writer_id` set up again on a new connection, as a client reconnecting does, once the store
    serves the segment again (it closes, or answers WrongHost, until it has heartbeaten and read
    the container map after the database came back)."""
    deadline = time.monotonic() + 30
    while True:
        client = await Client.connect(address)
        try:
            reply = await client.call(wc.SetupAppend(rid(), writer_id, RAW_SEGMENT, ""))
        except (ConnectionError, asyncio.IncompleteReadError):
            reply = None
        if isinstance(reply, wc.AppendSetup):
            last = reply.last_event_number
            assert last == expect_last, (
                f"the store holds event {last} of the writer, {expect_last} acknowledged"
            )
            return client
        await client.close()
        assert reply is None or isinstance(reply, wc.WrongHost), reply
        assert time.monotonic() < deadline, "the store never served the segment again"
        await asyncio.sleep(0.2)


# The keeper's restarts while the disk stays full: more than its 5 counted attempts would take
# (0.5 + 1 + 2 + 4 s of backoff), so a keeper that counted them would have ended serve.
WAL_FULL_FOR_S = 20.0
BACK_AFTER_FREED_WITHIN_S = 30.0


async def _until_postmaster_dies(data_dir: pathlib.Path, timeout_s: float) -> None:
    """Makes PostgreSQL need a new WAL segment on a full disk, which it cannot create: it PANICs."""
    embedded = EmbeddedPostgres(data_dir)
    deadline = time.monotonic() + timeout_s
    while embedded.server_pid() is not None:
        assert time.monotonic() < deadline, "PostgreSQL kept running with its disk full"
        with contextlib.suppress(OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
            admin = await asyncpg.connect(embedded.admin_url(), timeout=5)
            try:
                await admin.execute("SELECT pg_switch_wal()")
                await admin.execute("CREATE TABLE IF NOT EXISTS wal_filler (x text)")
                await admin.execute(
                    "INSERT INTO wal_filler SELECT repeat('x', 100) FROM generate_series(1, 1000)"
                )
            finally:
                await admin.close()
        await asyncio.sleep(0.1)


async def test_a_full_disk_that_stops_postgresql_is_waited_out_and_writes_resume(
    small_fs: pathlib.Path,
) -> None:
    """The WAL cannot grow: PostgreSQL PANICs and cannot start again while the disk is full. serve
    stays up (liveness true, readiness false) and keeps trying, without counting those tries
    against its restart attempts; once space is freed the database is back and writes resume,
    with every acknowledged byte still there."""
    data_dir = small_fs / "data"
    served = await start_served(small_fs.parent, "--data-dir", str(data_dir))
    filler = small_fs / "filler"
    try:
        assert served.segment_store_port is not None
        address = ("127.0.0.1", served.segment_store_port)
        channel = Channel("127.0.0.1", served.grpc_port)
        stub = ControllerServiceStub(channel)
        try:
            await stub.createScope(pb.ScopeInfo(scope=SCOPE))
            await _create_stream(stub, "raw", 1)
        finally:
            channel.close()
        raw, raw_writer = await _raw_writer(address)
        acknowledged = b""
        for number in range(1, 4):
            data = event(f"raw {number}|".encode() + os.urandom(EVENT_BYTES))
            assert isinstance(await raw.append(raw_writer, data, number), wc.DataAppended)
            acknowledged += data
        await raw.close()

        _fill(filler)
        await _until_postmaster_dies(data_dir, timeout_s=30)
        full_since = time.monotonic()
        async with aiohttp.ClientSession() as http:
            while time.monotonic() - full_since < WAL_FULL_FOR_S:
                assert served.process.returncode is None, served.log()[-4000:]
                async with http.get(f"{served.rest_base}/v1/health/liveness?strict=true") as response:
                    assert response.status == 200, await response.text()
                async with http.get(f"{served.rest_base}/v1/health/readiness") as response:
                    assert await response.json() is False
                await asyncio.sleep(0.5)
            log = served.log()
            assert "its disk is full" in log, log[-4000:]
            assert "restart 1 of" not in log, log[-4000:]

            filler.unlink()
            freed_at = time.monotonic()
            while True:
                async with http.get(f"{served.rest_base}/v1/health/readiness") as response:
                    if await response.json() is True:
                        break
                assert time.monotonic() - freed_at < BACK_AFTER_FREED_WITHIN_S, served.log()[-4000:]
                await asyncio.sleep(0.2)

        raw = await _raw_writer_as(address, raw_writer, expect_last=3)
        data = event(b"raw 4|" + os.urandom(EVENT_BYTES))
        assert isinstance(await raw.append(raw_writer, data, 4), wc.DataAppended)
        acknowledged += data
        stored = b""
        while len(stored) < len(acknowledged):
            read = await raw.read(RAW_SEGMENT, len(stored))
            assert isinstance(read, wc.SegmentRead) and read.data, read
            stored += read.data
        assert stored == acknowledged
        await raw.close()
    finally:
        filler.unlink(missing_ok=True)
        code = await served.stop()
    assert code == 0, served.log()[-4000:]
