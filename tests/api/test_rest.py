"""The REST API end to end: aiohttp's test server over the real services and a real PostgreSQL.
Every answer is also checked against the served OpenAPI document (see conftest_rest.Api)."""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from app.api.rest.app import create_app
from app.api.rest.keys import HEALTH, STREAMS
from app.clock import SystemClock
from app.domain.records import RetentionPolicy, RetentionType, ScaleType, ScalingPolicy
from app.ports import SegmentStore
from app.services.health import HealthService, HealthStatus
from app.services.lifecycle import StreamLifecycle
from app.services.paging import PAGE_LIMIT, Page
from app.services.scopes import ScopeService
from app.services.streams import StreamService
from app.services.transactions import TransactionService
from app.settings import Settings
from app.store.pool import create_pool
from app.store.requests import PgRequestQueue
from app.store.scopes import PgScopeStore
from app.store.streams import PgStreamStore
from app.store.txns import PgTxnStore
from app.testing.segment_store import embedded_segment_store
from tests.api.conftest_rest import PREFIX, Api, resolve

MB = 1024 * 1024
MINUTE = 60_000
HOUR = 60 * MINUTE
DAY = 24 * HOUR
UNBOUNDED = 2**63 - 1
JSON = {"Content-Type": "application/json"}


def build_app(
    pool: Any, segment_store: SegmentStore, scopes_cls: type[ScopeService] = ScopeService
) -> web.Application:
    clock = SystemClock()
    scopes = scopes_cls(PgScopeStore(pool), clock)
    streams = StreamService(PgStreamStore(pool), segment_store, clock)
    defaults = Settings()
    lifecycle = StreamLifecycle.build(
        PgScopeStore(pool),
        PgStreamStore(pool),
        PgRequestQueue(pool),
        clock,
        completion_timeout_s=defaults.completion_timeout_s,
        seal_busy_first_s=defaults.seal_busy_first_s,
    )
    transactions = TransactionService(
        PgStreamStore(pool),
        PgTxnStore(pool),
        segment_store,
        clock,
        defaults.txn_limits,
    )
    return create_app(scopes, streams, HealthService(clock), lifecycle, transactions)


@pytest.fixture
async def pool(db_url: str) -> AsyncIterator[Any]:
    pool = await create_pool(db_url, min_size=1, max_size=5)
    try:
        yield pool
    finally:
        await pool.close()


@pytest.fixture
async def api(pool: Any) -> AsyncIterator[Api]:
    async with embedded_segment_store(pool) as segment_store:
        app = build_app(pool, segment_store)
        async with TestClient(TestServer(app)) as client:
            yield Api(client, app)


async def make_scope(api: Api, name: str = "sc") -> None:
    status, body = await api.call("POST", "/v1/scopes", json_body={"scopeName": name})
    assert (status, body) == (201, {"scopeName": name})


async def make_stream(api: Api, scope: str, name: str, **extra: Any) -> dict[str, Any]:
    request = {"streamName": name, "scalingPolicy": {"type": "FIXED_NUM_SEGMENTS", "minSegments": 1}, **extra}
    status, body = await api.call("POST", f"/v1/scopes/{scope}/streams", json_body=request)
    assert status == 201, body
    assert isinstance(body, dict)
    return body


async def stream_names(api: Api, scope: str, **params: str) -> list[str]:
    status, body = await api.call("GET", f"/v1/scopes/{scope}/streams", params=params)
    assert status == 200, body
    return [s["streamName"] for s in body["streams"]]


async def scope_names(api: Api) -> list[str]:
    """The user scopes listed; Pravega's internal `_system` is always listed first (checked here)."""
    status, body = await api.call("GET", "/v1/scopes")
    assert status == 200
    names = [s["scopeName"] for s in body["scopes"]]
    assert names[:1] == ["_system"], names
    return names[1:]


def assert_error(status: int, body: Any, expected: int) -> None:
    assert status == expected, body
    assert body["code"] == expected
    assert isinstance(body["message"], str) and body["message"]


