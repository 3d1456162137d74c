"""Test-side helpers for the data plane end to end: a `serve` with its embedded segment store,
the real client's roles (tests/support/pravega_worker.py) as bounded processes, and the checks
on what the readers saw.

Every wait has a deadline that fails the test with what the client printed, because the client
itself retries forever and would otherwise hang the session.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from grpclib.client import Channel

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.testing.scale import scale_request
from app.testing.served import ServedProcess, start_served

REPO_ROOT = Path(__file__).resolve().parents[2]


async def start_with_segment_store(
    work_dir: Path, *args: str, env: dict[str, str] | None = None
) -> ServedProcess:
    """`serve` with its embedded segment store on a free port; the bound port comes from the
    ready file's `segment_store_port`, like the gRPC and REST ports."""
    served = await start_served(work_dir, "--segment-store-port", "0", *args, env=env)
    assert served.segment_store_port, f"the ready file names no segment-store port:\n{served.log()}"
    return served


async def restart_on_same_ports(
    work_dir: Path, before: ServedProcess, *args: str, env: dict[str, str] | None = None
) -> ServedProcess:
    """A new `serve` on the ports of `before`: the client keeps the controller URI and the
    segment-store address it was given and reconnects to them."""
    assert before.segment_store_port is not None
    return await start_served(
        work_dir,
        "--grpc-port",
        str(before.grpc_port),
        "--rest-port",
        str(before.rest_port),
        "--segment-store-port",
        str(before.segment_store_port),
        *args,
        env=env,
    )


async def sigkill(served: ServedProcess) -> None:
    served.process.send_signal(signal.SIGKILL)
    assert await asyncio.wait_for(served.process.wait(), 10) == -signal.SIGKILL


