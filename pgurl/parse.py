"""Parses a libpq connection URL (postgres:// or postgresql://) into a PgUrl, the one description
every database client of the project is built from. Invariant: a URL is either understood whole or
refused with a PgUrlError naming the part at fault; no message or repr ever carries the password.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from types import MappingProxyType
from urllib.parse import quote, unquote

__all__ = ["PgUrl", "PgUrlError", "masked", "parse"]

_SCHEMES = ("postgresql", "postgres", "postgresql+asyncpg", "postgres+asyncpg")
SSLMODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")

# libpq parameters this project acts on; each is checked where it is used.
USED = frozenset(
    {
        "application_name",
        "fallback_application_name",
        "connect_timeout",
        "options",
        "passfile",
        "sslmode",
        "sslrootcert",
        "sslcert",
        "sslkey",
        "sslpassword",
        "sslcrl",
        "ssl_min_protocol_version",
        "ssl_max_protocol_version",
        "target_session_attrs",
    }
)
# libpq parameters that tune the transport and change nothing a client must honour; accepted so a
# pasted URL works, and not acted on.
IGNORED = frozenset(
    {
        "keepalives",
        "keepalives_idle",
        "keepalives_interval",
        "keepalives_count",
        "tcp_user_timeout",
        "sslcompression",
        "sslsni",
        "krbsrvname",
        "gsslib",
    }
)
# libpq parameters accepted only with the value(s) that ask nothing this client lacks.
_ONLY_VALUES: Mapping[str, tuple[str, ...]] = {
    "gssencmode": ("disable", "prefer"),
    "channel_binding": ("disable", "prefer"),
    "client_encoding": ("UTF8", "utf8", "UTF-8", "utf-8", "auto"),
    "load_balance_hosts": ("disable",),
    "requiressl": ("0", "1"),
}
# Known to libpq, but not supported here: a clear refusal beats a silent difference.
_UNSUPPORTED = frozenset(
    {"hostaddr", "service", "sslcertmode", "require_auth", "replication", "sslnegotiation"}
)
# Secrets that may sit in the query; shown as *** wherever a URL is shown.
_SECRET_PARAMS = frozenset({"sslpassword"})
# Parameters that move into the URL's main parts.
_STRUCTURAL = frozenset({"host", "port", "dbname", "user", "password"})


class PgUrlError(ValueError):
    """The database URL cannot be used as given; the message names the part at fault."""


@dataclasses.dataclass(frozen=True)
class PgUrl:
    """A libpq URL, understood. `hosts` holds host names, IP addresses or (starting with "/")
    Unix-socket directories; `ports` is as long as `hosts` (None: the default port)."""

    hosts: tuple[str, ...] = ()
    ports: tuple[int | None, ...] = ()
    user: str | None = None
    password: str | None = dataclasses.field(default=None, repr=False)
    database: str | None = None
    params: Mapping[str, str] = dataclasses.field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", MappingProxyType(dict(self.params)))

    @property
    def sslmode(self) -> str | None:
        mode = self.params.get("sslmode")
        if mode is None and self.params.get("requiressl") == "1":
            return "require"
        return mode

    def replace(self, **changes: object) -> PgUrl:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def with_database(self, database: str) -> PgUrl:
        return dataclasses.replace(self, database=database)

    def to_url(self, *, show_password: bool = True) -> str:
        """The URL again, canonical (postgresql://, percent-encoded). `show_password=False` gives
        the form that may be logged or printed."""
        netloc = ""
        if self.user is not None:
            netloc = quote(self.user, safe="")
            if self.password is not None:
                netloc += ":" + (quote(self.password, safe="") if show_password else "***")
            netloc += "@"
        netloc += ",".join(_host_text(h, p) for h, p in zip(self.hosts, self.ports, strict=True))
        path = "/" + quote(self.database, safe="") if self.database is not None else ""
        query = "&".join(
            f"{quote(k, safe='')}={quote(v, safe='') if show_password or k not in _SECRET_PARAMS else '***'}"
            for k, v in self.params.items()
        )
        return f"postgresql://{netloc}{path}" + (f"?{query}" if query else "")

    def __str__(self) -> str:
        return self.to_url(show_password=False)

    def __repr__(self) -> str:
        return f"PgUrl({self})"


def _host_text(host: str, port: int | None) -> str:
    if host.startswith("/"):
        shown = quote(host, safe="")
    elif ":" in host:
        shown = f"[{host}]"
    else:
        shown = quote(host, safe="")
    return shown + (f":{port}" if port is not None else "")


def _port(text: str) -> int | None:
    if text == "":
        return None
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise PgUrlError(f"invalid port {text!r} in the database URL")
    return int(text)


def _split_hosts(hostlist: str) -> tuple[list[str], list[int | None]]:
    hosts: list[str] = []
    ports: list[int | None] = []
    if hostlist == "":
        return hosts, ports
    for item in hostlist.split(","):
        if item.startswith("["):
            end = item.find("]")
            if end < 0:
                raise PgUrlError(f"unclosed [ in host {item!r} of the database URL")
            host, rest = item[1:end], item[end + 1 :]
            if rest and not rest.startswith(":"):
                raise PgUrlError(f"unexpected text after ] in host {item!r} of the database URL")
            port_text = rest[1:]
        else:
            host, _, port_text = item.partition(":")
            if ":" in port_text:
                raise PgUrlError(f"an IPv6 address must be written in brackets: {item!r}")
        hosts.append(unquote(host))
        ports.append(_port(port_text))
    return hosts, ports


def _query(text: str) -> dict[str, str]:
    params: dict[str, str] = {}
    for pair in text.split("&") if text else ():
        if not pair:
            continue
        key, eq, value = pair.partition("=")
        key = unquote(key)
        if not eq:
            raise PgUrlError(f"parameter {key!r} of the database URL has no value (write {key}=...)")
        if key in params:
            raise PgUrlError(f"parameter {key!r} appears twice in the database URL")
        params[key] = unquote(value)
    return params


def _check_param(name: str, value: str) -> None:
    if name in USED or name in IGNORED:
        if name == "sslmode" and value not in SSLMODES:
            raise PgUrlError(f"sslmode={value!r} is not one of {', '.join(SSLMODES)}")
        return
    if name in _ONLY_VALUES:
        if value not in _ONLY_VALUES[name]:
            raise PgUrlError(f"{name}={value!r} is not supported; accepted: {', '.join(_ONLY_VALUES[name])}")
        return
    if name in _UNSUPPORTED:
        raise PgUrlError(f"the libpq parameter {name!r} is not supported in the database URL")
    raise PgUrlError(
        f"unknown parameter {name!r} in the database URL; known: {', '.join(sorted(USED | IGNORED))}"
    )


def parse(url: str) -> PgUrl:
    """Understands postgres:// and postgresql:// URLs (and SQLAlchemy's postgresql+asyncpg://):
    percent-encoded user, password, database and hosts; host lists with ports; IPv6 in brackets;
    Unix-socket directories (`?host=/path` or a percent-encoded path as the host); and the
    query parameters libpq documents (host, port, dbname, user and password override the parts
    before the `?`)."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in _SCHEMES:
        raise PgUrlError(
            f"the database URL must start with postgresql:// or postgres://, not {scheme[:20]!r}"
            if sep
            else "the database URL must start with postgresql:// or postgres://"
        )
    rest, _, fragment = rest.partition("#")
    if fragment:
        raise PgUrlError("the database URL must not have a #fragment")
    rest, _, query_text = rest.partition("?")
    netloc, slash, path = rest.partition("/")
    userinfo, at, hostlist = netloc.rpartition("@")
    if not at:
        userinfo, hostlist = "", netloc
    user: str | None = None
    password: str | None = None
    if at:
        user_text, colon, password_text = userinfo.partition(":")
        user = unquote(user_text) or None
        password = unquote(password_text) if colon else None
    hosts, ports = _split_hosts(hostlist)
    database = unquote(path) if slash and path else None
    params = _query(query_text)
    for name, value in params.items():
        if name not in _STRUCTURAL:
            _check_param(name, value)
    if "host" in params:
        hosts = params.pop("host").split(",")
        if "port" not in params:
            # libpq pairs the URL's ports with the parameter's hosts when the counts agree.
            ports = ports if len(ports) == len(hosts) else [ports[0] if ports else None] * len(hosts)
    if "port" in params:
        port_list = [_port(p) for p in params.pop("port").split(",")]
        if not hosts:
            hosts = [""] * len(port_list)
        if len(port_list) == 1:
            port_list *= len(hosts)
        if len(port_list) != len(hosts):
            raise PgUrlError(f"the database URL names {len(hosts)} hosts but {len(port_list)} ports")
        ports = port_list
    if "dbname" in params:
        database = params.pop("dbname")
    if "user" in params:
        user = params.pop("user")
    if "password" in params:
        password = params.pop("password")
    if any(h == "" for h in hosts) and len(hosts) > 1:
        raise PgUrlError("an empty host in the database URL's host list")
    if hosts == [""] and ports == [None]:
        # "postgresql://@/db": nothing said; an empty host with a port means the default host.
        hosts, ports = [], []
    return PgUrl(
        hosts=tuple(hosts),
        ports=tuple(ports),
        user=user,
        password=password,
        database=database,
        params=params,
    )


_USERINFO_PASSWORD = re.compile(r"^([^:/?#]*://[^:@/?#]*:)([^@/?#]*)(@)")
_QUERY_SECRET = re.compile(r"([?&](?:password|sslpassword)=)([^&#]*)")


def masked(url: str) -> str:
    """The URL with its password (and sslpassword) shown as ***, for logs and messages. Works on
    text that does not parse too: masking must never be the step that fails."""
    text = _USERINFO_PASSWORD.sub(r"\1***\3", url)
    return _QUERY_SECRET.sub(r"\1***", text)
