"""REST views of the cluster (our extension): members, bucket owners, the leader, and what the
answering process itself holds. Read-only; the cluster loop makes every decision."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web

from app.domain.cluster import BucketRow, BucketService
from app.domain.errors import InvalidInput, NotFound
from app.services.cluster import ClusterQueries

CLUSTER = web.AppKey("cluster", ClusterQueries)


def _bucket_json(row: BucketRow) -> dict[str, Any]:
    return {
        "service": row.service.value,
        "bucket": row.bucket,
        "assignedTo": row.assigned_to,
        "owner": row.owner,
        "generation": row.generation,
    }


async def list_members(request: web.Request) -> web.Response:
    members = await request.app[CLUSTER].members()
    return web.json_response(
        {
            "members": [
                {
                    "id": view.member.id,
                    "host": view.member.host,
                    "grpcPort": view.member.grpc_port,
                    "restPort": view.member.rest_port,
                    "startedAt": view.member.started_at,
                    "heartbeatAt": view.member.heartbeat_at,
                    "live": view.live,
                }
                for view in members
            ]
        }
    )


async def list_buckets(request: web.Request) -> web.Response:
    name = request.query.get("service")
    service = None
    if name is not None:
        try:
            service = BucketService(name)
        except ValueError:
            choices = ", ".join(s.value for s in BucketService)
            raise InvalidInput(f"service must be one of {choices}, got {name!r}") from None
    rows = await request.app[CLUSTER].buckets(service)
    return web.json_response({"buckets": [_bucket_json(row) for row in rows]})


async def get_leader(request: web.Request) -> web.Response:
    leader = await request.app[CLUSTER].leader()
    if leader is None:
        raise NotFound("no controller has led this cluster yet")
    return web.json_response(
        {"controllerId": leader.controller_id, "term": leader.term, "since": leader.since}
    )


async def get_self(request: web.Request) -> web.Response:
    local = request.app[CLUSTER].local()
    return web.json_response(
        {
            "id": local.member_id,
            "leader": local.leader,
            "owned": {service.value: sorted(buckets) for service, buckets in local.owned.items()},
        }
    )


ROUTES = [
    web.get("/v1/cluster/members", list_members, allow_head=False),
    web.get("/v1/cluster/buckets", list_buckets, allow_head=False),
    web.get("/v1/cluster/leader", get_leader, allow_head=False),
    web.get("/v1/cluster/self", get_self, allow_head=False),
]


def extension(cluster: ClusterQueries) -> Callable[[web.Application], None]:
    def install(app: web.Application) -> None:
        app[CLUSTER] = cluster
        app.add_routes(ROUTES)

    return install
