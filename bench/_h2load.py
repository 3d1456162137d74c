"""h2load as the gRPC load generator of the benches: one connection, a fixed number of requests
in flight, and a run counted only when every answer carried a message (h2load counts any HTTP
200 as success, and a gRPC error is an HTTP 200 with trailers only).

Pacing: one h2load paces its connections with one timer phase, so `-c 32 --rps r` sends 32 calls
in the same millisecond every 1/r s, a burst, not a rate. `run_h2load_spread` runs one h2load per
connection, started one after another, so the connections' phases spread as independent clients'
do."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass
class H2Run:
    requests: int
    rate: float
    mean_ms: float
    data_bytes: int


def grpc_body(payload: bytes) -> bytes:
    """One gRPC message: uncompressed flag, 4-byte length, the protobuf."""
    return b"\x00" + len(payload).to_bytes(4, "big") + payload


async def run_h2load(
    url: str,
    body: Path,
    requests: int,
    in_flight: int,
    min_answer_bytes: int,
    metadata: Mapping[str, str] | None = None,
    *,
    connections: int = 1,
    rps: float | None = None,
    log_file: Path | None = None,
) -> H2Run:
    """`requests` calls of `url` with the gRPC message in `body`; every answer must carry at
    least `min_answer_bytes` of DATA, or the run is an error. `connections` each carry
    `in_flight` calls at once (several reach several processes sharing a port); `rps` paces each
    connection; `log_file` gets one line per call (read back by `latencies_ms`)."""
    headers = ["-H", "content-type: application/grpc", "-H", "te: trailers"]
    for key, value in (metadata or {}).items():
        headers += ["-H", f"{key}: {value}"]
    extra = [] if rps is None else ["--rps", f"{rps:.3f}"]
    if log_file is not None:
        extra += ["--log-file", str(log_file)]
    process = await asyncio.create_subprocess_exec(
        "h2load", "-n", str(requests), "-c", str(connections), "-t", "1", "-m", str(in_flight),
        *extra, "-d", str(body), *headers, url,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out = (await process.communicate())[0].decode()
    done = re.search(r"requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded", out)
    rate = re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", out)
    mean = re.search(r"time for request:\s+\S+\s+\S+\s+(\S+)", out)
    data = re.search(r"traffic: .*\((\d+)\) data", out)
    if process.returncode != 0 or not (done and rate and mean and data):
        raise RuntimeError(f"h2load failed ({process.returncode}):\n{out}")
    if int(done.group(2)) != requests or int(data.group(1)) < requests * min_answer_bytes:
        raise RuntimeError(f"h2load: not every request was answered with a message:\n{out}")
    return H2Run(requests, float(rate.group(1)), _ms(mean.group(1)), int(data.group(1)))


async def run_h2load_spread(
    url: str,
    body: Path,
    rate: float,
    seconds: float,
    connections: int,
    min_answer_bytes: int,
    log_dir: Path,
    metadata: Mapping[str, str] | None = None,
) -> list[Path]:
    """`rate` calls/s for `seconds` over `connections` connections with one call in flight each, as
    `connections` h2load processes of one connection each. Their starts are 1/`rate` apart, so
    their timers (period `connections`/`rate`) do not fire together. Returns the per-call logs."""
    per_connection = int(rate * seconds / connections)
    logs = [log_dir / f"spread-{i}.log" for i in range(connections)]
    runs = []
    started = time.monotonic()
    for i, log in enumerate(logs):
        log.unlink(missing_ok=True)
        runs.append(
            asyncio.create_task(
                run_h2load(
                    url,
                    body,
                    per_connection,
                    1,
                    min_answer_bytes,
                    metadata,
                    rps=rate / connections,
                    log_file=log,
                )
            )
        )
        # Spawning takes about as long as the stagger, so the phases end up spread, not exact.
        await asyncio.sleep(max(0.0, started + (i + 1) / rate - time.monotonic()))
    await asyncio.gather(*runs)
    return logs


def latencies_ms(log_file: Path) -> list[float]:
    """Each call's duration from an h2load --log-file (start us, status, duration us per line)."""
    lines = log_file.read_text().splitlines()
    return [int(line.split("\t")[2]) / 1000 for line in lines if line.strip()]


def _ms(text: str) -> float:
    for unit, factor in (("us", 0.001), ("ms", 1.0), ("s", 1000.0)):
        if text.endswith(unit):
            return float(text[: -len(unit)]) * factor
    raise ValueError(text)
