"""Customized state views (after Helix): participants report their states, operators choose which
state names are aggregated, listeners read views and wait for them to move; and the leader's
aggregation pass that turns logged changes into views.

Reports and removals are conditional on the version read; one without an expected version is
"whatever is there now" and retries a lost race a few times. A waiter never depends on a
notification alone: it re-reads at least every `poll_s`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from app.domain.errors import NotFound, WriteConflict
from app.domain.state_views import (
    AggregationBatch,
    CustomizedView,
    ParticipantSummary,
    ResourceStates,
    StatesWrite,
    StateViewConfig,
    ViewChange,
    ViewKey,
    ViewSummary,
    full_build,
    parse_view_payload,
    plan_config,
    recompute,
    validate_config,
    validate_participant,
    validate_report,
    validate_resource,
    validate_state_name,
)
from app.ports import Clock, StateViewStore
from app.waiting import wait_event

DEFAULT_POLL_S = 0.5
MAX_WAIT_MS = 60_000
# Change-log entries per aggregation batch: 100 hosts replacing 1,000 partitions each fit in one,
# so each partition is recomputed once however many hosts changed it.
DEFAULT_BATCH = 100_000
_ATTEMPTS = 5  # for writes without an expected version: a participant racing itself is rare


class StateViewService:
    def __init__(self, store: StateViewStore, clock: Clock, *, poll_s: float = DEFAULT_POLL_S) -> None:
        self._store = store
        self._clock = clock
        self._poll_s = poll_s
        self._waiters: dict[ViewKey, set[asyncio.Event]] = {}

    # --- participants -----------------------------------------------------------------------

    async def report(
        self,
        participant: str,
        state_name: str,
        resource: str,
        partitions: Mapping[str, str | None],
        *,
        merge: bool,
        expected_version: int | None = None,
    ) -> StatesWrite:
        """Replaces the participant's partition map of (state name, resource), or with `merge`
        changes only the partitions given (None removes one). With `expected_version` the
        write is conditional on it (WriteConflict, also when there is no record)."""
        _check_key(participant, state_name, resource)
        validate_report(partitions, removals=merge)
        for attempt in range(_ATTEMPTS):
            current = await self._store.resource_version(participant, state_name, resource)
            if expected_version is not None and current != expected_version:
                raise WriteConflict(
                    f"the states of {participant} for {state_name}/{resource} are at version "
                    f"{current}, not {expected_version}"
                )
            if current is None and not any(s is not None for s in partitions.values()):
                # Nothing to remove from a record that does not exist, and nothing to create.
                return StatesWrite(None, 0, 0, self._clock.now_ms())
            try:
                return await self._store.write_states(
                    participant,
                    state_name,
                    resource,
                    partitions,
                    replace=not merge,
                    expected_version=current,
                    now_ms=self._clock.now_ms(),
                )
            except WriteConflict:
                if expected_version is not None or attempt == _ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")

    async def states(
        self, participant: str, state_name: str | None = None, resource: str | None = None
    ) -> list[ResourceStates]:
        validate_participant(participant)
        if state_name is not None:
            validate_state_name(state_name)
        if resource is not None:
            validate_resource(resource)
        return await self._store.participant_states(participant, state_name, resource)

    async def resource_states(self, participant: str, state_name: str, resource: str) -> ResourceStates:
        _check_key(participant, state_name, resource)
        found = await self._store.participant_states(participant, state_name, resource)
        if not found:
            raise NotFound(f"{participant} reports no {state_name} states for {resource}")
        return found[0]

    async def participants(self) -> list[ParticipantSummary]:
        return await self._store.participants()

    async def remove_participant(self, participant: str) -> int:
        """Removes every state of the participant (its views drop it at the next aggregation);
        NotFound when it has none. Returns how many (state name, resource) records went."""
        validate_participant(participant)
        for attempt in range(_ATTEMPTS):
            expected = await self._store.participant_versions(participant)
            if not expected:
                raise NotFound(f"participant {participant} has no customized states")
            try:
                return await self._store.remove_participant(participant, expected)
            except WriteConflict:
                if attempt == _ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")

    # --- the config -------------------------------------------------------------------------

    async def config(self) -> StateViewConfig:
        return await self._store.get_config()

    async def set_config(self, state_names: Sequence[str], expected_version: int) -> StateViewConfig:
        """WriteConflict when the config moved since `expected_version` was read."""
        names = validate_config(state_names)
        now = self._clock.now_ms()
        version = await self._store.set_config(names, expected_version, now)
        return StateViewConfig(names, version, now)

    # --- views and their listeners ----------------------------------------------------------

    async def views(self, state_name: str | None = None) -> list[ViewSummary]:
        if state_name is not None:
            validate_state_name(state_name)
        return await self._store.list_views(state_name)

    async def view(self, state_name: str, resource: str) -> CustomizedView:
        validate_state_name(state_name)
        validate_resource(resource)
        return await self._store.get_view(state_name, resource)

    async def wait_view(
        self, state_name: str, resource: str, after_version: int, timeout_ms: int
    ) -> CustomizedView:
        """The view once its version is above `after_version`, else (after `timeout_ms`) the view
        as it is. NotFound when it does not exist then, or at once when it existed when the
        wait began and was removed meanwhile."""
        validate_state_name(state_name)
        validate_resource(resource)
        key = (state_name, resource)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0, min(timeout_ms, MAX_WAIT_MS)) / 1000
        existed: bool | None = None
        while True:
            # Registered before the read, so a change between the read and the wait is not lost.
            event = asyncio.Event()
            self._waiters.setdefault(key, set()).add(event)
            try:
                version = await self._store.view_version(state_name, resource)
                if existed is None:
                    existed = version is not None
                if version is not None and version > after_version:
                    view = await self._store.get_view(state_name, resource)
                    if view.version > after_version:
                        return view
                    continue
                if version is None and existed:
                    raise NotFound(f"customized view {state_name}/{resource} was removed")
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return await self._store.get_view(state_name, resource)
                await wait_event(event, min(self._poll_s, remaining))
            finally:
                events = self._waiters.get(key)
                if events is not None:
                    events.discard(event)
                    if not events:
                        del self._waiters[key]

    def view_changed(self, payload: str) -> None:
        """The `pgc_views` notification callback: wakes the waiters of that view."""
        parsed = parse_view_payload(payload)
        if parsed is None:
            self.wake_all()
            return
        for event in self._waiters.get(parsed[0], ()):
            event.set()

    def wake_all(self, *_args: object) -> None:
        """After a reconnection notifications may have been lost: everyone re-reads."""
        for events in self._waiters.values():
            for event in events:
                event.set()


# --- the aggregation pass -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AggregationSummary:
    """What one pass landed (a fenced pass: what landed before its term was found gone)."""

    skipped: bool = False  # not the leader: nothing read or written
    fenced: bool = False  # the leader term moved on: the pass stopped, its last batch landed nowhere
    built: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()
    changes: int = 0  # change-log entries consumed
    partitions: int = 0  # view partitions recomputed
    views: tuple[ViewChange, ...] = ()  # views whose version moved (version None: removed)


@dataclass
class _Pass:
    built: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    changes: int = 0
    partitions: int = 0
    views: list[ViewChange] = field(default_factory=list)

    def summary(self, *, fenced: bool = False) -> AggregationSummary:
        return AggregationSummary(
            fenced=fenced,
            built=tuple(self.built),
            dropped=tuple(self.dropped),
            changes=self.changes,
            partitions=self.partitions,
            views=tuple(self.views),
        )


class ViewAggregation:
    """One pass: apply the config (build the views of newly aggregated state names from every
    stored state, drop those of names no longer aggregated), then recompute exactly the
    partitions the change log names, each once per batch of at most `batch` entries. Every
    batch is one fenced transaction that also deletes the entries it covered, so a crash or a
    lost term leaves them for the next pass; recomputing from the stored states makes a replay
    harmless."""

    def __init__(self, store: StateViewStore, clock: Clock, *, batch: int = DEFAULT_BATCH) -> None:
        if batch <= 0:
            raise ValueError("the aggregation batch must be positive")
        self._store = store
        self._clock = clock
        self._batch = batch

    async def run(self, term: int) -> AggregationSummary:
        done = _Pass()
        config = await self._store.get_config()
        built = await self._store.built_names()
        plan = plan_config(config.state_names, built)
        if plan.drop:
            expected = await self._store.views_of_names(plan.drop)
            batch = AggregationBatch(dropped=plan.drop, expected=dict(expected))
            if not await self._apply(term, batch, done):
                return done.summary(fenced=True)
            done.dropped += plan.drop
        for state_name in plan.build:
            current = await self._store.name_states(state_name)
            existing = await self._store.views_of_names([state_name])
            updates = full_build(state_name, current, [r for _, r in existing])
            batch = AggregationBatch(updates=updates, built=(state_name,), expected=dict(existing))
            if not await self._apply(term, batch, done):
                return done.summary(fenced=True)
            done.built.append(state_name)
            done.partitions += sum(len(u.partitions) for u in updates)
        aggregated = (built | set(plan.build)) - set(plan.drop)
        while True:
            pending = await self._store.take_changes(self._batch)
            if not pending:
                break
            seqs = tuple(seq for change in pending for seq in change.seqs)
            keys = {(c.state_name, c.resource, c.partition) for c in pending if c.state_name in aggregated}
            updates = recompute(keys, aggregated, await self._store.partition_states(keys))
            expected = await self._store.view_versions((u.state_name, u.resource) for u in updates)
            batch = AggregationBatch(updates=updates, consumed=seqs, expected=dict(expected))
            if not await self._apply(term, batch, done):
                return done.summary(fenced=True)
            done.changes += len(seqs)
            done.partitions += len(keys)
            if len(seqs) < self._batch:
                break
        return done.summary()

    async def _apply(self, term: int, batch: AggregationBatch, done: _Pass) -> bool:
        """False when the term is gone (nothing of the batch landed)."""
        changes = await self._store.apply_aggregation(term, batch, self._clock.now_ms())
        if changes is None:
            return False
        done.views += changes
        return True


def _check_key(participant: str, state_name: str, resource: str) -> None:
    validate_participant(participant)
    validate_state_name(state_name)
    validate_resource(resource)
