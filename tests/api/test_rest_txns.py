"""The REST transaction views (our extension) over the real services: the active transactions
of a stream and what is known of one id. Transactions are opened and ended through the
service, as gRPC does; every answer is checked against the served OpenAPI document."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from app.api.rest.app import create_app
from app.clock import SystemClock
from app.domain.txns import TxnId, TxnRecord
from app.services.health import HealthService
from app.testing.controller import Services, running_controller
from tests.api.conftest_rest import Api
from tests.api.test_rest import assert_error, make_scope, make_stream

STREAM = "/v1/scopes/sc/streams/s"
TXNS = f"{STREAM}/transactions"
LEASE = 10_000
WAIT_S = 20.0


def build(services: Services) -> Any:
    return create_app(
        services.scopes,
        services.streams,
        HealthService(SystemClock()),
        services.lifecycle,
        services.transactions,
    )


@pytest.fixture
async def api(services: Services) -> AsyncIterator[Api]:
    app = build(services)
    async with TestClient(TestServer(app)) as client:
        yield Api(client, app)


@pytest.fixture
async def idle(db_url: str) -> AsyncIterator[tuple[Api, Services]]:
    """No workers: commits and aborts stay COMMITTING and ABORTING."""
    async with running_controller(db_url, workers=False) as services:
        app = build(services)
        async with TestClient(TestServer(app)) as client:
            yield Api(client, app), services


async def stream(api: Api, segments: int = 2) -> None:
    await make_scope(api, "sc")
    await make_stream(api, "sc", "s", scalingPolicy={"type": "FIXED_NUM_SEGMENTS", "minSegments": segments})


async def open_txn(services: Services, lease: int = LEASE, name: str = "s") -> TxnId:
    return (await services.transactions.create("sc", name, lease)).txn


async def record(services: Services, txn: TxnId) -> TxnRecord:
    active = (await services.transactions.get("sc", "s", txn)).active
    assert active is not None
    return active.value


def expected(r: TxnRecord) -> dict[str, Any]:
    body: dict[str, Any] = {
        "txnId": str(r.txn),
        "epoch": r.epoch,
        "status": r.status.value,
        "creationTime": r.creation_time,
        "leaseMs": r.lease_ms,
        "leaseExpiry": r.lease_expiry,
        "maxExecutionExpiry": r.max_exec_expiry,
    }
    for name, value in (
        ("writerId", r.writer_id),
        ("commitTime", r.commit_time),
        ("commitOrder", r.commit_order),
    ):
        if value is not None:
            body[name] = value
    return body


async def listed(api: Api) -> dict[str, dict[str, Any]]:
    status, body = await api.call("GET", TXNS)
    assert status == 200, body
    return {item["txnId"]: item for item in body["transactions"]}


async def get(api: Api, txn: TxnId | str) -> dict[str, Any]:
    status, body = await api.call("GET", f"{TXNS}/{txn}")
    assert status == 200, body
    assert isinstance(body, dict)
    return body


async def wait_status(api: Api, txn: TxnId, wanted: str) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while True:
        body = await get(api, txn)
        if body["status"] == wanted:
            return body
        if loop.time() > deadline:
            raise AssertionError(f"transaction still {body['status']} after {WAIT_S} s")
        await asyncio.sleep(0.02)


# --- listing -------------------------------------------------------------------------------------


async def test_a_stream_without_transactions_lists_none(api: Api) -> None:
    await stream(api)
    assert await api.call("GET", TXNS) == (200, {"transactions": []})


async def test_open_transactions_are_listed_with_their_records(api: Api, services: Services) -> None:
    await stream(api)
    short, long = await open_txn(services, LEASE), await open_txn(services, 20_000)
    items = await listed(api)
    assert set(items) == {str(short), str(long)}
    for txn, lease in ((short, LEASE), (long, 20_000)):
        item = items[str(txn)]
        assert item == expected(await record(services, txn))
        assert uuid.UUID(item["txnId"]) == txn.uuid
        assert item["epoch"] == 0 and item["status"] == "OPEN"
        assert item["leaseMs"] == lease
        assert item["leaseExpiry"] == item["creationTime"] + lease
        assert item["maxExecutionExpiry"] == item["creationTime"] + 1000 * lease
        assert not {"writerId", "commitTime", "commitOrder"} & set(item)


async def test_committing_and_aborting_are_listed_until_processed(idle: tuple[Api, Services]) -> None:
    api, services = idle
    await stream(api)
    committing, aborting, plain = await open_txn(services), await open_txn(services), await open_txn(services)
    await services.transactions.commit("sc", "s", committing, writer_id="7", timestamp=1_234)
    await services.transactions.abort("sc", "s", aborting)
    await services.transactions.commit("sc", "s", plain)
    items = await listed(api)
    assert items[str(committing)]["status"] == "COMMITTING"
    assert items[str(committing)]["writerId"] == "7"
    assert items[str(committing)]["commitTime"] == 1_234
    assert isinstance(items[str(committing)]["commitOrder"], int)
    assert items[str(plain)]["commitOrder"] > items[str(committing)]["commitOrder"]
    assert not {"writerId", "commitTime"} & set(items[str(plain)])
    assert items[str(aborting)]["status"] == "ABORTING"
    for txn in (committing, aborting, plain):
        assert items[str(txn)] == expected(await record(services, txn))
        assert await get(api, txn) == items[str(txn)]


async def test_completed_transactions_leave_the_listing(api: Api, services: Services) -> None:
    await stream(api)
    committed, aborted, still_open = (
        await open_txn(services),
        await open_txn(services),
        await open_txn(services),
    )
    await services.transactions.commit("sc", "s", committed)
    await services.transactions.abort("sc", "s", aborted)
    await wait_status(api, committed, "COMMITTED")
    await wait_status(api, aborted, "ABORTED")
    assert set(await listed(api)) == {str(still_open)}


async def test_listing_a_missing_stream_or_scope_is_404(api: Api) -> None:
    await stream(api)
    for path in ("/v1/scopes/sc/streams/nosuch/transactions", "/v1/scopes/nosuch/streams/s/transactions"):
        status, body = await api.call("GET", path)
        assert_error(status, body, 404)


# --- one transaction -----------------------------------------------------------------------------


async def test_an_open_transaction_answers_its_record(api: Api, services: Services) -> None:
    await stream(api)
    txn = await open_txn(services)
    assert await get(api, txn) == expected(await record(services, txn))
    # The id may come without dashes or in capitals; the answer spells it canonically.
    assert (await get(api, txn.uuid.hex.upper()))["txnId"] == str(txn)


async def test_completed_transactions_answer_their_outcome_and_time(api: Api, services: Services) -> None:
    await stream(api)
    committed, aborted = await open_txn(services), await open_txn(services)
    created = (await record(services, committed)).creation_time
    await services.transactions.commit("sc", "s", committed)
    await services.transactions.abort("sc", "s", aborted)
    for txn, status in ((committed, "COMMITTED"), (aborted, "ABORTED")):
        body = await wait_status(api, txn, status)
        assert set(body) == {"txnId", "epoch", "status", "completionTime"}
        assert body["txnId"] == str(txn) and body["epoch"] == 0
        assert body["completionTime"] >= created


async def test_an_unknown_id_or_another_streams_id_is_unknown(api: Api, services: Services) -> None:
    await stream(api)
    await make_stream(api, "sc", "other")
    elsewhere = await open_txn(services, name="other")
    never = TxnId.make(5, 42)
    assert await get(api, never) == {"txnId": str(never), "epoch": 5, "status": "UNKNOWN"}
    assert await get(api, elsewhere) == {"txnId": str(elsewhere), "epoch": 0, "status": "UNKNOWN"}
    status, body = await api.call("GET", f"/v1/scopes/sc/streams/other/transactions/{elsewhere}")
    assert (status, body["status"]) == (200, "OPEN")


async def test_the_id_carries_the_epoch_in_its_top_bits(api: Api, services: Services) -> None:
    await stream(api, 1)
    await services.lifecycle.scaling.scale("sc", "s", [0], [(0.0, 0.5), (0.5, 1.0)], 1_000)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while (await services.stream_store.get_active_epoch("sc", "s"))[1].epoch != 1:
        assert loop.time() < deadline, "scale did not complete"
        await asyncio.sleep(0.02)
    txn = await open_txn(services)
    body = await get(api, txn)
    assert body["epoch"] == 1
    assert body["txnId"].startswith("00000001-")


@pytest.mark.parametrize("bad", ["not-a-uuid", "123", "0000000000000000000000000000000g", "%20"])
async def test_a_malformed_id_is_400(api: Api, bad: str) -> None:
    await stream(api)
    status, body = await api.call("GET", f"{TXNS}/{bad}")
    assert_error(status, body, 400)


async def test_one_transaction_of_a_missing_stream_is_404(api: Api) -> None:
    await stream(api)
    txn = TxnId.make(0, 1)
    for path in (
        f"/v1/scopes/sc/streams/nosuch/transactions/{txn}",
        f"/v1/scopes/nosuch/streams/s/transactions/{txn}",
    ):
        status, body = await api.call("GET", path)
        assert_error(status, body, 404)