# --- scopes -----------------------------------------------------------------------------


async def test_scope_create_get_list_delete_round_trip(api: Api) -> None:
    assert await scope_names(api) == []
    await make_scope(api, "alpha")
    await make_scope(api, "beta.1-x")

    assert await api.call("GET", "/v1/scopes/alpha") == (200, {"scopeName": "alpha"})
    assert await scope_names(api) == ["alpha", "beta.1-x"]

    assert await api.call("DELETE", "/v1/scopes/alpha") == (204, None)
    status, body = await api.call("GET", "/v1/scopes/alpha")
    assert_error(status, body, 404)
    assert await scope_names(api) == ["beta.1-x"]


async def test_listing_scopes_reads_past_the_service_page_size(api: Api, pool: Any) -> None:
    scopes = ScopeService(PgScopeStore(pool), SystemClock())
    names = [f"s{i:04d}" for i in range(PAGE_LIMIT + 3)]
    for name in names:
        await scopes.create_scope(name)
    assert await scope_names(api) == names


async def test_create_scope_twice_is_409_with_json_body(api: Api) -> None:
    await make_scope(api, "dup")
    status, body = await api.call("POST", "/v1/scopes", json_body={"scopeName": "dup"})
    assert_error(status, body, 409)
    assert "dup" in body["message"]
    assert await scope_names(api) == ["dup"]


@pytest.mark.parametrize(
    "request_body",
    [
        {"scopeName": "has space"},
        {"scopeName": "_internal"},  # Pravega's REST takes user names only
        {"scopeName": "x" * 256},
        {"scopeName": ""},
        {"scopeName": "slash/y"},
        {"scopeName": 42},
        {"scopeName": None},
        {},
    ],
)
async def test_invalid_scope_create_is_400_and_writes_nothing(api: Api, request_body: Any) -> None:
    status, body = await api.call("POST", "/v1/scopes", json_body=request_body)
    assert_error(status, body, 400)
    assert await scope_names(api) == []


async def test_longest_valid_scope_name_is_accepted(api: Api) -> None:
    await make_scope(api, "x" * 255)


async def test_get_and_delete_missing_scope_are_404(api: Api) -> None:
    status, body = await api.call("GET", "/v1/scopes/nope")
    assert_error(status, body, 404)
    status, body = await api.call("DELETE", "/v1/scopes/nope")
    assert_error(status, body, 404)


async def test_delete_non_empty_scope_is_412_and_keeps_it(api: Api) -> None:
    await make_scope(api, "full")
    await make_stream(api, "full", "s1")
    status, body = await api.call("DELETE", "/v1/scopes/full")
    assert_error(status, body, 412)
    assert await api.call("GET", "/v1/scopes/full") == (200, {"scopeName": "full"})
    assert await stream_names(api, "full") == ["s1"]


# --- stream creation --------------------------------------------------------------------

FIXED_3 = {"type": "FIXED_NUM_SEGMENTS", "minSegments": 3}

