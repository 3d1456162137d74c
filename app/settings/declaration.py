"""How a setting is declared: one `setting(...)` call per `Settings` field carries its default,
help, unit, value parser, check and old spellings; flag and environment names derive from the
field name. Everything else (argparse, --help, the README table) reads these declarations.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar, overload

from app.domain.errors import InvalidInput
from app.domain.hosts import HostAddress

ENV_PREFIX = "PGCONTROLLER_"
_KEY = "pgcontroller.setting"

T = TypeVar("T")
# A check answers None for a good value, else what is required ("must be positive").
Check = Callable[[Any], str | None]
# A parser turns flag or environment text into a value; a ValueError says what is required.
Parser = Callable[[str], Any]
# "serve": a flag of `pgcontroller serve`; "global": before or after any command (app/cli/globals.py);
# "segment-store": a flag of `pgcontroller segment-store` only (serve reads the others it takes too).
Scope = Literal["serve", "global", "segment-store"]


class SettingError(ValueError):
    """A refused value, phrased for one line: the flag or variable it came from, then why."""

    def __init__(self, source: str, problem: str) -> None:
        super().__init__(f"{source} {problem}")
        self.source = source


@dataclass(frozen=True)
class Setting:
    """One declared setting; `name` is the `Settings` field it belongs to."""

    name: str
    help: str
    parse: Parser
    metavar: str | None
    check: Check | None
    at_most: str | None  # another setting this one may not exceed
    old_flags: tuple[str, ...]
    old_envs: tuple[str, ...]
    shown_default: str | None  # text for a default that is computed or better said in words
    scope: Scope
    default: Any  # None for a default computed per process (then `shown_default` says what it is)

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()

    @property
    def metavar_text(self) -> str:
        """What the flag's value is called in --help: declared, else the unit in the name."""
        if self.metavar:
            return self.metavar
        for suffix, unit in (("_ms", "MS"), ("_s", "S"), ("_hours", "HOURS")):
            if self.name.endswith(suffix):
                return unit
        return "N"

    @property
    def is_switch(self) -> bool:
        """A flag that takes no value (`--no-embedded-segment-store`)."""
        return self.parse is truthy

    def shown(self) -> str:
        """The default as the README writes it (backticks are markdown; --help drops them)."""
        if self.shown_default is not None:
            return self.shown_default
        if self.default is None:
            return "none"
        return f"`{show(self.default)}`"

    def refusal(self, source: str, value: Any) -> SettingError | None:
        problem = self.check(value) if self.check else None
        return SettingError(source, f"{problem}, got {show(value) or repr('')}") if problem else None


def show(value: Any) -> str:
    """A value as an operator would type it."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, tuple):
        return ",".join(show(item) for item in value)
    if isinstance(value, HostAddress):
        return f"{value.host}:{value.port}"
    return str(value)


@overload
def setting(
    default: T,
    *,
    help: str,
    parse: Parser | None = ...,
    metavar: str | None = ...,
    check: Check | None = ...,
    at_most: str | None = ...,
    old_flags: Sequence[str] = ...,
    old_envs: Sequence[str] = ...,
    shown_default: str | None = ...,
    scope: Scope = ...,
) -> T: ...


@overload
def setting(
    *,
    factory: Callable[[], T],
    help: str,
    parse: Parser | None = ...,
    metavar: str | None = ...,
    check: Check | None = ...,
    shown_default: str,
) -> T: ...


def setting(
    default: Any = None,
    *,
    help: str,
    factory: Callable[[], Any] | None = None,
    parse: Parser | None = None,
    metavar: str | None = None,
    check: Check | None = None,
    at_most: str | None = None,
    old_flags: Sequence[str] = (),
    old_envs: Sequence[str] = (),
    shown_default: str | None = None,
    scope: Scope = "serve",
) -> Any:
    """A `Settings` field carrying its declaration; the field's name is filled in by `declared`."""
    sample = factory() if factory is not None else default
    meta = {
        "help": help,
        "parse": parse or _parser_for(sample),
        "metavar": metavar,
        "check": check,
        "at_most": at_most,
        "old_flags": tuple(old_flags),
        "old_envs": tuple(old_envs),
        "shown_default": shown_default,
        "scope": scope,
        "default": default,
    }
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata={_KEY: meta})
    return dataclasses.field(default=default, metadata={_KEY: meta})


