"""The stream state machine of Pravega's State.java: which transitions are allowed.

Every state change goes through `check_transition`, so no workflow can invent a path.
"""

from app.domain.errors import OperationNotAllowed
from app.domain.records import StreamState

_S = StreamState
_ALLOWED: dict[StreamState, frozenset[StreamState]] = {
    _S.UNKNOWN: frozenset({_S.CREATING}),
    _S.CREATING: frozenset({_S.ACTIVE}),
    _S.ACTIVE: frozenset({_S.SCALING, _S.TRUNCATING, _S.COMMITTING_TXN, _S.SEALING, _S.SEALED, _S.UPDATING}),
    _S.SCALING: frozenset({_S.ACTIVE}),
    _S.COMMITTING_TXN: frozenset({_S.ACTIVE}),
    _S.TRUNCATING: frozenset({_S.ACTIVE}),
    _S.UPDATING: frozenset({_S.ACTIVE}),
    _S.SEALING: frozenset({_S.SEALED}),
    _S.SEALED: frozenset(),
}


def is_allowed(current: StreamState, new: StreamState) -> bool:
    return current == new or new in _ALLOWED[current]


def check_transition(current: StreamState, new: StreamState) -> None:
    if not is_allowed(current, new):
        raise OperationNotAllowed(f"stream state cannot move from {current.value} to {new.value}")