CREATE_CASES: list[tuple[str, dict[str, Any], dict[str, Any], ScalingPolicy, RetentionPolicy | None]] = [
    # (case, request fields, expected StreamProperty fields, expected stored scaling, retention)
    (
        "fixed-no-retention",
        {"scalingPolicy": FIXED_3},
        {"scalingPolicy": FIXED_3},
        ScalingPolicy.fixed(3),
        None,
    ),
    (
        "fixed-ignores-rates",
        {"scalingPolicy": {**FIXED_3, "targetRate": 9, "scaleFactor": 9}},
        {"scalingPolicy": FIXED_3},
        ScalingPolicy.fixed(3),
        None,
    ),
    (
        "events-rate-size-mb",
        {
            "scalingPolicy": {
                "type": "BY_RATE_IN_EVENTS_PER_SEC",
                "targetRate": 100,
                "scaleFactor": 2,
                "minSegments": 2,
            },
            "retentionPolicy": {"type": "LIMITED_SIZE_MB", "value": 10},
        },
        {
            "scalingPolicy": {
                "type": "BY_RATE_IN_EVENTS_PER_SEC",
                "targetRate": 100,
                "scaleFactor": 2,
                "minSegments": 2,
            },
            "retentionPolicy": {"type": "LIMITED_SIZE_MB", "value": 10},
        },
        ScalingPolicy(ScaleType.BY_RATE_IN_EVENTS_PER_SEC, 100, 2, 2),
        RetentionPolicy(RetentionType.SIZE, 10 * MB, UNBOUNDED),
    ),
    (
        "kbytes-rate-size-mb-with-max",
        {
            "scalingPolicy": {
                "type": "BY_RATE_IN_KBYTES_PER_SEC",
                "targetRate": 2048,
                "scaleFactor": 3,
                "minSegments": 1,
            },
            "retentionPolicy": {"type": "LIMITED_SIZE_MB", "value": 10, "maxValue": 20},
        },
        {
            "scalingPolicy": {
                "type": "BY_RATE_IN_KBYTES_PER_SEC",
                "targetRate": 2048,
                "scaleFactor": 3,
                "minSegments": 1,
            },
            "retentionPolicy": {"type": "LIMITED_SIZE_MB", "value": 10, "maxValue": 20},
        },
        ScalingPolicy(ScaleType.BY_RATE_IN_KBYTES_PER_SEC, 2048, 3, 1),
        RetentionPolicy(RetentionType.SIZE, 10 * MB, 20 * MB),
    ),
    (
        "days",
        {"scalingPolicy": FIXED_3, "retentionPolicy": {"type": "LIMITED_DAYS", "value": 7}},
        {
            "scalingPolicy": FIXED_3,
            "retentionPolicy": {
                "type": "LIMITED_DAYS",
                "value": 7,
                "timeBasedRetention": {"days": 7, "hours": 0, "minutes": 0},
            },
        },
        ScalingPolicy.fixed(3),
        RetentionPolicy(RetentionType.TIME, 7 * DAY, UNBOUNDED),
    ),
    (
        "time-based",
        {
            "scalingPolicy": FIXED_3,
            "retentionPolicy": {
                "type": "LIMITED_DAYS",
                "value": 0,
                "timeBasedRetention": {"days": 1, "hours": 2, "minutes": 3},
            },
        },
        {
            "scalingPolicy": FIXED_3,
            "retentionPolicy": {
                "type": "LIMITED_DAYS",
                "value": 0,
                "timeBasedRetention": {"days": 1, "hours": 2, "minutes": 3},
            },
        },
        ScalingPolicy.fixed(3),
        RetentionPolicy(RetentionType.TIME, DAY + 2 * HOUR + 3 * MINUTE, UNBOUNDED),
    ),
    (
        "days-with-max-days",
        {"scalingPolicy": FIXED_3, "retentionPolicy": {"type": "LIMITED_DAYS", "value": 1, "maxValue": 30}},
        {
            "scalingPolicy": FIXED_3,
            "retentionPolicy": {
                "type": "LIMITED_DAYS",
                "value": 1,
                "timeBasedRetention": {"days": 1, "hours": 0, "minutes": 0},
                "maxValue": 30,
                "maxTimeBasedRetention": {"days": 30, "hours": 0, "minutes": 0},
            },
        },
        ScalingPolicy.fixed(3),
        RetentionPolicy(RetentionType.TIME, DAY, 30 * DAY),
    ),
    (
        "time-based-with-max-time-based",
        {
            "scalingPolicy": FIXED_3,
            "retentionPolicy": {
                "type": "LIMITED_DAYS",
                "timeBasedRetention": {"hours": 1, "minutes": 30},
                "maxTimeBasedRetention": {"days": 2, "hours": 12},
            },
        },
        {
            "scalingPolicy": FIXED_3,
            "retentionPolicy": {
                "type": "LIMITED_DAYS",
                "value": 0,
                "timeBasedRetention": {"days": 0, "hours": 1, "minutes": 30},
                "maxValue": 0,
                "maxTimeBasedRetention": {"days": 2, "hours": 12, "minutes": 0},
            },
        },
        ScalingPolicy.fixed(3),
        RetentionPolicy(RetentionType.TIME, HOUR + 30 * MINUTE, 2 * DAY + 12 * HOUR),
    ),
    (
        "plain-days-win-over-time-based",  # Java's rule: timeBasedRetention counts only when value is 0
        {
            "scalingPolicy": FIXED_3,
            "retentionPolicy": {"type": "LIMITED_DAYS", "value": 2, "timeBasedRetention": {"hours": 5}},
        },
        {
            "scalingPolicy": FIXED_3,
            "retentionPolicy": {
                "type": "LIMITED_DAYS",
                "value": 2,
                "timeBasedRetention": {"days": 2, "hours": 0, "minutes": 0},
            },
        },
        ScalingPolicy.fixed(3),
        RetentionPolicy(RetentionType.TIME, 2 * DAY, UNBOUNDED),
    ),
]


