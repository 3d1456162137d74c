"""Manual scale and checkScale, as Pravega's controller runs them. Scale writes the epoch
transition record with its request (outbox) and returns STARTED at once; the caller polls
checkScale."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from app.domain.errors import DomainError, InvalidInput, NotFound, WriteConflict
from app.domain.ids import epoch_of, number_of
from app.domain.names import require_present
from app.domain.records import SegmentRecord, StreamState
from app.domain.requests import NewRequest, RequestKind
from app.domain.scale_rules import (
    KeyRange,
    ScaleCheck,
    ScaleStatus,
    check_scale,
    compute_epoch_transition,
    etr_matches,
    validate_scale,
)
from app.domain.validation import check_epoch_size, check_scale_request
from app.metrics.record import operation, status_is
from app.ports import Clock, RequestQueue, StreamStore


class ScaleOutcomeStatus(enum.Enum):
    STARTED = "STARTED"
    FAILURE = "FAILURE"
    PRECONDITION_FAILED = "PRECONDITION_FAILED"


@dataclass(frozen=True, slots=True)
class ScaleOutcome:
    status: ScaleOutcomeStatus
    segments: tuple[SegmentRecord, ...] = ()
    epoch: int = 0  # the active epoch at submission, as Pravega answers


class CheckScaleOutcome(enum.Enum):
    IN_PROGRESS = "IN_PROGRESS"
    SUCCESS = "SUCCESS"
    INVALID_INPUT = "INVALID_INPUT"
    INTERNAL_ERROR = "INTERNAL_ERROR"


_FAILED = ScaleOutcome(ScaleOutcomeStatus.FAILURE)
_CONFLICT_ATTEMPTS = 5


class Scaling:
    def __init__(self, streams: StreamStore, clock: Clock, requests: RequestQueue) -> None:
        self._streams = streams
        self._clock = clock
        self._requests = requests

    @operation("stream", "scaled", "scale_failed", status_is(ScaleOutcomeStatus.STARTED))
    async def scale(
        self, scope: str, name: str, to_seal: Sequence[int], new_ranges: Sequence[KeyRange], timestamp: int
    ) -> ScaleOutcome:
        require_present("scope", scope)
        require_present("stream", name)
        check_scale_request(to_seal, new_ranges, timestamp)
        try:
            # A lost race for the transition record is judged again on what won it: an
            # identical scale submitted at the same moment (a client retrying a timed-out call)
            # then gets the idempotent STARTED with the same segments, as a later repeat does.
            for _ in range(_CONFLICT_ATTEMPTS):
                try:
                    return await self._submit(scope, name, to_seal, new_ranges, timestamp)
                except WriteConflict:
                    continue
        except NotFound:
            return _FAILED
        return _FAILED

    async def _submit(
        self, scope: str, name: str, to_seal: Sequence[int], new_ranges: Sequence[KeyRange], timestamp: int
    ) -> ScaleOutcome:
        state = (await self._streams.get_state(scope, name)).value
        if state in (StreamState.SEALING, StreamState.SEALED):
            return _FAILED
        etr_v = await self._streams.get_epoch_transition(scope, name)
        if etr_v.value is not None:
            if etr_matches(etr_v.value, to_seal, new_ranges):
                return _started(etr_v.value.new_segments, etr_v.value.active_epoch, timestamp)
            return _FAILED
        _state, active = await self._streams.get_active_epoch(scope, name)
        config = (await self._streams.get_config(scope, name)).value
        check_epoch_size(len(active.segments), to_seal, len(new_ranges))
        check = validate_scale(active, to_seal, new_ranges, config.scaling.min_num_segments)
        if check == ScaleCheck.PRECONDITION_FAILED:
            return ScaleOutcome(ScaleOutcomeStatus.PRECONDITION_FAILED)
        if check == ScaleCheck.INVALID_RANGES:
            return _FAILED
        # The client's timestamp orders the epoch; one that is unset falls back to now.
        time = timestamp if timestamp > 0 else self._clock.now_ms()
        etr = compute_epoch_transition(active, to_seal, new_ranges, time)
        request = NewRequest(
            RequestKind.SCALE,
            scope,
            name,
            self._clock.now_ms(),
            payload={"manual": True, "epoch": active.epoch},
        )
        await self._streams.set_epoch_transition(scope, name, etr, etr_v.version, request=request)
        return _started(etr.new_segments, active.epoch, time)

    async def check_scale(self, scope: str, name: str, epoch: int) -> CheckScaleOutcome:
        require_present("scope", scope)
        require_present("stream", name)
        if epoch < 0:
            raise InvalidInput(f"epoch must not be negative, got {epoch}")
        try:
            state, active = await self._streams.get_active_epoch(scope, name)
            etr = (await self._streams.get_epoch_transition(scope, name)).value
            status = check_scale(epoch, active, state, etr)
            if status is ScaleStatus.IN_PROGRESS and etr is None and state is not StreamState.SCALING:
                # Nothing is running: the scale submitted on this epoch was parked (rolled back).
                parked = await self._requests.parked_since(scope, name, RequestKind.SCALE, 0)
                if parked is not None and parked.payload.get("epoch") == epoch:
                    return CheckScaleOutcome.INTERNAL_ERROR
        except NotFound:
            return CheckScaleOutcome.INVALID_INPUT
        except DomainError:
            return CheckScaleOutcome.INTERNAL_ERROR
        if status is ScaleStatus.IN_PROGRESS and state in (StreamState.SEALING, StreamState.SEALED):
            # A sealed stream never scales again: a scale still pending behind the seal is
            # discarded by its workflow, so the caller's wait ends here instead of polling forever.
            return CheckScaleOutcome.INVALID_INPUT
        return CheckScaleOutcome(status.value)


def _started(new_segments: Sequence[tuple[int, float, float]], epoch: int, time: int) -> ScaleOutcome:
    segments = tuple(
        SegmentRecord(number_of(sid), epoch_of(sid), time, start, end) for sid, start, end in new_segments
    )
    return ScaleOutcome(ScaleOutcomeStatus.STARTED, segments, epoch)
