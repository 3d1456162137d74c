"""The reader-group request handlers step by step: each is crashed right after each of its
writes in turn (a subscriber added or removed, the state stream's metadata, segment and state,
the group's record), then run again from the start as the runner would; the end state must
equal that of a run that never crashed. Also: stale requests are skipped, and recursive scope
deletion's helper removes every group of a scope."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, cast

import pytest

from app.domain.errors import NotFound
from app.domain.readergroups import ReaderGroupConfig, ReaderGroupState, ScopedStream, StreamDataRetention
from app.domain.records import ScalingPolicy, ScopeState, StreamConfig
from app.domain.requests import Processor, Request, RequestKind
from app.services.readergroups import CreateStatus, DeleteStatus, UpdateStatus
from app.store.retention import PgRetentionStore
from app.testing.controller import Services, running_controller
from tests.support.readergroups import Rig, rig, run_pending
from workers.handlers.common import WorkflowDeps
from workers.handlers.readergroups import (
    CreateReaderGroupHandler,
    DeleteReaderGroupHandler,
    ReaderGroupDeps,
    UpdateReaderGroupHandler,
    delete_reader_groups_in_scope,
)

SC, OTHER = "hsc", "other"
S1, S2 = ScopedStream(SC, "s1"), ScopedStream(OTHER, "s2")  # a group may read another scope's stream
AUTOMATIC = StreamDataRetention.AUTOMATIC_RELEASE_AT_LAST_CHECKPOINT


class Crash(Exception):
    """Stands for the process dying right after a write took effect."""


class Steps:
    def __init__(self, crash_at: int | None) -> None:
        self.crash_at = crash_at
        self.count = 0

    def done(self, what: str) -> None:
        self.count += 1
        if self.count == self.crash_at:
            raise Crash(f"crash after step {self.count} ({what})")


class AfterEach:
    """Counts each awaited call of `methods` as a step (once it took effect)."""

    def __init__(self, target: object, steps: Steps, methods: set[str]) -> None:
        self._target, self._steps, self._methods = target, steps, methods

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if name not in self._methods:
            return attr

        async def call(*args: Any, **kwargs: Any) -> Any:
            result = await attr(*args, **kwargs)
            self._steps.done(name)
            return result

        return call


def crashing(r: Rig, steps: Steps) -> ReaderGroupDeps:
    s = r.s
    workflow = WorkflowDeps(
        cast(
            Any,
            AfterEach(
                s.stream_store, steps, {"create_stream_metadata", "activate_created_stream", "delete_stream"}
            ),
        ),
        s.scope_store,
        cast(Any, AfterEach(s.segment_store, steps, {"create_segment", "seal_segment", "delete_segment"})),
        s.clock,
        s.txn_store,
    )
    return ReaderGroupDeps(
        workflow,
        cast(Any, AfterEach(r.store, steps, {"update_reader_group", "delete_reader_group"})),
        cast(Any, AfterEach(r.subscribers, steps, {"add_subscriber", "remove_subscriber"})),
    )


@pytest.fixture
async def r(db_url: str) -> AsyncIterator[Rig]:
    async with running_controller(db_url, workers=False) as s:
        for scope, stream in ((SC, "s1"), (OTHER, "s2")):
            await s.scopes.create_scope(scope)
            await s.streams.create_stream(scope, stream, StreamConfig(ScalingPolicy.fixed(2)))
        async with rig(s, workers=False) as built:
            yield built


def config(*streams: ScopedStream, retention: StreamDataRetention = AUTOMATIC) -> ReaderGroupConfig:
    return ReaderGroupConfig({s: {} for s in streams}, retention=retention)


async def snapshot(r: Rig, name: str) -> dict[str, Any]:
    """Everything a reader-group workflow touches, for group `name`."""
    s: Services = r.s
    group = await r.store.get_reader_group(SC, name)
    subscribers = {}
    retention = PgRetentionStore(s.pool)
    for stream in (S1, S2):
        found = await retention.get_subscriber(stream.scope, stream.stream, f"{SC}/{name}")
        subscribers[str(stream)] = None if found is None else found.value.generation
    try:
        stream_state: str | None = (await s.stream_store.get_state(SC, f"_RG{name}")).value.value
    except NotFound:
        stream_state = None
    segments = await s.pool.fetch(
        "SELECT name, sealed, rollover_size_bytes FROM embedded_segments WHERE name LIKE $1 ORDER BY name",
        f"{SC}/_RG{name}/%",
    )
    return {
        "group": None if group is None else (group.value.state, group.value.generation, group.value.updating),
        "subscribers": subscribers,
        "stream": stream_state,
        "segments": [
            (row["name"].split("/", 2)[2], row["sealed"], row["rollover_size_bytes"]) for row in segments
        ],
    }


async def queued(r: Rig, name: str, kind: RequestKind) -> Request:
    """The request an API call queued for group `name` (it is waiting for it to be run)."""
    for _ in range(500):
        pending: list[Request] = await r.s.requests.pending(Processor.REQUESTS, r.buckets, [], 1000)
        for request in pending:
            if request.kind is kind and request.payload.get("name") == name:
                return request
        await asyncio.sleep(0.01)
    raise AssertionError(f"no {kind.value} request for {name}")


async def ack(r: Rig, request: Request) -> None:
    await r.s.requests.ack(request.id)


async def nothing() -> None:
    return None


Handler = Callable[[ReaderGroupDeps], Any]
Prepare = Callable[[Rig, str], Awaitable[tuple["asyncio.Future[Any]", Request]]]


async def crash_after_each_step(r: Rig, prepare: Prepare, handler: Handler) -> int:
    """Runs the workflow for group "clean" without a crash, then for "k1", "k2", ... crashed
    after step k and re-run; each ends like "clean". Returns the number of steps."""
    future, request = await prepare(r, "clean")
    await handler(r.deps).handle(request, nothing)
    await ack(r, request)
    await future
    expected = await snapshot(r, "clean")
    k = 1
    while True:
        name = f"k{k}"
        future, request = await prepare(r, name)
        steps = Steps(k)
        try:
            await handler(crashing(r, steps)).handle(request, nothing)
        except Crash:
            await handler(r.deps).handle(request, nothing)  # the runner's next attempt
            await ack(r, request)
            await future
            assert await snapshot(r, name) == expected, f"crashed after step {k}"
            # And once more after it completed: nothing changes.
            await handler(r.deps).handle(request, nothing)
            assert await snapshot(r, name) == expected, f"re-run after completion, step {k}"
            k += 1
            continue
        await ack(r, request)
        await future
        assert await snapshot(r, name) == expected
        return steps.count


async def start_create(r: Rig, name: str) -> tuple[asyncio.Future[Any], Request]:
    future = asyncio.ensure_future(r.service.create_reader_group(SC, name, config(S1, S2)))
    return future, await queued(r, name, RequestKind.CREATE_READER_GROUP)


async def created(r: Rig, name: str, group_config: ReaderGroupConfig) -> Any:
    future = asyncio.ensure_future(r.service.create_reader_group(SC, name, group_config))
    await queued(r, name, RequestKind.CREATE_READER_GROUP)
    await run_pending(r)
    result = await future
    assert result.status is CreateStatus.SUCCESS
    return result.record


async def test_create_survives_a_crash_after_each_step(r: Rig) -> None:
    steps = await crash_after_each_step(r, start_create, CreateReaderGroupHandler)
    # two subscribers, the stream's metadata, its segment, its activation, the group ACTIVE
    assert steps == 6
    final = await snapshot(r, "clean")
    assert final == {
        "group": (ReaderGroupState.ACTIVE, 0, False),
        "subscribers": {str(S1): 0, str(S2): 0},
        "stream": "ACTIVE",
        "segments": [("0.#epoch.0", False, 4 * 1024 * 1024)],
    }


async def start_update(r: Rig, name: str) -> tuple[asyncio.Future[Any], Request]:
    group = await created(r, name, config(S1, S2))
    future = asyncio.ensure_future(r.service.update_reader_group(SC, name, config(S1), group.id, 0))
    return future, await queued(r, name, RequestKind.UPDATE_READER_GROUP)


async def test_update_survives_a_crash_after_each_step(r: Rig) -> None:
    steps = await crash_after_each_step(r, start_update, UpdateReaderGroupHandler)
    assert steps == 3  # S2 unsubscribed, S1's generation raised, the update completed
    assert await snapshot(r, "clean") == {
        "group": (ReaderGroupState.ACTIVE, 1, False),
        "subscribers": {str(S1): 1, str(S2): None},
        "stream": "ACTIVE",
        "segments": [("0.#epoch.0", False, 4 * 1024 * 1024)],
    }


async def start_delete(r: Rig, name: str) -> tuple[asyncio.Future[Any], Request]:
    group = await created(r, name, config(S1, S2))
    future = asyncio.ensure_future(r.service.delete_reader_group(SC, name, str(group.id)))
    return future, await queued(r, name, RequestKind.DELETE_READER_GROUP)


async def test_delete_survives_a_crash_after_each_step(r: Rig) -> None:
    steps = await crash_after_each_step(r, start_delete, DeleteReaderGroupHandler)
    # two subscribers removed, the segment sealed and deleted, the stream's metadata, the group
    assert steps == 6
    assert await snapshot(r, "clean") == {
        "group": None,
        "subscribers": {str(S1): None, str(S2): None},
        "stream": None,
        "segments": [],
    }


# --- stale requests ------------------------------------------------------------------------------


async def test_requests_of_another_incarnation_or_generation_are_skipped(r: Rig) -> None:
    future, create_request = await start_create(r, "rg")
    old = await r.store.get_reader_group(SC, "rg")
    assert old is not None
    await r.store.delete_reader_group(SC, "rg", old.value.id, old.version)
    await r.s.requests.ack(create_request.id)
    assert (await future).status is CreateStatus.FAILURE
    group = await created(r, "rg", config(S1))
    # The first incarnation's create request runs late: it touches nothing.
    await CreateReaderGroupHandler(r.deps).handle(create_request, nothing)
    assert await snapshot(r, "rg") == {
        "group": (ReaderGroupState.ACTIVE, 0, False),
        "subscribers": {str(S1): 0, str(S2): None},
        "stream": "ACTIVE",
        "segments": [("0.#epoch.0", False, 4 * 1024 * 1024)],
    }
    # An update request of a generation since replaced does nothing either.
    stale = dataclasses.replace(
        create_request,
        kind=RequestKind.UPDATE_READER_GROUP,
        payload={
            "name": "rg",
            "id": str(group.id),
            "generation": 5,
            "transition": True,
            "remove_streams": [str(S1)],
        },
    )
    await UpdateReaderGroupHandler(r.deps).handle(stale, nothing)
    assert (await snapshot(r, "rg"))["subscribers"] == {str(S1): 0, str(S2): None}


async def test_a_delete_that_overtakes_the_creation_cleans_up(r: Rig) -> None:
    creating = asyncio.ensure_future(r.service.create_reader_group(SC, "rg", config(S1, S2)))
    await queued(r, "rg", RequestKind.CREATE_READER_GROUP)
    group = await r.store.get_reader_group(SC, "rg")
    assert group is not None
    deleting = asyncio.ensure_future(r.service.delete_reader_group(SC, "rg", str(group.value.id)))
    await queued(r, "rg", RequestKind.DELETE_READER_GROUP)
    assert await run_pending(r) == 2  # create (sees DELETING: nothing to do), then delete
    assert (await creating).status is CreateStatus.FAILURE
    assert await deleting is DeleteStatus.SUCCESS
    assert await snapshot(r, "rg") == {
        "group": None,
        "subscribers": {str(S1): None, str(S2): None},
        "stream": None,
        "segments": [],
    }


async def test_an_update_queued_behind_the_creation_is_applied(r: Rig) -> None:
    creating = asyncio.ensure_future(r.service.create_reader_group(SC, "rg", config(S1, S2)))
    await queued(r, "rg", RequestKind.CREATE_READER_GROUP)
    group = await r.store.get_reader_group(SC, "rg")
    assert group is not None
    updating = asyncio.ensure_future(
        r.service.update_reader_group(
            SC, "rg", config(S2, retention=StreamDataRetention.NONE), group.value.id, 0
        )
    )
    await queued(r, "rg", RequestKind.UPDATE_READER_GROUP)
    assert await run_pending(r) == 2
    assert (await creating).status is CreateStatus.SUCCESS
    assert (await updating).status is UpdateStatus.SUCCESS
    assert await snapshot(r, "rg") == {
        "group": (ReaderGroupState.ACTIVE, 1, False),
        "subscribers": {str(S1): None, str(S2): None},
        "stream": "ACTIVE",
        "segments": [("0.#epoch.0", False, 4 * 1024 * 1024)],
    }


# --- recursive scope deletion's share ----------------------------------------------------------------


async def test_delete_reader_groups_in_scope(r: Rig) -> None:
    for name in ("a", "b"):
        await created(r, name, config(S1, S2))
    current = await r.s.scope_store.get_scope(SC)
    await r.s.scope_store.set_scope_state(SC, ScopeState.DELETING, current.version)
    assert await delete_reader_groups_in_scope(r.deps, SC) == 2
    for name in ("a", "b"):
        assert await snapshot(r, name) == {
            "group": None,
            "subscribers": {str(S1): None, str(S2): None},
            "stream": None,
            "segments": [],
        }
    assert await delete_reader_groups_in_scope(r.deps, SC) == 0
    assert await delete_reader_groups_in_scope(r.deps, "nosuch") == 0
    assert await r.store.count_reader_groups(SC) == 0
