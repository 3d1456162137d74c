"""Reader groups and key-value tables: their API services, the request kinds that carry out their
workflows, and their part in deleting a scope (a scope goes only with its groups and tables)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from app.api.grpc.kvtables import KvtRpcs
from app.api.grpc.readergroups import ReaderGroupRpcs
from app.api.rest import readergroups as reader_group_routes
from app.security.delegation import DelegationTokens
from app.services.kvtables import KvtService
from app.services.readergroups import ReaderGroupService
from app.services.retention import SubscriberService
from app.settings import Settings
from app.store.kvtables import PgKvtStore
from app.store.readergroups import PgReaderGroupStore
from app.wiring.resources import Contribution, Resources
from app.wiring.streams import RequestExtensions
from workers.handlers.common import WorkflowDeps
from workers.handlers.kvtables import delete_kvts_in_scope, kvt_handlers
from workers.handlers.readergroups import (
    ReaderGroupDeps,
    delete_reader_groups_in_scope,
    reader_group_handlers,
)


@dataclass(frozen=True)
class ReaderGroupsAndTables:
    reader_groups: ReaderGroupService
    kvts: KvtService
    requests: RequestExtensions
    contribution: Contribution


def wire_reader_groups_and_tables(
    settings: Settings,
    resources: Resources,
    deps: WorkflowDeps,
    subscribers: SubscriberService,
    tokens: DelegationTokens | None = None,
) -> ReaderGroupsAndTables:
    """`subscribers` are retention's: a subscribing group bounds what retention truncates."""
    group_store = PgReaderGroupStore(resources.pool)
    kvt_store = PgKvtStore(resources.pool)
    requests = RequestExtensions(
        handlers={
            **reader_group_handlers(deps, group_store, subscribers),
            **kvt_handlers(deps, kvt_store),
        },
        scope_member_deletions=(
            functools.partial(delete_reader_groups_in_scope, ReaderGroupDeps(deps, group_store, subscribers)),
            functools.partial(delete_kvts_in_scope, deps, kvt_store),
        ),
    )
    timeout_s = settings.completion_timeout_s
    reader_groups = ReaderGroupService(
        group_store,
        resources.scope_store,
        resources.clock,
        resources.requests,
        completion_timeout_s=timeout_s,
    )
    kvts = KvtService(kvt_store, resources.clock, resources.requests, completion_timeout_s=timeout_s)
    contribution = Contribution(
        grpc=(ReaderGroupRpcs(reader_groups), KvtRpcs(kvts, tokens)),
        rest=(reader_group_routes.extension(reader_groups),),
    )
    return ReaderGroupsAndTables(reader_groups, kvts, requests, contribution)
