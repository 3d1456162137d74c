"""What a request carries for its rollback (the record or configuration it replaced) comes back
exactly from its JSON payload, and a payload without it (an older request) gives None."""

from __future__ import annotations

import json

from app.domain.records import (
    RetentionPolicy,
    RetentionType,
    ScaleType,
    ScalingPolicy,
    StreamConfig,
    TruncationRecord,
)
from app.domain.requests import config_payload, previous_config, previous_truncation, truncation_payload


def _through_json(payload: dict[str, object]) -> dict[str, object]:
    decoded: dict[str, object] = json.loads(json.dumps(payload))
    return decoded


def test_a_truncation_record_round_trips_through_the_payload() -> None:
    record = TruncationRecord(
        stream_cut={0: 10, 5: -1},
        span={0: 0, 5: 2},
        deleted_segments=frozenset({1, 2}),
        to_delete=frozenset({3}),
        size_till=2**40,
        updating=False,
    )
    assert previous_truncation(_through_json(truncation_payload(record))) == record
    assert previous_truncation({}) is None


def test_a_configuration_round_trips_through_the_payload() -> None:
    for config in (
        StreamConfig(ScalingPolicy.fixed(3)),
        StreamConfig(
            ScalingPolicy(ScaleType.BY_RATE_IN_EVENTS_PER_SEC, 100, 2, 4),
            RetentionPolicy(RetentionType.SIZE, 10, 20),
            tags=("b", "a"),
            timestamp_aggregation_timeout=5,
            rollover_size_bytes=1024,
        ),
    ):
        assert previous_config(_through_json(config_payload(config))) == config
    assert previous_config({"manual": True}) is None
