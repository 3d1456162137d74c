"""Operator commands that talk to a running controller, as Pravega's admin CLI offers them:
`scope`, `stream` and `readergroup` (one module per noun), over the controller's gRPC (and REST
where gRPC has no call). Every failure is one line on stderr and exit code 1 (2: invalid input);
credentials come from the environment only (app/cli/admin/common.py)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from app.cli.admin import readergroup, scope, stream
from app.cli.admin.common import AdminError

NOUNS = {"scope": scope, "stream": stream, "readergroup": readergroup}


def add_admin_parsers(commands: Any) -> None:
    for module in NOUNS.values():
        module.add_parser(commands)


def run_admin(args: argparse.Namespace) -> int:
    try:
        asyncio.run(NOUNS[args.command].run(args))
    except AdminError as exc:
        print(f"pgcontroller: {exc}", file=sys.stderr)
        return exc.code
    return 0
