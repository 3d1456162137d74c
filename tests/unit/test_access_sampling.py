"""Issue 32, item 8: the access log samples alike lines (same kind, method, path, status and client
host): the first of each window are written, the rest counted in one line when the window ends,
and every other line is untouched."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import pytest

from app.observability.access_sampling import ADMITTED_ATTR, AccessSampler, admit, sample_access_log
from app.observability.logs import ACCESS_FIELDS_ATTR, ACCESS_LOGGER

WINDOW_S = 0.2


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def collected() -> Iterator[_Collect]:
    logger = logging.getLogger(ACCESS_LOGGER)
    handler = _Collect()
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def _grpc(method: str, status: str, peer: str, n: int) -> None:
    fields = {"kind": "grpc", "method": method, "status": status, "duration_ms": 0.1, "peer": peer}
    logging.getLogger(ACCESS_LOGGER).info(
        "gRPC %s %s n=%d", method, status, n, extra={ACCESS_FIELDS_ATTR: fields}
    )


def _rest(path: str, status: int, remote: str, n: int) -> None:
    fields = {"kind": "rest", "method": "GET", "path": path, "status": status, "remote": remote}
    logging.getLogger(ACCESS_LOGGER).info("REST GET %s n=%d", path, n, extra={ACCESS_FIELDS_ATTR: fields})


async def test_alike_lines_past_the_window_share_are_counted_in_one_line(collected: _Collect) -> None:
    sampler = AccessSampler(per_window=5, window_s=WINDOW_S)
    logger = logging.getLogger(ACCESS_LOGGER)
    logger.addFilter(sampler)
    try:
        # Every connection of a retrying client has a port of its own: alike all the same.
        for n in range(200):
            _grpc("getURI", "OK", f"127.0.0.1:{40000 + n % 7}", n)
        _grpc("getURI", "UNAVAILABLE", "127.0.0.1:40000", 0)
        _grpc("getURI", "OK", "10.0.0.9:40000", 0)
        for n in range(12):
            _rest("/v1/scopes", 200, "127.0.0.1", n)
        _rest("/v1/scopes/a", 200, "127.0.0.1", 0)
        logging.getLogger("pgcontroller.other").info("not an access line")
        assert [m for m in collected.messages if "getURI OK" in m and "127.0.0.1" not in m] == [
            f"gRPC getURI OK n={n}" for n in range(5)
        ] + ["gRPC getURI OK n=0"]
        assert sum("UNAVAILABLE" in m for m in collected.messages) == 1
        assert [m for m in collected.messages if m.startswith("REST GET /v1/scopes ")] == [
            f"REST GET /v1/scopes n={n}" for n in range(5)
        ]
        assert "REST GET /v1/scopes/a n=0" in collected.messages
        await asyncio.sleep(WINDOW_S * 2)
        summaries = [m for m in collected.messages if "alike lines" in m]
        assert sorted(summaries) == sorted(
            [
                f"gRPC getURI OK from 127.0.0.1: 195 more alike lines in {WINDOW_S:.1f} s not written",
                f"REST GET /v1/scopes 200 from 127.0.0.1: 7 more alike lines in {WINDOW_S:.1f} s not written",
            ]
        )
        # A new window writes its first lines again.
        before = len(collected.messages)
        for n in range(3):
            _grpc("getURI", "OK", "127.0.0.1:1", n)
        assert len(collected.messages) == before + 3
    finally:
        logger.removeFilter(sampler)
        sampler.close()


async def test_removing_the_sampler_writes_what_its_open_windows_held(collected: _Collect) -> None:
    remove = sample_access_log(per_window=1)
    for n in range(4):
        _grpc("ping", "OK", "127.0.0.1:5", n)
    remove()
    assert collected.messages == [
        "gRPC ping OK n=0",
        "gRPC ping OK from 127.0.0.1: 3 more alike lines in 1.0 s not written",
    ]
    # Gone: every line is written again.
    for n in range(3):
        _grpc("ping", "OK", "127.0.0.1:5", n)
    assert len(collected.messages) == 5


def test_zero_writes_every_line(collected: _Collect) -> None:
    remove = sample_access_log(per_window=0)
    for n in range(50):
        _grpc("ping", "OK", "127.0.0.1:5", n)
    remove()
    assert len(collected.messages) == 50


async def test_admit_counts_as_the_filter_does_and_an_admitted_line_is_not_counted_twice(
    collected: _Collect,
) -> None:
    fields: dict[str, object] = {"kind": "grpc", "method": "ping", "status": "OK", "peer": "127.0.0.1:5"}
    remove = sample_access_log(per_window=2)
    try:
        assert [admit(fields) for _ in range(5)] == [True, True, False, False, False]
        logging.getLogger(ACCESS_LOGGER).info(
            "admitted", extra={ACCESS_FIELDS_ATTR: fields, ADMITTED_ATTR: True}
        )
    finally:
        remove()
    assert collected.messages == [
        "admitted",
        "gRPC ping OK from 127.0.0.1: 3 more alike lines in 1.0 s not written",
    ]
    # No sampler installed: every line is admitted.
    assert all(admit(fields) for _ in range(10))


async def test_admit_asks_a_sampler_added_to_the_logger_directly(collected: _Collect) -> None:
    fields: dict[str, object] = {"kind": "rest", "method": "GET", "path": "/", "status": 200, "remote": "h"}
    sampler = AccessSampler(per_window=1, window_s=WINDOW_S)
    logger = logging.getLogger(ACCESS_LOGGER)
    logger.addFilter(sampler)
    try:
        assert [admit(fields) for _ in range(3)] == [True, False, False]
    finally:
        logger.removeFilter(sampler)
        sampler.close()
    assert collected.messages == ["REST GET / 200 from h: 2 more alike lines in 0.2 s not written"]
