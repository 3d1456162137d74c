"""What asyncpg's connect() and create_pool() take for a PgUrl: hosts, ports, credentials, TLS,
server settings and the connect timeout, as keyword arguments. Invariant: no URL text reaches
asyncpg (it would read parameters its own way); everything passes through parse and tls.
"""

from __future__ import annotations

from typing import Any

from pgurl.parse import PgUrl, PgUrlError, parse
from pgurl.tls import ssl_setting

__all__ = ["connect_kwargs", "server_settings_of"]


def _options(text: str) -> dict[str, str]:
    """libpq's `options`: server command-line switches, `-c name=value` or `--name=value`,
    separated by spaces (a backslash keeps the next character, a space included)."""
    words: list[str] = []
    current = ""
    escaped = False
    for char in text:
        if escaped:
            current += char
            escaped = False
        elif char == "\\":
            escaped = True
        elif char.isspace():
            if current:
                words.append(current)
            current = ""
        else:
            current += char
    if current:
        words.append(current)
    settings: dict[str, str] = {}
    i = 0
    while i < len(words):
        word = words[i]
        if word == "-c" and i + 1 < len(words):
            pair = words[i + 1]
            i += 2
        elif (word.startswith("-c") and len(word) > 2) or (word.startswith("--") and "=" in word):
            pair, i = word[2:], i + 1
        else:
            raise PgUrlError(f"options: only -c name=value and --name=value are understood, not {word!r}")
        name, eq, value = pair.partition("=")
        if not eq or not name:
            raise PgUrlError(f"options: {pair!r} is not name=value")
        settings[name.replace("-", "_")] = value
    return settings


def server_settings_of(url: PgUrl, default_application_name: str | None = None) -> dict[str, str]:
    settings = _options(url.params.get("options", ""))
    name = url.params.get("application_name") or url.params.get("fallback_application_name")
    name = name or default_application_name
    if name:
        settings["application_name"] = name
    return settings


def _timeout(url: PgUrl) -> float | None:
    text = url.params.get("connect_timeout")
    if text is None:
        return None
    try:
        seconds = int(text)
    except ValueError:
        raise PgUrlError(f"connect_timeout={text!r} is not a whole number of seconds") from None
    if seconds < 0:
        raise PgUrlError(f"connect_timeout={text!r} is negative")
    # libpq: 0 waits forever; anything below 2 s counts as 2 s.
    return None if seconds == 0 else float(max(seconds, 2))


def connect_kwargs(url: str | PgUrl, *, application_name: str | None = None) -> dict[str, Any]:
    """Keyword arguments for asyncpg.connect/create_pool. `application_name` is the default the
    URL's own application_name overrides."""
    u = parse(url) if isinstance(url, str) else url
    kwargs: dict[str, Any] = {}
    if u.hosts and u.hosts != ("",):
        # asyncpg reads a host starting with "/" as a Unix-socket directory, as libpq does.
        hosts = list(u.hosts)
        kwargs["host"] = hosts if len(hosts) > 1 else hosts[0]
        if any(p is not None for p in u.ports):
            ports = [p or 5432 for p in u.ports]
            kwargs["port"] = ports if len(ports) > 1 else ports[0]
    elif u.ports and u.ports[0] is not None:
        # "postgresql://:5433/db": the default host, on that port.
        kwargs["port"] = u.ports[0]
    if u.user is not None:
        kwargs["user"] = u.user
    if u.password is not None:
        kwargs["password"] = u.password
    elif "passfile" in u.params:
        # Without one, asyncpg looks where libpq does (PGPASSFILE, ~/.pgpass) by itself.
        kwargs["passfile"] = u.params["passfile"]
    if u.database is not None:
        kwargs["database"] = u.database
    ssl = ssl_setting(u)
    if ssl is not None:
        kwargs["ssl"] = ssl
    settings = server_settings_of(u, application_name)
    if settings:
        kwargs["server_settings"] = settings
    timeout = _timeout(u)
    if timeout is not None:
        kwargs["timeout"] = timeout
    attrs = u.params.get("target_session_attrs")
    if attrs is not None:
        kwargs["target_session_attrs"] = attrs
    return kwargs
