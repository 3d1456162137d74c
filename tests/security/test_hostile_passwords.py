"""Password guessing against `serve --auth-enabled` (issue 32, item 5), over loopback against a
real `serve` process: a flood of wrong passwords from one address must not delay another client's
first login nor its later calls (the guesses past the limits are refused at once with
RESOURCE_EXHAUSTED, never queued), and a name without an account must be refused in the time a
wrong password takes, so the time does not tell which names exist.

The attacker and the legitimate client speak from different loopback addresses (127.0.0.2 and
127.0.0.1: Linux answers the whole 127/8 on `lo`), as they would from different hosts."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import statistics
import sys
import textwrap
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import pytest
from grpclib.client import Channel
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.security.passwords import hash_password
from app.store.accounts import PgAccountStore
from app.store.pool import create_pool
from app.testing.served import ServedProcess, start_served
from tests.support.hostile import BoundChannel, rss_kb

pytestmark = pytest.mark.timeout(120)

ATTACKER = "127.0.0.2"
GUESSES_IN_FLIGHT = 64
ATTACK_LIMIT_S = 30.0  # each attacker stops by itself after this, whatever happens
PAUSE_S = 0.05
REPO_ROOT = Path(__file__).resolve().parents[2]
STREAM = pb.StreamInfo(scope="guarded", stream="s")
PROBES = 40
# A first login during the attack may wait for the checks the attacker's address is allowed at
# once (two) besides its own: within 1 s of it on an idle machine, allowing for a loaded one.
FIRST_LOGIN_MARGIN_S = 1.0
PROBE_P99_LIMIT_S = 1.0
FULL_ACL = "prn::*,READ_UPDATE"


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")


@pytest.fixture
async def served(db_url: str, tmp_path: Path) -> AsyncIterator[ServedProcess]:
    pool = await create_pool(db_url, min_size=1, max_size=1)
    try:
        accounts = PgAccountStore(pool)
        for name in ("ops", "writer", "victim"):
            await accounts.add(name, hash_password(f"{name}-pw"), FULL_ACL, 1)
    finally:
        await pool.close()
    instance = await start_served(tmp_path, "--db-url", db_url, "--auth-enabled")
    try:
        yield instance
    finally:
        code = await instance.stop()
        assert code == 0, instance.log()[-3000:]


def _p99(latencies: list[float]) -> float:
    return sorted(latencies)[max(0, round(len(latencies) * 0.99) - 1)]


async def _probe(stub: ControllerServiceStub, authorization: str, count: int) -> list[float]:
    """`count` authenticated reads one after another, each timed."""
    latencies: list[float] = []
    metadata = {"authorization": authorization}
    for _ in range(count):
        start = time.perf_counter()
        await stub.getCurrentSegments(STREAM, metadata=metadata)
        latencies.append(time.perf_counter() - start)
    return latencies


# The attacker, a process of its own (so that its loop and the probe's do not share a CPU):
# GUESSES_IN_FLIGHT calls kept in flight from ATTACKER, each sent again PAUSE_S after its answer,
# until its standard input closes or its time is up; it prints "ready" after the first answer,
# then the latencies of each status as JSON. Mode "guess": a new wrong password for an existing
# account each time; mode "control": the same calls without credentials, refused at once with no
# password check (the request load alone: the probe's reference).
ATTACKER_SCRIPT = textwrap.dedent(
    """
    import asyncio, base64, json, sys, threading, time
    from grpclib.client import Channel
    from grpclib.exceptions import GRPCError
    from app.api.grpc.proto import controller_pb2 as pb
    from app.api.grpc.proto.controller_grpc import ControllerServiceStub

    port, local, mode, guessers, pause_s, limit_s = sys.argv[1:7]

    class BoundChannel(Channel):
        async def _create_connection(self):
            _, protocol = await self._loop.create_connection(
                self._protocol_factory, self._host, self._port, local_addr=(local, 0))
            return protocol

    async def main():
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        threading.Thread(
            target=lambda: (sys.stdin.read(), loop.call_soon_threadsafe(stop.set)), daemon=True
        ).start()
        channel = BoundChannel("127.0.0.1", int(port))
        stub = ControllerServiceStub(channel)
        latencies, counter = {}, [0]

        async def guesser():
            while True:
                counter[0] += 1
                token = base64.b64encode(f"victim:guess-{counter[0]}".encode()).decode()
                metadata = {"authorization": "Basic " + token} if mode == "guess" else None
                start = time.perf_counter()
                try:
                    await stub.checkScopeExists(pb.ScopeInfo(scope="guarded"), metadata=metadata)
                    status = "OK"
                except GRPCError as exc:
                    status = exc.status.name
                first = not latencies
                latencies.setdefault(status, []).append(time.perf_counter() - start)
                if first:
                    print("ready", flush=True)
                await asyncio.sleep(float(pause_s))

        tasks = [asyncio.create_task(guesser()) for _ in range(int(guessers))]
        try:
            await asyncio.wait_for(stop.wait(), float(limit_s))
        except asyncio.TimeoutError:
            pass
        for task in tasks:  # calls still waiting are abandoned, as an attacker would
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        channel.close()
        print(json.dumps(latencies), flush=True)

    asyncio.run(main())
    """
)


@asynccontextmanager
async def attacking(grpc_port: int, mode: str) -> AsyncIterator[dict[str, list[float]]]:
    """The attacker running for the block; after it, the latencies of its answers by status."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        ATTACKER_SCRIPT,
        *(str(grpc_port), ATTACKER, mode, str(GUESSES_IN_FLIGHT), str(PAUSE_S), str(ATTACK_LIMIT_S)),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        cwd=REPO_ROOT,
    )
    assert process.stdin is not None and process.stdout is not None
    results: dict[str, list[float]] = {}
    try:
        ready = await asyncio.wait_for(process.stdout.readline(), 30)
        assert ready == b"ready\n", ready
        yield results
    finally:
        process.stdin.close()
        output, _ = await asyncio.wait_for(process.communicate(), ATTACK_LIMIT_S + 30)
        assert process.returncode == 0, output
    results.update(json.loads(output))


