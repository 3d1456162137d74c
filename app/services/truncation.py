"""truncateStream: the cut must be valid and not behind the current truncation point; the new
truncation record is computed and stored "updating" together with its request (outbox); the
caller waits until the workflow completed it."""

from __future__ import annotations

from collections.abc import Mapping

from app.domain.errors import FinalFailure, InvalidInput, NotFound, WriteConflict
from app.domain.names import require_present
from app.domain.records import SEALED_SIZE_SHARD_EPOCHS
from app.domain.requests import NewRequest, RequestKind, truncation_payload
from app.domain.streamcuts import (
    CutVerdict,
    EpochWindow,
    new_truncation_span,
    next_truncation,
    truncation_epoch_range,
)
from app.domain.validation import check_truncation_cut
from app.metrics.record import operation, outcome_is
from app.services.stream_updates import CLOSED_BY_SEAL, UpdateOutcome
from app.services.stream_workflow import StreamWorkflows


class Truncation:
    def __init__(self, workflows: StreamWorkflows) -> None:
        self._workflows = workflows
        self._streams = workflows.streams
        self._clock = workflows.clock

    @operation("stream", "truncated", "truncate_failed", outcome_is(UpdateOutcome.SUCCESS))
    async def truncate_stream(self, scope: str, name: str, cut: Mapping[int, int]) -> UpdateOutcome:
        require_present("scope", scope)
        require_present("stream", name)
        if not cut:
            raise InvalidInput("the stream cut must not be empty")
        check_truncation_cut(cut)
        since = self._clock.now_ms()
        try:
            if (await self._streams.get_state(scope, name)).value in CLOSED_BY_SEAL:
                return UpdateOutcome.STREAM_SEALED
            previous = await self._streams.get_truncation(scope, name)
            if previous.value.updating:
                return UpdateOutcome.FAILURE
            low, high = truncation_epoch_range(previous.value, cut)
            window = EpochWindow.of(await self._streams.get_epochs(scope, name, low, high))
            if not window.covers(low) or not window.covers(high):
                return UpdateOutcome.FAILURE
            span = new_truncation_span(previous.value, cut, window)
            if isinstance(span, CutVerdict):
                return UpdateOutcome.FAILURE
            sizes = await self._sealed_sizes(scope, name, low, high)
            record = next_truncation(previous.value, cut, span, window, sizes)
            request = NewRequest(
                RequestKind.TRUNCATE_STREAM,
                scope,
                name,
                self._clock.now_ms(),
                payload=truncation_payload(previous.value),
            )
            try:
                await self._streams.set_truncation(scope, name, record, previous.version, request=request)
            except WriteConflict:
                return UpdateOutcome.FAILURE
            await self._workflows.wait(
                RequestKind.TRUNCATE_STREAM, scope, name, since, lambda: self._is_truncated(scope, name)
            )
        except FinalFailure:
            return UpdateOutcome.FAILURE  # parked: the stream's truncation is as it was
        except NotFound:
            return UpdateOutcome.STREAM_NOT_FOUND
        except InvalidInput:
            return UpdateOutcome.FAILURE  # ids that name no segment of this stream
        return UpdateOutcome.SUCCESS

    async def _sealed_sizes(self, scope: str, name: str, low: int, high: int) -> dict[int, int]:
        sizes: dict[int, int] = {}
        for shard in range(low // SEALED_SIZE_SHARD_EPOCHS, high // SEALED_SIZE_SHARD_EPOCHS + 1):
            found = await self._streams.get_sealed_size_shard(scope, name, shard)
            if found is not None:
                sizes.update(found.value)
        return sizes

    async def _is_truncated(self, scope: str, name: str) -> bool:
        return not (await self._streams.get_truncation(scope, name)).value.updating
