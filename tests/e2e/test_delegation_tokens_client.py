"""The real Pravega client with delegation tokens of a 3 s TTL: it writes and reads for several
TTLs while the embedded store checks every token it sends, so it must keep fetching fresh ones
from the controller (its DelegationTokenProvider), and the store refuses what has no valid token.

Authentication of the client itself is not enforced on this branch: the ACL lookup is set here,
explicitly, to grant READ_UPDATE to every caller."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from grpclib.client import Channel

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.domain.ids import segment_id
from app.security.tokens import Permission, TokenSigner, stream_resource
from app.segmentstore.server.tokens import TOKEN_CHECK_FAILED, TOKEN_EXPIRED
from app.segmentstore.wire import commands as wc
from app.testing.controller import Services, running_controller
from tests.segmentstore.server_harness import Client, rid, wid
from tests.support.dataplane import ClientProcess, expected_names, read_events
from tests.support.grpc_served import grpc_port

pytestmark = [pytest.mark.interop, pytest.mark.timeout(300)]

KEY = b"the end-to-end tests' delegation-token signing key, 64 bytes or longer, never shown"
TTL_S = 3
EVENTS = 600
KEYS = 5
RATE = 50  # events/s: the writer writes for 12 s, four TTLs
TIMEOUT_S = 90.0


class Granted:
    """The ACL lookup of this test: READ_UPDATE for everyone; counts the tokens signed."""

    def __init__(self) -> None:
        self.signed: list[str] = []

    def __call__(self, resource: str) -> Permission:
        self.signed.append(resource)
        return Permission.READ_UPDATE


@pytest.fixture
async def secured(db_url: str) -> AsyncIterator[tuple[Services, str, Granted]]:
    async with running_controller(
        db_url, auth_enabled=True, token_signing_key=KEY, auth_token_ttl_s=TTL_S
    ) as services:
        granted = Granted()
        services.storage.tokens.authorize_with(granted)
        async with grpc_port(services, tokens=services.storage.tokens) as port:
            yield services, f"tcp://127.0.0.1:{port}", granted


async def test_the_client_writes_and_reads_for_several_ttls_on_refreshed_tokens(
    secured: tuple[Services, str, Granted], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, uri, granted = secured
    # The client's documented credential variables (ignored until authentication is enforced).
    monkeypatch.setenv("pravega_client_auth_method", "Basic")
    monkeypatch.setenv("pravega_client_auth_username", "writer")
    monkeypatch.setenv("pravega_client_auth_password", "not-checked-here")
    host, port = uri.removeprefix("tcp://").split(":")
    channel = Channel(host, int(port))
    stub = ControllerServiceStub(channel)
    try:
        await stub.createScope(pb.ScopeInfo(scope="tk"))
        config = pb.StreamConfig(
            streamInfo=pb.StreamInfo(scope="tk", stream="s"),
            scalingPolicy=pb.ScalingPolicy(scaleType=pb.ScalingPolicy.FIXED_NUM_SEGMENTS, minNumSegments=2),
        )
        assert (await stub.createStream(config)).status == pb.CreateStreamStatus.SUCCESS
        out = tmp_path / "read.json"
        reader = await ClientProcess.start(
            "read", tmp_path, uri=uri, auth=True, scope="tk", stream="s", group="rg", readers=1,
            deadline_s=TIMEOUT_S, stop_after=EVENTS, out=str(out), progress_every=100,
        )  # fmt: skip
        writer = await ClientProcess.start(
            "write", tmp_path, uri=uri, auth=True, scope="tk", stream="s", count=EVENTS, keys=KEYS,
            inflight=100, progress_every=100, rate=RATE,
        )  # fmt: skip
        try:
            written = await writer.result(TIMEOUT_S)
            assert written["written"] == EVENTS and written["seconds"] > 3 * TTL_S
            seen = await reader.result(TIMEOUT_S)
        finally:
            await writer.kill()
            await reader.kill()
        assert seen["read"] == EVENTS
        assert {name for _, name in read_events(out)} == expected_names("e", EVENTS, KEYS)
        # The client fetched tokens again and again: one TTL could not have carried it (with a
        # 600 s TTL the same run fetches 5; with 3 s, about 30).
        stream_tokens = [r for r in granted.signed if r == stream_resource("tk", "s")]
        assert len(stream_tokens) >= 10, len(stream_tokens)

        # Meanwhile the store checks: no token, or an expired one, is refused.
        uri_reply = await stub.getURI(pb.SegmentId(streamInfo=config.streamInfo, segmentId=segment_id(0, 0)))
        c = await Client.connect((uri_reply.endpoint, uri_reply.port))
        try:
            segment = "tk/s/0.#epoch.0"
            empty = await c.call(wc.SetupAppend(rid(), wid(), segment, ""))
            assert isinstance(empty, wc.AuthTokenCheckFailed) and empty.error_code == TOKEN_CHECK_FAILED
            stale = TokenSigner(KEY, TTL_S, now=lambda: 1_000_000.0).issue(
                stream_resource("tk", "s"), Permission.READ_UPDATE
            )
            expired = await c.call(wc.ReadSegment(segment, 0, 100, stale, rid()))
            assert isinstance(expired, wc.AuthTokenCheckFailed) and expired.error_code == TOKEN_EXPIRED
        finally:
            await c.close()
    finally:
        channel.close()