@pytest.mark.parametrize(
    ("request_fields", "expected", "scaling", "retention"),
    [case[1:] for case in CREATE_CASES],
    ids=[case[0] for case in CREATE_CASES],
)
async def test_create_stream_maps_policies_and_get_returns_the_same_property(
    api: Api,
    request_fields: dict[str, Any],
    expected: dict[str, Any],
    scaling: ScalingPolicy,
    retention: RetentionPolicy | None,
) -> None:
    await make_scope(api, "sc")
    created = await make_stream(api, "sc", "s1", **request_fields)
    expected_property = {
        "scopeName": "sc",
        "streamName": "s1",
        **expected,
        "tags": [],
        "timestampAggregationTimeout": 0,
        "rolloverSizeBytes": 0,
    }
    assert created == expected_property
    assert await api.call("GET", "/v1/scopes/sc/streams/s1") == (200, expected_property)
    status, listed = await api.call("GET", "/v1/scopes/sc/streams")
    assert (status, listed) == (200, {"streams": [expected_property]})

    # The stored values, not just the round trip: MB and days really become bytes and ms.
    config = await api.app[STREAMS].get_config("sc", "s1")
    assert config.scaling == scaling
    assert config.retention == retention


async def test_create_stream_keeps_tags_timeout_and_rollover(api: Api) -> None:
    await make_scope(api, "sc")
    created = await make_stream(
        api,
        "sc",
        "s1",
        streamTags=["b", "a", "b"],
        timestampAggregationTimeout=1500,
        rolloverSizeBytes=MB,
        someFutureField={"ignored": True},
    )
    assert created["tags"] == ["a", "b"]
    assert created["timestampAggregationTimeout"] == 1500
    assert created["rolloverSizeBytes"] == MB
    assert await api.call("GET", "/v1/scopes/sc/streams/s1") == (200, created)


async def test_create_stream_in_missing_scope_is_404(api: Api) -> None:
    request = {"streamName": "s1", "scalingPolicy": FIXED_3}
    status, body = await api.call("POST", "/v1/scopes/nope/streams", json_body=request)
    assert_error(status, body, 404)
    assert await scope_names(api) == []


async def test_create_duplicate_stream_is_409(api: Api) -> None:
    await make_scope(api, "sc")
    await make_stream(api, "sc", "s1")
    request = {"streamName": "s1", "scalingPolicy": FIXED_3}
    status, body = await api.call("POST", "/v1/scopes/sc/streams", json_body=request)
    assert_error(status, body, 409)
    assert (await api.call("GET", "/v1/scopes/sc/streams/s1"))[1]["scalingPolicy"]["minSegments"] == 1


async def test_get_missing_stream_is_404(api: Api) -> None:
    await make_scope(api, "sc")
    status, body = await api.call("GET", "/v1/scopes/sc/streams/nope")
    assert_error(status, body, 404)
    status, body = await api.call("GET", "/v1/scopes/nope/streams/nope")
    assert_error(status, body, 404)


