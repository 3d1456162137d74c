"""Issue 35: backups and point-in-time recovery, the procedure of docs/ha.md run for real.

A PostgreSQL 15 of the test's own with WAL archiving on (`archive_command` copying each segment
into a directory), `serve` on it, and the real Python client writing. A base backup is taken with
`pg_basebackup` while a paced writer writes; the writer goes on, and a recovery target time is
read from the database right after a progress report; more is written after it, and a
transaction open at the target is committed after it. The backup is then restored into a new
cluster up to the target (`restore_command`, `recovery_target_time`, promote), and a new `serve`
starts on it: every event acknowledged before the target is read back exactly once and in key
order (both streams sealed and read to their ends, so the store holds every segment the metadata
names, to its length), and the transaction open at the target does not stay open: its lease ran
out before the restore, and the controller aborts it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from app.api.grpc.proto import controller_pb2 as pb
from app.store.migrate import upgrade_to_head
from tests.support.dataplane import (
    ClientProcess,
    Controller,
    check_exactly_once_in_key_order,
    read_events,
    start_with_segment_store,
    wait_txn_state,
)
from tests.support.plain_pg import Cluster, cluster_root, copied_cluster, new_cluster, own

pytestmark = [pytest.mark.interop, pytest.mark.timeout(420)]

SCOPE, STREAM, TXN_STREAM, KEYS, PREFIX = "pitr", "events", "txns", 4, "p"
RATE, COUNT = 200, 3000
# Acknowledged before the base backup starts, then before the target.
BEFORE_BACKUP, BEFORE_TARGET = 400, 1400
# The Python client's transaction lease is 90 s (the Rust client's default): the transaction open
# at the target expires at most that long after its last ping before it.
TXN_ABORTED_WITHIN_S = 150.0


@pytest.fixture
def root() -> Iterator[Path]:
    with cluster_root("pgcontroller-pitr-") as path:
        (path / "archive").mkdir()
        own(path / "archive")
        yield path


def _primary(root: Path) -> Cluster:
    archive = root / "archive"
    return new_cluster(
        root,
        "primary",
        [
            "wal_level = replica",
            "archive_mode = on",
            # Never overwrite a segment already archived (the documented, safe command).
            f"archive_command = 'test ! -f {archive}/%f && cp %p {archive}/%f'",
        ],
    )


def _restore(root: Path, backup: Path, target: str) -> Cluster:
    """The base backup, recovered from the archive up to `target`, promoted, on a new port."""
    cluster = copied_cluster(
        root,
        "restored",
        backup,
        [
            "archive_mode = off",
            f"restore_command = 'cp {root / 'archive'}/%f %p'",
            f"recovery_target_time = '{target}'",
            "recovery_target_action = 'promote'",
        ],
    )
    (cluster.data / "recovery.signal").touch()
    own(cluster.data)
    cluster.start()
    return cluster


async def _until_promoted(url: str) -> None:
    for _ in range(600):
        conn = await asyncpg.connect(url)
        try:
            if not await conn.fetchval("SELECT pg_is_in_recovery()"):
                return
        finally:
            await conn.close()
        await asyncio.sleep(0.1)
    raise AssertionError("the restored cluster never left recovery")


async def _read_to_end(
    controller: Controller, uri: str, work: Path, info: pb.StreamInfo
) -> list[tuple[int, str]]:
    await controller.seal(info)
    out = work / f"read-{info.stream}.json"
    reader = await ClientProcess.start(
        "read", work, uri=uri, scope=SCOPE, stream=info.stream, group=f"check-{info.stream}",
        out=str(out), deadline_s=120, until_end=True,
    )  # fmt: skip
    result = await reader.result(timeout_s=150)
    assert result["ended"], f"{info.stream} was not read to its end: {result}"
    return read_events(out)


async def test_a_backup_restored_to_a_point_in_time_holds_everything_acknowledged_before_it(
    root: Path, tmp_path: Path
) -> None:
    primary = _primary(root)
    await asyncio.to_thread(upgrade_to_head, primary.url)
    before = tmp_path / "before"
    before.mkdir()
    served = await start_with_segment_store(before, "--db-url", primary.url)
    clients: list[ClientProcess] = []
    # Closed whatever happens: a channel left open is reported by whichever test collects it.
    controller = Controller(served)
    try:
        await controller.create_stream(SCOPE, STREAM, 2)
        await controller.create_stream(SCOPE, TXN_STREAM, 1)
        uri = f"tcp://127.0.0.1:{served.grpc_port}"
        writer = await ClientProcess.start(
            "write", tmp_path, uri=uri, scope=SCOPE, stream=STREAM, count=COUNT, keys=KEYS, prefix=PREFIX,
            rate=RATE, progress_every=100,
        )  # fmt: skip
        clients.append(writer)
        await writer.until(lambda r: r["acked"] >= BEFORE_BACKUP, timeout_s=60)
        # The base backup, taken while the writer writes (the WAL comes from the archive).
        backup = root / "base"
        await asyncio.to_thread(primary.basebackup, backup, "-X", "none")
        held = await ClientProcess.start(
            "txn-held", tmp_path, uri=uri, scope=SCOPE, stream=TXN_STREAM, size=20, before=10,
            go=str(tmp_path / "go"), deadline_s=120,
        )  # fmt: skip
        clients.append(held)
        txn_id = int((await held.until(lambda r: "txn" in r, timeout_s=60))["txn"])
        report = await writer.until(lambda r: r["acked"] >= BEFORE_TARGET, timeout_s=60)
        admin = await asyncpg.connect(primary.url)
        try:
            # Everything acknowledged in `report` committed before this instant.
            target = str(await admin.fetchval("SELECT clock_timestamp()"))
            acked_before_target = report["acked"]
            # Written after the target: the transaction's commit, and the rest of the events.
            (tmp_path / "go").touch()
            assert "committed" in await held.result(timeout_s=60)
            assert (await writer.result(timeout_s=120))["written"] == COUNT
            # The last WAL segment goes to the archive too.
            closed = await admin.fetchval("SELECT pg_walfile_name(pg_switch_wal())")
            await _until_archived(admin, closed)
        finally:
            await admin.close()
    finally:
        controller.close()
        for client in clients:
            await client.kill()
        await served.stop()
    primary.stop()

    restored = _restore(root, backup, target)
    await _until_promoted(restored.url)
    after = tmp_path / "after"
    after.mkdir()
    served = await start_with_segment_store(after, "--db-url", restored.url)
    controller = Controller(served)
    try:
        uri = f"tcp://127.0.0.1:{served.grpc_port}"
        info = pb.StreamInfo(scope=SCOPE, stream=STREAM)
        txn_info = pb.StreamInfo(scope=SCOPE, stream=TXN_STREAM)
        # Open at the target: once its lease runs out, the restored controller aborts it.
        await wait_txn_state(controller, txn_info, txn_id, pb.TxnState.ABORTED, TXN_ABORTED_WITHIN_S)
        events = await _read_to_end(controller, uri, after, info)
        # Everything acknowledged before the target, exactly once and in key order; of what
        # came after it, at most what committed before it (a prefix per key, no gaps, no repeats).
        names = {name for _, name in events}
        restored_count = len(events)
        assert acked_before_target <= restored_count <= COUNT, (acked_before_target, restored_count)
        check_exactly_once_in_key_order(events, PREFIX, restored_count, KEYS)
        assert all(f"{PREFIX}{i % KEYS:03d}:{i // KEYS:08d}" in names for i in range(acked_before_target))
        # The plain events written before the transaction are there; none of the transaction's.
        txn_events = [name for _, name in await _read_to_end(controller, uri, after, txn_info)]
        assert sorted(txn_events) == [f"n:{i:04d}" for i in range(10)], txn_events
        print(f"pitr: {acked_before_target} events acknowledged before the target, {restored_count} restored")
    finally:
        controller.close()
        await served.stop()
        restored.stop()


async def _until_archived(admin: asyncpg.Connection, closed: str) -> None:
    """Until `closed`, the segment pg_switch_wal() closed, is in the archive (the archiver goes
    in order, so every segment before it is too). Named from the switch's own answer: the name of
    the current position right after a switch is that same segment when no WAL has followed it
    (pg_walfile_name names the file before a position on a file boundary), so a name read then
    could not say which segment to wait for."""
    for _ in range(300):
        archived = await admin.fetchval("SELECT last_archived_wal FROM pg_stat_archiver")
        # A later segment, or this one itself (not the backup label archived with its name).
        if archived == closed or (archived is not None and archived[:24] > closed):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"WAL segment {closed} was not archived")
