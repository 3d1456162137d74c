"""Fuzzed `Authorization` values over real gRPC and HTTP never give a 5xx nor a gRPC
INTERNAL/UNKNOWN: each is an answer (200/OK), 401/UNAUTHENTICATED or 403/PERMISSION_DENIED."""

from __future__ import annotations

import base64
import re

import aiohttp
from grpclib.const import Status
from grpclib.exceptions import GRPCError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.api.grpc.proto import controller_pb2 as pb
from tests.security.conftest import ADMIN, Secured

EXAMPLES = 120
_SENDABLE = re.compile(r"[ -~]+")
_PRINTABLE = st.characters(min_codepoint=0x20, max_codepoint=0x7E)
_LATIN1 = st.characters(min_codepoint=0x20, max_codepoint=0xFF, blacklist_characters="\x7f")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


HEADERS = st.one_of(
    st.text(_PRINTABLE, max_size=200),
    st.builds(lambda t: "Basic " + t, st.text(_PRINTABLE, max_size=200)),
    st.builds(lambda b: "Basic " + _b64(b), st.binary(max_size=200)),
    # the real account's name with fuzzed passwords: these reach Argon2id
    st.builds(lambda p: "Basic " + _b64(b"admin:" + p), st.binary(max_size=40)),
    st.builds(
        lambda m, t: f"{m} {t}",
        st.sampled_from(["basic", "BASIC", "Bearer", "Digest", "Basic\t"]),
        st.text(_PRINTABLE, max_size=60),
    ),
    st.just("Basic " + _b64(b"admin:admin-pw")),
    st.just("Basic " + _b64(b"admin:admin-pw") + "="),
    st.just("Basic " + _b64(b":")),
)


def _examples() -> list[str]:
    found: list[str] = []

    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(HEADERS)
    def collect(value: str) -> None:
        found.append(value)

    collect()
    return found


async def test_fuzzed_authorization_headers_get_clean_answers(secured: Secured) -> None:
    await secured.add_user(*ADMIN)
    await secured.services.scopes.create_scope("s1")
    problems: list[str] = []
    headers = _examples()
    async with aiohttp.ClientSession(secured.rest_base) as http:
        for value in headers + [
            v.encode("latin-1", "replace").decode("latin-1") + "\xe9" for v in headers[:10]
        ]:
            async with http.get("/v1/scopes", headers={"Authorization": value}) as response:
                if response.status not in (200, 401, 403):
                    problems.append(f"REST {response.status} for {value!r}")
                elif response.status == 401 and "WWW-Authenticate" not in response.headers:
                    problems.append(f"REST 401 without WWW-Authenticate for {value!r}")
    for value in headers:
        # What grpclib's client can send at all: printable ASCII (a tab is a space on the wire).
        grpc_value = value.replace("\t", " ").strip()
        if not grpc_value or not _SENDABLE.fullmatch(grpc_value):
            continue
        try:
            await secured.stub.checkScopeExists(
                pb.ScopeInfo(scope="s1"), metadata={"authorization": grpc_value}
            )
        except GRPCError as exc:
            if exc.status not in (Status.UNAUTHENTICATED, Status.PERMISSION_DENIED):
                problems.append(f"gRPC {exc.status.name} for {grpc_value!r}")
    assert not problems
    assert any(h == "Basic " + _b64(b"admin:admin-pw") for h in headers)