async def assert_no_streams(api: Api, scope: str = "sc") -> None:
    assert await stream_names(api, scope) == []
    assert await stream_names(api, scope, filter_type="showInternalStreams") == []


@pytest.mark.parametrize("name", ["has space", "_internal", "_MARKs1", "x" * 251, "", "a/b", 7, None])
async def test_invalid_stream_name_is_400_and_writes_nothing(api: Api, name: Any) -> None:
    await make_scope(api, "sc")
    request = {"streamName": name, "scalingPolicy": FIXED_3}
    status, body = await api.call("POST", "/v1/scopes/sc/streams", json_body=request)
    assert_error(status, body, 400)
    await assert_no_streams(api)


async def test_longest_valid_stream_name_is_accepted(api: Api) -> None:
    await make_scope(api, "sc")
    await make_stream(api, "sc", "x" * 250)


@pytest.mark.parametrize(
    "raw",
    [
        b"{not json",
        b"",
        b"   ",
        b"[1, 2]",
        b'"text"',
        b"null",
        b'{"streamName": NaN}',
        b"\xff\xfe",
        b"[" * 100_000,
    ],
    ids=["garbage", "empty", "blank", "array", "string", "null", "nan", "not-utf8", "deep"],
)
async def test_malformed_json_body_is_400_json(api: Api, raw: bytes) -> None:
    await make_scope(api, "sc")
    status, body = await api.call("POST", "/v1/scopes/sc/streams", data=raw, headers=JSON)
    assert_error(status, body, 400)
    status, body = await api.call("POST", "/v1/scopes", data=raw, headers=JSON)
    assert_error(status, body, 400)
    await assert_no_streams(api)
    assert await scope_names(api) == ["sc"]


async def test_body_without_content_type_is_read_as_json(api: Api) -> None:
    async with api.client.post(
        "/v1/scopes", data=b'{"scopeName": "bare"}', skip_auto_headers=["Content-Type"]
    ) as r:
        assert r.status == 201, await r.text()
    assert await scope_names(api) == ["bare"]


async def test_non_json_content_type_is_415(api: Api) -> None:
    status, body = await api.call(
        "POST", "/v1/scopes", data=b'{"scopeName": "x"}', headers={"Content-Type": "text/plain"}
    )
    assert_error(status, body, 415)
    assert await scope_names(api) == []


async def test_oversized_body_is_413_json(api: Api) -> None:
    status, body = await api.call("POST", "/v1/scopes", data=io.BytesIO(b" " * (2 * MB)), headers=JSON)
    assert_error(status, body, 413)


BY_RATE = {"type": "BY_RATE_IN_EVENTS_PER_SEC", "targetRate": 10, "scaleFactor": 2, "minSegments": 1}


