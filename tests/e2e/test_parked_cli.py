"""`pgcontroller request parked list|retry|drop` against a served controller: a truncation the
segment store refuses (issue 16, defect 2) is parked, listed with its error, retried and dropped;
an unreachable controller is one clear line and exit code 1."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys

from grpclib.client import Channel

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.testing.served import ServedProcess
from tests.api.test_grpc_streams import config

S = pb.StreamInfo(scope="sc", stream="s")


async def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "app.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


async def parked(served: ServedProcess) -> list[dict[str, object]]:
    done = await cli("request", "--rest-url", served.rest_base, "parked", "list", "--json")
    assert done.returncode == 0, done.stderr
    rows: list[dict[str, object]] = json.loads(done.stdout)["requests"]
    return rows


async def test_defect_2_parked_truncation_is_listed_retried_and_dropped_with_the_cli(
    served: ServedProcess,
) -> None:
    channel = Channel("127.0.0.1", served.grpc_port)
    try:
        stub = ControllerServiceStub(channel)
        assert (await stub.createScope(pb.ScopeInfo(scope="sc"))).status == pb.CreateScopeStatus.SUCCESS
        assert (await stub.createStream(config("sc", "s", 1))).status == pb.CreateStreamStatus.SUCCESS
        truncated = await stub.truncateStream(pb.StreamCut(streamInfo=S, cut={0: 100}))
        assert truncated.status == pb.UpdateStreamStatus.FAILURE

        listed = await cli("request", "--rest-url", served.rest_base, "parked", "list")
        assert listed.returncode == 0, listed.stderr
        [line] = listed.stdout.splitlines()
        request_id, kind, key, _when, error = line.split("\t")
        assert (kind, key) == ("truncate_stream", "sc/s")
        assert error.startswith("InvalidInput: cannot truncate") and "its length is 0" in error
        assert "1 parked request(s)" in listed.stderr

        # Retried: its truncation was rolled back, so the run finds nothing to do and it is gone.
        retried = await cli("request", "--rest-url", served.rest_base, "parked", "retry", request_id)
        assert retried.returncode == 0, retried.stderr
        assert f"request {request_id} is queued again" in retried.stderr
        assert await parked(served) == []

        # Parked again by a new truncation; dropped; a second drop is refused with the REST answer.
        truncated = await stub.truncateStream(pb.StreamCut(streamInfo=S, cut={0: 100}))
        assert truncated.status == pb.UpdateStreamStatus.FAILURE
        [row] = await parked(served)
        dropped = await cli("request", "--rest-url", served.rest_base, "parked", "drop", str(row["id"]))
        assert dropped.returncode == 0, dropped.stderr
        assert await parked(served) == []
        again = await cli("request", "--rest-url", served.rest_base, "parked", "drop", str(row["id"]))
        assert again.returncode == 1
        assert f"answered 404: no parked request {row['id']}" in again.stderr
        # The stream goes on: it can be sealed.
        assert (await stub.sealStream(S)).status == pb.UpdateStreamStatus.SUCCESS
    finally:
        channel.close()


async def test_an_unreachable_controller_is_one_clear_line() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound and not listening: connections are refused
        done = await cli("request", "--rest-url", f"http://127.0.0.1:{port}", "parked", "list")
    assert done.returncode == 1
    assert done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith(f"pgcontroller: cannot reach the controller's REST API at http://127.0.0.1:{port}")
    assert "Traceback" not in done.stderr
