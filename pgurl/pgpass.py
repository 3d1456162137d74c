"""Reads a libpq password file (.pgpass format: host:port:database:user:password, `*` matches
anything, `\\:` and `\\\\` escape) to find the password of a connection. Invariant: a file that
others may read is not used (libpq refuses it too), and nothing read from it is ever shown.
"""

from __future__ import annotations

import os
import pathlib
import stat

from pgurl.parse import PgUrl

__all__ = ["passfile_of", "password_from_file", "write_pgpass"]


def passfile_of(url: PgUrl) -> pathlib.Path | None:
    """The password file libpq would read for `url`: passfile=, else PGPASSFILE, else ~/.pgpass."""
    explicit = url.params.get("passfile") or os.environ.get("PGPASSFILE")
    if explicit:
        return pathlib.Path(explicit)
    home = os.environ.get("HOME") or os.path.expanduser("~")
    return pathlib.Path(home) / ".pgpass" if home and home != "~" else None


def _fields(line: str) -> list[str]:
    fields: list[str] = []
    current = ""
    escaped = False
    for char in line:
        if escaped:
            current += char
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == ":" and len(fields) < 4:
            fields.append(current)
            current = ""
        else:
            current += char
    fields.append(current)
    return fields


def password_from_file(url: PgUrl, host: str, port: int | None) -> str | None:
    """The first matching line's password for (host, port, database, user), as libpq matches it
    (a Unix-socket directory or no host matches "localhost")."""
    path = passfile_of(url)
    if path is None or url.user is None:
        return None
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode) or st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            return None
        text = path.read_text()
    except OSError:
        return None
    wanted = [
        "localhost" if not host or host.startswith("/") else host,
        str(port or 5432),
        url.database or url.user,
        url.user,
    ]
    for raw in text.splitlines():
        if not raw or raw.startswith("#"):
            continue
        fields = _fields(raw)
        if len(fields) == 5 and all(f in ("*", w) for f, w in zip(fields[:4], wanted, strict=True)):
            return fields[4]
    return None


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace(":", "\\:")


def write_pgpass(path: pathlib.Path, entries: list[tuple[str, str, str, str, str]]) -> None:
    """Writes a password file, owner-only (0600) from its first byte, replacing any old one whole."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        for entry in entries:
            fh.write(":".join(e if e == "*" else _escape(e) for e in entry) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
