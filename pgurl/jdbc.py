"""The pgjdbc form of a PgUrl: a jdbc:postgresql:// URL with pgjdbc's parameter names, and the
secrets (password, sslpassword) kept out of it as connection properties. Invariant: a parameter
pgjdbc cannot honour the way libpq does (a Unix socket, a CRL) is refused, never dropped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType
from urllib.parse import quote

from pgurl.parse import PgUrl, PgUrlError, parse
from pgurl.pgpass import password_from_file

__all__ = ["JdbcParts", "jdbc_parts"]

_RENAMED = {
    "sslrootcert": "sslrootcert",
    "sslcert": "sslcert",
    "sslkey": "sslkey",
    "application_name": "ApplicationName",
    "connect_timeout": "connectTimeout",
    "options": "options",
}
_SESSION_ATTRS = {
    "any": "any",
    "read-write": "primary",
    "primary": "primary",
    "read-only": "secondary",
    "standby": "secondary",
    "prefer-standby": "preferSecondary",
}
_REFUSED = ("sslcrl", "ssl_max_protocol_version")


@dataclasses.dataclass(frozen=True)
class JdbcParts:
    url: str
    user: str
    password: str | None = dataclasses.field(repr=False)
    # Connection properties that must not sit in the URL (sslpassword).
    secrets: Mapping[str, str] = dataclasses.field(default_factory=lambda: MappingProxyType({}), repr=False)


def jdbc_parts(url: str | PgUrl) -> JdbcParts:
    u = parse(url) if isinstance(url, str) else url
    if not u.hosts or any(h == "" or h.startswith("/") for h in u.hosts):
        raise PgUrlError("the database URL needs a host: the JDBC driver cannot use a Unix socket")
    for name in _REFUSED:
        if name in u.params:
            raise PgUrlError(f"{name} has no equivalent in the JDBC driver; leave it out for the pipeline")
    user = u.user or "postgres"
    database = u.database or user
    hosts = ",".join(
        (f"[{h}]" if ":" in h else h) + f":{p or 5432}" for h, p in zip(u.hosts, u.ports, strict=True)
    )
    query: list[tuple[str, str]] = []
    mode = u.sslmode
    if mode is not None:
        query.append(("sslmode", mode))
    for name, value in u.params.items():
        if name == "sslrootcert" and value == "system":
            # libpq's "the system's roots": pgjdbc's factory that uses Java's default trust store.
            query.append(("sslfactory", "org.postgresql.ssl.DefaultJavaSSLFactory"))
        elif name in _RENAMED:
            query.append((_RENAMED[name], value))
        elif name == "target_session_attrs":
            query.append(("targetServerType", _SESSION_ATTRS.get(value, value)))
    text = f"jdbc:postgresql://{hosts}/{quote(database, safe='')}"
    if query:
        text += "?" + "&".join(f"{k}={quote(v, safe='/')}" for k, v in query)
    password = u.password
    if password is None:
        password = password_from_file(u, u.hosts[0], u.ports[0])
    secrets = {"sslpassword": u.params["sslpassword"]} if "sslpassword" in u.params else {}
    return JdbcParts(url=text, user=user, password=password, secrets=secrets)
