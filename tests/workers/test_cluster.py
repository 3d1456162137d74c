"""Several controllers in one test process on one database: membership, leadership, the fair
share of buckets, rebalancing on join and leave, fencing, and the cluster's API views.

Each controller is fully wired (its own pool, lock session and loops), exactly as `serve`
wires it; only the processes are shared. Real processes are in tests/e2e/test_cluster_processes.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import asyncpg
import pytest
from aiohttp.test_utils import TestClient, TestServer

from app.api.grpc.cluster import ClusterRpcs
from app.api.grpc.proto import controller_pb2 as pb
from app.api.rest import cluster as cluster_routes
from app.api.rest.app import create_app
from app.clock import SystemClock
from app.domain.cluster import DEFAULT_COUNTS, BucketService, Fence, Member, balance
from app.domain.errors import StoreUnavailable
from app.domain.records import ScalingPolicy, StreamConfig
from app.domain.requests import NewRequest, RequestKind
from app.services.health import HealthService
from app.store.cluster import PgClusterStore
from app.store.locks import PgAdvisoryLocks
from app.store.pool import create_pool
from app.store.requests import PgRequestQueue
from app.testing.controller import Services, running_controller
from tests.api.conftest import served
from tests.api.conftest_rest import Api
from workers.buckets import BucketClaims
from workers.cluster import ClusterNode

WAIT_S = 15.0
SERVICES = tuple(BucketService)


async def eventually(check: Callable[[], Any], timeout_s: float = WAIT_S, what: str = "condition") -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def owned(node: Services, service: BucketService = BucketService.REQUESTS) -> frozenset[int]:
    return node.cluster_node.claims[service].owned()


def fair(nodes: list[Services]) -> bool:
    """Every bucket of every service held by exactly one node, spread within one."""
    for service in SERVICES:
        counts = [len(owned(node, service)) for node in nodes]
        held = [bucket for node in nodes for bucket in owned(node, service)]
        if len(held) != len(set(held)) or len(held) != DEFAULT_COUNTS.of(service):
            return False
        if max(counts) - min(counts) > 1:
            return False
    return True


def disjoint(nodes: list[Services]) -> bool:
    for service in SERVICES:
        held = [bucket for node in nodes for bucket in owned(node, service)]
        if len(held) != len(set(held)):
            return False
    return True


class Cluster:
    """Controllers started and stopped at will, all on one database."""

    def __init__(self, db_url: str) -> None:
        self.db_url = db_url
        self.nodes: dict[str, Services] = {}
        self._stacks: dict[str, AsyncExitStack] = {}

    async def start(self, member_id: str, **overrides: Any) -> Services:
        stack = AsyncExitStack()
        node = await stack.enter_async_context(
            running_controller(self.db_url, instance_id=member_id, **{"rebalance_delay_s": 0.3, **overrides})
        )
        self.nodes[member_id] = node
        self._stacks[member_id] = stack
        return node

    async def stop(self, member_id: str) -> None:
        self.nodes.pop(member_id)
        await self._stacks.pop(member_id).aclose()

    async def crash(self, member_id: str) -> None:
        """As the database sees a SIGKILL: the lock session ends without any release."""
        node = self.nodes[member_id]
        locks = node.cluster_node._locks
        conn = locks._conn  # type: ignore[attr-defined]
        conn.terminate()
        # The dead process also stops working; its loops are cancelled without releasing.
        node.cluster_node._released = True

    def live(self) -> list[Services]:
        return list(self.nodes.values())

    async def close(self) -> None:
        for member_id in list(self._stacks):
            with contextlib.suppress(Exception):
                await self.stop(member_id)


@asynccontextmanager
async def cluster_of(db_url: str) -> AsyncIterator[Cluster]:
    cluster = Cluster(db_url)
    try:
        yield cluster
    finally:
        await cluster.close()


async def test_one_controller_leads_and_owns_every_bucket(db_url: str) -> None:
    async with cluster_of(db_url) as cluster:
        node = await cluster.start("c1")
        assert node.cluster_node.is_leader
        assert fair([node])
        leader = await node.cluster_queries.leader()
        assert leader is not None and leader.controller_id == "c1" and leader.term == 1
        rows = await node.cluster_queries.buckets()
        assert len(rows) == sum(DEFAULT_COUNTS.of(s) for s in SERVICES)
        assert {(r.assigned_to, r.owner) for r in rows} == {("c1", "c1")}
        assert all(r.generation == 1 for r in rows)


async def test_two_then_three_controllers_share_fairly_and_survivors_take_over(db_url: str) -> None:
    async with cluster_of(db_url) as cluster:
        first = await cluster.start("c1")
        await cluster.start("c2")
        await eventually(lambda: fair(cluster.live()), what="a fair share over two")
        assert [len(owned(n)) for n in cluster.live()] == [8, 8]
        await cluster.start("c3")
        await eventually(lambda: fair(cluster.live()), what="a fair share over three")
        assert sorted(len(owned(n, BucketService.WATERMARKS)) for n in cluster.live()) == [33, 33, 34]
        # Only one leader; the others follow.
        assert [n.cluster_node.is_leader for n in cluster.live()] == [True, False, False]
        await cluster.stop("c2")
        await eventually(lambda: fair(cluster.live()), what="c2's buckets taken over")
        assert first.cluster_node.is_leader
        members = await first.cluster_queries.members()
        assert sorted(view.member.id for view in members) == ["c1", "c3"]


async def test_a_rebalance_logs_one_release_line_per_service_as_ranges(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """What an operator reads when a member joins: the buckets given up as ranges, one line per
    service, as claims are (it used to be a line per bucket: 58 of them here)."""
    caplog.set_level(logging.INFO, logger="pgcontroller.buckets")
    async with cluster_of(db_url) as cluster:
        await cluster.start("c1")
        await cluster.start("c2")
        await eventually(lambda: fair(cluster.live()), what="a fair share over two")
        released = [r.getMessage() for r in caplog.records if "released" in r.getMessage()]
    # The balancer moves the most loaded member's last buckets; retention's one bucket stays.
    assert released == [
        "requests buckets released (reassigned): 8-15 (8; now 8)",
        "watermarks buckets released (reassigned): 50-99 (50; now 50)",
    ]


async def test_leader_crash_elects_a_new_leader_who_reassigns_its_buckets(db_url: str) -> None:
    async with cluster_of(db_url) as cluster:
        await cluster.start("c1")
        second = await cluster.start("c2")
        await eventually(lambda: fair(cluster.live()), what="a fair share")
        await cluster.crash("c1")
        survivor = [second]
        await eventually(lambda: second.cluster_node.is_leader, what="c2 leading")
        # Claiming all the crashed member's buckets is many lock and read round trips: on a
        # shared two-core machine running other test files at once, more than the usual bound.
        await eventually(lambda: fair(survivor), timeout_s=2 * WAIT_S, what="c2 owning every bucket")
        leader = await second.cluster_queries.leader()
        assert leader is not None and leader.controller_id == "c2" and leader.term == 2
        await eventually(
            lambda: _member_ids(second, ["c2"]), what="the crashed controller removed from membership"
        )


async def _member_ids(node: Services, expected: list[str]) -> bool:
    return sorted(v.member.id for v in await node.cluster_queries.members()) == expected


async def test_buckets_are_never_held_twice_while_membership_changes(db_url: str) -> None:
    async with cluster_of(db_url) as cluster:
        await cluster.start("c1")
        samples = 0
        stop = asyncio.Event()

        async def sample() -> None:
            nonlocal samples
            while not stop.is_set():
                assert disjoint(cluster.live()), "a bucket held by two controllers"
                samples += 1
                await asyncio.sleep(0.01)

        sampler = asyncio.create_task(sample())
        await cluster.start("c2")
        await cluster.start("c3")
        await eventually(lambda: fair(cluster.live()), what="three-way share")
        await cluster.stop("c1")
        await eventually(lambda: fair(cluster.live()), what="two-way share after c1 left")
        stop.set()
        await sampler
        assert samples > 50


async def test_a_claim_fences_the_previous_holders_acknowledgement(db_url: str) -> None:
    async with cluster_of(db_url) as cluster:
        node = await cluster.start("c1", workers=False)
        pool = await create_pool(db_url, min_size=1, max_size=2)
        try:
            store = PgClusterStore(pool)
            queue = PgRequestQueue(pool)
            await store.ensure_buckets(BucketService.REQUESTS, DEFAULT_COUNTS.requests)
            await node.scopes.create_scope("sc")
            await node.streams.create_stream("sc", "s", StreamConfig(ScalingPolicy.fixed(1)))
            request_id = await queue.enqueue(NewRequest(RequestKind.SCALE, "sc", "s", 1, {}))
            request = await queue.get(request_id)
            assert request is not None
            rows = await store.bucket_rows(BucketService.REQUESTS)
            row = next(r for r in rows if r.bucket == request.bucket)
            stale = Fence(BucketService.REQUESTS, row.bucket, row.generation)
            # Someone else claims the bucket (a takeover): the stale holder's ack must not land.
            fresh = await store.claim_bucket(row, "c2", 1)
            assert fresh.generation == stale.generation + 1
            assert not await store.fence_holds(stale)
            await queue.ack(request_id, stale)
            assert await queue.get(request_id) is not None
            await queue.ack(request_id, fresh)
            assert await queue.get(request_id) is None
            # The commit processor's acknowledgement of the requests a run covered, likewise.
            covered = [await queue.enqueue(NewRequest(RequestKind.SCALE, "sc", "s", 1, {})) for _ in range(2)]
            await queue.ack_many(covered, stale)
            assert all([await queue.get(each) is not None for each in covered])
            await queue.ack_many(covered, fresh)
            assert all([await queue.get(each) is None for each in covered])
            # A release under the stale generation never clears the newer claim.
            assert not await store.release_bucket(stale, "c1")
            assert await store.release_bucket(fresh, "c2")
        finally:
            await pool.close()


async def test_losing_the_lock_session_stops_all_bucket_work_at_once(db_url: str) -> None:
    async with cluster_of(db_url) as cluster:
        node = await cluster.start("c1")
        lost: list[frozenset[int]] = []
        node.dispatcher.buckets_lost = lambda buckets: lost.append(buckets)  # type: ignore[method-assign]
        conn = node.cluster_node._locks._conn  # type: ignore[attr-defined]
        conn.terminate()
        # Synchronously on the termination callback: nothing owned, leadership gone.
        await eventually(lambda: bool(lost), timeout_s=2, what="the loss callback")
        assert lost[0] == frozenset(range(DEFAULT_COUNTS.requests))
        # Then a new session re-takes everything.
        await eventually(lambda: fair([node]) and node.cluster_node.is_leader, what="re-acquisition")


async def test_the_lock_session_lost_in_the_middle_of_releasing_buckets_stops_nothing(db_url: str) -> None:
    """Seen in bench/ha_chaos.py at a failover: the round released reassigned buckets one by one,
    the lock session closed during one release (lose_all emptied the claims), and the next
    release met a bucket no longer there: KeyError, the cluster loop died, serve stopped."""
    async with cluster_of(db_url) as cluster:
        first = await cluster.start("c1")
        await eventually(lambda: fair([first]), what="c1 owning everything")
        claims = first.cluster_node.claims[BucketService.REQUESTS]
        passed_on = claims._on_lost  # type: ignore[attr-defined]
        cut: list[frozenset[int]] = []

        def lost_then_session_gone(buckets: frozenset[int]) -> None:
            passed_on(buckets)
            if not cut:  # the first release of the round: the session goes before the next one
                cut.append(buckets)
                first.cluster_node._locks._conn.terminate()  # type: ignore[attr-defined]

        claims._on_lost = lost_then_session_gone  # type: ignore[attr-defined]
        second = await cluster.start("c2")
        await eventually(lambda: bool(cut), what="c1 releasing buckets to c2")
        # The round went on: both controllers end with their fair shares, c1's loops alive.
        await eventually(lambda: fair([first, second]), what="a fair share after the loss")
        assert first.cluster_node.is_leader or second.cluster_node.is_leader


async def test_cluster_settings_are_fixed_once_streams_exist(db_url: str) -> None:
    pool = await create_pool(db_url, min_size=1, max_size=2)
    try:
        store = PgClusterStore(pool)
        changed = await store.configure_settings(
            DEFAULT_COUNTS.__class__(requests=8, retention=2, watermarks=10), 4
        )
        assert changed.counts.requests == 8
        async with running_controller(db_url, workers=False) as services:
            await services.scopes.create_scope("sc")
            await services.streams.create_stream("sc", "s", StreamConfig(ScalingPolicy.fixed(1)))
        from app.domain.errors import IllegalState

        with pytest.raises(IllegalState, match="fixed once streams exist"):
            await store.configure_settings(DEFAULT_COUNTS, 4)
        # Asking for what the cluster already has is fine.
        assert (await store.configure_settings(changed.counts, 4)).counts == changed.counts
        # Requests are filed under the cluster's count.
        bucket = await pool.fetchval("SELECT pgc_request_bucket('sc', 's')")
        assert 0 <= bucket < 8
    finally:
        await pool.close()


@pytest.mark.parametrize(
    "name", ["a/b", "scope/stream", "", "x" * 300, "ünïcødé/ストリーム", "emoji/\U0001f600\U0001f680"]
)
async def test_database_java_hash_matches_the_domain(db_url: str, name: str) -> None:
    from app.domain.containers import java_string_hash

    pool = await create_pool(db_url, min_size=1, max_size=1)
    try:
        assert await pool.fetchval("SELECT pgc_java_hash($1)", name) == java_string_hash(name)
    finally:
        await pool.close()


def test_balance_orphans_go_to_least_loaded_and_spread_waits_when_asked() -> None:
    keys = list(range(10))
    current = {k: ("a" if k < 6 else "b") for k in keys}
    # c joins: without spreading nothing moves; with it, the spread drops to one.
    assert balance(keys, current, ["a", "b", "c"], spread=False) == current
    spread = balance(keys, current, ["a", "b", "c"])
    loads = sorted(list(spread.values()).count(m) for m in "abc")
    assert loads == [3, 3, 4]
    # b leaves: its keys go to the least loaded one at a time.
    after = balance(keys, spread, ["a", "c"], spread=False)
    assert sorted(list(after.values()).count(m) for m in "ac") == [5, 5]


async def test_grpc_bucket_mapping_and_server_list(db_url: str) -> None:
    async with cluster_of(db_url) as cluster:
        first = await cluster.start("c1")
        second = await cluster.start("c2")
        first.controller.advertise("127.0.0.1", 9090, 9091)
        second.controller.advertise("127.0.0.2", 9092, 9093)
        await eventually(lambda: fair(cluster.live()), what="a fair share")
        await eventually(
            lambda: _endpoints(first, {("127.0.0.1", 9090), ("127.0.0.2", 9092)}), what="advertised endpoints"
        )
        async with served(first, [ClusterRpcs(first.cluster_queries)]) as stub:
            answer = await stub.getControllerToBucketMapping(
                pb.ControllerToBucketMappingRequest(
                    serviceType=pb.ControllerToBucketMappingRequest.WatermarkingService
                )
            )
            assert sorted(answer.mapping) == ["c1", "c2"]
            ids = sorted(i for bucket_ids in answer.mapping.values() for i in bucket_ids.id)
            assert ids == list(range(DEFAULT_COUNTS.watermarks))
            retention = await stub.getControllerToBucketMapping(
                pb.ControllerToBucketMappingRequest(
                    serviceType=pb.ControllerToBucketMappingRequest.RetentionService
                )
            )
            assert sum(len(b.id) for b in retention.mapping.values()) == DEFAULT_COUNTS.retention


async def test_endpoints_advertised_while_a_heartbeat_is_on_its_way_are_still_written(db_url: str) -> None:
    """The heartbeat that was waiting when new endpoints came must not count as their write."""
    async with cluster_of(db_url) as cluster:
        node = await cluster.start("c1")
        holder, watcher = await asyncpg.connect(db_url), await asyncpg.connect(db_url)
        try:
            held = holder.transaction()
            await held.start()
            await holder.execute("SELECT 1 FROM controllers WHERE id = 'c1' FOR UPDATE")

            async def heartbeat_waits() -> bool:
                return bool(
                    await watcher.fetchval(
                        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                        " AND query LIKE '%UPDATE controllers SET heartbeat_at%'"
                    )
                )

            await eventually(heartbeat_waits, what="a heartbeat waiting on the row")
            node.controller.advertise("127.0.0.9", 9190, 9191)
            await held.commit()
        finally:
            await holder.close()
            await watcher.close()
        await eventually(lambda: _endpoints(node, {("127.0.0.9", 9190)}), what="the new endpoints")


async def _endpoints(node: Services, expected: set[tuple[str, int]]) -> bool:
    live = await node.cluster_queries.live_controllers()
    return {(e.host, e.port) for e in live} == expected


async def test_rest_cluster_views(db_url: str) -> None:
    async with cluster_of(db_url) as cluster:
        node = await cluster.start("c1")
        app = create_app(
            node.scopes,
            node.streams,
            HealthService(SystemClock()),
            node.lifecycle,
            node.transactions,
            [cluster_routes.extension(node.cluster_queries)],
        )
        async with TestClient(TestServer(app)) as client:
            api = Api(client, app)

            async def get(path: str, status: int = 200, **params: str) -> Any:
                answered, body = await api.call("GET", path, params=params or None)
                assert answered == status, body
                return body

            members = await get("/v1/cluster/members")
            assert [m["id"] for m in members["members"]] == ["c1"] and members["members"][0]["live"]
            buckets = await get("/v1/cluster/buckets", service="retention")
            assert buckets["buckets"] == [
                {"service": "retention", "bucket": 0, "assignedTo": "c1", "owner": "c1", "generation": 1}
            ]
            everything = await get("/v1/cluster/buckets")
            assert len(everything["buckets"]) == sum(DEFAULT_COUNTS.of(s) for s in SERVICES)
            bad = await get("/v1/cluster/buckets", 400, service="nope")
            assert "service must be one of" in bad["message"]
            leader = await get("/v1/cluster/leader")
            assert leader["controllerId"] == "c1" and leader["term"] == 1
            me = await get("/v1/cluster/self")
            assert me["leader"] is True and me["owned"]["requests"] == list(range(DEFAULT_COUNTS.requests))


class _HeldLocks(PgAdvisoryLocks):
    """A lock session whose first lock waits for `go`: the moment between a new member's
    heartbeat and its first lock, held open so the leader can look at the member then."""

    def __init__(self, url: str, member_id: str) -> None:
        super().__init__(url, application_name=f"pgc-member:{member_id}")
        self.go = asyncio.Event()

    async def try_lock(self, namespace: int, key: int) -> bool:
        await self.go.wait()
        return await super().try_lock(namespace, key)


async def test_a_member_is_written_only_once_its_session_is_connected(db_url: str) -> None:
    """The leader counts a member row live only while its lock session is connected; a new
    member's row written before that session (it used to connect at the first lock) was removed
    as departed by the leader's next round, and the new member re-registered after it."""
    pool = await create_pool(db_url, min_size=1, max_size=2)
    nodes: list[ClusterNode] = []
    try:
        clock = SystemClock()

        def node(member_id: str, locks: PgAdvisoryLocks) -> ClusterNode:
            now = clock.now_ms()
            made = ClusterNode(
                PgClusterStore(pool), locks, clock, Member(member_id, "h", 1, 2, now, now), {},
                DEFAULT_COUNTS, interval_s=60, member_ttl_ms=60_000, rebalance_delay_ms=0,
            )  # fmt: skip
            nodes.append(made)
            return made

        leader = node("a", PgAdvisoryLocks(db_url, application_name="pgc-member:a"))
        await leader._round()
        assert leader.is_leader
        held = _HeldLocks(db_url, "b")
        newcomer = node("b", held)
        first_round = asyncio.create_task(newcomer._round())
        await eventually(
            lambda: pool.fetchval("SELECT count(*) FROM controllers WHERE id = 'b'"), what="b's row"
        )
        await leader._round()
        assert await pool.fetchval("SELECT version FROM controllers WHERE id = 'b'") is not None, (
            "the leader removed a member that had just joined"
        )
        held.go.set()
        await first_round
    finally:
        for made in nodes:
            await made._locks.reset()
        await pool.close()


