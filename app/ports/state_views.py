"""The customized state views port: participants' states, the aggregation config and the views
the leader aggregates from them, fenced by its term."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from app.domain.state_views import (
    AggregationBatch,
    CustomizedView,
    ParticipantSummary,
    ResourceStates,
    StateChange,
    StatesWrite,
    StateViewConfig,
    ViewChange,
    ViewKey,
    ViewSummary,
)


class StateViewStore(Protocol):
    """Participants' customized states, the aggregation config and the aggregated views
    (app/store/state_views.py). Every write is conditional on the version read (WriteConflict);
    the aggregator's batch is also fenced by the leader term."""

    async def resource_version(self, participant: str, state_name: str, resource: str) -> int | None: ...

    async def write_states(
        self,
        participant: str,
        state_name: str,
        resource: str,
        partitions: Mapping[str, str | None],
        *,
        replace: bool,
        expected_version: int | None,
        now_ms: int,
    ) -> StatesWrite:
        """`replace`: `partitions` is the whole new map; else a merge where None removes a
        partition. `expected_version` None: the record must not exist yet. A record left with
        no partition is removed. Every partition changed is logged for the aggregator."""
        ...

    async def participant_states(
        self, participant: str, state_name: str | None = None, resource: str | None = None
    ) -> list[ResourceStates]:
        """By state name, then resource."""
        ...

    async def participants(self) -> list[ParticipantSummary]: ...

    async def participant_versions(self, participant: str) -> dict[ViewKey, int]: ...

    async def remove_participant(self, participant: str, expected: Mapping[ViewKey, int]) -> int:
        """Every record of the participant, at the versions read, or nothing (WriteConflict)."""
        ...

    async def get_config(self) -> StateViewConfig: ...

    async def set_config(self, state_names: Sequence[str], expected_version: int, now_ms: int) -> int:
        """The new version; WriteConflict when the config moved since read."""
        ...

    async def list_views(self, state_name: str | None = None) -> list[ViewSummary]: ...

    async def get_view(self, state_name: str, resource: str) -> CustomizedView:
        """Raises NotFound."""
        ...

    async def view_version(self, state_name: str, resource: str) -> int | None: ...

    async def built_names(self) -> frozenset[str]:
        """The state names whose views the aggregator has built."""
        ...

    async def take_changes(self, limit: int) -> list[StateChange]:
        """The oldest change-log entries (at most `limit`), grouped by partition."""
        ...

    async def partition_states(self, keys: Iterable[tuple[str, str, str]]) -> dict[ViewKey, dict[str, str]]:
        """The given (state name, resource, partition) keys' current participant -> state maps,
        as JSON object text (folded where the data is); partitions nobody reports are absent."""
        ...

    async def name_states(self, state_name: str) -> dict[ViewKey, dict[str, str]]:
        """The same for every stored state of one state name."""
        ...

    async def view_versions(self, keys: Iterable[ViewKey]) -> dict[ViewKey, int]: ...

    async def views_of_names(self, state_names: Sequence[str]) -> dict[ViewKey, int]: ...

    async def apply_aggregation(
        self, term: int, batch: AggregationBatch, now_ms: int
    ) -> list[ViewChange] | None:
        """None (nothing written) when `term` is no longer the leader's."""
        ...