def _ms(latencies: list[float]) -> str:
    if not latencies:
        return "-"
    return f"{statistics.median(latencies) * 1000:.1f}/{_p99(latencies) * 1000:.1f} ms"


async def test_a_guessing_flood_does_not_delay_another_clients_login_nor_its_calls(
    served: ServedProcess,
) -> None:
    channel = Channel("127.0.0.1", served.grpc_port)
    stub = ControllerServiceStub(channel)
    try:
        ops = {"authorization": basic("ops", "ops-pw")}
        started = time.perf_counter()
        await stub.createScope(pb.ScopeInfo(scope="guarded"), metadata=ops)
        # One first login's time on this machine now (one Argon2id check, slower under load).
        unattacked_login_s = time.perf_counter() - started
        config = pb.StreamConfig(
            streamInfo=pb.StreamInfo(scope="guarded", stream="s"),
            scalingPolicy=pb.ScalingPolicy(scaleType=pb.ScalingPolicy.FIXED_NUM_SEGMENTS, minNumSegments=1),
        )
        await stub.createStream(config, metadata=ops)
        rss_before_kb = rss_kb(served.process.pid)
        async with attacking(served.grpc_port, "control") as control:
            reference = await _probe(stub, ops["authorization"], PROBES)
        async with attacking(served.grpc_port, "guess") as guesses:
            writer = basic("writer", "writer-pw")
            login_limit_s = FIRST_LOGIN_MARGIN_S + 2 * unattacked_login_s
            started = time.perf_counter()
            with contextlib.suppress(TimeoutError):
                # Bounded, so that a login stuck behind the guesses fails the test with its figures.
                await asyncio.wait_for(
                    stub.getCurrentSegments(STREAM, metadata={"authorization": writer}), login_limit_s
                )
            first_login_s = time.perf_counter() - started
            during = await _probe(stub, writer, PROBES)
            rss_during_kb = rss_kb(served.process.pid)
    finally:
        channel.close()

    exhausted = guesses.get("RESOURCE_EXHAUSTED", [])
    checked = guesses.get("UNAUTHENTICATED", [])
    figures = (
        f"first login {first_login_s:.3f} s (unattacked {unattacked_login_s:.3f} s); probe p50/p99 "
        f"under the control flood {_ms(reference)}, under the guesses {_ms(during)}; guesses refused "
        f"as too many {len(exhausted)} (p50/p99 {_ms(exhausted)}), checked and refused {len(checked)} "
        f"(p50/p99 {_ms(checked)}); control {sorted((k, len(v)) for k, v in control.items())}; "
        f"RSS {rss_before_kb // 1024} -> {rss_during_kb // 1024} MB"
    )
    print(figures)  # the figures docs/security.md quotes (pytest -s)
    assert "OK" not in guesses, figures
    assert first_login_s < login_limit_s, figures
    assert _p99(during) < PROBE_P99_LIMIT_S, figures
    # Cached credentials never wait for a password check: under the guesses the probe keeps the
    # pace it has under as many calls that need none.
    assert statistics.median(during) < 2 * statistics.median(reference) + 0.020, figures
    # Past the limits, guesses are refused at once rather than queued behind the checks.
    assert len(exhausted) > len(checked), figures
    assert statistics.median(exhausted) < statistics.median(checked), figures
    assert (rss_during_kb - rss_before_kb) < 100 * 1024, figures


