"""Throwaway certificates for local use and tests: a CA and, signed by it, a server certificate for
the loopback names (and any others asked for) and a client certificate. Never for production: the
CA's key sits next to its certificate and nothing is ever revoked.

Every key is written readable by its owner only (PostgreSQL refuses a server key others can read).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# Valid from a day back: a clock slightly behind on another machine still accepts them.
_BACKDATE: Final = datetime.timedelta(days=1)
DEFAULT_VALID_DAYS: Final = 365
LOOPBACK_NAMES: Final = ("localhost", "127.0.0.1", "::1")


@dataclass(frozen=True, slots=True)
class CertFiles:
    """Where `make_dev_certs` wrote each PEM file."""

    ca_cert: Path
    ca_key: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def make_dev_certs(
    directory: Path,
    *,
    names: tuple[str, ...] = (),
    client_name: str = "pgcontroller",
    valid_days: int = DEFAULT_VALID_DAYS,
    loopback: bool = True,
) -> CertFiles:
    """Writes ca.pem, ca.key, server.pem, server.key, client.pem and client.key into `directory`
    (created if missing; files there are replaced). The server certificate names the loopback
    addresses (unless `loopback` is false) and `names` (host names or IP literals); the client
    certificate's common name is `client_name` (PostgreSQL's `clientcert=verify-full` matches it
    against the role). `loopback=False` with host names only makes a certificate like Pravega's
    own test one, which names hosts and no IP address."""
    if valid_days < 1:
        raise ValueError(f"valid_days must be at least 1, got {valid_days}")
    if not loopback and not names:
        raise ValueError("a server certificate without the loopback names needs names of its own")
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    not_before, not_after = now - _BACKDATE, now + datetime.timedelta(days=valid_days)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pgcontroller dev CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    def leaf(
        common_name: str, usage: x509.ObjectIdentifier, alt_names: list[x509.GeneralName]
    ) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(not_before)
            .not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
            )
        )
        if alt_names:
            builder = builder.add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        return key, builder.sign(ca_key, hashes.SHA256())

    server_names = list(dict.fromkeys((*(LOOPBACK_NAMES if loopback else ()), *names)))
    server_key, server_cert = leaf(
        server_names[0], ExtendedKeyUsageOID.SERVER_AUTH, [_general_name(n) for n in server_names]
    )
    client_key, client_cert = leaf(client_name, ExtendedKeyUsageOID.CLIENT_AUTH, [])

    files = CertFiles(
        ca_cert=directory / "ca.pem",
        ca_key=directory / "ca.key",
        server_cert=directory / "server.pem",
        server_key=directory / "server.key",
        client_cert=directory / "client.pem",
        client_key=directory / "client.key",
    )
    _write_cert(files.ca_cert, ca_cert)
    _write_key(files.ca_key, ca_key)
    _write_cert(files.server_cert, server_cert)
    _write_key(files.server_key, server_key)
    _write_cert(files.client_cert, client_cert)
    _write_key(files.client_key, client_key)
    return files


def _general_name(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        if not name or any(c.isspace() for c in name):
            raise ValueError(f"not a host name or IP address: {name!r}") from None
        return x509.DNSName(name)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    path.chmod(0o644)


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    # Created owner-only: the key is never readable by others, not even between write and chmod.
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(pem)
