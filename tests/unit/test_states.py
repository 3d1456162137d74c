"""The stream state machine, checked against Pravega's whole transition table: every pair of
states is either an allowed transition (listed there, or a self-transition) or refused."""

from __future__ import annotations

import itertools

import pytest

from app.domain.errors import OperationNotAllowed
from app.domain.records import StreamState as S
from app.domain.states import check_transition, is_allowed

TABLE: dict[S, set[S]] = {
    S.UNKNOWN: {S.CREATING},
    S.CREATING: {S.ACTIVE},
    S.ACTIVE: {S.SCALING, S.TRUNCATING, S.COMMITTING_TXN, S.SEALING, S.SEALED, S.UPDATING},
    S.SCALING: {S.ACTIVE},
    S.COMMITTING_TXN: {S.ACTIVE},
    S.TRUNCATING: {S.ACTIVE},
    S.UPDATING: {S.ACTIVE},
    S.SEALING: {S.SEALED},
    S.SEALED: set(),
}


@pytest.mark.parametrize(("current", "new"), list(itertools.product(S, S)), ids=lambda s: s.value)
def test_every_pair_of_states(current: S, new: S) -> None:
    allowed = current == new or new in TABLE[current]
    assert is_allowed(current, new) is allowed
    if allowed:
        check_transition(current, new)
    else:
        with pytest.raises(OperationNotAllowed):
            check_transition(current, new)


def test_the_table_names_every_state() -> None:
    assert set(TABLE) == set(S)