@pytest.mark.parametrize(
    ("request_body", "mentions"),
    [
        # missing required members
        ({"scalingPolicy": FIXED_3}, "streamName"),
        ({"streamName": "s1"}, "scalingPolicy"),
        ({"streamName": "s1", "scalingPolicy": None}, "scalingPolicy"),
        ({"streamName": "s1", "scalingPolicy": {"minSegments": 1}}, "scalingPolicy.type"),
        ({"streamName": "s1", "scalingPolicy": {"type": "FIXED_NUM_SEGMENTS"}}, "minSegments"),
        ({"streamName": "s1", "scalingPolicy": {**BY_RATE, "targetRate": None}}, "targetRate"),
        ({"streamName": "s1", "scalingPolicy": {**BY_RATE, "scaleFactor": None}}, "scaleFactor"),
        (
            {"streamName": "s1", "scalingPolicy": FIXED_3, "retentionPolicy": {"value": 1}},
            "retentionPolicy.type",
        ),
        (
            {"streamName": "s1", "scalingPolicy": FIXED_3, "retentionPolicy": {"type": "LIMITED_SIZE_MB"}},
            "retentionPolicy.value",
        ),
        (
            {"streamName": "s1", "scalingPolicy": FIXED_3, "retentionPolicy": {"type": "LIMITED_DAYS"}},
            "timeBasedRetention",
        ),
        # wrong types
        ({"streamName": "s1", "scalingPolicy": {**FIXED_3, "minSegments": "x"}}, "minSegments"),
        ({"streamName": "s1", "scalingPolicy": {**FIXED_3, "minSegments": 1.5}}, "minSegments"),
        ({"streamName": "s1", "scalingPolicy": {**FIXED_3, "minSegments": True}}, "minSegments"),
        ({"streamName": "s1", "scalingPolicy": {**FIXED_3, "targetRate": "fast"}}, "targetRate"),
        ({"streamName": "s1", "scalingPolicy": "FIXED_NUM_SEGMENTS"}, "scalingPolicy"),
        ({"streamName": "s1", "scalingPolicy": {**FIXED_3, "type": "BOGUS"}}, "scalingPolicy.type"),
        ({"streamName": "s1", "scalingPolicy": FIXED_3, "streamTags": "red"}, "streamTags"),
        ({"streamName": "s1", "scalingPolicy": FIXED_3, "streamTags": ["red", 1]}, "streamTags[1]"),
        ({"streamName": "s1", "scalingPolicy": FIXED_3, "rolloverSizeBytes": "1"}, "rolloverSizeBytes"),
        (
            {
                "streamName": "s1",
                "scalingPolicy": FIXED_3,
                "retentionPolicy": {"type": "LIMITED_DAYS", "value": "7"},
            },
            "retentionPolicy.value",
        ),
        (
            {
                "streamName": "s1",
                "scalingPolicy": FIXED_3,
                "retentionPolicy": {"type": "FOREVER", "value": 1},
            },
            "retentionPolicy.type",
        ),
        (
            {
                "streamName": "s1",
                "scalingPolicy": FIXED_3,
                "retentionPolicy": {"type": "LIMITED_DAYS", "timeBasedRetention": {"hours": "2"}},
            },
            "timeBasedRetention.hours",
        ),
        # values the policies refuse
        ({"streamName": "s1", "scalingPolicy": {**FIXED_3, "minSegments": 0}}, "minSegments"),
        ({"streamName": "s1", "scalingPolicy": {**FIXED_3, "minSegments": 2**31}}, "minSegments"),
        ({"streamName": "s1", "scalingPolicy": {**BY_RATE, "targetRate": 0}}, "targetRate"),
        ({"streamName": "s1", "scalingPolicy": {**BY_RATE, "scaleFactor": -1}}, "scaleFactor"),
        ({"streamName": "s1", "scalingPolicy": FIXED_3, "rolloverSizeBytes": -1}, "rolloverSizeBytes"),
        (
            {"streamName": "s1", "scalingPolicy": FIXED_3, "timestampAggregationTimeout": -5},
            "timestampAggregation",
        ),
        (
            {
                "streamName": "s1",
                "scalingPolicy": FIXED_3,
                "retentionPolicy": {"type": "LIMITED_SIZE_MB", "value": -1},
            },
            "retentionPolicy.value",
        ),
        (
            {
                "streamName": "s1",
                "scalingPolicy": FIXED_3,
                "retentionPolicy": {"type": "LIMITED_SIZE_MB", "value": 2**62},
            },
            "too large",
        ),
        (
            {
                "streamName": "s1",
                "scalingPolicy": FIXED_3,
                "retentionPolicy": {"type": "LIMITED_DAYS", "value": 2**60},
            },
            "too large",
        ),
        ({"streamName": "s1", "scalingPolicy": FIXED_3, "streamTags": ["t"] * 128}, "tags"),
        ({"streamName": "s1", "scalingPolicy": FIXED_3, "streamTags": ["t" * 256]}, "tag"),
    ],
)
async def test_bad_stream_request_is_400_and_writes_nothing(
    api: Api, request_body: dict[str, Any], mentions: str
) -> None:
    await make_scope(api, "sc")
    status, body = await api.call("POST", "/v1/scopes/sc/streams", json_body=request_body)
    assert_error(status, body, 400)
    assert mentions in body["message"]
    await assert_no_streams(api)


