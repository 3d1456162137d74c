"""Loading auth handler plugins (Pravega's ServiceLoader of AuthHandler): factories named in
`--auth-handlers module:attribute,...` and in the entry-point group `pgcontroller.auth_handlers`,
each called with the Settings and answering an AuthHandler (app.security.authn).

Invariants: every failure (import, missing attribute, factory error, bad handler, two handlers for
one method) is one SettingError naming the plugin, raised before the controller serves; only a
plugin named in `--auth-handlers` may take the method `Basic`, an installed entry point never can.
"""

from __future__ import annotations

import importlib
import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from app.security.authn import BASIC, AuthHandler
from app.settings import SettingError, Settings

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "pgcontroller.auth_handlers"
SETTING = "--auth-handlers"
# A method is the word before the first space of `authorization` (split_header), so one token of
# visible ASCII without separators.
_METHOD = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}")

Factory = Callable[[Settings], AuthHandler]


@dataclass(frozen=True)
class _Source:
    label: str  # what an operator reads in an error: the spec or the entry point
    explicit: bool  # named in --auth-handlers (may take Basic)
    load: Callable[[], Any]


def resolve_factory(spec: str) -> Factory:
    """The factory `module:attribute` names, or SettingError."""
    module_name, _, attribute = spec.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as exc:  # an import may fail in any way; the operator needs one line
        raise SettingError(SETTING, f"cannot import {module_name!r} ({type(exc).__name__}: {exc})") from None
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise SettingError(SETTING, f"{module_name!r} has no attribute {attribute!r}") from None
    if not callable(target):
        raise SettingError(SETTING, f"{spec} is not callable (expected a factory taking the settings)")
    factory: Factory = target
    return factory


def _sources(settings: Settings, entry_points: Iterable[metadata.EntryPoint]) -> list[_Source]:
    sources = [_Source(spec, True, _resolver(spec)) for spec in settings.auth_handlers]
    for entry in entry_points:
        sources.append(_Source(f"entry point {entry.name} = {entry.value}", False, _loader(entry)))
    return sources


def _resolver(spec: str) -> Callable[[], Any]:
    return lambda: resolve_factory(spec)


def _loader(entry: metadata.EntryPoint) -> Callable[[], Any]:
    def load() -> Any:
        try:
            return entry.load()
        except Exception as exc:
            raise SettingError(
                SETTING, f"cannot load entry point {entry.name} = {entry.value} ({type(exc).__name__}: {exc})"
            ) from None

    return load


def installed_entry_points() -> Iterable[metadata.EntryPoint]:
    return metadata.entry_points(group=ENTRY_POINT_GROUP)


def load_handlers(
    settings: Settings, entry_points: Iterable[metadata.EntryPoint] | None = None
) -> list[AuthHandler]:
    """Every plugin's handler, in order: `--auth-handlers` first, then the entry points.
    SettingError on the first that cannot be loaded, or that claims a method already taken."""
    found: list[AuthHandler] = []
    taken: dict[str, str] = {}
    points = installed_entry_points() if entry_points is None else entry_points
    for source in _sources(settings, points):
        factory = source.load()
        if not callable(factory):
            raise SettingError(SETTING, f"{source.label} is not callable")
        try:
            handler = factory(settings)
        except SettingError:
            raise
        except Exception as exc:
            raise SettingError(
                SETTING, f"{source.label} failed to initialize ({type(exc).__name__}: {exc})"
            ) from None
        name = getattr(handler, "name", None)
        if not isinstance(handler, AuthHandler) or not isinstance(name, str):
            raise SettingError(
                SETTING, f"{source.label} did not return an auth handler (name, authenticate, authorize)"
            )
        if not _METHOD.fullmatch(name):
            raise SettingError(SETTING, f"{source.label} names an invalid method {name!r}")
        if name == BASIC and not source.explicit:
            raise SettingError(
                SETTING,
                f"{source.label} claims the method Basic; only a plugin named in {SETTING} may replace it",
            )
        if name in taken:
            raise SettingError(SETTING, f"{source.label} and {taken[name]} both serve the method {name}")
        taken[name] = source.label
        if name == BASIC:
            log.warning("Basic is served by %s: the accounts in the database do not log in", source.label)
        found.append(handler)
    return found


def check_handlers(settings: Settings, entry_points: Iterable[metadata.EntryPoint] | None = None) -> None:
    """Imports every plugin's factory without calling it (`serve` runs this before anything
    starts, so a wrong path stops it in one line); entry points only when authentication is on."""
    points: Iterable[metadata.EntryPoint] = ()
    if settings.auth_enabled:
        points = installed_entry_points() if entry_points is None else entry_points
    for source in _sources(settings, points):
        if not callable(source.load()):
            raise SettingError(SETTING, f"{source.label} is not callable")
