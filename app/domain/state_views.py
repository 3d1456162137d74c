"""Customized state views (after Apache Helix's CustomizedState / CustomizedView): the rules for
names and reported states, and the aggregation plan (which views to build, drop or recompute).

Invariant: a view partition maps each participant to exactly the state it last reported for that
(state name, resource, partition); a partition no participant reports is absent from the view,
and a view with no partition does not exist.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from app.domain.errors import InvalidInput

MAX_NAME_LENGTH = 128  # state names and resources: they are path segments and NOTIFY payloads
MAX_PARTICIPANT_LENGTH = 255
MAX_PARTITION_LENGTH = 255
MAX_STATE_LENGTH = 4096  # characters; room for a small JSON document
MAX_PARTITIONS_PER_REPORT = 10_000
MAX_AGGREGATED_STATE_NAMES = 256

_NAME = re.compile(r"[A-Za-z0-9_.\-]+")

# A partition's view: participant -> state.
PartitionView = dict[str, str]


def _check_length(kind: str, value: str, maximum: int) -> None:
    if not value:
        raise InvalidInput(f"{kind} must not be empty")
    if len(value) > maximum:
        raise InvalidInput(f"{kind} must be at most {maximum} characters, got {len(value)}")


def validate_state_name(name: str) -> str:
    _check_length("state name", name, MAX_NAME_LENGTH)
    if _NAME.fullmatch(name) is None:
        raise InvalidInput(f"invalid state name {name!r}: use a-z, A-Z, 0-9, '_', '.', '-'")
    return name


def validate_resource(name: str) -> str:
    _check_length("resource", name, MAX_NAME_LENGTH)
    if _NAME.fullmatch(name) is None:
        raise InvalidInput(f"invalid resource {name!r}: use a-z, A-Z, 0-9, '_', '.', '-'")
    return name


def _printable_token(kind: str, value: str, maximum: int) -> str:
    _check_length(kind, value, maximum)
    if "/" in value or not value.isprintable() or any(ch.isspace() for ch in value):
        raise InvalidInput(f"{kind} must not contain '/', whitespace or control characters, got {value!r}")
    return value


def validate_participant(participant: str) -> str:
    """A participant id; a segment store is `host:port` (`[v6]:port`), so ':' and brackets pass."""
    return _printable_token("participant", participant, MAX_PARTICIPANT_LENGTH)


def validate_partition(partition: str) -> str:
    return _printable_token("partition", partition, MAX_PARTITION_LENGTH)


def validate_state(partition: str, state: str) -> str:
    """Any text, JSON included; PostgreSQL text cannot hold NUL, so neither can a state."""
    if not state:
        raise InvalidInput(f"the state of partition {partition!r} must not be empty")
    if len(state) > MAX_STATE_LENGTH:
        raise InvalidInput(
            f"the state of partition {partition!r} must be at most {MAX_STATE_LENGTH} characters, "
            f"got {len(state)}"
        )
    if "\x00" in state:
        raise InvalidInput(f"the state of partition {partition!r} must not contain NUL characters")
    return state


def validate_report(partitions: Mapping[str, str | None], *, removals: bool) -> None:
    """A report's partition map; None (a removal) only where `removals` (a merge) allows it."""
    if len(partitions) > MAX_PARTITIONS_PER_REPORT:
        raise InvalidInput(
            f"a report may carry at most {MAX_PARTITIONS_PER_REPORT} partitions, got {len(partitions)}"
        )
    for partition, state in partitions.items():
        validate_partition(partition)
        if state is None:
            if not removals:
                raise InvalidInput(f"partition {partition!r} has no state (null removes only in a merge)")
            continue
        validate_state(partition, state)


def validate_config(names: Iterable[str]) -> tuple[str, ...]:
    """The aggregated state names, deduplicated and sorted."""
    unique = sorted({validate_state_name(name) for name in names})
    if len(unique) > MAX_AGGREGATED_STATE_NAMES:
        raise InvalidInput(
            f"at most {MAX_AGGREGATED_STATE_NAMES} state names can be aggregated, got {len(unique)}"
        )
    return tuple(unique)


# --- records ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ResourceStates:
    """One participant's report for one (state name, resource): Helix's CustomizedState record."""

    participant: str
    state_name: str
    resource: str
    partitions: dict[str, str]
    version: int
    updated_at: int  # its last report (changing a state or not), ms since the epoch


@dataclass(frozen=True, slots=True)
class StatesWrite:
    """What a report left: the record's new version (None: no partition left, record removed)."""

    version: int | None
    partition_count: int
    changed: int  # partitions whose state was set, changed or removed by this report
    updated_at: int


@dataclass(frozen=True, slots=True)
class ParticipantSummary:
    participant: str
    resources: int
    partitions: int
    last_report_at: int


