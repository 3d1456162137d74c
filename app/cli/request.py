"""`pgcontroller request parked list|retry|drop`: the operator's handle on parked requests (those
whose workflow failed finally), through a running controller's REST API. It speaks only HTTP, so
it works against any controller of the cluster, and never touches the database itself."""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.request
from typing import Any

from app.cli.admin.common import REST_URL_ENV, authorization

DEFAULT_REST_URL = "http://127.0.0.1:9091"
PARKED_PATH = "/v1/requests/parked"
_TIMEOUT_S = 30.0


class CliError(Exception):
    """A failure to tell the operator in one line."""


def add_request_parser(commands: Any) -> None:
    request = commands.add_parser("request", help="durable workflow requests (parked ones)")
    request.add_argument(
        "--rest-url",
        default=os.environ.get(REST_URL_ENV, DEFAULT_REST_URL),
        help=f"a running controller's REST address (default ${REST_URL_ENV}, else {DEFAULT_REST_URL})",
    )
    groups = request.add_subparsers(dest="request_group", required=True)
    parked = groups.add_parser("parked", help="requests whose workflow failed finally")
    actions = parked.add_subparsers(dest="parked_command", required=True)
    listing = actions.add_parser("list", help="list parked requests with their errors")
    _listing_options(listing)
    # `request list`: the requests an operator can act on are the parked ones (the live queue is
    # worked by the controllers themselves), so the short form lists those.
    short = groups.add_parser("list", help="list parked requests (as `request parked list`)")
    _listing_options(short)
    short.set_defaults(parked_command="list")
    retry = actions.add_parser("retry", help="put a parked request back into its stream's queue")
    retry.add_argument("id", type=int)
    drop = actions.add_parser("drop", help="delete a parked request for good")
    drop.add_argument("id", type=int)


def _listing_options(listing: argparse.ArgumentParser) -> None:
    listing.add_argument("--after", type=int, default=0, help="only ids above this (paging)")
    listing.add_argument("--limit", type=int, default=100, help="at most this many (1-1000)")
    listing.add_argument("--json", action="store_true", help="print the REST answer as JSON")


def _call(base: str, method: str, path: str) -> tuple[int, Any]:
    url = base.rstrip("/") + path
    headers = {"Accept": "application/json"}
    # With --auth-enabled the REST API wants credentials: the operator commands' (environment only).
    credentials = authorization(os.environ)
    if credentials is not None:
        headers["Authorization"] = credentials
    req = urllib.request.Request(url, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=_TIMEOUT_S) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        message = body.get("message") if isinstance(body, dict) else None
        raise CliError(f"{method} {path} answered {exc.code}: {message or exc.reason}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise CliError(
            f"cannot reach the controller's REST API at {base} ({reason}); is `pgcontroller serve` "
            "running there? (--rest-url)"
        ) from None


def _line(row: dict[str, Any]) -> str:
    key = f"{row['scope']}/{row['stream']}" if row["stream"] else row["scope"]
    return f"{row['id']}\t{row['kind']}\t{key}\tparked at {row['parkedAt']}\t{row['error']}"


def run_request(args: argparse.Namespace) -> int:
    base: str = args.rest_url
    try:
        if args.parked_command == "list":
            query = f"?after={args.after}&limit={args.limit}"
            _status, body = _call(base, "GET", PARKED_PATH + query)
            if args.json:
                print(json.dumps(body, indent=2))
            else:
                rows = body["requests"]
                for row in rows:
                    print(_line(row))
                print(f"{len(rows)} parked request(s)", file=sys.stderr)
        elif args.parked_command == "retry":
            _call(base, "POST", f"{PARKED_PATH}/{args.id}/retry")
            print(f"request {args.id} is queued again", file=sys.stderr)
        else:
            _call(base, "DELETE", f"{PARKED_PATH}/{args.id}")
            print(f"request {args.id} dropped", file=sys.stderr)
    except CliError as exc:
        print(f"pgcontroller: {exc}", file=sys.stderr)
        return 1
    return 0
