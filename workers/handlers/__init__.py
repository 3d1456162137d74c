"""Request handlers, one module per request kind, and the table the runner dispatches on."""

from __future__ import annotations

from collections.abc import Sequence

from app.domain.requests import RequestKind
from app.ports import AutoScaleStore, RequestQueue
from workers.handlers.abort_txn import AbortTxnHandler
from workers.handlers.auto_scale import AutoScaleHandler
from workers.handlers.commit_txns import CommitTxnsHandler
from workers.handlers.common import WorkflowDeps
from workers.handlers.create_stream import CreateStreamHandler, CreationFinisher
from workers.handlers.delete_scope import DeleteScopeHandler, ScopeMemberDeletion
from workers.handlers.delete_stream import DeleteStreamHandler
from workers.handlers.scale import ScaleHandler
from workers.handlers.seal_stream import SealStreamHandler
from workers.handlers.truncate_stream import TruncateStreamHandler
from workers.handlers.update_stream import UpdateStreamHandler
from workers.runner import RequestHandler


def stream_request_handlers(
    deps: WorkflowDeps,
    *,
    cold_markers: AutoScaleStore | None = None,
    scope_member_deletions: Sequence[ScopeMemberDeletion] = (),
) -> dict[RequestKind, RequestHandler]:
    return {
        RequestKind.AUTO_SCALE: AutoScaleHandler(deps, cold_markers),
        RequestKind.UPDATE_STREAM: UpdateStreamHandler(deps),
        RequestKind.SCALE: ScaleHandler(deps),
        RequestKind.TRUNCATE_STREAM: TruncateStreamHandler(deps),
        RequestKind.SEAL_STREAM: SealStreamHandler(deps),
        RequestKind.DELETE_STREAM: DeleteStreamHandler(deps),
        RequestKind.DELETE_SCOPE: DeleteScopeHandler(deps, scope_member_deletions),
    }


def creation_handlers(
    deps: WorkflowDeps, finisher: CreationFinisher, requests: RequestQueue
) -> dict[RequestKind, RequestHandler]:
    return {RequestKind.CREATE_STREAM: CreateStreamHandler(finisher, deps.streams, requests)}


def commit_handlers(handler: CommitTxnsHandler) -> dict[RequestKind, RequestHandler]:
    return {RequestKind.COMMIT_TXNS: handler}


def abort_handlers(deps: WorkflowDeps) -> dict[RequestKind, RequestHandler]:
    return {RequestKind.ABORT_TXN: AbortTxnHandler(deps)}