def declared(settings_class: type) -> Iterator[Setting]:
    """The declarations of a settings class, in field order."""
    for field in dataclasses.fields(settings_class):
        meta = field.metadata.get(_KEY)
        if meta is not None:
            yield Setting(name=field.name, **meta)


# Parsers: text from a flag or the environment into a value.


def text(value: str) -> str:
    return value


def whole(value: str) -> int:
    try:
        return int(value.strip())
    except ValueError:
        raise ValueError("must be a whole number") from None


def number(value: str) -> float:
    try:
        parsed = float(value.strip())
    except ValueError:
        raise ValueError("must be a number") from None
    if not math.isfinite(parsed):
        raise ValueError("must be a finite number")
    return parsed


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def truthy(value: str) -> bool:
    word = value.strip().lower()
    if word in _TRUE or word in _FALSE:
        return word in _TRUE
    raise ValueError(f"must be one of {', '.join(_TRUE + _FALSE)}")


def hosts(value: str) -> tuple[HostAddress, ...]:
    try:
        return tuple(HostAddress.parse(part) for part in value.split(",") if part.strip())
    except InvalidInput:
        raise ValueError("must be a comma-separated HOST:PORT list") from None


@dataclass(frozen=True)
class StoreGroup:
    """One embedded segment store's place among those of a `serve --processes N` run."""

    index: int
    size: int
    directory: Path

    def __str__(self) -> str:
        return f"{self.index}:{self.size}:{self.directory}"


def store_group(value: str) -> StoreGroup:
    index, _, rest = value.partition(":")
    size, _, directory = rest.partition(":")
    try:
        group = StoreGroup(int(index), int(size), Path(directory))
    except ValueError:
        raise ValueError("must be INDEX:SIZE:DIRECTORY") from None
    if not directory or group.size < 2 or not 0 <= group.index < group.size:
        raise ValueError("must be INDEX:SIZE:DIRECTORY with 0 <= INDEX < SIZE and SIZE >= 2")
    return group


# The TLS versions a listener may allow, as Pravega names them; older ones are never allowed.
TLS_VERSIONS = ("TLSv1.2", "TLSv1.3")


def tls_versions(value: str) -> tuple[str, ...]:
    given = tuple(dict.fromkeys(part.strip() for part in value.split(",") if part.strip()))
    by_lower = {version.lower(): version for version in TLS_VERSIONS}
    if not given or any(part.lower() not in by_lower for part in given):
        raise ValueError(f"must be a comma-separated list of {', '.join(TLS_VERSIONS)}")
    return tuple(by_lower[part.lower()] for part in given)


_HANDLER_SPEC = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")


def handler_specs(value: str) -> tuple[str, ...]:
    """`module:attribute,...` of `--auth-handlers`: the form only; importing waits for start."""
    specs = tuple(dict.fromkeys(part.strip() for part in value.split(",") if part.strip()))
    bad = [spec for spec in specs if not _HANDLER_SPEC.fullmatch(spec)]
    if bad:
        raise ValueError(f"must be a comma-separated list of module:attribute, not {bad[0]!r}")
    return specs


def _parser_for(sample: Any) -> Parser:
    # bool before int: a bool is an int.
    for kind, parser in ((bool, truthy), (int, whole), (float, number), (Path, Path), (str, text)):
        if isinstance(sample, kind):
            return parser
    raise TypeError(f"no parser for a default of {type(sample).__name__}; declare parse=")


# Checks: None when the value is acceptable, else what is required.


def positive(value: float) -> str | None:
    return None if value > 0 else "must be positive"


def not_negative(value: float) -> str | None:
    return None if value >= 0 else "must not be negative"


def port(value: int) -> str | None:
    return None if 0 <= value <= 65535 else "must be 0..65535"


def within(low: int, high: int) -> Check:
    def check(value: int) -> str | None:
        return None if low <= value <= high else f"must be within {low}..{high}"

    return check


def at_least(low: int, why: str) -> Check:
    def check(value: int) -> str | None:
        return None if value >= low else f"must be at least {low} ({why})"

    return check


def not_empty(value: Sequence[Any] | str) -> str | None:
    return None if len(value) > 0 else "must not be empty"