# --- stream listings --------------------------------------------------------------------


async def test_list_streams_hides_internal_streams_unless_asked(api: Api) -> None:
    await make_scope(api, "sc")
    await make_stream(api, "sc", "s1")
    await make_stream(api, "sc", "s2")
    assert await stream_names(api, "sc") == ["s1", "s2"]
    assert await stream_names(api, "sc", filter_type="showInternalStreams") == ["_MARKs1", "_MARKs2"]
    # As in Pravega: an unknown filter is ignored.
    assert await stream_names(api, "sc", filter_type="bogus") == ["s1", "s2"]
    status, body = await api.call(
        "GET", "/v1/scopes/sc/streams", params={"filter_type": "showInternalStreams"}
    )
    assert status == 200
    assert body["streams"][0] == {
        "scopeName": "sc",
        "streamName": "_MARKs1",
        "scalingPolicy": {"type": "FIXED_NUM_SEGMENTS", "minSegments": 1},
        "tags": [],
        "timestampAggregationTimeout": 0,
        "rolloverSizeBytes": 0,
    }


async def test_list_streams_by_tag(api: Api) -> None:
    await make_scope(api, "sc")
    await make_stream(api, "sc", "s1", streamTags=["red"])
    await make_stream(api, "sc", "s2", streamTags=["red", "blue"])
    await make_stream(api, "sc", "s3")
    assert await stream_names(api, "sc", filter_type="tag", filter_value="red") == ["s1", "s2"]
    assert await stream_names(api, "sc", filter_type="tag", filter_value="blue") == ["s2"]
    assert await stream_names(api, "sc", filter_type="tag", filter_value="green") == []
    # `tag` without a value lists every user stream, as Pravega does.
    assert await stream_names(api, "sc", filter_type="tag") == ["s1", "s2", "s3"]
    status, body = await api.call(
        "GET", "/v1/scopes/sc/streams", params={"filter_type": "tag", "filter_value": "blue"}
    )
    assert status == 200
    assert body["streams"][0]["tags"] == ["blue", "red"]


async def test_list_streams_of_missing_scope_is_404(api: Api) -> None:
    for params in ({}, {"filter_type": "showInternalStreams"}, {"filter_type": "tag", "filter_value": "x"}):
        status, body = await api.call("GET", "/v1/scopes/nope/streams", params=params)
        assert_error(status, body, 404)


# --- health -----------------------------------------------------------------------------


async def test_health_endpoints_follow_the_contributors(api: Api) -> None:
    health: HealthService = api.app[HEALTH]

    status, body = await api.call("GET", "/v1/health")
    assert (status, body) == (
        200,
        {
            "name": "pgcontroller",
            "status": "UNKNOWN",
            "readiness": False,
            "liveness": True,
            "details": {},
            "children": {},
        },
    )
    assert await api.call("GET", "/v1/health/readiness") == (200, False)
    assert await api.call("GET", "/v1/health/liveness") == (200, True)
    assert await api.call("GET", "/v1/health/status") == (200, "UNKNOWN")

    health.set("metadata-store", HealthStatus.UP, checked_at="123")
    status, body = await api.call("GET", "/v1/health")
    assert body["status"] == "UP" and body["readiness"] is True and body["liveness"] is True
    assert body["details"] == {"metadata-store": "UP"}
    assert body["children"] == {
        "metadata-store": {
            "name": "metadata-store",
            "status": "UP",
            "readiness": True,
            "liveness": True,
            "details": {"checked_at": "123"},
            "children": {},
        }
    }
    assert await api.call("GET", "/v1/health/readiness") == (200, True)
    assert await api.call("GET", "/v1/health/status") == (200, "UP")
    assert await api.call("GET", "/v1/health/details") == (200, {"metadata-store": "UP"})

    health.set("metadata-store", HealthStatus.DOWN, error="refused")
    assert await api.call("GET", "/v1/health/readiness") == (200, False)
    assert await api.call("GET", "/v1/health/liveness") == (200, True)
    status, body = await api.call("GET", "/v1/health")
    assert body["children"]["metadata-store"]["liveness"] is False  # Pravega: DOWN is not alive

    health.set("metadata-store", HealthStatus.FAILED)
    assert await api.call("GET", "/v1/health/liveness") == (200, False)
    assert await api.call("GET", "/v1/health/status") == (200, "FAILED")


