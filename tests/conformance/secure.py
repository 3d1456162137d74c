"""The secured pair of the conformance suite's `secure` profile: `serve` and Pravega 0.13 standalone,
both with authentication and TLS on, with the same accounts and certificates from the same CA.

`prepare_secure(work_dir)` writes everything both servers need and answers how to start them:

- one CA (`app.security.certs.make_dev_certs`), which clients trust (`ca_pem`, host names
  validated); serve's certificate from `make_dev_certs` (`localhost`, `127.0.0.1`, `::1`), and
  Pravega's signed by the same CA for `localhost` and `127.0.0.1`, for servers and clients alike;
- one password file in Pravega's format (`user:digest:acl`, the digest of Pravega's
  `StrongPasswordProcessor`): Pravega's `PasswordAuthHandler` reads it, and `serve` gets the same
  accounts by `pgcontroller auth user import` into the embedded database its `--data-dir` names;
- for Pravega, the JKS key and trust stores its TLS ZooKeeper needs besides the PEM files.

The accounts (the checks in SecurityChecks.java know the names and the password rule):

| account | ACL | password |
|---|---|---|
| `admin` | `prn::*,READ_UPDATE`: everything | `SecureSetup.password` |
| `limited` | `prn::/scope:lim*,READ_UPDATE`: the scopes `lim...`, nothing else | the same + `-limited` |
| `viewer` | `prn::/scope:ro*,READ`: READ in the scopes `ro...`, nothing else | the same + `-viewer` |

The runner passes a single account to the checks (`--user`, `--password`), so the other two
passwords follow from the first rather than needing options of their own.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from app.security.certs import make_dev_certs
from app.security.passwords import pravega_digest

REPO_ROOT = Path(__file__).resolve().parents[2]
ADMIN = "admin"
# Both servers parse these with Pravega's rule: every `*` is a wildcard over the rest of the
# resource, so `prn::/scope:lim*` covers the scopes `lim...` and everything inside them.
ACCOUNTS = {
    ADMIN: ("", "prn::*,READ_UPDATE"),
    "limited": ("-limited", "prn::/scope:lim*,READ_UPDATE"),
    "viewer": ("-viewer", "prn::/scope:ro*,READ"),
}
# Pravega's standalone reads its ZooKeeper trust store with this password in one place whatever
# the configuration says (InProcPravegaCluster.cleanUpZK), so every store here uses it.
STORE_PASSWORD = "1111_aaaa"


@dataclass(frozen=True)
class SecureSetup:
    user: str
    password: str
    ca_pem: Path  # the CA both servers' certificates are signed by (client trust store)
    serve_args: tuple[str, ...]  # extra `pgcontroller serve` arguments
    serve_env: dict[str, str]
    standalone_properties: dict[str, str]  # singlenode.* (and pravegaservice.*) for start_standalone
    serve_scheme: str = "tls"


def prepare_secure(work_dir: Path) -> SecureSetup:
    """Writes certificates, key stores, the password file and serve's accounts under `work_dir`
    (created if missing) and answers how to start both servers with them. It blocks for a few
    seconds (up to half a minute on a busy machine): `pgcontroller auth user import` starts and
    stops the embedded database of `serve_args`' `--data-dir` (async callers: `asyncio.to_thread`).
    The accounts live in that database, so `serve` must not be given a `--db-url` as well."""
    work_dir.mkdir(parents=True, exist_ok=True)
    password = secrets.token_urlsafe(18)
    certs = make_dev_certs(work_dir / "certs")
    password_file = _write_password_file(work_dir / "passwd", password)
    serve_data = work_dir / "serve-data"
    _import_accounts(password_file, serve_data)
    standalone_cert, standalone_key = _dual_use_certificate(work_dir / "stores", certs.ca_cert, certs.ca_key)
    stores = _java_stores(work_dir / "stores", standalone_cert, standalone_key, certs.ca_cert)
    serve_args = (
        *("--data-dir", str(serve_data)),
        "--auth-enabled",
        "--tls-enabled",
        *("--tls-cert-file", str(certs.server_cert)),
        *("--tls-key-file", str(certs.server_key)),
        *("--tls-trust-file", str(certs.ca_cert)),
        *("--segment-store-host", "localhost"),
        # The token credential of SecurityChecks (Pravega standalone gets the same handler in Java).
        *("--auth-handlers", "tests.conformance.token_plugin:make"),
    )
    standalone_properties = {
        "singlenode.security.auth.enable": "true",
        "singlenode.security.auth.pwdAuthHandler.accountsDb.location": str(password_file),
        # The account its own segment store (auto-scaler) uses to reach its controller.
        "singlenode.security.auth.credentials.username": ADMIN,
        "singlenode.security.auth.credentials.pwd": password,
        "singlenode.security.tls.enable": "true",
        "singlenode.security.tls.certificate.location": str(stores["chain"]),
        "singlenode.security.tls.privateKey.location": str(standalone_key),
        "singlenode.security.tls.keyStore.location": str(stores["keystore"]),
        "singlenode.security.tls.keyStore.pwd.location": str(stores["password"]),
        "singlenode.security.tls.trustStore.location": str(stores["truststore"]),
        # The segment store publishes its listening address (0.0.0.0 in standalone) unless told
        # otherwise; clients validate the store's certificate against the published name.
        "pravegaservice.service.published.host.nameOrIp": "localhost",
    }
    return SecureSetup(
        user=ADMIN,
        password=password,
        ca_pem=certs.ca_cert,
        serve_args=serve_args,
        serve_env={},
        standalone_properties=standalone_properties,
    )


def _write_password_file(path: Path, password: str) -> Path:
    lines = []
    for name, (suffix, acl) in ACCOUNTS.items():
        digest = pravega_digest(password + suffix, secrets.token_bytes(16))
        lines.append(f"{name}:{digest}:{acl}\n")
    _write_private(path, "".join(lines).encode("ascii"))
    return path


def _import_accounts(password_file: Path, data_dir: Path) -> None:
    """Pravega's password file into the embedded database of `data_dir`, as an operator moving
    from Pravega would (docs/security.md)."""
    command = [sys.executable, "-m", "app.cli", "auth", "user", "import", str(password_file), "--replace"]
    result = subprocess.run(
        [*command, "--data-dir", str(data_dir)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"pgcontroller auth user import exited {result.returncode}:\n{result.stderr}")


def _dual_use_certificate(directory: Path, ca_cert: Path, ca_key: Path) -> tuple[Path, Path]:
    """A certificate for the loopback names, signed by the CA, good for TLS servers and clients:
    Pravega's standalone presents its key store's certificate as a client too (its ZooKeeper asks
    for mutual TLS), so the server certificate of `make_dev_certs` (server use only) is refused."""
    directory.mkdir(parents=True, exist_ok=True)
    issuer = x509.load_pem_x509_certificate(ca_cert.read_bytes())
    issuer_key = serialization.load_pem_private_key(ca_key.read_bytes(), password=None)
    assert isinstance(issuer_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(issuer.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(issuer_key, hashes.SHA256())
    )
    cert_path, key_path = directory / "standalone.pem", directory / "standalone.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_private(
        key_path,
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
    )
    return cert_path, key_path


def _java_stores(directory: Path, server_cert: Path, server_key: Path, ca_cert: Path) -> dict[str, Path]:
    """What Pravega's standalone needs besides the PEM certificate and key: the chain (its
    controller trusts its own certificate file when it calls its segment store, so the file holds
    the CA too), and JKS stores for its TLS ZooKeeper."""
    directory.mkdir(parents=True, exist_ok=True)
    chain = directory / "chain.pem"
    chain.write_bytes(server_cert.read_bytes() + ca_cert.read_bytes())
    password = directory / "store-password"
    _write_private(password, STORE_PASSWORD.encode("ascii"))
    pkcs12, keystore, truststore = directory / "server.p12", directory / "server.jks", directory / "trust.jks"
    for store in (pkcs12, keystore, truststore):
        store.unlink(missing_ok=True)
    _run(
        "openssl", "pkcs12", "-export", "-in", str(server_cert), "-inkey", str(server_key),
        "-certfile", str(ca_cert), "-name", "server", "-out", str(pkcs12),
        "-passout", f"pass:{STORE_PASSWORD}",
    )  # fmt: skip
    _run(
        "keytool", "-importkeystore", "-noprompt", "-srckeystore", str(pkcs12), "-srcstoretype", "PKCS12",
        "-srcstorepass", STORE_PASSWORD, "-destkeystore", str(keystore), "-deststoretype", "JKS",
        "-deststorepass", STORE_PASSWORD,
    )  # fmt: skip
    _run(
        "keytool", "-importcert", "-noprompt", "-alias", "ca", "-file", str(ca_cert), "-keystore",
        str(truststore), "-storetype", "JKS", "-storepass", STORE_PASSWORD,
    )  # fmt: skip
    pkcs12.unlink()
    return {"chain": chain, "keystore": keystore, "truststore": truststore, "password": password}


def _run(*command: str) -> None:
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{command[0]} exited {result.returncode}: {result.stderr.strip()}")


def _write_private(path: Path, content: bytes) -> None:
    """Owner-only from the first byte: the file holds secrets (digests, a store password)."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(content)