@dataclass(frozen=True, slots=True)
class StateViewConfig:
    """Helix's CustomizedStateConfig: the state names the leader aggregates into views."""

    state_names: tuple[str, ...]
    version: int
    updated_at: int


@dataclass(frozen=True, slots=True)
class ViewSummary:
    state_name: str
    resource: str
    version: int
    updated_at: int
    partition_count: int


@dataclass(frozen=True, slots=True)
class CustomizedView:
    """Helix's CustomizedView for one (state name, resource): partition -> participant -> state.
    Versions come from one database sequence, so a view that is removed and built again still
    moves forward and a listener's `version > N` never misses it."""

    state_name: str
    resource: str
    version: int
    updated_at: int
    partitions: dict[str, PartitionView]


@dataclass(frozen=True, slots=True)
class StateChange:
    """Change-log entries a report left for one partition: it must be recomputed, and the
    entries `seqs` are covered once it is."""

    state_name: str
    resource: str
    partition: str
    seqs: tuple[int, ...]


ViewKey = tuple[str, str]  # (state name, resource)


@dataclass(frozen=True, slots=True)
class ViewUpdate:
    """New contents for some partitions of one view: each partition's participant -> state
    object as JSON text, folded by the store where the states are (the aggregator passes it
    through unparsed); None removes the partition. With `complete`, the listed partitions are
    the whole view and every other one is removed."""

    state_name: str
    resource: str
    partitions: dict[str, str | None]
    complete: bool = False


@dataclass(frozen=True, slots=True)
class AggregationBatch:
    """One fenced write of the aggregator: view updates, the change-log entries they cover,
    state names whose views were built from scratch or are dropped, and the version of every
    view the batch may touch as it was read (None: the view did not exist)."""

    updates: tuple[ViewUpdate, ...] = ()
    consumed: tuple[int, ...] = ()
    built: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()
    expected: dict[ViewKey, int | None] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ViewChange:
    """A view whose version moved; version None: the view was removed."""

    state_name: str
    resource: str
    version: int | None


# --- the aggregation plan ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConfigPlan:
    build: tuple[str, ...]  # aggregated now, no views yet: build them from every stored state
    drop: tuple[str, ...]  # no longer aggregated: remove their views


def plan_config(wanted: Iterable[str], built: Iterable[str]) -> ConfigPlan:
    wanted_set, built_set = set(wanted), set(built)
    return ConfigPlan(tuple(sorted(wanted_set - built_set)), tuple(sorted(built_set - wanted_set)))


def recompute(
    changed: Iterable[tuple[str, str, str]],
    aggregated: Iterable[str],
    current: Mapping[ViewKey, Mapping[str, str]],
) -> tuple[ViewUpdate, ...]:
    """The updates for changed (state name, resource, partition) keys of aggregated state names,
    given the current folded states of exactly those partitions: a changed partition nobody
    reports any more is removed. Keys of other state names are left out: their states are
    stored, not aggregated."""
    names = set(aggregated)
    wanted: dict[ViewKey, set[str]] = {}
    for state_name, resource, partition in changed:
        if state_name in names:
            wanted.setdefault((state_name, resource), set()).add(partition)
    updates = []
    for (state_name, resource), partitions in sorted(wanted.items()):
        states = current.get((state_name, resource), {})
        updates.append(ViewUpdate(state_name, resource, {p: states.get(p) for p in sorted(partitions)}))
    return tuple(updates)


def full_build(
    state_name: str, current: Mapping[ViewKey, Mapping[str, str]], existing: Iterable[str]
) -> tuple[ViewUpdate, ...]:
    """Every view of `state_name` from all its stored states (folded); views of `existing`
    resources with no state left are emptied, hence removed."""
    resources = {r for s, r in current if s == state_name} | set(existing)
    return tuple(
        ViewUpdate(
            state_name,
            resource,
            dict[str, str | None](current.get((state_name, resource), {})),
            complete=True,
        )
        for resource in sorted(resources)
    )


def view_payload(state_name: str, resource: str, version: int | None) -> str:
    """The `pgc_views` notification payload, as the database trigger writes it."""
    return f"{state_name}/{resource}:{'deleted' if version is None else version}"


def parse_view_payload(payload: str) -> tuple[ViewKey, int | None] | None:
    """(key, version or None when removed), or None for a payload that is not ours."""
    key, sep, version = payload.rpartition(":")
    state_name, slash, resource = key.partition("/")
    if not sep or not slash or not state_name or not resource:
        return None
    if version == "deleted":
        return (state_name, resource), None
    if not version.isascii() or not version.isdigit():
        return None
    return (state_name, resource), int(version)