class ClientProcess:
    """One worker role in its own interpreter; stdout is read line by line for its reports."""

    def __init__(self, process: asyncio.subprocess.Process, role: str, stderr_path: Path) -> None:
        self.process = process
        self.role = role
        self.stderr_path = stderr_path
        self.last: dict[str, Any] = {}

    @classmethod
    async def start(
        cls, role: str, work_dir: Path, *, rust_log: str | None = None, **args: Any
    ) -> ClientProcess:
        """`rust_log`: the client's own log at that level (RUST_LOG), to a `.client.log` file
        beside the role's stderr."""
        stderr_path = work_dir / f"client-{role}-{time.monotonic_ns()}.err"
        env = None
        if rust_log is not None:
            env = {**os.environ, "RUST_LOG": rust_log}
            args["client_log"] = str(stderr_path.with_suffix(".client.log"))
        with open(stderr_path, "wb") as stderr:  # noqa: ASYNC230 - a local file handed to the child
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "tests.support.pravega_worker",
                role,
                json.dumps(args),
                cwd=REPO_ROOT,
                stdout=asyncio.subprocess.PIPE,
                stderr=stderr,
                env=env,
            )
        return cls(process, role, stderr_path)

    def _failure(self, why: str) -> AssertionError:
        tail = self.stderr_path.read_text(encoding="utf-8", errors="replace")[-3000:]
        log = ""
        for suffix in (".out", ".client.log"):
            logged = self.stderr_path.with_suffix(suffix)
            if logged.exists():
                log += logged.read_text(encoding="utf-8", errors="replace")[-3000:]
        return AssertionError(f"client {self.role}: {why}; last report {self.last}\n{tail}\n{log}")

    async def _next_report(self, deadline: float) -> tuple[str, dict[str, Any]]:
        assert self.process.stdout is not None
        while True:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                await self.kill()
                raise self._failure("deadline passed")
            try:
                line = await asyncio.wait_for(self.process.stdout.readline(), left)
            except TimeoutError:
                continue
            if not line:
                await self.process.wait()
                raise self._failure(f"exited with {self.process.returncode} before its result")
            kind, _, body = line.decode(errors="replace").strip().partition(" ")
            if kind in ("PROGRESS", "RESULT"):
                self.last = json.loads(body)
                return kind, self.last
            # The client's own log (RUST_LOG=info or debug turns it on) goes to stdout too.
            with open(self.stderr_path.with_suffix(".out"), "ab") as log:  # noqa: ASYNC230 - diagnostics
                log.write(line)

    async def until(self, ready: Callable[[dict[str, Any]], bool], timeout_s: float) -> dict[str, Any]:
        """Waits for a progress report that satisfies `ready`."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while True:
            kind, report = await self._next_report(deadline)
            if kind == "RESULT":
                raise self._failure(f"finished before the awaited progress: {report}")
            if ready(report):
                return report

    async def result(self, timeout_s: float) -> dict[str, Any]:
        deadline = asyncio.get_running_loop().time() + timeout_s
        while True:
            kind, report = await self._next_report(deadline)
            if kind == "RESULT":
                await asyncio.wait_for(self.process.wait(), 10)
                return report

    async def kill(self) -> None:
        if self.process.returncode is None:
            self.process.kill()
            await self.process.wait()


class Controller:
    """gRPC calls the tests make around the client: streams, manual scales, seals."""

    def __init__(self, served: ServedProcess) -> None:
        self.channel = Channel("127.0.0.1", served.grpc_port)
        self.stub = ControllerServiceStub(self.channel)

    def close(self) -> None:
        self.channel.close()

    async def create_stream(self, scope: str, stream: str, segments: int) -> pb.StreamInfo:
        await self.stub.createScope(pb.ScopeInfo(scope=scope))
        info = pb.StreamInfo(scope=scope, stream=stream)
        status = await self.stub.createStream(
            pb.StreamConfig(streamInfo=info, scalingPolicy=pb.ScalingPolicy(minNumSegments=segments))
        )
        assert status.status == pb.CreateStreamStatus.SUCCESS, status
        return info

    async def current(self, info: pb.StreamInfo) -> list[tuple[int, float, float]]:
        ranges = (await self.stub.getCurrentSegments(info)).segmentRanges
        return [(r.segmentId.segmentId, r.minKey, r.maxKey) for r in ranges]

    async def scale(
        self, info: pb.StreamInfo, sealed: list[int], ranges: list[tuple[float, float]], timeout_s: float = 30
    ) -> list[tuple[int, float, float]]:
        """Starts a manual scale and waits until checkScale says it is done (the stream takes
        the next scale only then); returns the current segments."""
        started = await self.stub.scale(scale_request(info, sealed, ranges))
        assert started.status == pb.ScaleResponse.STARTED, started
        check = pb.ScaleStatusRequest(streamInfo=info, epoch=started.epoch)
        deadline = time.monotonic() + timeout_s
        while (status := (await self.stub.checkScale(check)).status) != pb.ScaleStatusResponse.SUCCESS:
            assert status == pb.ScaleStatusResponse.IN_PROGRESS, f"checkScale answered {status}"
            assert time.monotonic() < deadline, "the scale never completed"
            await asyncio.sleep(0.05)
        current = await self.current(info)
        assert not {s for s, _, _ in current} & set(sealed), current
        return current

    async def seal(self, info: pb.StreamInfo) -> None:
        assert (await self.stub.sealStream(info)).status == pb.UpdateStreamStatus.SUCCESS


def read_events(path: Path) -> list[tuple[int, str]]:
    return [(int(reader), name) for reader, name in json.loads(path.read_text())]


def expected_names(prefix: str, count: int, keys: int) -> set[str]:
    return {f"{prefix}{i % keys:03d}:{i // keys:08d}" for i in range(count)}


def check_exactly_once_in_key_order(
    events: Iterable[tuple[int, str]], prefix: str, count: int, keys: int
) -> None:
    """The events read are exactly the `count` written (no loss, no duplicate), and for each
    routing key they arrived in the order written."""
    names = [name for _, name in events]
    duplicates = len(names) - len(set(names))
    assert duplicates == 0, f"{duplicates} events were read more than once"
    want = expected_names(prefix, count, keys)
    missing, extra = want - set(names), set(names) - want
    assert not missing and not extra, (
        f"{len(missing)} missing (e.g. {sorted(missing)[:5]}), extra {sorted(extra)[:5]}"
    )
    per_key: dict[str, list[int]] = defaultdict(list)
    for name in names:
        key, _, seq = name[len(prefix) :].partition(":")
        per_key[key].append(int(seq))
    out_of_order = [key for key, seqs in per_key.items() if seqs != sorted(seqs)]
    assert not out_of_order, f"keys read out of order: {out_of_order[:5]}"


def to_proto_id(txn_id: int) -> pb.TxnId:
    """The client's unsigned 128-bit transaction id as Pravega's two signed 64-bit halves."""
    assert 0 <= txn_id < 1 << 128

    def signed(half: int) -> int:
        return half - (1 << 64) if half >= 1 << 63 else half

    return pb.TxnId(highBits=signed(txn_id >> 64), lowBits=signed(txn_id & ((1 << 64) - 1)))


async def wait_txn_state(
    controller: Controller, info: pb.StreamInfo, txn_id: int, want: int, timeout_s: float = 30
) -> None:
    """commit()/abort() return before the store has merged/deleted: wait for the end state."""
    request = pb.TxnRequest(streamInfo=info, txnId=to_proto_id(txn_id))
    deadline = time.monotonic() + timeout_s
    while (state := (await controller.stub.checkTransactionState(request)).state) != want:
        assert time.monotonic() < deadline, f"transaction {txn_id} stayed in state {state}, wanted {want}"
        await asyncio.sleep(0.05)


async def read_back_exactly_once(
    uri: str, work: Path, scope: str, stream: str, count: int, prefix: str, keys: int
) -> None:
    """A new reader group reads `count` events of `stream`: exactly those written by a writer of
    `prefix` over `keys` keys, each once, in key order."""
    out = work / f"read-back-{stream}.json"
    reader = await ClientProcess.start(
        "read", work, uri=uri, scope=scope, stream=stream, group=f"read-back-{stream}", out=str(out),
        deadline_s=120, until_end=False, stop_after=count,
    )  # fmt: skip
    try:
        result = await reader.result(timeout_s=150)
    finally:
        await reader.kill()
    # Which events came twice or not at all says more than how many were read.
    check_exactly_once_in_key_order(read_events(out), prefix, count, keys)
    assert result["read"] == count, result
