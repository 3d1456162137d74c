"""No stuck states (issue 16): hypothesis drives random interleavings of create, update, scale
(split and merge), truncate, seal, delete and transactions (create then commit or abort) on one
stream, against two in-process controllers with their workers on one database, over real gRPC.
After quiescence it checks: no stream in a transient state, no request left (none will ever run),
the current epoch's key ranges tile [0, 1), every acknowledged operation applied (once), no
orphaned segments, and that the stream can still be sealed and deleted.

Bounded and derandomized: EXAMPLES scenarios of a few concurrent calls each (each scenario on a
stream of its own)."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from grpclib.exceptions import GRPCError
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.domain.ids import epoch_of, qualified_segment_name
from app.domain.records import ScalingPolicy, StreamState
from app.testing.controller import Services, running_controller
from app.testing.scale import scale_request
from tests.api.conftest import served
from tests.api.test_grpc_streams import config

EXAMPLES = 25
SCOPE = "ilv"
QUIESCENCE_S = 30.0
CALL_S = 30.0  # no call may hang: each is bounded well above any legitimate wait
LEASE_MS = 10_000

# "seal_delete" is a client's usual end of a stream: seal, then delete once sealed.
# "create" repeats the stream's creation (STREAM_EXISTS, or a new stream after a deletion).
KINDS = ("create", "update", "split", "merge", "truncate", "seal", "seal_delete", "delete", "commit", "abort")
operation = st.tuples(st.sampled_from(KINDS), st.integers(1, 3), st.sampled_from([0, 1, 3, 8, 15]))
scenario = st.tuples(st.integers(1, 3), st.lists(operation, min_size=3, max_size=6))

_names = itertools.count()


@dataclass
class Outcome:
    """What the API answered for one call: `status` is the enum's name (or "grpc:<code>" for an
    error, "skipped" when there was nothing to do), `detail` what the check needs."""

    kind: str
    status: str
    detail: dict[str, Any] = field(default_factory=dict)


class Scenario:
    def __init__(self, stub: ControllerServiceStub, name: str) -> None:
        self.stub = stub
        self.info = pb.StreamInfo(scope=SCOPE, stream=name)

    async def current(self) -> list[tuple[int, float, float]]:
        try:
            found = await self.stub.getCurrentSegments(self.info)
        except GRPCError:
            return []  # gone, or not readable now: the caller skips
        return sorted((r.segmentId.segmentId, r.minKey, r.maxKey) for r in found.segmentRanges)

    async def run(self, kind: str, count: int, delay_ms: int) -> Outcome:
        await asyncio.sleep(delay_ms / 1000)
        try:
            return await asyncio.wait_for(self._call(kind, count), CALL_S)
        except GRPCError as exc:
            return Outcome(kind, f"grpc:{exc.status.name}", {"message": exc.message})
        except TimeoutError:
            return Outcome(kind, "hung")  # reported with every other answer by the checks

    async def _call(self, kind: str, count: int) -> Outcome:
        stub, info = self.stub, self.info
        if kind == "create":
            created = await stub.createStream(config(SCOPE, info.stream, count))
            return Outcome(kind, pb.CreateStreamStatus.Status.Name(created.status), {"count": count})
        if kind == "update":
            updated = await stub.updateStream(config(SCOPE, info.stream, count))
            return Outcome(kind, pb.UpdateStreamStatus.Status.Name(updated.status), {"count": count})
        if kind in ("split", "merge"):
            return await self._scale(kind)
        if kind == "truncate":
            segments = await self.current()
            if not segments:
                return Outcome(kind, "skipped")
            cut = {sid: 0 for sid, _, _ in segments}
            truncated = await stub.truncateStream(pb.StreamCut(streamInfo=info, cut=cut))
            return Outcome(kind, pb.UpdateStreamStatus.Status.Name(truncated.status), {"cut": sorted(cut)})
        if kind == "seal":
            sealed = await stub.sealStream(info)
            return Outcome(kind, pb.UpdateStreamStatus.Status.Name(sealed.status))
        if kind == "seal_delete":
            sealed = await stub.sealStream(info)
            if sealed.status != pb.UpdateStreamStatus.SUCCESS:
                return Outcome("seal", pb.UpdateStreamStatus.Status.Name(sealed.status))
            kind = "delete"
        if kind == "delete":
            deleted = await stub.deleteStream(info)
            return Outcome(kind, pb.DeleteStreamStatus.Status.Name(deleted.status))
        return await self._transaction(kind)

    async def _scale(self, kind: str) -> Outcome:
        segments = await self.current()
        if kind == "split" and segments:
            sid, low, high = max(segments, key=lambda s: s[2] - s[1])
            middle = (low + high) / 2
            sealed, ranges = [sid], [(low, middle), (middle, high)]
        elif kind == "merge" and len(segments) >= 2:
            (first, low, _), (second, _, high) = segments_by_key(segments)[:2]
            sealed, ranges = [first, second], [(low, high)]
        else:
            return Outcome(kind, "skipped")
        response = await self.stub.scale(scale_request(self.info, sealed, ranges))
        status = pb.ScaleResponse.ScaleStreamStatus.Name(response.status)
        detail: dict[str, Any] = {
            "new": sorted(r.segmentId.segmentId for r in response.segments),
            "ranges": [(r.minKey, r.maxKey) for r in response.segments],
        }
        if status == "STARTED":
            # A client then polls checkScale: it must come to an end.
            detail["check"] = await self._check_scale(response.epoch)
        return Outcome(kind, status, detail)

    async def _check_scale(self, epoch: int) -> str:
        request = pb.ScaleStatusRequest(streamInfo=self.info, epoch=epoch)
        while True:
            status = (await self.stub.checkScale(request)).status
            if status != pb.ScaleStatusResponse.IN_PROGRESS:
                return pb.ScaleStatusResponse.ScaleStatus.Name(status)
            await asyncio.sleep(0.01)

    async def _transaction(self, kind: str) -> Outcome:
        created = await self.stub.createTransaction(pb.CreateTxnRequest(streamInfo=self.info, lease=LEASE_MS))
        request = pb.TxnRequest(streamInfo=self.info, txnId=created.txnId)
        ended = await (self.stub.commitTransaction if kind == "commit" else self.stub.abortTransaction)(
            request
        )
        return Outcome(kind, pb.TxnStatus.Status.Name(ended.status), {"txn": created.txnId})


def segments_by_key(segments: list[tuple[int, float, float]]) -> list[tuple[int, float, float]]:
    return sorted(segments, key=lambda s: s[1])


async def until(check: Callable[[], Awaitable[bool]], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await check():
            return True
        await asyncio.sleep(0.02)
    return False


@pytest.fixture
async def second(db_url: str) -> AsyncIterator[Services]:
    """A second controller on the same database: the buckets, and so the workflows, are split
    between the two, and calls alternate between them."""
    async with running_controller(db_url) as running:
        yield running


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    # No shrinking: a failing scenario can wait out its timeouts, and it is reported as generated.
    phases=(Phase.explicit, Phase.generate),
    # Two controllers serve every example; each example works on a stream of its own.
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(scenario)
async def test_no_stuck_states_after_random_interleavings(
    services: Services, second: Services, case: tuple[int, list[tuple[str, int, int]]]
) -> None:
    initial, operations = case
    name = f"s{next(_names)}"
    async with served(services) as stub, served(second) as other_stub:
        created = await stub.createScope(pb.ScopeInfo(scope=SCOPE))
        assert created.status in (pb.CreateScopeStatus.SUCCESS, pb.CreateScopeStatus.SCOPE_EXISTS)
        made = await stub.createStream(config(SCOPE, name, initial))
        assert made.status == pb.CreateStreamStatus.SUCCESS
        runs = (Scenario(stub, name), Scenario(other_stub, name))
        outcomes = await asyncio.gather(
            *(runs[i % 2].run(kind, count, delay) for i, (kind, count, delay) in enumerate(operations))
        )
        quiet = await until(lambda: quiescent(services, name), QUIESCENCE_S)
        assert quiet, f"not quiescent: {await leftovers(services, name)}; outcomes {outcomes}"
        if await check_final_state(services, stub, name, initial, outcomes):
            await check_stream_ends(services, stub, name)


async def quiescent(services: Services, name: str) -> bool:
    pool = services.pool
    requests = await pool.fetchval(
        "SELECT count(*) FROM requests WHERE scope = $1 AND stream = $2", SCOPE, name
    )
    active = await pool.fetchval(
        """SELECT count(*) FROM transactions t JOIN streams s ON s.id = t.stream_id
           WHERE s.scope = $1 AND s.name = $2""",
        SCOPE,
        name,
    )
    return requests == 0 and active == 0


async def leftovers(services: Services, name: str) -> list[dict[str, Any]]:
    rows = await services.pool.fetch(
        """SELECT kind, processor, attempts, started, last_error FROM requests
           WHERE scope = $1 AND stream = $2""",
        SCOPE,
        name,
    )
    return [dict(row) for row in rows]


def acknowledged(outcomes: list[Outcome], kind: str, *statuses: str) -> list[Outcome]:
    return [o for o in outcomes if o.kind == kind and o.status in statuses]


async def check_final_state(
    services: Services, stub: ControllerServiceStub, name: str, initial: int, outcomes: list[Outcome]
) -> bool:
    """Asserts the stream's state after quiescence; whether it still exists."""
    pool, streams = services.pool, services.stream_store
    why = f"outcomes {outcomes}"
    for outcome in outcomes:
        # Every call ended with an answer: no hang, no INTERNAL or UNKNOWN from the races themselves
        # (transaction creation on a closing stream answers an error of its own, as Pravega's).
        assert outcome.status not in ("hung", "grpc:DEADLINE_EXCEEDED", "grpc:UNKNOWN"), why
        if outcome.kind not in ("commit", "abort"):
            assert not outcome.status.startswith("grpc:"), why
    stream_id = await pool.fetchval("SELECT id FROM streams WHERE scope = $1 AND name = $2", SCOPE, name)
    segments_left = await pool.fetch(
        "SELECT name FROM embedded_segments WHERE name LIKE $1 OR name LIKE $2",
        f"{SCOPE}/{name}/%",
        f"{SCOPE}/_MARK{name}/%",
    )
    # No transaction segment outlives its transaction: every transaction has completed by now.
    assert not [r["name"] for r in segments_left if "#transaction." in r["name"]], why
    recreated = acknowledged(outcomes, "create", "SUCCESS")
    created_with = {o.detail["count"] for o in recreated} or {initial}
    if recreated:
        # Only a deletion lets a create succeed again; the checks below are of the new stream,
        # whose history started over, so only the universal ones apply to it.
        assert acknowledged(outcomes, "delete", "SUCCESS"), why
        outcomes = [o for o in outcomes if o.kind in ("create", "delete")]
    elif acknowledged(outcomes, "delete", "SUCCESS"):
        assert stream_id is None, why
    if stream_id is None:
        assert acknowledged(outcomes, "delete", "SUCCESS"), why
        assert not segments_left, why
        return False
    state = (await streams.get_state(SCOPE, name)).value
    assert state in (StreamState.ACTIVE, StreamState.SEALED), why
    if acknowledged(outcomes, "seal", "SUCCESS"):
        assert state == StreamState.SEALED, why
    waiting = await pool.fetchval(
        "SELECT count(*) FROM stream_waiting_processors WHERE stream_id = $1", stream_id
    )
    assert waiting == 0, why
    assert (await streams.get_epoch_transition(SCOPE, name)).value is None, why
    stored, updating = (await streams.get_config_record(SCOPE, name)).value
    assert not updating, why
    truncation = (await streams.get_truncation(SCOPE, name)).value
    assert not truncation.updating, why

    _state, active = await streams.get_active_epoch(SCOPE, name)
    ranges = sorted((s.key_start, s.key_end) for s in active.segments)
    assert ranges[0][0] == 0.0 and ranges[-1][1] == 1.0, why
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges)), f"{ranges}; {why}"
    # The active segments exist in the segment store, sealed exactly when the stream is.
    names = {r["name"] for r in segments_left}
    for segment in active.segments:
        info = await services.segment_store.get_segment_info(qualified_segment_name(SCOPE, name, segment.id))
        assert info.sealed == (state == StreamState.SEALED), why
    rows = await pool.fetch(
        """SELECT segment_id, creation_epoch, sealed_epoch, key_start, key_end FROM segments
           WHERE stream_id = $1""",
        stream_id,
    )
    known = {r["segment_id"]: r for r in rows}

    # Each STARTED scale was applied once (its new segments exist, created together in one epoch),
    # or discarded behind a seal (checkScale then says it never completes). A rolling transaction
    # between submission and run moves a manual scale to new ids (Pravega's migration), so the
    # segments are found by their key ranges.
    created_in: dict[int, set[tuple[float, float]]] = {}
    for r in rows:
        created_in.setdefault(r["creation_epoch"], set()).add((r["key_start"], r["key_end"]))
    for outcome in acknowledged(outcomes, "split", "STARTED") + acknowledged(outcomes, "merge", "STARTED"):
        new = outcome.detail["new"]
        ranges = set(outcome.detail["ranges"])
        if all(sid in known for sid in new):
            assert len({known[sid]["creation_epoch"] for sid in new}) == 1, why
            assert all(known[sid]["creation_epoch"] == epoch_of(sid) for sid in new), why
        if any(ranges <= together for together in created_in.values()):
            assert outcome.detail["check"] == "SUCCESS" or state == StreamState.SEALED, why
        else:
            assert not any(sid in known for sid in new) and state == StreamState.SEALED, why
            assert outcome.detail["check"] == "INVALID_INPUT", why

    # Each acknowledged update was applied: its segment count was reached by some epoch, and the
    # stored configuration is one a caller asked for.
    updates = acknowledged(outcomes, "update", "SUCCESS")
    if updates:
        counts = {o.detail["count"] for o in updates + acknowledged(outcomes, "update", "STREAM_SEALED")}
        assert stored.scaling.min_num_segments in counts, why
        epoch_sizes = await epoch_segment_counts(services, stream_id)
        for outcome in updates:
            assert outcome.detail["count"] in epoch_sizes, f"{epoch_sizes}; {why}"
    elif not acknowledged(outcomes, "update", "STREAM_SEALED"):
        assert stored.scaling in {ScalingPolicy.fixed(count) for count in created_with}, why

    # Each acknowledged truncation was applied: every segment wholly before its cut is deleted,
    # in the metadata and in the segment store.
    for outcome in acknowledged(outcomes, "truncate", "SUCCESS"):
        newest = max(epoch_of(sid) for sid in outcome.detail["cut"])
        before = {
            sid for sid, r in known.items() if r["sealed_epoch"] is not None and r["sealed_epoch"] <= newest
        }
        assert before <= truncation.deleted_segments, why
    for sid in truncation.deleted_segments:
        assert qualified_segment_name(SCOPE, name, sid) not in names, why

    # Each acknowledged commit committed, each acknowledged abort aborted.
    for kind, final in (("commit", pb.TxnState.COMMITTED), ("abort", pb.TxnState.ABORTED)):
        for outcome in acknowledged(outcomes, kind, "SUCCESS"):
            request = pb.TxnRequest(
                streamInfo=pb.StreamInfo(scope=SCOPE, stream=name), txnId=outcome.detail["txn"]
            )
            assert (await stub.checkTransactionState(request)).state == final, why
    return True


