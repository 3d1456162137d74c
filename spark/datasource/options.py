"""The `pravega` data source's options, read and checked once, so a bad option is one clear error
when the query is defined (`load()`, `save()`, `start()`), never deep in an executor.

Option names follow Pravega's JVM Spark connector where it has one (`controller`, `scope`,
`stream`, `start_stream_cut`, `end_stream_cut`, `transaction_timeout_ms`); Spark hands them over
with lower-cased keys.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from app.kvtclient.controller import TLS_SCHEMES, controller_tls, parse_controller
from app.streamclient import Credentials

EARLIEST: Final = "earliest"
LATEST: Final = "latest"
ENCODINGS: Final = ("binary", "utf8", "json")
ON_TRUNCATION: Final = ("fail", "skip")
# A batch read splits a segment's range into partitions of about this many bytes.
DEFAULT_SPLIT_BYTES: Final = 128 * 1024 * 1024
# Pravega's connector's default transaction timeout; the controller's maximum is 10 minutes.
DEFAULT_LEASE_MS: Final = 120_000


class OptionError(ValueError):
    """An option of the `pravega` data source is missing or wrong; the message names it."""


@dataclass(frozen=True)
class SourceOptions:
    controller: str
    scope: str
    stream: str
    start_cut: str
    end_cut: str
    username: str | None
    password: str | None
    tls_trust_file: str | None
    encoding: str
    split_bytes: int
    max_bytes_per_trigger: int | None
    on_truncation: str
    routing_key_column: str
    event_column: str
    lease_ms: int
    commit_timeout_s: float

    @property
    def credentials(self) -> Credentials | None:
        if self.username is None:
            return None
        return Credentials(self.username, self.password or "")

    def tls(self) -> ssl.SSLContext | None:
        return controller_tls(
            self.controller, None if self.tls_trust_file is None else Path(self.tls_trust_file)
        )


def read_options(options: Mapping[str, str], *, streaming: bool = False) -> SourceOptions:
    lowered = {k.lower(): v for k, v in options.items()}

    def required(name: str) -> str:
        value = lowered.get(name, "").strip()
        if not value:
            raise OptionError(f"the pravega data source needs the option {name!r}")
        return value

    controller = required("controller")
    try:
        parse_controller(controller)
    except ValueError as exc:
        raise OptionError(f"option 'controller': {exc}") from None
    trust = lowered.get("tls_trust_file")
    if trust is not None and not Path(trust).is_file():
        raise OptionError(f"option 'tls_trust_file': no file at {trust}")
    if trust is not None and controller.partition("://")[0] not in TLS_SCHEMES:
        raise OptionError("option 'tls_trust_file' is for a TLS controller: give it as tls://host:port")
    username = lowered.get("username")
    if (username is None) != (lowered.get("password") is None):
        raise OptionError("options 'username' and 'password' go together")
    return SourceOptions(
        controller=controller,
        scope=required("scope"),
        stream=required("stream"),
        start_cut=lowered.get("start_stream_cut", LATEST if streaming else EARLIEST).strip(),
        end_cut=lowered.get("end_stream_cut", LATEST).strip(),
        username=username,
        password=lowered.get("password"),
        tls_trust_file=trust,
        encoding=_choice(lowered, "encoding", ENCODINGS),
        split_bytes=_integer(lowered, "split_size_bytes", DEFAULT_SPLIT_BYTES, minimum=0),
        max_bytes_per_trigger=_optional_integer(lowered, "max_bytes_per_trigger", minimum=1),
        on_truncation=_choice(lowered, "on_truncation", ON_TRUNCATION),
        routing_key_column=lowered.get("routing_key_column", "routing_key"),
        event_column=lowered.get("event_column", "event"),
        lease_ms=_integer(lowered, "transaction_timeout_ms", DEFAULT_LEASE_MS, minimum=10_000),
        commit_timeout_s=_integer(lowered, "commit_timeout_ms", 60_000, minimum=1) / 1000,
    )


def _choice(options: Mapping[str, str], name: str, allowed: tuple[str, ...]) -> str:
    value = options.get(name, allowed[0]).strip().lower()
    if value not in allowed:
        raise OptionError(f"option {name!r} is one of {', '.join(allowed)}, not {value!r}")
    return value


def _integer(options: Mapping[str, str], name: str, default: int, *, minimum: int) -> int:
    value = _optional_integer(options, name, minimum=minimum)
    return default if value is None else value


def _optional_integer(options: Mapping[str, str], name: str, *, minimum: int) -> int | None:
    text = options.get(name)
    if text is None:
        return None
    try:
        value = int(text.strip())
    except ValueError:
        raise OptionError(f"option {name!r} is a whole number, not {text!r}") from None
    if value < minimum:
        raise OptionError(f"option {name!r} is at least {minimum}, not {value}")
    return value
