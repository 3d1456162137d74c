"""CREATE_KVT and DELETE_KVT processing step by step, crashes mid-request, and the deletion of a
scope's tables.

No background workers run: each test runs the pending requests itself with a real RequestRunner
over the table handlers (one attempt each, in id order). A crash is simulated two ways: a
failpoint that raises after a step (the attempt fails and the request stays queued), and one
that parks the handler, whose task is then cancelled mid-request, as a killed process would
stop; a fresh runner must then finish the work with every table segment created exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import uuid
from collections.abc import AsyncIterator

import pytest

from app.domain.cluster import DEFAULT_COUNTS
from app.domain.errors import NotFound
from app.domain.ids import segment_id
from app.domain.kvtables import KvtConfig, KvtRecord, KvtState, table_segment_name
from app.domain.records import ScopeState
from app.domain.requests import Processor, Request
from app.services.kvtables import create_request, delete_request
from app.store.kvtables import PgKvtStore
from app.testing.controller import TEST_SETTINGS, Services, running_controller
from workers import failpoints
from workers.handlers import kvtables as kvt_handlers_module
from workers.handlers.common import WorkflowDeps
from workers.handlers.kvtables import delete_kvts_in_scope, kvt_handlers
from workers.runner import RequestRunner

SC = "kv"
ALL_BUCKETS = list(range(DEFAULT_COUNTS.requests))
CONFIG = KvtConfig(partition_count=4, primary_key_length=8, secondary_key_length=2, rollover_size_bytes=4096)


@dataclasses.dataclass
class Env:
    services: Services
    kvts: PgKvtStore
    deps: WorkflowDeps


@pytest.fixture
async def env(db_url: str) -> AsyncIterator[Env]:
    async with running_controller(db_url, workers=False) as services:
        await services.scopes.create_scope(SC)
        deps = WorkflowDeps(
            services.stream_store,
            services.scope_store,
            services.segment_store,
            services.clock,
            services.txn_store,
        )
        yield Env(services, PgKvtStore(services.pool), deps)


def runner(env: Env) -> RequestRunner:
    """A fresh runner, as a restarted process would build."""
    return RequestRunner(
        env.services.requests,
        kvt_handlers(env.deps, env.kvts),
        env.services.clock,
        max_failures=TEST_SETTINGS.request_max_failures,
    )


async def pending(env: Env) -> list[Request]:
    return await env.services.requests.pending(Processor.REQUESTS, ALL_BUCKETS, [], 100)


async def run_pending(env: Env) -> tuple[int, int]:
    """One attempt for each pending request, in id order; (finished, still queued)."""
    each = runner(env)
    finished = left = 0
    for request in await pending(env):
        outcome = await each.attempt(dataclasses.replace(request, not_before=0))
        finished, left = (finished + 1, left) if outcome is None else (finished, left + 1)
    return finished, left


async def start_create(env: Env, name: str = "t", config: KvtConfig = CONFIG, scope: str = SC) -> KvtRecord:
    now = env.services.clock.now_ms()
    proposed = KvtRecord(scope, name, str(uuid.uuid4()), config, KvtState.CREATING, now, 0)
    creation = await env.kvts.create_kvt(proposed, create_request(proposed, now))
    assert creation.created
    return creation.record.value


async def start_delete(env: Env, name: str = "t") -> KvtRecord:
    current = await env.kvts.get_kvt(SC, name)
    request = delete_request(current.value, env.services.clock.now_ms())
    await env.kvts.set_kvt_state(
        SC, name, current.value.id, KvtState.DELETING, current.version, request=request
    )
    return current.value


async def table_segments(env: Env, scope: str = SC) -> list[tuple[str, int, int]]:
    """(name, key length, rollover) of every table segment the segment store holds."""
    rows = await env.services.pool.fetch(
        "SELECT name, key_length, rollover_size_bytes FROM embedded_segments WHERE kind = 'table' "
        "AND name LIKE $1 ORDER BY name",
        f"{scope}/%",
    )
    return [(r["name"], r["key_length"], r["rollover_size_bytes"]) for r in rows]


def expected_segments(name: str, numbers: range, config: KvtConfig = CONFIG) -> list[tuple[str, int, int]]:
    return sorted(
        (table_segment_name(SC, name, segment_id(n, 0)), config.key_length, config.rollover_size_bytes)
        for n in numbers
    )


async def state(env: Env, name: str = "t") -> KvtState | None:
    try:
        return (await env.kvts.get_kvt(SC, name)).value.state
    except NotFound:
        return None


# --- the plain workflows ---------------------------------------------------------------------------


async def test_create_makes_every_table_segment_then_activates(env: Env) -> None:
    record = await start_create(env)
    assert await table_segments(env) == []

    assert await run_pending(env) == (1, 0)

    assert await state(env) == KvtState.ACTIVE
    assert await table_segments(env) == expected_segments("t", range(4))
    assert [name for name, _, _ in await table_segments(env)] == sorted(record.segment_names)
    assert await pending(env) == []


async def test_delete_removes_segments_and_metadata_and_records_the_last_number(env: Env) -> None:
    await start_create(env)
    await run_pending(env)
    await start_delete(env)

    assert await run_pending(env) == (1, 0)

    assert await state(env) is None
    assert await table_segments(env) == []
    deleted = await env.kvts.get_deleted_kvt(SC, "t")
    assert deleted is not None and deleted.value == 3


async def test_a_recreated_table_numbers_its_segments_after_the_deleted_one(env: Env) -> None:
    await start_create(env)
    await run_pending(env)
    await start_delete(env)
    await run_pending(env)

    again = await start_create(env, config=KvtConfig(2, 4))
    assert again.start_number == 4
    await run_pending(env)
    assert await table_segments(env) == expected_segments("t", range(4, 6), KvtConfig(2, 4))
    assert [s.id for s in again.segments] == [segment_id(4, 0), segment_id(5, 0)]

    # A second deletion keeps the highest number ever used.
    await start_delete(env)
    await run_pending(env)
    deleted = await env.kvts.get_deleted_kvt(SC, "t")
    assert deleted is not None and deleted.value == 5


async def test_a_create_deleted_before_it_ran_creates_nothing(env: Env) -> None:
    await start_create(env)
    await start_delete(env)  # same key: runs after the create, in id order

    assert await run_pending(env) == (2, 0)

    assert await state(env) is None
    assert await table_segments(env) == []


async def test_requests_naming_an_earlier_incarnation_leave_a_recreated_table_alone(env: Env) -> None:
    old = await start_create(env)
    await run_pending(env)
    await start_delete(env)
    await run_pending(env)
    new = await start_create(env)
    await run_pending(env)

    async def mark_started() -> None:
        return None

    for kind, handler in kvt_handlers(env.deps, env.kvts).items():
        stale = Request(0, kind, SC, "t_kvtable", 0, {"kvt": "t", "id": old.id}, 0, 0, 0, False, None, 0)
        await handler.handle(stale, mark_started)
    current = await env.kvts.get_kvt(SC, "t")
    assert (current.value.id, current.value.state) == (new.id, KvtState.ACTIVE)
    assert await table_segments(env) == expected_segments("t", range(4, 8))


# --- crashes: a failing step, then a fresh runner ---------------------------------------------------


@pytest.mark.parametrize("point", ["kvt_create.after_first_segment", "kvt_create.after_segments"])
async def test_create_failing_after_a_step_is_finished_by_the_next_attempt(
    env: Env, point: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    await start_create(env)
    monkeypatch.setitem(failpoints._ENABLED, point, "raise")

    assert await run_pending(env) == (0, 1)
    created = await table_segments(env)
    assert len(created) == (1 if point.endswith("first_segment") else 4)
    assert await state(env) == KvtState.CREATING
    [queued] = await pending(env)
    assert queued.last_error is not None and point in queued.last_error

    monkeypatch.delitem(failpoints._ENABLED, point)
    assert await run_pending(env) == (1, 0)
    assert await state(env) == KvtState.ACTIVE
    assert await table_segments(env) == expected_segments("t", range(4))


@pytest.mark.parametrize(
    "point", ["kvt_delete.after_first_segment", "kvt_delete.after_segments", "kvt_delete.after_record"]
)
async def test_delete_failing_after_a_step_is_finished_by_the_next_attempt(
    env: Env, point: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    await start_create(env)
    await run_pending(env)
    await start_delete(env)
    monkeypatch.setitem(failpoints._ENABLED, point, "raise")

    assert await run_pending(env) == (0, 1)
    assert await state(env) == KvtState.DELETING
    assert len(await table_segments(env)) == (3 if point.endswith("first_segment") else 0)
    recorded = await env.kvts.get_deleted_kvt(SC, "t")
    assert (recorded is not None) == point.endswith("after_record")

    monkeypatch.delitem(failpoints._ENABLED, point)
    assert await run_pending(env) == (1, 0)
    assert await state(env) is None
    assert await table_segments(env) == []
    recorded = await env.kvts.get_deleted_kvt(SC, "t")
    assert recorded is not None and (recorded.value, recorded.version) == (3, 0)


async def test_a_finished_request_run_again_changes_nothing(env: Env) -> None:
    record = await start_create(env)
    [create] = await pending(env)
    await run_pending(env)
    handlers = kvt_handlers(env.deps, env.kvts)

    async def mark_started() -> None:
        return None

    before = await env.kvts.get_kvt(SC, "t")
    await handlers[create.kind].handle(create, mark_started)  # redelivered after completion
    assert await env.kvts.get_kvt(SC, "t") == before
    assert await table_segments(env) == expected_segments("t", range(4))

    await start_delete(env)
    [delete] = await pending(env)
    await run_pending(env)
    await handlers[delete.kind].handle(delete, mark_started)
    await handlers[create.kind].handle(create, mark_started)
    assert await state(env) is None
    assert await table_segments(env) == []
    assert record.id == create.payload["id"]


# --- crashes: the handler's task dies mid-request ---------------------------------------------------


async def _cancel_mid_request(env: Env, point: str, monkeypatch: pytest.MonkeyPatch, segments: int) -> None:
    """Runs the pending request until it parks at `point`, then cancels it as a kill would."""
    monkeypatch.setitem(failpoints._ENABLED, point, "pause")
    [request] = await pending(env)
    task = asyncio.create_task(runner(env).attempt(request))
    deadline = asyncio.get_running_loop().time() + 10
    while len(await table_segments(env)) != segments:
        assert not task.done(), task
        assert asyncio.get_running_loop().time() < deadline, "the handler never reached the failpoint"
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)
    assert not task.done()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    monkeypatch.delitem(failpoints._ENABLED, point)
    # Nothing was acknowledged: the request is still queued for whoever runs next.
    assert [r.id for r in await pending(env)] == [request.id]


async def test_create_killed_mid_request_is_completed_by_a_fresh_runner(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    await start_create(env)
    await _cancel_mid_request(env, "kvt_create.after_first_segment", monkeypatch, segments=1)
    assert await state(env) == KvtState.CREATING

    assert await run_pending(env) == (1, 0)
    assert await state(env) == KvtState.ACTIVE
    assert await table_segments(env) == expected_segments("t", range(4))
    assert await pending(env) == []


async def test_delete_killed_mid_request_is_completed_by_a_fresh_runner(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    await start_create(env)
    await run_pending(env)
    await start_delete(env)
    await _cancel_mid_request(env, "kvt_delete.after_first_segment", monkeypatch, segments=3)
    assert await state(env) == KvtState.DELETING

    assert await run_pending(env) == (1, 0)
    assert await state(env) is None
    assert await table_segments(env) == []
    assert await pending(env) == []


# --- the scope's tables ------------------------------------------------------------------------------


async def test_delete_kvts_in_scope_removes_tables_in_every_state(env: Env) -> None:
    await start_create(env, "active")
    await run_pending(env)
    await start_create(env, "creating")  # its request stays queued
    await start_create(env, "deleting")
    [_, create_deleting] = await pending(env)
    await runner(env).attempt(create_deleting)
    await start_delete(env, "deleting")  # its request stays queued too
    assert len(await table_segments(env)) == 8

    await delete_kvts_in_scope(env.deps, env.kvts, SC)
    await delete_kvts_in_scope(env.deps, env.kvts, SC)  # idempotent

    assert await env.kvts.count_kvts(SC) == 0
    assert await table_segments(env) == []
    for name, last in (("active", 3), ("creating", 3), ("deleting", 3)):
        recorded = await env.kvts.get_deleted_kvt(SC, name)
        assert recorded is not None and recorded.value == last, name
    # The leftover requests find their tables gone and finish without creating anything.
    assert await run_pending(env) == (2, 0)
    assert await table_segments(env) == []


async def test_delete_kvts_in_a_missing_scope_does_nothing(env: Env) -> None:
    await delete_kvts_in_scope(env.deps, env.kvts, "never")


async def test_create_in_a_scope_being_deleted_leaves_the_table_to_the_scope(env: Env) -> None:
    await start_create(env)
    version = (await env.services.scope_store.get_scope(SC)).version
    await env.services.scope_store.set_scope_state(SC, ScopeState.DELETING, version)

    assert await run_pending(env) == (1, 0)
    assert await table_segments(env) == []
    assert await state(env) == KvtState.CREATING
    await delete_kvts_in_scope(env.deps, env.kvts, SC)
    assert await state(env) is None


async def test_a_scope_deletion_overtaking_a_create_leaves_no_segments(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scope's deletion runs under another request key, so it can pass a table whose create
    is between its segments and its activation: the create then removes what it made."""
    await start_create(env)
    real_failpoint = kvt_handlers_module.failpoint

    async def scope_deleted_meanwhile(name: str) -> None:
        if name == "kvt_create.after_segments":
            await delete_kvts_in_scope(env.deps, env.kvts, SC)
        await real_failpoint(name)

    monkeypatch.setattr(kvt_handlers_module, "failpoint", scope_deleted_meanwhile)
    assert await run_pending(env) == (1, 0)

    assert await state(env) is None
    assert await table_segments(env) == []
