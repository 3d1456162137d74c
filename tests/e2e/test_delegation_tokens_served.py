"""`pgcontroller serve --auth-enabled` as operators start it: with no key given it makes one and
shares it with its embedded store (the controller's own calls pass the store's check), the key
never shows in `ps` or the log, and the store refuses a token signed with another key."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from grpclib.client import Channel

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.security.passwords import hash_password
from app.security.tokens import Permission, TokenSigner, stream_resource
from app.segmentstore.wire import commands as wc
from app.store.accounts import PgAccountStore
from app.store.pool import create_pool
from tests.segmentstore.server_harness import Client, rid, wid
from tests.support.dataplane import start_with_segment_store

ADMIN = {"authorization": "Basic " + base64.b64encode(b"admin:admin-pw").decode()}

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("key_from", ["generated", "file"])
async def test_serve_with_auth_runs_its_workflows_and_its_store_checks_tokens(
    db_url: str, tmp_path: Path, key_from: str
) -> None:
    args = ["--db-url", db_url, "--auth-enabled"]
    secret = "a key given in a file, which must not show anywhere"
    if key_from == "file":
        (tmp_path / "key").write_text(secret + "\n")
        args += ["--auth-token-signing-key-file", str(tmp_path / "key")]
    pool = await create_pool(db_url, min_size=1, max_size=1)
    try:
        await PgAccountStore(pool).add("admin", hash_password("admin-pw"), "prn::*,READ_UPDATE", 1)
    finally:
        await pool.close()
    served = await start_with_segment_store(tmp_path, *args)
    try:
        channel = Channel("127.0.0.1", served.grpc_port)
        try:
            # Creating and sealing go through the store on the controller's own token.
            stub = ControllerServiceStub(channel)
            await stub.createScope(pb.ScopeInfo(scope="au"), metadata=ADMIN)
            info = pb.StreamInfo(scope="au", stream="s")
            config = pb.StreamConfig(streamInfo=info, scalingPolicy=pb.ScalingPolicy(minNumSegments=2))
            made = await stub.createStream(config, metadata=ADMIN)
            assert made.status == pb.CreateStreamStatus.SUCCESS, made
            sealed = await stub.sealStream(info, metadata=ADMIN)
            assert sealed.status == pb.UpdateStreamStatus.SUCCESS, sealed
        finally:
            channel.close()
        assert served.segment_store_port is not None
        c = await Client.connect(("127.0.0.1", served.segment_store_port))
        try:
            foreign = TokenSigner(b"some other cluster's key").issue(
                stream_resource("au", "s"), Permission.READ
            )
            reply = await c.call(wc.ReadSegment("au/s/0.#epoch.0", 0, 10, foreign, rid()))
            assert isinstance(reply, wc.AuthTokenCheckFailed) and reply.error_code == 0
            if key_from == "file":
                signed = TokenSigner(secret.encode()).issue(
                    stream_resource("au", "s"), Permission.READ_UPDATE
                )
                ok = await c.call(wc.SetupAppend(rid(), wid(), "au/s/0.#epoch.0", signed))
                assert isinstance(ok, wc.AppendSetup), ok
        finally:
            await c.close()
        assert secret not in served.log()
    finally:
        code = await served.stop()
        assert code == 0, served.log()