# --- errors that are not the caller's input ---------------------------------------------


async def test_unknown_path_and_wrong_method_answer_json(api: Api) -> None:
    # `/v1/scopes/` is `/v1/scopes` now, as Pravega's admin CLI needs (tests/api/test_pravega_tools.py).
    for path in ("/nope", "/v1/nope", "/v1/scopes/sc/streams/s1/extra"):
        status, body = await api.call("GET", path)
        assert_error(status, body, 404)
    status, body = await api.call("PUT", "/v1/scopes")
    assert_error(status, body, 405)
    async with api.client.request("PATCH", "/v1/scopes/sc") as resp:
        assert resp.status == 405
        assert set(resp.headers["Allow"].split(", ")) == {"GET", "DELETE"}


class ExplodingScopes(ScopeService):
    async def list_scopes(self, token: str, limit: int = 1000) -> Page:
        raise RuntimeError("secret internals")


async def test_unexpected_exception_is_500_json_and_the_server_lives_on(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    pool = await create_pool(db_url, min_size=1, max_size=2)
    try:
        async with embedded_segment_store(pool) as segment_store:
            app = build_app(pool, segment_store, scopes_cls=ExplodingScopes)
            client = TestClient(TestServer(app))
            await client.start_server()
            api = Api(client, app)
            status, body = await api.call("GET", "/v1/scopes")
            assert_error(status, body, 500)
            assert "secret" not in body["message"]
            assert "secret internals" in caplog.text
            assert await api.call("GET", "/v1/scopes/none") == (
                404,
                {"code": 404, "message": "scope 'none' not found"},
            )
            await client.close()
    finally:
        await pool.close()


async def test_unreachable_store_is_503_with_retry_after(db_url: str) -> None:
    pool = await create_pool(db_url, min_size=1, max_size=2)
    async with embedded_segment_store(pool) as segment_store:
        app = build_app(pool, segment_store)
        await pool.close()
        async with TestClient(TestServer(app)) as client:
            api = Api(client, app)
            status, body = await api.call("GET", "/v1/scopes")
            assert_error(status, body, 503)
            async with client.get("/v1/scopes/sc") as resp:
                assert resp.status == 503
                assert resp.headers["Retry-After"] == "1"


# --- the OpenAPI document ---------------------------------------------------------------


async def test_openapi_document_is_served_and_equals_the_file(api: Api) -> None:
    status, served = await api.call("GET", "/v1/openapi.json")
    assert status == 200
    on_disk = json.loads((Path(__file__).parents[2] / "app" / "api" / "rest" / "openapi.json").read_text())
    assert served == on_disk
    assert served["openapi"].startswith("3.")
    assert served["servers"] == [{"url": PREFIX}]


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        own = [node["$ref"]] if "$ref" in node else []
        return own + [r for value in node.values() for r in _refs(value)]
    if isinstance(node, list):
        return [r for value in node for r in _refs(value)]
    return []


async def test_openapi_document_references_resolve_and_errors_are_documented(api: Api) -> None:
    doc = api.doc
    for ref in _refs(doc):
        resolve(doc, {"$ref": ref})  # raises KeyError when dangling
    for path, item in doc["paths"].items():
        for method, operation in item.items():
            if method in ("parameters", "servers"):  # `servers`: /ping sits outside /v1
                continue
            for code in ("500", "503", "default"):
                assert code in operation["responses"], (path, method, code)
            templated = {p.strip("{}") for p in path.split("/") if p.startswith("{")}
            declared = {
                resolve(doc, p)["name"] for p in item.get("parameters", []) + operation.get("parameters", [])
            }
            assert templated <= declared, (path, templated, declared)
