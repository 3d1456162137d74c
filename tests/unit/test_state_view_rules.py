"""The pure rules of customized state views: names, states and reports are validated with clear
errors; the config plan, the incremental recompute and the full build name exactly the views
and partitions to rewrite; notification payloads round-trip."""

from __future__ import annotations

import pytest

from app.domain.errors import InvalidInput
from app.domain.state_views import (
    MAX_AGGREGATED_STATE_NAMES,
    MAX_NAME_LENGTH,
    MAX_PARTITIONS_PER_REPORT,
    MAX_STATE_LENGTH,
    ConfigPlan,
    ViewUpdate,
    full_build,
    parse_view_payload,
    plan_config,
    recompute,
    validate_config,
    validate_participant,
    validate_partition,
    validate_report,
    validate_resource,
    validate_state,
    validate_state_name,
    view_payload,
)


@pytest.mark.parametrize("name", ["CURRENT_STATE", "a", "x.y-z_1", "9" * MAX_NAME_LENGTH])
def test_good_state_names_and_resources_pass(name: str) -> None:
    assert validate_state_name(name) == name
    assert validate_resource(name) == name


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "must not be empty"),
        ("a" * (MAX_NAME_LENGTH + 1), "at most 128"),
        ("a/b", "invalid"),
        ("a:b", "invalid"),
        ("a b", "invalid"),
        ("é", "invalid"),
    ],
    ids=["empty", "long", "slash", "colon", "space", "non-ascii"],
)
def test_bad_state_names_and_resources_are_invalid_input(name: str, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        validate_state_name(name)
    with pytest.raises(InvalidInput, match=message):
        validate_resource(name)


@pytest.mark.parametrize("participant", ["10.0.0.1:12345", "[::1]:12345", "host-a", "ß:1"])
def test_participant_ids_take_segment_store_addresses(participant: str) -> None:
    assert validate_participant(participant) == participant


@pytest.mark.parametrize("bad", ["", "a/b", "a b", "a\tb", "a\x00b", "x" * 256])
def test_bad_participants_and_partitions_are_invalid_input(bad: str) -> None:
    with pytest.raises(InvalidInput):
        validate_participant(bad)
    with pytest.raises(InvalidInput):
        validate_partition(bad)


def test_states_are_any_text_up_to_the_limit_json_included() -> None:
    document = '{"lag": 5, "note": "line\\nbreak", "ok": true}'
    assert validate_state("p", document) == document
    assert validate_state("p", "multi\nline\ttext") == "multi\nline\ttext"
    assert validate_state("p", "x" * MAX_STATE_LENGTH) == "x" * MAX_STATE_LENGTH


@pytest.mark.parametrize(
    ("state", "message"),
    [("", "must not be empty"), ("x" * (MAX_STATE_LENGTH + 1), "at most 4096"), ("a\x00", "NUL")],
    ids=["empty", "long", "nul"],
)
def test_bad_states_name_their_partition(state: str, message: str) -> None:
    with pytest.raises(InvalidInput, match=f"partition 'p7'.*{message}"):
        validate_state("p7", state)


def test_a_report_allows_removals_only_in_a_merge() -> None:
    validate_report({"p0": "ON", "p1": None}, removals=True)
    with pytest.raises(InvalidInput, match="null removes only in a merge"):
        validate_report({"p0": "ON", "p1": None}, removals=False)


def test_a_report_is_bounded() -> None:
    validate_report({f"p{i}": "s" for i in range(MAX_PARTITIONS_PER_REPORT)}, removals=False)
    with pytest.raises(InvalidInput, match="at most 10000 partitions"):
        validate_report({f"p{i}": "s" for i in range(MAX_PARTITIONS_PER_REPORT + 1)}, removals=False)


def test_a_report_checks_every_partition_and_state() -> None:
    with pytest.raises(InvalidInput, match="partition"):
        validate_report({"ok": "s", "bad partition": "s"}, removals=False)
    with pytest.raises(InvalidInput, match="'p1'"):
        validate_report({"p0": "s", "p1": ""}, removals=False)


def test_config_names_are_validated_deduplicated_and_sorted() -> None:
    assert validate_config(["b", "a", "b"]) == ("a", "b")
    assert validate_config([]) == ()
    with pytest.raises(InvalidInput):
        validate_config(["ok", ""])
    with pytest.raises(InvalidInput, match="at most 256"):
        validate_config([f"n{i}" for i in range(MAX_AGGREGATED_STATE_NAMES + 1)])


def test_the_config_plan_builds_added_names_and_drops_removed_ones() -> None:
    assert plan_config(["a", "b", "c"], ["b", "d"]) == ConfigPlan(build=("a", "c"), drop=("d",))
    assert plan_config(["a"], ["a"]) == ConfigPlan((), ())


def test_recompute_covers_exactly_the_changed_partitions_of_aggregated_names() -> None:
    current = {("S", "db"): {"p0": '{"h1": "ON", "h2": "OFF"}'}}
    changed = [("S", "db", "p0"), ("S", "db", "p0"), ("S", "db", "p9"), ("T", "db", "p0")]
    assert recompute(changed, ["S"], current) == (
        # p9 changed and nobody reports it any more: it is removed; T is not aggregated.
        ViewUpdate("S", "db", {"p0": '{"h1": "ON", "h2": "OFF"}', "p9": None}),
    )
    assert recompute(changed, [], current) == ()


def test_recompute_groups_updates_by_view() -> None:
    current = {("S", "a"): {"p": "{}"}, ("S", "b"): {"q": "{}"}}
    updates = recompute([("S", "b", "q"), ("S", "a", "p"), ("S", "a", "r")], ["S"], current)
    assert [(u.resource, u.partitions) for u in updates] == [
        ("a", {"p": "{}", "r": None}),
        ("b", {"q": "{}"}),
    ]


def test_a_full_build_lists_every_partition_and_empties_views_with_no_state_left() -> None:
    current = {("S", "db"): {"p0": '{"h1": "ON"}'}, ("S", "kv"): {"p3": '{"h2": "x"}'}}
    assert full_build("S", current, ["old", "db"]) == (
        ViewUpdate("S", "db", {"p0": '{"h1": "ON"}'}, complete=True),
        ViewUpdate("S", "kv", {"p3": '{"h2": "x"}'}, complete=True),
        ViewUpdate("S", "old", {}, complete=True),
    )


def test_view_payloads_round_trip() -> None:
    assert view_payload("S", "db", 12) == "S/db:12"
    assert parse_view_payload(view_payload("S", "db", 12)) == (("S", "db"), 12)
    assert parse_view_payload(view_payload("S", "db", None)) == (("S", "db"), None)
    for foreign in ("", "states", "S/db", "S:1", "/db:1", "S/:1", "S/db:x", "S/db:\u0661"):
        assert parse_view_payload(foreign) is None, foreign
