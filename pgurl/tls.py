"""Turns a PgUrl's sslmode and certificate parameters into the TLS setup of a Python client, with
libpq's meaning of every mode. Invariant: a mode that promises verification never yields a context
that skips it; a missing or unreadable file is a PgUrlError naming the parameter, never a crash.
"""

from __future__ import annotations

import os
import pathlib
import ssl
from typing import Literal

from pgurl.parse import PgUrl, PgUrlError

__all__ = ["SslSetting", "ssl_setting"]

# What asyncpg's `ssl` argument takes: False (plain), a mode it negotiates itself with fallback
# ("allow", "prefer"), or a context that must be used (no fallback to plain text).
SslSetting = Literal[False, "allow", "prefer"] | ssl.SSLContext | None

_TLS_VERSIONS = {
    "TLSv1": ssl.TLSVersion.TLSv1,
    "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}


def _user_file(name: str) -> pathlib.Path | None:
    # libpq's defaults live in ~/.postgresql/ (root.crt, root.crl, postgresql.crt, postgresql.key).
    home = os.environ.get("HOME") or os.path.expanduser("~")
    if not home or home == "~":
        return None
    path = pathlib.Path(home) / ".postgresql" / name
    return path if path.is_file() else None


def _file(url: PgUrl, name: str) -> str | None:
    value = url.params.get(name)
    if value is None:
        return None
    if not os.path.isfile(value):
        raise PgUrlError(f"{name}: no readable file at {value}")
    if not os.access(value, os.R_OK):
        raise PgUrlError(f"{name}: {value} is not readable by this process")
    return value


def _tls_version(url: PgUrl, name: str) -> ssl.TLSVersion | None:
    value = url.params.get(name)
    if value is None:
        return None
    try:
        return _TLS_VERSIONS[value]
    except KeyError:
        raise PgUrlError(f"{name}={value!r} is not one of {', '.join(_TLS_VERSIONS)}") from None


def ssl_setting(url: PgUrl) -> SslSetting:
    """None when the URL says nothing of TLS (the driver's default applies: PGSSLMODE, else
    prefer). require encrypts without checking the server unless a root certificate is given
    (sslrootcert, or ~/.postgresql/root.crt), then it checks the chain, as libpq does; verify-ca
    checks the chain; verify-full checks the chain and that the certificate names the host."""
    mode = url.sslmode
    if mode is None:
        if any(k in url.params for k in ("sslrootcert", "sslcert", "sslkey")):
            raise PgUrlError(
                "sslrootcert, sslcert and sslkey need an sslmode (require, verify-ca or verify-full)"
            )
        return None
    if mode == "disable":
        return False
    if mode in ("allow", "prefer"):
        if "sslcert" in url.params or "sslkey" in url.params:
            raise PgUrlError(f"sslcert and sslkey need sslmode=require or stronger here, not {mode}")
        return "allow" if mode == "allow" else "prefer"
    return _context(url, mode)


def _context(url: PgUrl, mode: str) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = _tls_version(url, "ssl_min_protocol_version") or ssl.TLSVersion.TLSv1_2
    maximum = _tls_version(url, "ssl_max_protocol_version")
    if maximum is not None:
        context.maximum_version = maximum
    rootcert = url.params.get("sslrootcert")
    if rootcert == "system":
        # libpq 16: the operating system's trusted roots, allowed with verify-full only.
        if mode != "verify-full":
            raise PgUrlError("sslrootcert=system needs sslmode=verify-full")
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)
        verify = True
    else:
        cafile = _file(url, "sslrootcert") or _user_file("root.crt")
        if cafile is None and mode != "require":
            raise PgUrlError(
                f"sslmode={mode} needs a root certificate: give sslrootcert=<file> "
                "(or put it in ~/.postgresql/root.crt)"
            )
        verify = cafile is not None
        if cafile is not None:
            try:
                context.load_verify_locations(cafile=str(cafile))
            except (ssl.SSLError, OSError) as exc:
                raise PgUrlError(
                    f"sslrootcert: {cafile} holds no usable certificate ({exc.strerror or exc})"
                ) from None
    context.check_hostname = mode == "verify-full"
    context.verify_mode = ssl.CERT_REQUIRED if verify else ssl.CERT_NONE
    crl = _file(url, "sslcrl")
    if crl is not None:
        if not verify:
            raise PgUrlError("sslcrl needs a root certificate (sslrootcert) to check against")
        context.load_verify_locations(cafile=crl)
        context.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF
    _load_client_certificate(url, context)
    return context


def _load_client_certificate(url: PgUrl, context: ssl.SSLContext) -> None:
    cert = _file(url, "sslcert")
    key = _file(url, "sslkey")
    if cert is None and key is not None:
        raise PgUrlError("sslkey needs sslcert (the client certificate it belongs to)")
    if cert is None:
        default = _user_file("postgresql.crt")
        if default is None:
            return
        cert = str(default)
        key = key or (str(p) if (p := _user_file("postgresql.key")) else None)
    secret = url.params.get("sslpassword")
    try:
        # A callable, so an encrypted key without sslpassword fails here instead of prompting on a tty.
        context.load_cert_chain(cert, keyfile=key, password=lambda: secret or "")
    except ssl.SSLError:
        # The library's text is not shown: it adds nothing safe beyond "does not match or decrypt".
        raise PgUrlError(
            "sslcert/sslkey: the client certificate and key cannot be loaded (a key that does not "
            "match the certificate, or an encrypted key with a wrong or missing sslpassword)"
        ) from None