class _GatedBuckets(PgClusterStore):
    """Bucket reads that wait at `gate` once armed: a round held in its middle."""

    def __init__(self, pool: Any) -> None:
        super().__init__(pool)
        self.armed = False
        self.held = asyncio.Event()
        self.gate = asyncio.Event()

    async def bucket_rows(self, service: BucketService | None = None) -> list[Any]:
        if self.armed:
            self.held.set()
            await self.gate.wait()
        return await super().bucket_rows(service)


async def test_a_session_lost_mid_round_ends_the_round_and_takes_no_lock_in_a_new_session(
    db_url: str,
) -> None:
    """A round that was waiting on the database when the lock session died went on and took its
    locks again in a session it opened silently: buckets a dead member could not give back, and a
    leader's duties run without the leader lock. The new session starts only at the next round."""
    pool = await create_pool(db_url, min_size=1, max_size=2)
    locks = PgAdvisoryLocks(db_url, application_name="pgc-member:midround")
    try:
        clock = SystemClock()
        store = _GatedBuckets(pool)
        now = clock.now_ms()
        claims = BucketClaims(BucketService.REQUESTS, locks, store, clock, "midround")
        node = ClusterNode(
            store, locks, clock, Member("midround", "h", 1, 2, now, now),
            {BucketService.REQUESTS: claims}, DEFAULT_COUNTS,
            interval_s=60, member_ttl_ms=60_000, rebalance_delay_ms=0,
        )  # fmt: skip
        await node._round()
        assert node.is_leader and len(claims.owned()) == DEFAULT_COUNTS.requests
        store.armed = True
        held_round = asyncio.create_task(node._round())
        await asyncio.wait_for(store.held.wait(), WAIT_S)
        locks._conn.terminate()  # type: ignore[union-attr]
        await eventually(lambda: not node.is_leader, what="the lost session noticed")
        store.armed = False
        store.gate.set()
        with pytest.raises(StoreUnavailable):
            await asyncio.wait_for(held_round, WAIT_S)
        assert claims.owned() == frozenset() and not node.is_leader
        advisory = await pool.fetchval(
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
            " WHERE l.locktype = 'advisory' AND a.application_name = 'pgc-member:midround'"
        )
        assert advisory == 0, "the interrupted round took locks in a session nobody knows it holds"
        await node._round()  # the next round starts the new session and takes everything back
        assert node.is_leader and len(claims.owned()) == DEFAULT_COUNTS.requests
    finally:
        await locks.reset()
        await pool.close()