async def check_stream_ends(services: Services, stub: ControllerServiceStub, name: str) -> None:
    """Nothing is left blocking the stream: it can still be sealed and deleted, leaving nothing."""
    info = pb.StreamInfo(scope=SCOPE, stream=name)
    sealed = await asyncio.wait_for(stub.sealStream(info), CALL_S)
    assert sealed.status == pb.UpdateStreamStatus.SUCCESS
    deleted = await asyncio.wait_for(stub.deleteStream(info), CALL_S)
    assert deleted.status == pb.DeleteStreamStatus.SUCCESS
    assert await until(lambda: quiescent(services, name), QUIESCENCE_S), await leftovers(services, name)
    left = await services.pool.fetchval(
        "SELECT count(*) FROM embedded_segments WHERE name LIKE $1 OR name LIKE $2",
        f"{SCOPE}/{name}/%",
        f"{SCOPE}/_MARK{name}/%",
    )
    assert left == 0


async def epoch_segment_counts(services: Services, stream_id: int) -> set[int]:
    """How many segments each epoch of the stream had (from the segments' creation and sealing)."""
    rows = await services.pool.fetch(
        """SELECT e.epoch, count(*) AS n FROM epochs e JOIN segments s ON s.stream_id = e.stream_id
           AND s.creation_epoch <= e.epoch AND (s.sealed_epoch IS NULL OR s.sealed_epoch > e.epoch)
           WHERE e.stream_id = $1 GROUP BY e.epoch""",
        stream_id,
    )
    return {int(r["n"]) for r in rows}
