"""Flags and environment variables, both made from the declarations in `app.settings.model`:
`add_setting` puts a setting on an argparse parser; `resolve` reads what was given, a flag over
its environment variable over the declared default.

Invariant: a value is parsed and checked against the spelling the operator used, so a refusal
names that flag or variable; old spellings keep working and each use says so once.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.settings.declaration import Setting, SettingError
from app.settings.model import BY_NAME, DECLARATIONS, Settings


@dataclass(frozen=True)
class Given:
    """A value given on the command line, and the spelling of the flag that gave it."""

    text: str
    spelling: str


class _NotGiven:
    def __repr__(self) -> str:
        return "NOT_GIVEN"


# The parser's default for every declared flag: `resolve` then falls back to the environment.
NOT_GIVEN = _NotGiven()


class _Record(argparse.Action):
    """Stores the raw text and the spelling used; parsing waits for `resolve`, which can name it."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        text = values if isinstance(values, str) else "true"
        setattr(namespace, self.dest, Given(text, option_string or self.dest))


def add_setting(parser: argparse.ArgumentParser, name: str) -> None:
    """Adds the declared setting `name` (and its old spellings, hidden) to `parser`."""
    item = BY_NAME[name]
    shape: dict[str, Any] = {"dest": item.name, "action": _Record, "default": NOT_GIVEN}
    if item.is_switch:
        shape["nargs"] = 0
    else:
        shape["metavar"] = item.metavar_text
    parser.add_argument(item.flag, help=help_text(item), **shape)
    for old in item.old_flags:
        parser.add_argument(old, help=argparse.SUPPRESS, **shape)


def add_serve_settings(parser: argparse.ArgumentParser) -> None:
    for item in DECLARATIONS:
        if item.scope == "serve":
            add_setting(parser, item.name)


def add_global_settings(parser: argparse.ArgumentParser) -> None:
    for item in DECLARATIONS:
        if item.scope == "global":
            add_setting(parser, item.name)


def help_text(item: Setting) -> str:
    notes = [f"env {item.env}", f"default {item.shown()}"]
    if item.old_flags or item.old_envs:
        notes.append("formerly " + ", ".join(item.old_flags + item.old_envs))
    # argparse %-formats help; markdown backticks are for the README only.
    return f"{item.help} ({'; '.join(notes)})".replace("`", "").replace("%", "%%")


@dataclass(frozen=True)
class Resolved:
    """The settings one command declares (`names`), those given (parsed and checked) and the
    old spellings used."""

    names: tuple[str, ...]
    values: Mapping[str, Any]
    deprecations: tuple[str, ...]

    def settings(self) -> Settings:
        return Settings(**self.values)


def resolve(args: argparse.Namespace, environ: Mapping[str, str]) -> Resolved:
    """Values for the settings the chosen command declares; others keep their defaults.

    Raises SettingError naming the flag or variable of a refused value.
    """
    names = tuple(name for name, given in vars(args).items() if isinstance(given, Given | _NotGiven))
    values: dict[str, Any] = {}
    deprecations: list[str] = []
    for name in names:
        item = BY_NAME[name]
        given = getattr(args, name)
        found = _given_text(item, given, environ)
        if found is None:
            continue
        raw, source = found
        if source in item.old_flags or source in item.old_envs:
            current = item.flag if source.startswith("--") else item.env
            deprecations.append(f"{source} is deprecated; use {current}")
        values[name] = _parse(item, raw, source)
    return Resolved(names, values, tuple(deprecations))


def _given_text(
    item: Setting, given: Given | _NotGiven, environ: Mapping[str, str]
) -> tuple[str, str] | None:
    if isinstance(given, Given):
        return given.text, given.spelling
    # An empty variable counts as unset, as a compose file's `NAME=` intends.
    for variable in (item.env, *item.old_envs):
        if environ.get(variable, ""):
            return environ[variable], variable
    return None


def _parse(item: Setting, raw: str, source: str) -> Any:
    try:
        value = item.parse(raw)
    except ValueError as exc:
        raise SettingError(source, f"{exc}, got {raw!r}") from None
    refused = item.refusal(source, value)
    if refused:
        raise refused
    return value
