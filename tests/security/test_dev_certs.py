"""`pgcontroller dev certs`: the certificates it writes make a verified TLS handshake over loopback
for every name they are issued for, refuse one they are not, and keep their keys owner-only."""

from __future__ import annotations

import asyncio
import json
import ssl
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from app.security.certs import make_dev_certs


async def _handshake(files_dir: Path, server_hostname: str, connect_host: str = "127.0.0.1") -> str:
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(files_dir / "server.pem", files_dir / "server.key")
    client_ctx = ssl.create_default_context(cafile=str(files_dir / "ca.pem"))

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await reader.readexactly(5))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, connect_host, 0, ssl=server_ctx)
    port = server.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.open_connection(
            connect_host, port, ssl=client_ctx, server_hostname=server_hostname
        )
        writer.write(b"hello")
        echoed = await reader.readexactly(5)
        writer.close()
        return echoed.decode()
    finally:
        server.close()
        await server.wait_closed()


@pytest.mark.parametrize("name", ["localhost", "127.0.0.1", "store.example"])
async def test_the_server_certificate_verifies_against_the_ca_for_its_names(
    tmp_path: Path, name: str
) -> None:
    make_dev_certs(tmp_path, names=("store.example",))
    assert await _handshake(tmp_path, name) == "hello"


async def test_a_name_the_certificate_does_not_carry_is_refused(tmp_path: Path) -> None:
    make_dev_certs(tmp_path)
    with pytest.raises(ssl.SSLCertVerificationError):
        await _handshake(tmp_path, "other.example")


async def test_a_certificate_without_the_loopback_names_carries_only_its_names(tmp_path: Path) -> None:
    # As Pravega's own test certificate: host names only, no IP address.
    make_dev_certs(tmp_path, names=("localhost", "server.pravegastack.io"), loopback=False)
    assert await _handshake(tmp_path, "localhost") == "hello"
    assert await _handshake(tmp_path, "server.pravegastack.io") == "hello"
    with pytest.raises(ssl.SSLCertVerificationError, match="IP address mismatch"):
        await _handshake(tmp_path, "127.0.0.1")
    with pytest.raises(ValueError, match="needs names"):
        make_dev_certs(tmp_path / "none", loopback=False)


async def test_a_certificate_from_another_ca_is_refused(tmp_path: Path) -> None:
    make_dev_certs(tmp_path / "a")
    make_dev_certs(tmp_path / "b")
    (tmp_path / "a" / "ca.pem").write_bytes((tmp_path / "b" / "ca.pem").read_bytes())
    with pytest.raises(ssl.SSLCertVerificationError):
        await _handshake(tmp_path / "a", "localhost")


def test_the_command_writes_owner_only_keys_and_names_its_files(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "app.cli", "dev", "certs", str(tmp_path / "certs"), "--name", "10.1.2.3"],
        capture_output=True,
        text=True,
        check=True,
    )
    files = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(files) == {"ca_cert", "ca_key", "server_cert", "server_key", "client_cert", "client_key"}
    for field, path in files.items():
        mode = stat.S_IMODE(Path(path).stat().st_mode)
        assert mode == (0o600 if field.endswith("_key") else 0o644), (field, oct(mode))


def test_the_command_refuses_a_bad_name_with_a_message(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "app.cli", "dev", "certs", str(tmp_path), "--name", "bad name"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2
    assert "bad name" in out.stderr and "Traceback" not in out.stderr
