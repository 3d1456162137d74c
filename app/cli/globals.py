"""Flags every `pgcontroller` command takes on either side of its name: `--log-level` and
`--log-format` (on every command), `--db-url` and `--data-dir` (on the commands that read them),
and `--version`.

Invariant: a flag given before the command counts exactly as if given after it; given on both
sides, the one after wins; given before a command that does not read it, it is refused (exit 2),
never silently dropped.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from importlib import metadata

from app.settings import add_setting
from app.settings.argv import Given

EITHER_SIDE = ("log_level", "log_format", "db_url", "data_dir")
# argparse copies a subcommand's defaults over what the main parser stored under the same dest,
# so the flags before the command are kept under their own names until `merge_either_side`.
_BEFORE = "before_command__"
# `--log-level` and `--log-format` are added after every command; the others stay where a command
# declares them.
_EVERY_COMMAND = ("log_level", "log_format")


class EitherSideParser(argparse.ArgumentParser):
    """The top-level parser: every parse ends with `merge_either_side`, so whoever parses
    (`main`, tests, scripts) gets one value per setting."""

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        merge_either_side(self, parsed)
        return parsed, extras


def package_version() -> str:
    try:
        return metadata.version("pgcontroller")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def add_either_side(parser: argparse.ArgumentParser) -> None:
    """Adds `--version` and the before-the-command flags to `parser`, then `--log-level` to
    each runnable command; call once every command is on `parser`."""
    parser.add_argument("--version", action="version", version=f"pgcontroller {package_version()}")
    for name in EITHER_SIDE:
        # Declared on a scratch parser, then moved: the flag, help and old spellings stay the
        # declaration's, only the dest differs.
        scratch = argparse.ArgumentParser(add_help=False)
        add_setting(scratch, name)
        for action in scratch._actions:
            action.dest = _BEFORE + name
            parser._add_action(action)
    for command in _commands(parser):
        declared = {action.dest for action in command._actions}
        for name in _EVERY_COMMAND:
            if name not in declared:
                add_setting(command, name)


def merge_either_side(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Moves each flag given before the command to the command's own setting."""
    for name in EITHER_SIDE:
        before = vars(args).pop(_BEFORE + name, None)
        if not isinstance(before, Given):
            continue
        if not hasattr(args, name):
            parser.exit(2, f"pgcontroller: {before.spelling} is not read by this command\n")
        if not isinstance(getattr(args, name), Given):
            setattr(args, name, before)


def _commands(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """The runnable commands: parsers without commands of their own."""
    found: list[argparse.ArgumentParser] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                found.extend(_commands(child) or [child])
    return found
