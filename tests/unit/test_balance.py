"""balance(): Pravega's UniformContainerBalancer as used for segment containers and buckets.

First map and single member -> uniform {i, i+n, ...}; departed members' keys to the least
loaded; spread at most one with the fewest moves; the same answer whatever the input order.
"""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest

from app.domain.cluster import balance

KEYS8 = list(range(8))


def loads(assignment: dict[int, str]) -> Counter[str]:
    return Counter(assignment.values())


def owned(assignment: dict[int, str], member: str) -> set[int]:
    return {key for key, owner in assignment.items() if owner == member}


def test_first_map_is_uniform_in_sorted_member_order() -> None:
    result = balance(KEYS8, {}, ["b", "c", "a"])
    assert result == {0: "a", 1: "b", 2: "c", 3: "a", 4: "b", 5: "c", 6: "a", 7: "b"}


def test_single_member_takes_every_key_whatever_the_map() -> None:
    current = {0: "a", 1: "b", 2: "a", 3: "c"}
    assert balance([0, 1, 2, 3], current, ["b"]) == dict.fromkeys([0, 1, 2, 3], "b")


def test_a_map_whose_owners_all_left_is_built_afresh() -> None:
    current = {k: "gone" for k in KEYS8}
    assert balance(KEYS8, current, ["x", "y"]) == balance(KEYS8, {}, ["x", "y"])


def test_no_members_assigns_nothing() -> None:
    assert balance(KEYS8, {0: "a"}, []) == {}


def test_departed_members_keys_go_to_the_least_loaded() -> None:
    current = {0: "a", 1: "a", 2: "a", 3: "a", 4: "b", 5: "c", 6: "c", 7: "c"}
    result = balance(KEYS8, current, ["a", "b"])
    # b held one key, a four: each of c's three goes to b, the least loaded at every step.
    assert owned(result, "a") == {0, 1, 2, 3}
    assert owned(result, "b") == {4, 5, 6, 7}


def test_orphans_spread_over_equally_loaded_survivors() -> None:
    current = {0: "a", 1: "b", 2: "c", 3: "a", 4: "b", 5: "c"}
    result = balance(list(range(6)), current, ["b", "c"])
    assert owned(result, "b") >= {1, 4} and owned(result, "c") >= {2, 5}
    assert loads(result) == Counter({"b": 3, "c": 3})


def test_a_join_gets_a_fair_share_and_only_that_moves() -> None:
    current = balance(list(range(12)), {}, ["a", "b", "c"])
    result = balance(list(range(12)), current, ["a", "b", "c", "d"])
    assert loads(result) == Counter({"a": 3, "b": 3, "c": 3, "d": 3})
    moved = {k for k in result if result[k] != current[k]}
    assert len(moved) == 3 and all(result[k] == "d" for k in moved)


def test_a_join_with_an_uneven_count_leaves_spread_one() -> None:
    current = balance([0, 1, 2, 3], {}, ["a", "b"])
    result = balance([0, 1, 2, 3], current, ["a", "b", "c"])
    assert max(loads(result).values()) - min(loads(result).values()) == 1
    assert sum(result[k] != current[k] for k in result) == 1


def test_a_balanced_map_with_the_same_members_is_kept() -> None:
    current = {0: "b", 1: "a", 2: "b", 3: "a", 4: "c"}
    assert balance([0, 1, 2, 3, 4], current, ["a", "b", "c"]) == current


def test_keys_no_longer_wanted_are_dropped_and_new_ones_assigned() -> None:
    current = {0: "a", 1: "b", 9: "a"}
    result = balance([0, 1, 2, 3], current, ["a", "b"])
    assert set(result) == {0, 1, 2, 3}
    assert result[0] == "a" and result[1] == "b"
    assert loads(result) == Counter({"a": 2, "b": 2})


def test_the_answer_does_not_depend_on_input_order() -> None:
    current = {0: "a", 1: "a", 2: "a", 3: "b", 4: "c", 5: "c", 6: "a", 7: "d"}
    expected = balance(KEYS8, current, ["a", "b", "c", "e"])
    shuffled = list(current.items())
    rng = random.Random(7)
    for _ in range(20):
        rng.shuffle(shuffled)
        members = ["e", "c", "b", "a", "c"]
        rng.shuffle(members)
        assert balance(KEYS8, dict(shuffled), members) == expected


def _fewest_moves(kept_loads: list[int], total: int, members: int) -> int:
    """Moves needed to bring the loads to a spread of one: the biggest get the ceiling share."""
    low, extra = divmod(total, members)
    targets = [low + 1] * extra + [low] * (members - extra)
    return sum(
        max(0, load - target) for load, target in zip(sorted(kept_loads, reverse=True), targets, strict=True)
    )


@pytest.mark.parametrize("seed", range(40))
def test_random_membership_changes_keep_every_invariant(seed: int) -> None:
    rng = random.Random(seed)
    names = [f"m{i}" for i in range(8)]
    keys = list(range(rng.randint(1, 40)))
    before = rng.sample(names, rng.randint(1, 6))
    current = balance(keys, {}, before)
    after = sorted(set(rng.sample(names, rng.randint(1, 6))))
    result = balance(keys, current, after)

    assert set(result) == set(keys)
    assert set(result.values()) <= set(after)
    counts = [loads(result).get(m, 0) for m in after]
    assert max(counts) - min(counts) <= 1
    assert result == balance(keys, current, list(reversed(after)))

    survivors = [m for m in after if m in before]
    if survivors and len(after) > 1:
        orphans = [k for k in keys if current[k] not in after]
        kept_moved = sum(1 for k in keys if current[k] in after and result[k] != current[k])
        # Orphans fill the least loaded first, so kept keys move only as far as balance needs.
        kept_loads = [loads(current).get(m, 0) for m in after]
        assert kept_moved <= _fewest_moves(kept_loads, len(keys), len(after))
        if not orphans:
            assert kept_moved == _fewest_moves(kept_loads, len(keys), len(after))


def test_ceiling_of_the_share_is_never_exceeded() -> None:
    keys = list(range(10))
    current = {k: "a" for k in keys}
    result = balance(keys, current, ["a", "b", "c"])
    assert max(loads(result).values()) == math.ceil(10 / 3)
