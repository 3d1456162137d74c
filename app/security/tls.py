"""TLS contexts for the service's own ports (gRPC, REST, the segment store's) and for the
controller's connections to segment stores, built from the `--tls-*` settings.

Invariant: with TLS on, every context allows only the configured versions (never below TLS 1.2)
and a client context always verifies the peer's certificate and name; a missing, unreadable or
mismatched file is a `TlsSettingsError` naming the flag and the file, never a traceback.
"""

from __future__ import annotations

import ssl
from collections.abc import Sequence
from pathlib import Path
from typing import Final, Protocol

from app.settings.declaration import SettingError

_VERSIONS: Final = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
# ALPN: gRPC runs on HTTP/2 (the Rust client's rustls offers "h2" and tonic needs it); the REST
# server speaks HTTP/1.1 only, so it must never accept "h2" from a browser or curl.
ALPN_GRPC: Final = ("h2",)
ALPN_REST: Final = ("http/1.1",)


class TlsSettings(Protocol):
    """The settings these contexts are made from (`Settings` has them all)."""

    @property
    def tls_enabled(self) -> bool: ...
    @property
    def tls_cert_file(self) -> Path | None: ...
    @property
    def tls_key_file(self) -> Path | None: ...
    @property
    def tls_trust_file(self) -> Path | None: ...
    @property
    def tls_protocol_version(self) -> tuple[str, ...]: ...


class TlsSettingsError(SettingError):
    """TLS asked for but not possible with the files given; one line naming the flag and file."""


def check_tls(settings: TlsSettings) -> None:
    """Loads every file TLS needs once, so that a bad one stops start-up before anything runs."""
    server_context(settings, ())
    client_context(settings)


def server_context(settings: TlsSettings, alpn: Sequence[str]) -> ssl.SSLContext | None:
    """The context a listener wraps its connections in, or None when TLS is off."""
    if not settings.tls_enabled:
        return None
    cert, key = settings.tls_cert_file, settings.tls_key_file
    if cert is None or key is None:
        raise TlsSettingsError("--tls-enabled", "needs --tls-cert-file and --tls-key-file")
    _readable("--tls-cert-file", cert)
    _readable("--tls-key-file", key)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _limit_versions(context, settings.tls_protocol_version)
    try:
        context.load_cert_chain(cert, key)
    except ssl.SSLError as exc:
        # The reason only (e.g. KEY_VALUES_MISMATCH, PEM_lib): never the file's content.
        raise TlsSettingsError(
            "--tls-cert-file",
            f"{cert} with --tls-key-file {key}: not a PEM certificate and its key ({exc.reason})",
        ) from None
    if alpn:
        context.set_alpn_protocols(list(alpn))
    return context


def client_context(settings: TlsSettings) -> ssl.SSLContext | None:
    """The context the controller reaches segment stores with (verifying their certificates
    against --tls-trust-file, else the system's CAs), or None when TLS is off."""
    if not settings.tls_enabled:
        return None
    return trusting(settings.tls_trust_file, settings.tls_protocol_version)


def trusting(
    trust_file: Path | None, versions: Sequence[str] = tuple(_VERSIONS), alpn: Sequence[str] = ()
) -> ssl.SSLContext:
    """A verifying client context that trusts the CAs of `trust_file` (None: the system's)."""
    if trust_file is not None:
        _readable("--tls-trust-file", trust_file)
    context = ssl.create_default_context()
    _limit_versions(context, versions)
    if trust_file is not None:
        try:
            context.load_verify_locations(cafile=trust_file)
        except ssl.SSLError as exc:
            raise TlsSettingsError(
                "--tls-trust-file", f"{trust_file}: no PEM CA certificate in it ({exc.reason})"
            ) from None
    if alpn:
        context.set_alpn_protocols(list(alpn))
    return context


def _limit_versions(context: ssl.SSLContext, versions: Sequence[str]) -> None:
    chosen = sorted(_VERSIONS[v] for v in versions)
    if not chosen:
        raise TlsSettingsError("--tls-protocol-version", "must name at least one TLS version")
    context.minimum_version, context.maximum_version = chosen[0], chosen[-1]


def _readable(flag: str, path: Path) -> None:
    try:
        with open(path, "rb") as handle:
            handle.read(1)
    except OSError as exc:
        raise TlsSettingsError(
            flag, f"{path}: cannot read it ({exc.strerror or type(exc).__name__})"
        ) from None
