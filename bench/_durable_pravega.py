"""Pravega 0.13 with a durable log, for bench/beside_pravega.py's `--pravega durable`: the
standalone's controller and segment store in one JVM (bench/java/DurablePravega.java) with the
segment store's log in a local BookKeeper bookie whose journal is fsynced on this machine's disk,
and its long-term storage on the file system. Pravega standalone keeps both in memory, so its
acknowledgement is not durable where serve's is; this one's is, as a production Pravega's is.

The bookie's ensemble and quorums are 1 (one disk, as serve's one PostgreSQL); its journal
directory is the JVM's temporary directory, under the bench's work directory on the same disk as
serve's PostgreSQL."""

from __future__ import annotations

from pathlib import Path

from app.testing.ports import free_port
from tests.conformance.maven import ORACLE, classpath
from tests.conformance.pravega_standalone import Standalone, await_ready, on_free_ports, spawn

LAUNCHER = Path(__file__).resolve().parent / "java" / "DurablePravega.java"
EXTRAS = Path(__file__).resolve().parent / "java" / "durable"
# The bookie formats its metadata and the segment store opens a ledger per container: a minute
# and more beside other work on two cores.
READY_TIMEOUT_S = 240.0


def start_durable(work_dir: Path, flush_when_queue_empty: bool) -> Standalone:
    """A ready durable Pravega under `work_dir`, on free ports (fresh ones when one was taken
    between choosing and binding it)."""
    return on_free_ports(lambda attempt: _start_once(work_dir / f"attempt-{attempt}", flush_when_queue_empty))


def _start_once(work_dir: Path, flush_when_queue_empty: bool) -> Standalone:
    work_dir.mkdir(parents=True, exist_ok=True)
    zk, bookie, controller, segment_store, rest = (free_port() for _ in range(5))
    cp = f"{classpath(EXTRAS.resolve(), package=False)}:{classpath(ORACLE, package=True)}"
    command = [
        "java",
        "-Xmx3g",
        "-XX:+UseSerialGC",
        f"-Djava.io.tmpdir={work_dir}",
        f"-Dlogback.configurationFile={ORACLE / 'logback.xml'}",
        # The segment store's BookKeeper client: the in-JVM ZooKeeper, ledgers where
        # LocalBookKeeper formats them, one bookie.
        f"-Dbookkeeper.zkAddress=localhost:{zk}",
        "-Dbookkeeper.bkLedgerPath=/ledgers",
        "-Dbookkeeper.bkEnsembleSize=1",
        "-Dbookkeeper.bkWriteQuorumSize=1",
        "-Dbookkeeper.bkAckQuorumSize=1",
        f"-Dfilesystem.root={work_dir / 'long-term'}",
        "-cp",
        cp,
        str(LAUNCHER),
        *(str(port) for port in (zk, bookie, controller, segment_store, rest)),
        "true" if flush_when_queue_empty else "false",
    ]
    log_path = work_dir / "durable-pravega.log"
    server = Standalone(spawn(command, work_dir, log_path), controller, rest, segment_store, log_path)
    await_ready(server, "durable Pravega", READY_TIMEOUT_S)
    return server
