"""The REST stream lifecycle (update, seal, delete, scaling events) over the real services with
the request workers running; every answer is checked against the served OpenAPI document."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.domain.ids import segment_id
from app.domain.records import RetentionPolicy, RetentionType, ScaleType, ScalingPolicy, StreamState
from app.services.scaling import CheckScaleOutcome, ScaleOutcomeStatus
from app.testing.controller import Services
from tests.api.conftest import rest_api
from tests.api.conftest_rest import Api
from tests.api.test_rest import JSON, MB, assert_error, make_scope, make_stream, stream_names

STREAM = "/v1/scopes/sc/streams/s"
STATE = f"{STREAM}/state"
EVENTS = f"{STREAM}/scaling-events"
FIXED_2 = {"type": "FIXED_NUM_SEGMENTS", "minSegments": 2}
FIXED_3 = {"type": "FIXED_NUM_SEGMENTS", "minSegments": 3}
INT64_MAX = 2**63 - 1
# Scale timestamps are chosen by the test so the windows below are exact.
STEP = 10_000


@pytest.fixture
async def api(services: Services) -> AsyncIterator[Api]:
    async with rest_api(services) as served_api:
        yield served_api


async def stream_with(api: Api, segments: int = 2, **extra: Any) -> dict[str, Any]:
    await make_scope(api, "sc")
    policy = {"type": "FIXED_NUM_SEGMENTS", "minSegments": segments}
    return await make_stream(api, "sc", "s", scalingPolicy=policy, **extra)


async def get_stream(api: Api) -> dict[str, Any]:
    status, body = await api.call("GET", STREAM)
    assert status == 200, body
    assert isinstance(body, dict)
    return body


async def state_of(services: Services) -> StreamState:
    state: StreamState = (await services.stream_store.get_state("sc", "s")).value
    return state


async def pending_requests(services: Services) -> int:
    count: int = await services.pool.fetchval("SELECT count(*) FROM requests")
    return count


async def seal(api: Api) -> None:
    assert await api.call("PUT", STATE, json_body={"streamState": "SEALED"}) == (
        200,
        {"streamState": "SEALED"},
    )


def seg(number: int, epoch: int = 0) -> int:
    return segment_id(number, epoch)


# --- update ------------------------------------------------------------------------------


async def test_update_to_more_fixed_segments_scales_and_get_returns_the_new_config(
    api: Api, services: Services
) -> None:
    await stream_with(api, 2)
    update = {
        "scalingPolicy": FIXED_3,
        "retentionPolicy": {"type": "LIMITED_SIZE_MB", "value": 10},
        "streamTags": ["t2", "t1"],
        "timestampAggregationTimeout": 1500,
        "rolloverSizeBytes": MB,
    }
    expected = {
        "scopeName": "sc",
        "streamName": "s",
        "scalingPolicy": FIXED_3,
        "retentionPolicy": {"type": "LIMITED_SIZE_MB", "value": 10},
        "tags": ["t1", "t2"],
        "timestampAggregationTimeout": 1500,
        "rolloverSizeBytes": MB,
    }
    assert await api.call("PUT", STREAM, json_body=update) == (200, expected)
    assert await get_stream(api) == expected

    config = await services.streams.get_config("sc", "s")
    assert config.scaling == ScalingPolicy.fixed(3)
    assert config.retention == RetentionPolicy(RetentionType.SIZE, 10 * MB, INT64_MAX)
    state, active = await services.stream_store.get_active_epoch("sc", "s")
    assert state == StreamState.ACTIVE
    assert active.epoch == 1
    assert len(active.segments) == 3
    assert await pending_requests(services) == 0


async def test_update_to_a_rate_policy_and_time_retention_round_trips(api: Api, services: Services) -> None:
    await stream_with(api, 2, streamTags=["old"], rolloverSizeBytes=MB)
    by_rate = {"type": "BY_RATE_IN_KBYTES_PER_SEC", "targetRate": 100, "scaleFactor": 2, "minSegments": 2}
    update = {
        "scalingPolicy": by_rate,
        "retentionPolicy": {"type": "LIMITED_DAYS", "value": 0, "timeBasedRetention": {"hours": 2}},
    }
    status, body = await api.call("PUT", STREAM, json_body=update)
    assert status == 200, body
    # The whole configuration is replaced: what the body leaves out takes its default.
    assert body == {
        "scopeName": "sc",
        "streamName": "s",
        "scalingPolicy": by_rate,
        "retentionPolicy": {
            "type": "LIMITED_DAYS",
            "value": 0,
            "timeBasedRetention": {"days": 0, "hours": 2, "minutes": 0},
        },
        "tags": [],
        "timestampAggregationTimeout": 0,
        "rolloverSizeBytes": 0,
    }
    assert await get_stream(api) == body
    config = await services.streams.get_config("sc", "s")
    assert config.scaling == ScalingPolicy(ScaleType.BY_RATE_IN_KBYTES_PER_SEC, 100, 2, 2)
    assert config.retention == RetentionPolicy(RetentionType.TIME, 2 * 3_600_000, INT64_MAX)
    # The same minimum: no scale.
    assert (await services.stream_store.get_active_epoch("sc", "s"))[1].epoch == 0


async def test_updated_tags_are_what_the_tag_listing_finds(api: Api) -> None:
    await stream_with(api, 2, streamTags=["old", "kept"])
    status, _ = await api.call(
        "PUT", STREAM, json_body={"scalingPolicy": FIXED_2, "streamTags": ["new", "kept"]}
    )
    assert status == 200
    assert await stream_names(api, "sc", filter_type="tag", filter_value="new") == ["s"]
    assert await stream_names(api, "sc", filter_type="tag", filter_value="kept") == ["s"]
    assert await stream_names(api, "sc", filter_type="tag", filter_value="old") == []
    assert (await get_stream(api))["tags"] == ["kept", "new"]


async def test_update_of_a_missing_stream_or_scope_is_404(api: Api, services: Services) -> None:
    await make_scope(api, "sc")
    for path in (STREAM, "/v1/scopes/nope/streams/s"):
        status, body = await api.call("PUT", path, json_body={"scalingPolicy": FIXED_2})
        assert_error(status, body, 404)
    assert await pending_requests(services) == 0


async def test_update_of_a_sealed_stream_is_500_as_in_pravega_and_changes_nothing(
    api: Api, services: Services
) -> None:
    created = await stream_with(api, 2)
    await seal(api)
    status, body = await api.call("PUT", STREAM, json_body={"scalingPolicy": FIXED_3, "streamTags": ["x"]})
    assert_error(status, body, 500)
    assert "sealed" in body["message"]
    assert await get_stream(api) == created
    assert await state_of(services) == StreamState.SEALED


async def test_update_while_another_is_in_flight_is_500_as_in_pravega(api: Api, services: Services) -> None:
    created = await stream_with(api, 2)
    # An update whose workflow has not run yet: its flag is set, and no request is queued to clear it.
    record = await services.stream_store.get_config_record("sc", "s")
    await services.stream_store.set_config("sc", "s", record.value[0], True, record.version)
    status, body = await api.call("PUT", STREAM, json_body={"scalingPolicy": FIXED_3})
    assert_error(status, body, 500)
    assert "busy" in body["message"]
    assert await get_stream(api) == created
    assert await pending_requests(services) == 0


@pytest.mark.parametrize(
    ("raw", "mentions"),
    [
        (b"{not json", "not valid JSON"),
        (b"", "empty body"),
        (b"[1]", "JSON object"),
        (b"{}", "scalingPolicy"),
        (b'{"scalingPolicy": null}', "scalingPolicy"),
        (b'{"scalingPolicy": {"type": "FIXED_NUM_SEGMENTS", "minSegments": 0}}', "minSegments"),
        (b'{"scalingPolicy": {"type": "FIXED_NUM_SEGMENTS", "minSegments": "3"}}', "minSegments"),
        (b'{"scalingPolicy": {"type": "BOGUS", "minSegments": 3}}', "scalingPolicy.type"),
        (
            b'{"scalingPolicy": {"type": "FIXED_NUM_SEGMENTS", "minSegments": 3}, "streamTags": [1]}',
            "streamTags[0]",
        ),
        (
            b'{"scalingPolicy": {"type": "FIXED_NUM_SEGMENTS", "minSegments": 3},'
            b' "retentionPolicy": {"type": "LIMITED_SIZE_MB"}}',
            "retentionPolicy.value",
        ),
        (
            b'{"scalingPolicy": {"type": "FIXED_NUM_SEGMENTS", "minSegments": 3}, "rolloverSizeBytes": -1}',
            "rolloverSizeBytes",
        ),
    ],
    ids=[
        "garbage",
        "empty",
        "array",
        "no-policy",
        "null-policy",
        "zero-segments",
        "string-count",
        "bad-type",
        "bad-tag",
        "size-without-value",
        "negative-rollover",
    ],
)
async def test_bad_update_is_400_json_and_writes_nothing(
    api: Api, services: Services, raw: bytes, mentions: str
) -> None:
    created = await stream_with(api, 2, streamTags=["t"])
    status, body = await api.call("PUT", STREAM, data=raw, headers=JSON)
    assert_error(status, body, 400)
    assert mentions in body["message"]
    assert await get_stream(api) == created
    assert await state_of(services) == StreamState.ACTIVE
    assert await pending_requests(services) == 0


async def test_update_with_a_non_json_content_type_is_415(api: Api) -> None:
    created = await stream_with(api, 2)
    status, body = await api.call(
        "PUT",
        STREAM,
        data=b'{"scalingPolicy": {"type": "FIXED_NUM_SEGMENTS", "minSegments": 3}}',
        headers={"Content-Type": "text/plain"},
    )
    assert_error(status, body, 415)
    assert await get_stream(api) == created


# --- seal --------------------------------------------------------------------------------


async def test_seal_answers_the_state_and_the_stream_is_sealed(api: Api, services: Services) -> None:
    await stream_with(api, 2)
    await seal(api)
    assert await state_of(services) == StreamState.SEALED
    # Sealing a sealed stream succeeds again, as in Pravega.
    await seal(api)
    assert await state_of(services) == StreamState.SEALED
    assert await pending_requests(services) == 0


@pytest.mark.parametrize(
    "raw",
    [
        b'{"streamState": "ACTIVE"}',
        b'{"streamState": "sealed"}',
        b'{"streamState": "SEALING"}',
        b'{"streamState": null}',
        b'{"streamState": 1}',
        b'{"streamState": ["SEALED"]}',
        b"{}",
        b'"SEALED"',
        b"{oops",
        b"",
    ],
)
async def test_a_state_other_than_sealed_is_400_json_and_changes_nothing(
    api: Api, services: Services, raw: bytes
) -> None:
    await stream_with(api, 2)
    status, body = await api.call("PUT", STATE, data=raw, headers=JSON)
    assert_error(status, body, 400)
    assert await state_of(services) == StreamState.ACTIVE
    assert await pending_requests(services) == 0


async def test_seal_of_a_missing_stream_or_scope_is_404(api: Api) -> None:
    await make_scope(api, "sc")
    for path in (STATE, "/v1/scopes/nope/streams/s/state"):
        status, body = await api.call("PUT", path, json_body={"streamState": "SEALED"})
        assert_error(status, body, 404)


# --- delete ------------------------------------------------------------------------------


async def test_delete_of_an_unsealed_stream_is_412_and_keeps_it(api: Api, services: Services) -> None:
    created = await stream_with(api, 2)
    status, body = await api.call("DELETE", STREAM)
    assert_error(status, body, 412)
    assert "not sealed" in body["message"]
    assert await get_stream(api) == created
    assert await state_of(services) == StreamState.ACTIVE


async def test_delete_of_a_sealed_stream_is_204_then_it_is_gone(api: Api, services: Services) -> None:
    await stream_with(api, 2)
    await seal(api)
    assert await api.call("DELETE", STREAM) == (204, None)
    status, body = await api.call("GET", STREAM)
    assert_error(status, body, 404)
    assert await stream_names(api, "sc") == []
    status, body = await api.call("GET", EVENTS, params={"from": "0", "to": "1"})
    assert_error(status, body, 404)
    # A stream of the same name can be created afresh.
    await make_stream(api, "sc", "s")


async def test_delete_of_a_missing_stream_or_scope_is_404(api: Api) -> None:
    await make_scope(api, "sc")
    for path in (STREAM, "/v1/scopes/nope/streams/s"):
        status, body = await api.call("DELETE", path)
        assert_error(status, body, 404)


# --- scaling events ----------------------------------------------------------------------


async def scale(services: Services, sealed: list[int], ranges: list[tuple[float, float]], at: int) -> None:
    started = await services.lifecycle.scaling.scale("sc", "s", sealed, ranges, at)
    assert started.status == ScaleOutcomeStatus.STARTED
    for _ in range(500):
        outcome = await services.lifecycle.scaling.check_scale("sc", "s", started.epoch)
        if outcome == CheckScaleOutcome.SUCCESS:
            return
        assert outcome == CheckScaleOutcome.IN_PROGRESS
        await asyncio.sleep(0.01)
    raise AssertionError("scale did not complete")


def segment(number: int, epoch: int, start: int, key_start: float, key_end: float) -> dict[str, Any]:
    return {"number": number, "epoch": epoch, "start": start, "keyStart": key_start, "keyEnd": key_end}


async def scaled_twice(api: Api, services: Services) -> tuple[int, list[dict[str, Any]]]:
    """A split at t0 + STEP and a merge at t0 + 2 STEP; the three events Pravega would list."""
    await stream_with(api, 2)
    t0 = (await services.stream_store.get_active_epoch("sc", "s"))[1].creation_time
    await scale(services, [seg(1)], [(0.5, 0.75), (0.75, 1.0)], t0 + STEP)
    await scale(services, [seg(2, 1), seg(3, 1)], [(0.5, 1.0)], t0 + 2 * STEP)
    first = segment(0, 0, t0, 0.0, 0.5)
    events = [
        {"timestamp": t0, "segments": [first, segment(1, 0, t0, 0.5, 1.0)], "splits": 0, "merges": 0},
        {
            "timestamp": t0 + STEP,
            "segments": [first, segment(2, 1, t0 + STEP, 0.5, 0.75), segment(3, 1, t0 + STEP, 0.75, 1.0)],
            "splits": 1,
            "merges": 0,
        },
        {
            "timestamp": t0 + 2 * STEP,
            "segments": [first, segment(4, 2, t0 + 2 * STEP, 0.5, 1.0)],
            "splits": 0,
            "merges": 1,
        },
    ]
    return t0, events


def leading(event: dict[str, Any]) -> dict[str, Any]:
    return {**event, "splits": 0, "merges": 0}


async def events_between(api: Api, start: int, end: int) -> list[dict[str, Any]]:
    status, body = await api.call("GET", EVENTS, params={"from": str(start), "to": str(end)})
    assert status == 200, body
    assert isinstance(body, list)
    return body


async def test_scaling_events_list_the_epoch_in_force_then_those_in_the_window(
    api: Api, services: Services
) -> None:
    t0, (e0, e1, e2) = await scaled_twice(api, services)
    assert await events_between(api, 0, INT64_MAX) == [e0, e1, e2]
    assert await events_between(api, t0, t0 + 2 * STEP) == [e0, e1, e2]
    # The epoch in force at `from` leads, even when it was created before the window.
    assert await events_between(api, t0 + STEP // 2, t0 + 3 * STEP) == [e0, e1, e2]
    assert await events_between(api, t0 + STEP, t0 + STEP) == [e0, e1]
    # As in Pravega, splits and merges count from the event listed before: none for the first.
    assert await events_between(api, t0 + STEP + 1, t0 + STEP + 1) == [leading(e1)]
    assert await events_between(api, t0 + STEP + 1, t0 + 2 * STEP) == [leading(e1), e2]
    assert await events_between(api, t0 + 2 * STEP + 1, INT64_MAX) == [leading(e2)]
    # Nothing existed before the stream did.
    assert await events_between(api, 0, t0 - 1) == []


async def test_scaling_events_of_an_unscaled_stream_are_its_first_epoch(api: Api, services: Services) -> None:
    await stream_with(api, 1)
    t0 = (await services.stream_store.get_active_epoch("sc", "s"))[1].creation_time
    events = await events_between(api, t0, t0)
    assert events == [{"timestamp": t0, "segments": [segment(0, 0, t0, 0.0, 1.0)], "splits": 0, "merges": 0}]
    # Keys are doubles, spelled 0.0 and 1.0 as Jackson writes them (0 == 0.0 in Python).
    keys = events[0]["segments"][0]
    assert isinstance(keys["keyStart"], float) and isinstance(keys["keyEnd"], float)


@pytest.mark.parametrize(
    ("params", "mentions"),
    [
        ({}, "'from' is required"),
        ({"from": "0"}, "'to' is required"),
        ({"to": "5"}, "'from' is required"),
        ({"from": "abc", "to": "5"}, "'from'"),
        ({"from": "1.5", "to": "5"}, "'from'"),
        ({"from": "", "to": "5"}, "'from'"),
        ({"from": " 1", "to": "5"}, "'from'"),
        ({"from": "1_0", "to": "50"}, "'from'"),
        ({"from": "-1", "to": "5"}, "'from'"),
        ({"from": "0", "to": "-5"}, "'to'"),
        ({"from": "0", "to": str(INT64_MAX + 1)}, "'to'"),
        ({"from": "0", "to": "9" * 5000}, "'to'"),
        ({"from": "10", "to": "9"}, "after"),
    ],
)
async def test_bad_scaling_event_windows_are_400(api: Api, params: dict[str, str], mentions: str) -> None:
    await stream_with(api, 1)
    status, body = await api.call("GET", EVENTS, params=params)
    assert_error(status, body, 400)
    assert mentions in body["message"]
    # As in Pravega, the window is checked before the stream is looked up.
    status, body = await api.call("GET", "/v1/scopes/sc/streams/nope/scaling-events", params=params)
    assert_error(status, body, 400)


async def test_scaling_event_bounds_take_java_long_spellings(api: Api) -> None:
    await stream_with(api, 1)
    assert len(await events_between(api, 0, INT64_MAX)) == 1
    status, body = await api.call("GET", EVENTS, params={"from": "+0", "to": "000" + str(INT64_MAX)})
    assert status == 200 and len(body) == 1


async def test_scaling_events_of_a_missing_stream_or_scope_are_404(api: Api) -> None:
    await make_scope(api, "sc")
    for path in (EVENTS, "/v1/scopes/nope/streams/s/scaling-events"):
        status, body = await api.call("GET", path, params={"from": "0", "to": "1"})
        assert_error(status, body, 404)
