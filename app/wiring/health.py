"""The health contributors of a serving process, one per background service, each read from the
state it reports on when asked. Invariant: a contributor is UP only while its loops run and it
holds what it should (its buckets, its session), so readiness never outlives the work it vouches for.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from app.domain.cluster import BucketService
from app.services.health import Check, HealthService, HealthStatus
from app.wiring.controller import Controller
from app.wiring.segment_store import RunningStore
from workers.buckets import BucketClaims
from workers.cluster import ClusterNode

# A loop's state by name: True while it runs, False once it ended, None before it started.
LoopState = Callable[[str], bool | None]

GRPC_SERVER = "grpc-server"
CLUSTER = "cluster-membership"
CONTAINER_BALANCER = "container-balancer"
REQUEST_PROCESSORS = "request-processors"
SEGMENT_STORE = "segment-store"
METADATA_STORE = "metadata-store"

# The loop each bucket service's work runs in: its buckets are worked only while it runs.
BUCKET_LOOPS: Mapping[BucketService, str] = {
    BucketService.REQUESTS: "request-dispatcher",
    BucketService.RETENTION: "retention",
    BucketService.WATERMARKS: "watermarks",
}
# Loops that belong to a contributor of their own; every other loop is a request processor.
_OWNED_LOOPS = frozenset({"cluster", "container-map", *BUCKET_LOOPS.values()})


def bucket_contributor(service: BucketService) -> str:
    return f"{service.value}-buckets"


def _loops_verdict(names: Iterable[str], state: LoopState) -> tuple[HealthStatus, dict[str, str]]:
    details: dict[str, str] = {}
    worst = HealthStatus.UP
    for name in sorted(names):
        running = state(name)
        details[name] = {None: "not started", True: "running", False: "ended"}[running]
        if running is False:
            worst = HealthStatus.DOWN
        elif running is None and worst is HealthStatus.UP:
            worst = HealthStatus.STARTING
    return worst, details


def register_contributors(
    health: HealthService, controller: Controller, state: LoopState, store: RunningStore | None
) -> None:
    """Registers every contributor but the pushed ones (metadata-store, grpc-server)."""
    node = controller.cluster_node
    health.register(CLUSTER, _cluster(controller, state))
    for service, claims in controller.membership.claims.items():
        health.register(bucket_contributor(service), _buckets(claims, state))
    health.register(CONTAINER_BALANCER, _balancer(node, state))
    processors = [name for name in controller.loops() if name not in _OWNED_LOOPS]
    health.register(REQUEST_PROCESSORS, lambda: _loops_verdict(processors, state))
    health.register(SEGMENT_STORE, _segment_store(store))


def _cluster(controller: Controller, state: LoopState) -> Check:
    node = controller.cluster_node

    def check() -> tuple[HealthStatus, dict[str, str]]:
        status, details = _loops_verdict(["cluster"], state)
        details = {"member": node.member.id, "leader": str(node.is_leader).lower(), **details}
        if status is HealthStatus.UP and not node.first_round.is_set():
            status = HealthStatus.STARTING
        elif status is HealthStatus.UP and not node.registered:
            status, details["session"] = HealthStatus.DOWN, "lost"
        return status, details

    return check


def _buckets(claims: BucketClaims, state: LoopState) -> Check:
    def check() -> tuple[HealthStatus, dict[str, str]]:
        status, details = _loops_verdict(["cluster", BUCKET_LOOPS[claims.service]], state)
        mine, held = claims.assigned, claims.owned()
        details["owned"] = str(len(held))
        if mine is None:
            return (HealthStatus.STARTING if status is HealthStatus.UP else status), details
        details["assigned"] = str(len(mine))
        if status is HealthStatus.UP and not mine <= held:
            # Assigned here but not held: nobody works those buckets until this process claims them.
            status = HealthStatus.DOWN
        return status, details

    return check


def _balancer(node: ClusterNode, state: LoopState) -> Check:
    def check() -> tuple[HealthStatus, dict[str, str]]:
        status, details = _loops_verdict(["container-map"], state)
        # The balancing itself is a duty of the leader's cluster rounds.
        details["balancing"] = str(node.is_leader).lower()
        return status, details

    return check


def _segment_store(store: RunningStore | None) -> Check:
    def check() -> tuple[HealthStatus, dict[str, str]]:
        if store is None:
            # External stores are separate processes with their own health; the container map
            # (container-balancer) is what this process keeps of them.
            return HealthStatus.UP, {"mode": "external"}
        died = store.died()
        if died is not None:
            return HealthStatus.DOWN, {"mode": "embedded", "error": type(died).__name__}
        return HealthStatus.UP, {"mode": "embedded", "port": str(store.address[1]), **store.tier_health()}

    return check
