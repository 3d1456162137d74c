"""The TLS settings at start-up: TLS on without a certificate and key, or with a file that cannot
be read or is not what it should be, stops `serve` and `segment-store` with one line naming the
flag and the file (never a traceback, never a key's content); good files give contexts that allow
only the configured versions, never below TLS 1.2."""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import replace
from pathlib import Path

import pytest

from app.cli import main
from app.security.certs import make_dev_certs
from app.security.tls import ALPN_GRPC, TlsSettingsError, check_tls, client_context, server_context
from app.settings import Settings


def test_tls_is_off_by_default_and_then_no_context_is_made() -> None:
    settings = Settings()
    assert not settings.tls_enabled
    assert server_context(settings, ALPN_GRPC) is None and client_context(settings) is None
    check_tls(settings)


@pytest.mark.parametrize("command", ["serve", "segment-store"])
@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--tls-enabled"], "--tls-enabled needs --tls-cert-file and --tls-key-file"),
        (["--tls-enabled", "--tls-cert-file", "{d}/server.pem"], "needs --tls-cert-file and --tls-key-file"),
        (
            ["--tls-enabled", "--tls-cert-file", "{d}/missing.pem", "--tls-key-file", "{d}/server.key"],
            "--tls-cert-file {d}/missing.pem: cannot read it (No such file or directory)",
        ),
        (
            ["--tls-enabled", "--tls-cert-file", "{d}/server.pem", "--tls-key-file", "{d}/client.key"],
            "--tls-cert-file {d}/server.pem with --tls-key-file {d}/client.key: not a PEM certificate",
        ),
        (
            ["--tls-enabled", "--tls-cert-file", "{d}/ca.key", "--tls-key-file", "{d}/server.key"],
            "not a PEM certificate and its key",
        ),
    ],
)
def test_a_bad_tls_setting_stops_start_up_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, flags: list[str], said: str
) -> None:
    make_dev_certs(tmp_path)
    argv = [command, *(flag.format(d=tmp_path) for flag in flags)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert said.format(d=tmp_path) in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert "PRIVATE KEY" not in err


def test_an_unreadable_key_or_trust_file_is_named(tmp_path: Path) -> None:
    files = make_dev_certs(tmp_path)
    # A directory cannot be read as a file, whoever runs the test (root reads any mode-0 file).
    settings = Settings(tls_enabled=True, tls_cert_file=files.server_cert, tls_key_file=tmp_path)
    with pytest.raises(TlsSettingsError, match=f"--tls-key-file {tmp_path}: cannot read it"):
        check_tls(settings)
    not_a_ca = tmp_path / "empty.pem"
    not_a_ca.write_text("nothing here\n")
    settings = Settings(
        tls_enabled=True,
        tls_cert_file=files.server_cert,
        tls_key_file=files.server_key,
        tls_trust_file=not_a_ca,
    )
    with pytest.raises(TlsSettingsError, match=r"--tls-trust-file .*empty\.pem: no PEM CA certificate"):
        check_tls(settings)


@pytest.mark.parametrize(
    ("versions", "lowest", "highest"),
    [
        (("TLSv1.2", "TLSv1.3"), ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3),
        (("TLSv1.3",), ssl.TLSVersion.TLSv1_3, ssl.TLSVersion.TLSv1_3),
        (("TLSv1.2",), ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_2),
    ],
)
def test_the_contexts_allow_only_the_configured_versions(
    tmp_path: Path, versions: tuple[str, ...], lowest: ssl.TLSVersion, highest: ssl.TLSVersion
) -> None:
    files = make_dev_certs(tmp_path)
    settings = Settings(
        tls_enabled=True,
        tls_cert_file=files.server_cert,
        tls_key_file=files.server_key,
        tls_trust_file=files.ca_cert,
        tls_protocol_version=versions,
    )
    server, client = server_context(settings, ALPN_GRPC), client_context(settings)
    assert server is not None and client is not None
    for context in (server, client):
        assert (context.minimum_version, context.maximum_version) == (lowest, highest)
    assert client.verify_mode == ssl.CERT_REQUIRED and client.check_hostname


async def _handshake_version(server: ssl.SSLContext, client: ssl.SSLContext) -> str | None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    listener = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=server)
    try:
        _, writer = await asyncio.open_connection(
            "127.0.0.1", listener.sockets[0].getsockname()[1], ssl=client, server_hostname="localhost"
        )
        version = writer.get_extra_info("ssl_object").version()
        writer.close()
        return str(version)
    finally:
        listener.close()
        await listener.wait_closed()


async def test_a_client_below_the_allowed_versions_is_refused(tmp_path: Path) -> None:
    files = make_dev_certs(tmp_path)
    only_13 = Settings(
        tls_enabled=True,
        tls_cert_file=files.server_cert,
        tls_key_file=files.server_key,
        tls_protocol_version=("TLSv1.3",),
    )
    server = server_context(only_13, ())
    assert server is not None
    client = ssl.create_default_context(cafile=str(files.ca_cert))
    assert await _handshake_version(server, client) == "TLSv1.3"
    client.maximum_version = ssl.TLSVersion.TLSv1_2
    # The server ends the handshake: the client sees an SSL alert or a reset, both OSErrors.
    with pytest.raises((ssl.SSLError, ConnectionResetError)):
        await _handshake_version(server, client)
    default = server_context(replace(only_13, tls_protocol_version=("TLSv1.2", "TLSv1.3")), ())
    assert default is not None
    assert await _handshake_version(default, client) == "TLSv1.2"
