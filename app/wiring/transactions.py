"""Transactions: the API's use cases, the commit and abort dispatchers working the request buckets
this process owns, the sweeper that aborts expired transactions in those buckets, and the
leader's garbage collection of completed-transaction records."""

from __future__ import annotations

from dataclasses import dataclass

from app.domain.cluster import BucketService
from app.domain.requests import Processor
from app.ports import TxnWriterMarks
from app.services.transactions import TransactionService
from app.settings import Settings
from app.wiring.cluster import Cluster
from app.wiring.resources import Contribution, Resources
from workers.buckets import BucketClaims
from workers.dispatcher import RequestDispatcher
from workers.handlers import abort_handlers, commit_handlers
from workers.handlers.commit_txns import CommitTxnsHandler
from workers.handlers.common import WorkflowDeps
from workers.runner import RequestRunner
from workers.txn_gc import CompletedTxnGc
from workers.txn_timeouts import TxnTimeoutSweeper


@dataclass(frozen=True)
class Transactions:
    transactions: TransactionService
    commit_dispatcher: RequestDispatcher
    abort_dispatcher: RequestDispatcher
    sweeper: TxnTimeoutSweeper
    gc: CompletedTxnGc
    contribution: Contribution


def wire_transactions(
    settings: Settings,
    resources: Resources,
    deps: WorkflowDeps,
    cluster: Cluster,
    writer_marks: TxnWriterMarks,
) -> Transactions:
    """`writer_marks` are the watermarks' writer marks, which a commit records."""
    claims = cluster.claims[BucketService.REQUESTS]
    commits = _commit_dispatcher(settings, resources, deps, claims, writer_marks)
    aborts = _abort_dispatcher(settings, resources, deps, claims)
    cluster.dispatchers.add(commits)
    cluster.dispatchers.add(aborts)
    limits = settings.txn_limits
    clock = resources.clock
    sweeper = TxnTimeoutSweeper(
        resources.txn_store, clock, claims.owned, limits, tick_s=min(0.4, settings.request_poll_s)
    )
    # Cluster-wide sweep: only the leader runs it.
    gc = CompletedTxnGc(resources.txn_store, clock, limits, leads=lambda: cluster.node.is_leader)
    service = TransactionService(
        resources.stream_store,
        resources.txn_store,
        deps.segment_store,
        clock,
        limits,
        timeouts_running=lambda: sweeper.running,
    )
    loops = {
        "commit-dispatcher": commits.run,
        "abort-dispatcher": aborts.run,
        "txn-timeouts": sweeper.run,
        "txn-gc": gc.run,
    }
    return Transactions(service, commits, aborts, sweeper, gc, Contribution(loops=loops))


def _commit_dispatcher(
    settings: Settings, resources: Resources, deps: WorkflowDeps, claims: BucketClaims, marks: TxnWriterMarks
) -> RequestDispatcher:
    handler = CommitTxnsHandler(deps, resources.requests, writer_marks=marks, fence_for=claims.fence_for)
    runner = RequestRunner(
        resources.requests,
        commit_handlers(handler),
        resources.clock,
        processor=Processor.COMMITS,
        owns=claims.owns,
        fence_for=claims.fence_for,
        started_check=handler.started,
        max_failures=settings.request_max_failures,
    )
    return RequestDispatcher(
        resources.requests,
        runner,
        claims.owned,
        processor=Processor.COMMITS,
        # One run commits everything pending on the stream and acknowledges the requests it
        # covered, so a stream's later commit requests wait in the database, not in memory.
        one_per_key=True,
        ceiling=settings.request_concurrency,
        poll_s=settings.request_poll_s,
    )


def _abort_dispatcher(
    settings: Settings, resources: Resources, deps: WorkflowDeps, claims: BucketClaims
) -> RequestDispatcher:
    runner = RequestRunner(
        resources.requests,
        abort_handlers(deps),
        resources.clock,
        processor=Processor.ABORTS,
        owns=claims.owns,
        fence_for=claims.fence_for,
        barrier=False,
        max_failures=settings.request_max_failures,
    )
    return RequestDispatcher(
        resources.requests,
        runner,
        claims.owned,
        processor=Processor.ABORTS,
        # Aborts are independent of each other: one key per request, not per stream.
        key=lambda request: f"{request.key}#{request.id}",
        ceiling=settings.request_concurrency,
        poll_s=settings.request_poll_s,
    )
