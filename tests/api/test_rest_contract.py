"""The REST API checked against its own contract, app/api/rest/openapi.json: the document is a valid
OpenAPI 3 document, it names exactly the routes `serve` serves (both ways), and a property-based run
(schemathesis, against the live server on loopback) finds no 5xx and no answer outside the document."""

from __future__ import annotations

import asyncio
import json
import os
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import hypothesis
import pytest
import requests
import schemathesis
from aiohttp import web
from openapi_spec_validator import validate
from schemathesis import APIOperation, Case, GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.core.result import Ok
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from app.api.rest.app import load_openapi
from app.api.rest.auth import OPEN_PATHS, OPEN_PREFIXES
from app.domain.records import ScalingPolicy, StreamConfig
from app.testing.controller import running_controller, serving
from tests.api.conftest_rest import PREFIX

METHODS = {"get", "put", "post", "delete", "patch", "head", "options"}

# Per operation and generation mode; small enough for the whole run to stay under a minute, large
# enough to reach each route's validation with odd names, bodies and queries. A deeper run by hand:
# REST_CONTRACT_EXAMPLES=200 pytest tests/api/test_rest_contract.py
EXAMPLES = int(os.environ.get("REST_CONTRACT_EXAMPLES", "12"))

# A call waiting on a workflow answers (504) after COMPLETION_TIMEOUT_S (the tests' usual); no
# answer by ANSWER_WITHIN_S is a hang.
COMPLETION_TIMEOUT_S = 30.0
ANSWER_WITHIN_S = 60.0

# The scope and stream the second pass addresses.
EXISTING = {"scopeName": "contract", "streamName": "s1"}

CHECKS: list[Callable[..., Any]] = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


def _document() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(load_openapi())
    return doc


def routed(app: web.Application) -> set[tuple[str, str]]:
    """(METHOD, full path template) of every route the app's router serves."""
    return {
        (route.method.upper(), route.resource.canonical)
        for route in app.router.routes()
        if route.resource is not None
    }


def documented(doc: dict[str, Any]) -> set[tuple[str, str]]:
    """(METHOD, full path template) of every operation the document names; its paths are relative to
    its one server URL (/v1), unless the path item or the operation names its own server (the root
    paths: Pravega's /ping, the scrape paths)."""
    (server,) = doc["servers"]

    def base(*levels: dict[str, Any]) -> str:
        for level in levels:
            if "servers" in level:
                (own,) = level["servers"]
                return str(own["url"]).rstrip("/")
        return str(server["url"])

    return {
        (method.upper(), base(operation, item) + path)
        for path, item in doc["paths"].items()
        for method, operation in item.items()
        if method in METHODS
    }


def coverage_gaps(served: Iterable[tuple[str, str]], named: Iterable[tuple[str, str]]) -> list[str]:
    """One line per difference, sorted by path: what must be documented or must go."""
    served, named = set(served), set(named)
    lines = [f"  served, not in openapi.json: {m} {p}" for m, p in served - named]
    lines += [f"  in openapi.json, not served: {m} {p}" for m, p in named - served]
    return sorted(lines, key=lambda line: (line.split()[-1], line))


def test_the_document_is_a_valid_openapi_3_document() -> None:
    doc = _document()
    assert doc["openapi"].startswith("3.0.")
    validate(doc)  # raises OpenAPIValidationError naming the first offending node


def test_coverage_gaps_name_each_missing_path_on_its_own_line() -> None:
    gaps = coverage_gaps({("GET", "/ping"), ("GET", "/v1/scopes")}, {("GET", "/v1/scopes"), ("PUT", "/v1/x")})
    assert gaps == ["  served, not in openapi.json: GET /ping", "  in openapi.json, not served: PUT /v1/x"]


def test_the_document_says_which_routes_ask_for_credentials() -> None:
    """As the REST middleware decides (app/api/rest/auth.py): the open routes declare no security;
    every other one documents the 401 and 403 that --auth-enabled can answer."""
    doc = _document()
    assert set(doc["components"]["securitySchemes"]) == {"basicAuth", "pravegaAuth"}
    # Auth is off by default, so no credentials is one of the accepted alternatives.
    assert {} in doc["security"]
    (server,) = doc["servers"]
    for path, item in doc["paths"].items():
        for method, operation in item.items():
            if method not in METHODS:
                continue
            own = operation.get("servers") or item.get("servers") or [server]
            full = str(own[0]["url"]).rstrip("/") + path
            is_open = full in OPEN_PATHS or full.startswith(OPEN_PREFIXES)
            where = f"{method.upper()} {full}"
            if is_open:
                assert operation.get("security") == [], f"{where} is open: it must declare security []"
                assert not {"401", "403"} & set(operation["responses"]), where
            else:
                assert "security" not in operation, f"{where} needs credentials with --auth-enabled"
                assert operation["responses"].get("401") == {"$ref": "#/components/responses/Unauthorized"}, (
                    where
                )
                assert operation["responses"].get("403") == {"$ref": "#/components/responses/Forbidden"}, (
                    where
                )