async def _refusal_time(grpc_port: int, source: str, authorization: str) -> float:
    """One refused call's time, on a connection already open (from its own address, so no
    per-address limit is what is timed)."""
    channel = BoundChannel("127.0.0.1", grpc_port, source)
    try:
        stub = ControllerServiceStub(channel)
        await stub.getControllerServerList(pb.ServerRequest())  # opens the connection
        start = time.perf_counter()
        with pytest.raises(GRPCError) as refused:
            await stub.checkScopeExists(pb.ScopeInfo(scope="any"), metadata={"authorization": authorization})
        elapsed = time.perf_counter() - start
        assert refused.value.status is Status.UNAUTHENTICATED, refused.value
        return elapsed
    finally:
        channel.close()


async def test_an_unknown_name_is_refused_in_the_time_a_wrong_password_takes(served: ServedProcess) -> None:
    unknown: list[float] = []
    wrong: list[float] = []
    for i in range(8):
        # Interleaved, so a change of load on the machine touches both alike.
        unknown.append(await _refusal_time(served.grpc_port, f"127.0.1.{i + 1}", basic(f"nobody{i}", "pw")))
        wrong.append(await _refusal_time(served.grpc_port, f"127.0.2.{i + 1}", basic("victim", f"no{i}")))
    ratio = statistics.median(unknown) / statistics.median(wrong)
    figures = (
        f"unknown name median {statistics.median(unknown) * 1000:.1f} ms, wrong password median "
        f"{statistics.median(wrong) * 1000:.1f} ms (ratio {ratio:.2f})"
    )
    print(figures)
    assert 0.5 <= ratio <= 2.0, figures


async def test_rest_refuses_guesses_past_the_limits_with_429_and_retry_after(served: ServedProcess) -> None:
    connector = aiohttp.TCPConnector(local_addr=(ATTACKER, 0), limit=0)
    async with aiohttp.ClientSession(served.rest_base, connector=connector) as http:

        async def guess(i: int) -> tuple[int, str | None]:
            headers = {"Authorization": basic("victim", f"rest-guess-{i}")}
            async with http.get("/v1/scopes", headers=headers) as response:
                return response.status, response.headers.get("Retry-After")

        answers = await asyncio.gather(*(guess(i) for i in range(16)))
    statuses = sorted(status for status, _ in answers)
    # One check runs and one waits for the address; the rest are refused at once.
    assert set(statuses) == {401, 429}, answers
    assert all(retry and int(retry) >= 1 for status, retry in answers if status == 429), answers
