"""Request ids from the caller to the wire, as Pravega's controller keeps them (client/tracing.py):
each wire command has its own wire request id, and every line the controller logs about it names
that id beside the caller's request id (the gRPC or REST call's, or the queued request's), while the
embedded store's lines for the command carry the wire id as their request id."""

from __future__ import annotations

import logging
import re

import pytest

from app.domain.errors import StoreUnavailable
from app.domain.hosts import HostAddress
from app.domain.records import ScaleType
from app.observability.context import bound, new_request_id
from app.observability.logs import ContextFilter, TextFormatter
from app.security.tokens import TokenSigner, TokenVerifier
from app.segmentstore.client import WireSegmentStore
from app.segmentstore.server import SegmentStoreServer
from app.segmentstore.server.tokens import TokenGate
from app.segmentstore.wire import commands as wc
from app.store.segment_data import PgSegmentStorage
from app.testing.segment_store import OneHost
from tests.segmentstore.scripted import STALL, FixedLocator, scripted

CLIENT_LOGGER = "app.segmentstore.client"
SERVER_LOGGER = "app.segmentstore.server.connection"
SEG = "sc/st/0.#epoch.0"


def lines(caplog: pytest.LogCaptureFixture, logger: str, level: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == logger and r.levelno == level]


def wire_id_named(record: logging.LogRecord) -> int:
    found = re.search(r"wire request (\d+)", record.getMessage())
    assert found, record.getMessage()
    return int(found[1])


async def test_a_timeout_is_logged_with_the_callers_request_id_and_the_wire_request_id(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger=CLIENT_LOGGER)
    caller = new_request_id()
    async with scripted(lambda _command: STALL) as server:
        store = WireSegmentStore(FixedLocator(server.endpoint), request_timeout_s=0.3)
        try:
            with bound(request=caller), pytest.raises(StoreUnavailable, match="no reply"):
                await store.seal_segment(SEG)
        finally:
            await store.close()
    (sent,) = server.requests()
    assert isinstance(sent, wc.SealSegment)
    (line,) = lines(caplog, CLIENT_LOGGER, logging.WARNING)
    assert getattr(line, "request_id", None) == caller
    assert wire_id_named(line) == sent.request_id
    # As an operator reads it, in the text format: the failure, the wire id and the caller's id.
    text = TextFormatter().format(line)
    assert "no reply to SealSegment" in text
    assert f"wire request {sent.request_id})" in text
    assert text.endswith(f" request_id={caller}")


async def test_each_of_a_calls_pipelined_wire_requests_has_its_own_id_and_a_debug_line_naming_both(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger=CLIENT_LOGGER)
    caller = new_request_id()

    def created(command: wc.Command) -> wc.Command:
        assert isinstance(command, wc.CreateSegment)
        return wc.SegmentCreated(command.request_id, command.segment)

    async with scripted(created) as server:
        store = WireSegmentStore(FixedLocator(server.endpoint))
        try:
            with bound(request=caller):
                await store.create_transaction_segments([f"sc/st/{n}.#epoch.0" for n in range(3)], 0, 1, 0)
        finally:
            await store.close()
    sent = [c.request_id for c in server.requests() if isinstance(c, wc.CreateSegment)]
    # One call, three commands at once on one connection: distinct wire ids, none the caller's.
    assert server.connections == 1 and len(set(sent)) == 3
    assert str(sent[0]) != caller
    debug = lines(caplog, CLIENT_LOGGER, logging.DEBUG)
    assert sorted(wire_id_named(r) for r in debug) == sorted(sent)
    assert {getattr(r, "request_id", None) for r in debug} == {caller}
    assert all("answered SegmentCreated" in r.getMessage() for r in debug)


async def test_a_refused_token_is_logged_on_both_sides_under_the_same_wire_request_id(
    storage: PgSegmentStorage, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=CLIENT_LOGGER)
    caplog.set_level(logging.WARNING, logger=SERVER_LOGGER)
    # The process's log handler stamps each line with the context's request id: so does this one.
    caplog.handler.addFilter(ContextFilter())
    caller = new_request_id()
    tokens = TokenGate(TokenVerifier(b"the store's signing key"))
    server = await SegmentStoreServer.start(storage, "127.0.0.1", 0, tail_wait_s=0.5, tokens=tokens)
    forged = TokenSigner(b"another key").master()
    store = WireSegmentStore(OneHost(HostAddress(*server.address)), token=lambda: forged)
    try:
        with bound(request=caller), pytest.raises(StoreUnavailable, match="refused the token"):
            await store.create_segment("sc/st/7.#epoch.0", ScaleType.FIXED_NUM_SEGMENTS, 0, 0)
    finally:
        await store.close()
        await server.close()
    (controller_line,) = lines(caplog, CLIENT_LOGGER, logging.WARNING)
    (store_line,) = lines(caplog, SERVER_LOGGER, logging.WARNING)
    assert getattr(controller_line, "request_id", None) == caller
    assert "CreateSegment(sc/st/7.#epoch.0)" in controller_line.getMessage()
    assert "CreateSegment refused, delegation token" in store_line.getMessage()
    # The store's line carries the wire id the controller named beside its caller's id.
    assert getattr(store_line, "request_id", None) == str(wire_id_named(controller_line))
