"""`pgcontroller auth user add|update|remove|list|import` as a real subprocess against the test
database; the accounts it writes log in over gRPC to a controller with `--auth-enabled`, a
Pravega password file's accounts with their existing passwords. No password is ever an argument."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

from grpclib.const import Status
from grpclib.exceptions import GRPCError

from app.api.grpc.proto import controller_pb2 as pb
from app.security.passwords import pravega_digest
from tests.security.conftest import Secured, basic
from tests.security.test_passwords_acl import PRAVEGA_ADMIN_DIGEST


async def cli(
    db_url: str, *args: str, stdin: str = "", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "app.cli", "auth", "user", *args, "--db-url", db_url],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


async def logs_in(secured: Secured, user: str, password: str) -> bool:
    try:
        await secured.stub.checkScopeExists(
            pb.ScopeInfo(scope="sc"), metadata={"authorization": basic(user, password)}
        )
    except GRPCError as exc:
        assert exc.status in (Status.UNAUTHENTICATED, Status.PERMISSION_DENIED)
        return exc.status is Status.PERMISSION_DENIED
    return True


async def test_add_update_remove_list(secured: Secured, db_url: str) -> None:
    added = await cli(db_url, "add", "alice", "--acl", "prn::*,READ_UPDATE", stdin="alice-pw\n")
    assert added.returncode == 0, added.stderr
    assert "alice-pw" not in added.stdout + added.stderr
    assert await logs_in(secured, "alice", "alice-pw")
    assert not await logs_in(secured, "alice", "other")

    again = await cli(db_url, "add", "alice", stdin="x\n")
    assert again.returncode == 1 and "already exists" in again.stderr
    bad_acl = await cli(db_url, "add", "bob", "--acl", "prn::*,WRITE", stdin="x\n")
    assert bad_acl.returncode != 0 and "WRITE" in bad_acl.stderr
    flag = await cli(db_url, "add", "bob", "--password", "leaky")
    assert flag.returncode == 2 and "leaky" not in flag.stderr

    updated = await cli(
        db_url, "update", "alice", "--password-env", "NEW_PW", "--acl", "prn::/,READ", env={"NEW_PW": "pw2"}
    )
    assert updated.returncode == 0, updated.stderr
    listed = await cli(db_url, "list", "--json")
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert rows == [
        {
            "name": "alice",
            "acl": "prn::/,READ",
            "version": 1,
            "createdAt": rows[0]["createdAt"],
            "updatedAt": rows[0]["updatedAt"],
        }
    ]
    assert "argon2" not in listed.stdout
    # the cache may still hold the old credential for a few seconds; a new one is verified now
    assert await logs_in(secured, "alice", "pw2")

    removed = await cli(db_url, "remove", "alice")
    assert removed.returncode == 0, removed.stderr
    assert (await cli(db_url, "list")).stdout == ""
    assert (await cli(db_url, "remove", "alice")).returncode == 1


async def test_import_a_pravega_password_file(secured: Secured, db_url: str, tmp_path: Path) -> None:
    lines = [
        "# written by Pravega's PasswordCreatorTool",
        f"admin:{PRAVEGA_ADMIN_DIGEST}:prn::*,READ_UPDATE;",
        f"reader:{pravega_digest('reader-pw', bytes(range(32)))}:prn::/scope:sc,READ;prn::/scope:sc/*,READ;",
        "noacl:" + pravega_digest("noacl-pw", b"\x07" * 32),
        "broken:not-a-digest:prn::*,READ",
    ]
    path = tmp_path / "passwd"
    path.write_text("\n".join(lines) + "\n")
    done = await cli(db_url, "import", str(path))
    assert done.returncode == 1  # one line could not be imported, and it is named
    assert "line 5 ('broken')" in done.stderr and "imported 3 accounts" in done.stderr
    assert await logs_in(secured, "admin", "1111_aaaa")
    assert await logs_in(secured, "reader", "reader-pw")
    assert not await logs_in(secured, "reader", "1111_aaaa")
    account = await secured.accounts.get("admin")
    assert account is not None and account.password_hash.startswith("$argon2id$")  # re-hashed on login
    kept = await cli(db_url, "import", str(path))
    assert "admin exists; kept" in kept.stderr