async def test_the_document_names_exactly_the_routes_serve_serves(db_url: str) -> None:
    """Against the REST app `serve` starts (every extension installed); each side's extras listed."""
    async with running_controller(db_url, workers=False) as services, serving(services) as servers:
        app = servers.rest_runner.app
        assert app is not None
        served = routed(app)
    gaps = coverage_gaps(served, documented(_document()))
    assert not gaps, "openapi.json and the served routes differ:\n" + "\n".join(gaps)
    assert any(path.startswith(PREFIX + "/scopes") for _, path in served)


@dataclass
class Findings:
    failures: list[str] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)


def _run_operation(
    operation: APIOperation[Any, Any, Any, Any],
    mode: GenerationMode,
    base_url: str,
    session: requests.Session,
    found: Findings,
    pinned: dict[str, str],
    concrete: frozenset[str],
) -> None:
    """Up to EXAMPLES cases of one operation in one mode, its path parameters named in `pinned`
    fixed; every failed check is recorded, not raised, so one run reports them all. A case whose
    URL is one of the `concrete` (untemplated) paths of the document is not sent: OpenAPI matches
    a concrete path before a templated one, so `/health/{id}` with the id `details` is the
    `/health/details` operation, whose own cases check it."""

    @hypothesis.settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        phases=[hypothesis.Phase.explicit, hypothesis.Phase.generate],
        suppress_health_check=list(hypothesis.HealthCheck),
    )
    @hypothesis.given(case=operation.as_strategy(generation_mode=mode, path_parameters=pinned or None))
    def check(case: Case[Any]) -> None:
        if case.formatted_path in concrete and case.formatted_path != operation.path:
            return
        label = f"{operation.label} [{mode.value}{', ' + str(pinned) if pinned else ''}]"
        try:
            response = case.call(base_url=base_url, session=session, timeout=ANSWER_WITHIN_S)
        except requests.Timeout:
            found.failures.append(f"{label}: no answer in {ANSWER_WITHIN_S} s\n    {case.as_curl_command()}")
            return
        found.statuses[response.status_code] += 1
        try:
            case.validate_response(response, checks=CHECKS)
        except (AssertionError, FailureGroup) as exc:
            # The first failure of an operation in a mode is enough to fix it; the rest repeat it.
            if not any(f.startswith(label) for f in found.failures):
                found.failures.append(f"{label}: {exc}\n    {case.as_curl_command()}")

    try:
        check()
    except hypothesis.errors.Unsatisfiable:
        # An operation that takes no input at all has no invalid input to send.
        if mode is GenerationMode.POSITIVE:
            raise


def _fuzz(doc: dict[str, Any], base_url: str) -> Findings:
    """Every operation of the document against the live server: valid and invalid inputs with
    generated names, then valid inputs addressed to a scope and stream that exist (generated names
    rarely do), so the bodies and queries reach the handlers' deeper paths."""
    found = Findings()
    concrete = frozenset(path for path in doc["paths"] if "{" not in path)
    with requests.Session() as session:
        for result in schemathesis.openapi.from_dict(doc).get_all_operations():
            # An operation schemathesis cannot read is the document's defect: it fails here.
            assert isinstance(result, Ok), result.err()
            operation = result.ok()
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                _run_operation(operation, mode, base_url, session, found, {}, concrete)
            names = {p.name for p in operation.path_parameters}
            pinned = {k: v for k, v in EXISTING.items() if k in names}
            if pinned:
                _run_operation(operation, GenerationMode.POSITIVE, base_url, session, found, pinned, concrete)
    return found


@pytest.mark.timeout(240 * max(1, EXAMPLES // 12))
async def test_schemathesis_finds_no_server_error_and_no_answer_outside_the_document(db_url: str) -> None:
    async with (
        running_controller(db_url, completion_timeout_s=COMPLETION_TIMEOUT_S) as services,
        serving(services) as servers,
    ):
        base_url = f"http://127.0.0.1:{servers.rest_port}{PREFIX}"
        await services.scopes.create_scope(EXISTING["scopeName"])
        await services.streams.create_stream(
            EXISTING["scopeName"], EXISTING["streamName"], StreamConfig(ScalingPolicy.fixed(2))
        )
        # Blocking HTTP in a thread while this loop serves the requests.
        found = await asyncio.to_thread(_fuzz, _document(), base_url)
    print(f"schemathesis: {found.statuses.total()} requests, by status {sorted(found.statuses.items())}")
    # The run reached the handlers: some inputs were accepted, some refused.
    statuses = found.statuses
    assert any(200 <= s < 300 for s in statuses) and any(400 <= s < 500 for s in statuses), statuses
    failures = found.failures
    assert not failures, f"{len(failures)} contract failures:\n" + "\n".join(failures[:20])
