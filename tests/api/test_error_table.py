"""The error table (app/api/errors.py): every domain error has a row, both servers answer each
error as its row says (the same service failure seen over real gRPC and real HTTP), and
docs/errors.md shows exactly this table."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from app.api.errors import ERROR_TABLE, UNMAPPED, ErrorRow, row_for
from app.api.grpc.proto import controller_pb2 as pb
from app.api.rest.app import create_app
from app.clock import SystemClock
from app.domain import errors
from app.domain.records import StreamConfig
from app.services.health import HealthService
from app.testing.controller import Services
from tests.api.conftest import served

DOC = Path(__file__).resolve().parents[2] / "docs" / "errors.md"

# What Pravega's clients do with a status code: the Java client's ControllerImpl retry
# configuration and the Rust controller client's map_grpc_error (which the Python client uses)
# agree on these two sets.
RETRIED_BY_PRAVEGA_CLIENTS = {
    Status.ABORTED,
    Status.CANCELLED,
    Status.DATA_LOSS,
    Status.DEADLINE_EXCEEDED,
    Status.FAILED_PRECONDITION,
    Status.INTERNAL,
    Status.RESOURCE_EXHAUSTED,
    Status.UNAVAILABLE,
    Status.UNKNOWN,
}
GIVEN_UP_BY_PRAVEGA_CLIENTS = {
    Status.ALREADY_EXISTS,
    Status.INVALID_ARGUMENT,
    Status.NOT_FOUND,
    Status.OUT_OF_RANGE,
    Status.PERMISSION_DENIED,
    Status.UNIMPLEMENTED,
}


class ScopeGone(errors.NotFound):
    """A subclass without a row: answers as its parent."""


class Unlisted(errors.DomainError):
    """A domain error nobody added to the table: answers as the unmapped row."""


def _all_subclasses(cls: type[errors.DomainError]) -> Iterator[type[errors.DomainError]]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _all_subclasses(sub)


def domain_errors() -> list[type[errors.DomainError]]:
    """The closed set as app/domain/errors.py defines it, base included."""
    return [errors.DomainError] + [
        cls for cls in _all_subclasses(errors.DomainError) if cls.__module__ == errors.__name__
    ]


# Every class of the closed set, plus the two test-only ones that exercise the MRO walk.
CASES: list[type[errors.DomainError]] = [*domain_errors(), ScopeGone, Unlisted]


def test_every_domain_error_has_a_row_of_its_own() -> None:
    own = {row.error for row in ERROR_TABLE}
    assert len(own) == len(ERROR_TABLE), "a class has two rows"
    assert set(domain_errors()) == own


def test_a_subclass_answers_as_its_nearest_parent_with_a_row() -> None:
    assert row_for(ScopeGone("x")).error is errors.NotFound
    assert row_for(Unlisted("x")) is UNMAPPED
    assert UNMAPPED.error is errors.DomainError
    assert (UNMAPPED.grpc, UNMAPPED.http) == (Status.INTERNAL, 500)


def test_retryable_rows_use_codes_pravegas_clients_retry_and_others_do_not_use_give_up_codes() -> None:
    for row in ERROR_TABLE:
        if row.retryable:
            assert row.grpc in RETRIED_BY_PRAVEGA_CLIENTS, row
        assert not (row.retryable and row.grpc in GIVEN_UP_BY_PRAVEGA_CLIENTS), row
        if row.grpc in GIVEN_UP_BY_PRAVEGA_CLIENTS:
            assert not row.retryable, row


def test_the_surfaces_agree_where_the_issue_found_them_apart() -> None:
    illegal = row_for(errors.IllegalState("x"))
    not_allowed = row_for(errors.OperationNotAllowed("x"))
    for row in (illegal, not_allowed):
        assert (row.grpc, row.http, row.retryable) == (Status.FAILED_PRECONDITION, 409, True)


# --- both servers, one failure -------------------------------------------------------------


@pytest.fixture
def failing_get_config(services: Services, monkeypatch: pytest.MonkeyPatch) -> list[errors.DomainError]:
    """StreamService.get_config, which getStreamConfiguration (gRPC) and GET .../streams/{name}
    (REST) both call, raises the error the test puts in the returned list."""
    pending: list[errors.DomainError] = []

    async def get_config(scope: str, name: str) -> StreamConfig:
        raise pending[0]

    monkeypatch.setattr(services.streams, "get_config", get_config)
    return pending


async def test_grpc_answers_every_domain_error_as_its_row(
    services: Services, failing_get_config: list[errors.DomainError]
) -> None:
    answered: dict[str, tuple[Status, str | None]] = {}
    expected: dict[str, tuple[Status, str | None]] = {}
    async with served(services) as stub:
        for cls in CASES:
            message = f"{cls.__name__} raised by the service"
            failing_get_config[:] = [cls(message)]
            with pytest.raises(GRPCError) as raised:
                await stub.getStreamConfiguration(pb.StreamInfo(scope="sc", stream="st"))
            answered[cls.__name__] = (raised.value.status, raised.value.message)
            expected[cls.__name__] = (row_for(cls(message)).grpc, message)
    assert answered == expected


def _rest_app(services: Services) -> web.Application:
    health = HealthService(SystemClock())
    return create_app(services.scopes, services.streams, health, services.lifecycle, services.transactions)


def _rest_expected(row: ErrorRow, message: str) -> tuple[int, dict[str, object], str | None]:
    return row.http, {"code": row.http.value, "message": message}, "1" if row.retryable else None


async def test_rest_answers_every_domain_error_as_its_row(
    services: Services, failing_get_config: list[errors.DomainError]
) -> None:
    app = _rest_app(services)
    answered: dict[str, tuple[int, dict[str, object], str | None]] = {}
    expected: dict[str, tuple[int, dict[str, object], str | None]] = {}
    async with TestClient(TestServer(app)) as client:
        for cls in CASES:
            message = f"{cls.__name__} raised by the service"
            failing_get_config[:] = [cls(message)]
            async with client.get("/v1/scopes/sc/streams/st") as resp:
                answered[cls.__name__] = (resp.status, await resp.json(), resp.headers.get("Retry-After"))
            expected[cls.__name__] = _rest_expected(row_for(cls(message)), message)
    assert answered == expected


async def test_an_error_without_a_message_is_named_on_both_surfaces(
    services: Services, failing_get_config: list[errors.DomainError]
) -> None:
    failing_get_config[:] = [errors.WriteConflict()]
    async with served(services) as stub:
        with pytest.raises(GRPCError) as raised:
            await stub.getStreamConfiguration(pb.StreamInfo(scope="sc", stream="st"))
    assert (raised.value.status, raised.value.message) == (Status.FAILED_PRECONDITION, "WriteConflict")
    app = _rest_app(services)
    async with TestClient(TestServer(app)) as client, client.get("/v1/scopes/sc/streams/st") as resp:
        assert (resp.status, await resp.json()) == (409, {"code": 409, "message": "WriteConflict"})


# --- the document ----------------------------------------------------------------------------

_DOC_ROW = re.compile(r"^\| `(\w+)` \| `(\w+)` \| (\d{3} [^|]+?) \| (yes|no) \|$")


def _documented_rows() -> list[tuple[str, str, str, str]]:
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## The table", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("| `")]
    rows = []
    for line in lines:
        match = _DOC_ROW.match(line)
        assert match, f"docs/errors.md: a table line the test cannot read: {line!r}"
        name, grpc, http, retry = match.groups()
        rows.append((name, grpc, http, retry))
    return rows


def _yes_no(flag: bool) -> str:
    return "yes" if flag else "no"


def test_docs_errors_md_shows_exactly_the_table() -> None:
    in_code = [
        (row.error.__name__, row.grpc.name, f"{row.http.value} {row.http.phrase}", _yes_no(row.retryable))
        for row in ERROR_TABLE
    ]
    assert _documented_rows() == in_code
