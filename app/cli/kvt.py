"""`pgcontroller kvt create|delete|get|put|remove|list`: key-value tables and their entries from
the shell, through a running controller's gRPC and its segment stores (app/kvtclient). Keys and
values are UTF-8 text, or hex with --hex; a version is the "segment:version" text a put prints."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from app.kvtclient import (
    NOT_EXISTS,
    KeyValueTable,
    KvtError,
    TableKey,
    Version,
    create_table,
    delete_table,
)
from app.kvtclient.controller import controller_tls

DEFAULT_CONTROLLER = "127.0.0.1:9090"


def add_kvt_parser(commands: Any) -> None:
    kvt = commands.add_parser("kvt", help="read and write a key-value table's entries")
    kvt.add_argument(
        "--controller",
        default=DEFAULT_CONTROLLER,
        help=f"a running controller's gRPC address host:port, tls://host:port for TLS "
        f"(default {DEFAULT_CONTROLLER})",
    )
    kvt.add_argument(
        "--tls-trust-file",
        type=Path,
        metavar="PATH",
        help="PEM CA certificates to verify a tls:// controller and its segment stores with "
        "(default: the system's CAs)",
    )
    kvt.add_argument("--hex", action="store_true", help="keys and values are given and printed in hex")
    actions = kvt.add_subparsers(dest="kvt_command", required=True)

    def table_args(parser: argparse.ArgumentParser, with_key: bool = True) -> None:
        parser.add_argument("scope")
        parser.add_argument("table")
        if with_key:
            parser.add_argument("key", help="the primary key")
            parser.add_argument("--secondary", default="", help="the secondary key, if the table has them")

    create = actions.add_parser("create", help="create a table (exit code 0 also when it exists)")
    table_args(create, with_key=False)
    create.add_argument("--partitions", type=int, required=True, help="its number of table segments")
    create.add_argument("--primary-key-length", type=int, required=True, help="bytes of a primary key")
    create.add_argument("--secondary-key-length", type=int, default=0, help="bytes of a secondary key")
    delete = actions.add_parser("delete", help="delete a table and all its entries")
    table_args(delete, with_key=False)
    get = actions.add_parser("get", help="print a key's value and version")
    table_args(get)
    put = actions.add_parser("put", help="set a key's value; prints its new version")
    table_args(put)
    put.add_argument("value")
    condition = put.add_mutually_exclusive_group()
    condition.add_argument("--version", help="only if the key has this version (segment:version)")
    condition.add_argument("--if-absent", action="store_true", help="only if the key does not exist")
    remove = actions.add_parser("remove", help="remove a key")
    table_args(remove)
    remove.add_argument("--version", help="only if the key has this version (segment:version)")
    listing = actions.add_parser("list", help="print the entries in key order")
    table_args(listing, with_key=False)
    listing.add_argument("--primary", help="only the entries of this primary key")
    listing.add_argument("--limit", type=int, default=0, help="at most this many (0: all)")


def _bytes(args: argparse.Namespace, text: str) -> bytes:
    return bytes.fromhex(text) if args.hex else text.encode()


def _text(args: argparse.Namespace, data: bytes) -> str:
    return data.hex() if args.hex else data.decode(errors="backslashreplace")


def _key(args: argparse.Namespace) -> TableKey:
    return TableKey(_bytes(args, args.key), _bytes(args, args.secondary))


def _show_key(args: argparse.Namespace, key: TableKey) -> str:
    shown = _text(args, key.primary)
    return f"{shown} {_text(args, key.secondary)}" if key.secondary else shown


async def kvt_command(args: argparse.Namespace) -> int:
    """Runs one `kvt` action; 0 on success, 1 with one line on stderr otherwise."""
    try:
        tls = controller_tls(args.controller, args.tls_trust_file)
        if args.kvt_command == "create":
            created = await create_table(
                args.controller,
                args.scope,
                args.table,
                partitions=args.partitions,
                primary_key_length=args.primary_key_length,
                secondary_key_length=args.secondary_key_length,
                tls=tls,
            )
            print("created" if created else "exists already", file=sys.stderr)
            return 0
        if args.kvt_command == "delete":
            if not await delete_table(args.controller, args.scope, args.table, tls=tls):
                print(f"pgcontroller: no table {args.scope}/{args.table}", file=sys.stderr)
                return 1
            return 0
        async with await KeyValueTable.open(args.controller, args.scope, args.table, tls=tls) as table:
            if args.kvt_command == "get":
                entry = await table.get(_key(args))
                if entry is None:
                    print(f"pgcontroller: no key {args.key!r} in {args.scope}/{args.table}", file=sys.stderr)
                    return 1
                print(f"{_text(args, entry.value)}\t{entry.version}")
            elif args.kvt_command == "put":
                version = NOT_EXISTS if args.if_absent else _version(args.version)
                print(await table.put(_key(args), _bytes(args, args.value), version))
            elif args.kvt_command == "remove":
                await table.remove(_key(args), _version(args.version))
            else:
                primary = None if args.primary is None else _bytes(args, args.primary)
                shown = 0
                async for page in table.entries(page_size=100, primary_key=primary):
                    for entry in page.entries:
                        if args.limit and shown >= args.limit:
                            return 0
                        print(f"{_show_key(args, entry.key)}\t{_text(args, entry.value)}\t{entry.version}")
                        shown += 1
    except (KvtError, ValueError, OSError) as exc:
        print(f"pgcontroller: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


def _version(text: str | None) -> Version | None:
    return None if text is None else Version.parse(text)


def run_kvt(args: argparse.Namespace) -> int:
    return asyncio.run(kvt_command(args))
