"""docs/deploy.md's compose file and Kubernetes manifests are valid YAML of the right shape, and
their probes ask the controller's real health paths (those the REST app routes)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from app.api.rest.health import ROUTES
from app.wiring.shutdown_watchdog import shutdown_budget_s

DEPLOY = Path(__file__).resolve().parents[2] / "docs" / "deploy.md"
_YAML_BLOCK = re.compile(r"^```yaml\n(.*?)^```", re.MULTILINE | re.DOTALL)
_HEALTH_URL = re.compile(r"http://127\.0\.0\.1:9091(/[\w/]+)")
ROUTED = {route.path for route in ROUTES}


def blocks() -> dict[str, list[Any]]:
    """Each yaml block's documents, by the file name its first line gives."""
    found: dict[str, list[Any]] = {}
    for text in _YAML_BLOCK.findall(DEPLOY.read_text()):
        name = text.splitlines()[0].removeprefix("# ").strip()
        found[name] = [doc for doc in yaml.safe_load_all(text) if doc is not None]
    return found


def _probe_paths(command: list[str]) -> list[str]:
    return [path for part in command for path in _HEALTH_URL.findall(part)]


def test_the_compose_file_has_controller_and_postgres_with_health_checks() -> None:
    [compose] = blocks()["compose.yaml"]
    services = compose["services"]
    assert set(services) == {"controller", "postgres"}
    controller = services["controller"]
    assert controller["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert "@postgres:5432/" in controller["environment"]["PGCONTROLLER_DB_URL"]
    assert _probe_paths(controller["healthcheck"]["test"]) == ["/v1/health/readiness"]
    assert "pg_isready" in services["postgres"]["healthcheck"]["test"][1]
    assert {"9090:9090", "9091:9091", "12345:12345"} <= set(controller["ports"])


def test_the_manifests_are_a_deployment_service_and_secret_probing_the_health_paths() -> None:
    documents = blocks()["pgcontroller.yaml"]
    kinds = sorted(doc["kind"] for doc in documents)
    assert kinds == ["Deployment", "Secret", "Service", "Service"]
    [deployment] = [doc for doc in documents if doc["kind"] == "Deployment"]
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    probes = {name: container[name] for name in ("startupProbe", "readinessProbe", "livenessProbe")}
    # Kubernetes judges an httpGet probe by its status code alone: only the strict form says 503.
    assert {name: probe["httpGet"]["path"] for name, probe in probes.items()} == {
        "startupProbe": "/v1/health/readiness?strict=true",
        "readinessProbe": "/v1/health/readiness?strict=true",
        "livenessProbe": "/v1/health/liveness?strict=true",
    }
    assert {probe["httpGet"]["port"] for probe in probes.values()} == {"rest"}
    assert {probe["httpGet"]["path"].split("?")[0] for probe in probes.values()} <= ROUTED
    grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace > container["lifecycle"]["preStop"]["sleep"]["seconds"] + shutdown_budget_s(5.0, 5.0)
    [secret] = [doc for doc in documents if doc["kind"] == "Secret"]
    assert container["envFrom"] == [{"secretRef": {"name": secret["metadata"]["name"]}}]
    assert "PGCONTROLLER_DB_URL" in secret["stringData"]
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert deployment["spec"]["template"]["metadata"]["labels"] == selector
    services = [doc for doc in documents if doc["kind"] == "Service"]
    assert any(service["spec"].get("selector") == selector for service in services)
    assert any(service["spec"].get("type") == "ExternalName" for service in services)
    ports = {port["containerPort"]: port["name"] for port in container["ports"]}
    assert ports[9091] == "rest"
    assert set(ports) == {9090, 9091, 12345}
