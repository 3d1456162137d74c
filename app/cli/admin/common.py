"""What every operator command shares: the controller's address and TLS, the credentials (from the
environment only, never argv), one gRPC or REST call, and its failures as one line with an exit code.

Invariant: no grpclib, socket or HTTP exception leaves `call` or `rest`: each becomes an AdminError
whose message names the controller and never carries the credentials.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import ssl
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, TypeVar

from grpclib.client import Channel
from grpclib.const import Status
from grpclib.exceptions import GRPCError, StreamTerminatedError

from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.kvtclient.controller import controller_tls, parse_controller

T = TypeVar("T")

DEFAULT_CONTROLLER: Final = "tcp://127.0.0.1:9090"
DEFAULT_REST_URL: Final = "http://127.0.0.1:9091"
CONTROLLER_ENV: Final = "PGCONTROLLER_CONTROLLER_URI"
REST_URL_ENV: Final = "PGCONTROLLER_REST_URL"
# Ours first; then the names Pravega's Rust and Python clients read, so one environment serves both.
USERNAME_ENVS: Final = ("PGCONTROLLER_USERNAME", "pravega_client_auth_username")
PASSWORD_ENVS: Final = ("PGCONTROLLER_PASSWORD", "pravega_client_auth_password")
METHOD_ENV: Final = "pravega_client_auth_method"
TOKEN_ENV: Final = "pravega_client_auth_token"
TIMEOUT_S: Final = 30.0

EXIT_FAILED: Final = 1
EXIT_INVALID: Final = 2


class AdminError(Exception):
    """A failure told to the operator in one line; `code` is the process's exit code."""

    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.code = code


# What an answer's status means to the operator: the words after `what: `, and an exit code when
# it is not EXIT_FAILED (a refused name is invalid input).
Refusal = str | tuple[str, int]


def expect(
    what: str, status: int, enum: Any, refusals: Mapping[int, Refusal], success: str = "SUCCESS"
) -> None:
    """Returns when the answer's `status` is `enum`'s `success` value; otherwise raises the refusal
    given for it, or one naming the status as Pravega's enum `enum` names it."""
    if status == getattr(enum, success):
        return
    refusal = refusals.get(status)
    if refusal is None:
        raise AdminError(f"{what}: the controller answered {enum.Name(status)}")
    words, code = (refusal, EXIT_FAILED) if isinstance(refusal, str) else refusal
    raise AdminError(f"{what}: {words}", code)


def add_connection_options(parser: argparse.ArgumentParser, *, rest: bool = False) -> None:
    parser.add_argument(
        "--controller",
        default=os.environ.get(CONTROLLER_ENV, DEFAULT_CONTROLLER),
        metavar="URI",
        help=f"the controller's gRPC URI, tcp://host:port or tls://host:port "
        f"(default ${CONTROLLER_ENV}, else {DEFAULT_CONTROLLER})",
    )
    parser.add_argument(
        "--tls-trust-file",
        type=Path,
        metavar="PATH",
        help="PEM CA certificates to verify a tls:// controller (or https REST) with (default: the system's)",
    )
    if rest:
        parser.add_argument(
            "--rest-url",
            default=os.environ.get(REST_URL_ENV, DEFAULT_REST_URL),
            metavar="URL",
            help=f"the controller's REST address (default ${REST_URL_ENV}, else {DEFAULT_REST_URL})",
        )
    parser.add_argument("--json", action="store_true", help="print JSON for scripts instead of a table")


def authorization(env: Mapping[str, str]) -> str | None:
    """The `authorization` value from the environment: Basic from a user name and password, or
    Pravega's `pravega_client_auth_method` with `pravega_client_auth_token` for a plugin's method."""
    user = next((env[n] for n in USERNAME_ENVS if env.get(n)), None)
    password = next((env[n] for n in PASSWORD_ENVS if n in env), None)
    method = env.get(METHOD_ENV, "Basic") or "Basic"
    if method != "Basic" and env.get(TOKEN_ENV):
        return f"{method} {env[TOKEN_ENV]}"
    if user is None:
        return None
    token = base64.b64encode(f"{user}:{password or ''}".encode()).decode("ascii")
    return f"Basic {token}"


def _tls(args: argparse.Namespace) -> ssl.SSLContext | None:
    try:
        return controller_tls(args.controller, args.tls_trust_file)
    except (OSError, ssl.SSLError) as exc:
        raise AdminError(
            f"cannot read --tls-trust-file {args.tls_trust_file}: {exc.strerror or exc}"
        ) from None


async def call(
    args: argparse.Namespace, what: str, rpc: Callable[[ControllerServiceStub, Any], Awaitable[T]]
) -> T:
    """One RPC at the controller `args.controller`, with the environment's credentials."""
    try:
        host, port = parse_controller(args.controller)
    except ValueError as exc:
        raise AdminError(f"--controller: {exc}", EXIT_INVALID) from None
    header = authorization(os.environ)
    metadata = {} if header is None else {"authorization": header}
    channel = Channel(host, port, ssl=_tls(args))
    try:
        return await rpc(ControllerServiceStub(channel), metadata)
    except GRPCError as exc:
        raise _grpc_error(args.controller, what, exc) from None
    except StreamTerminatedError:
        # What a plain client meets at a TLS listener: it hangs up without an HTTP/2 answer.
        raise AdminError(
            f"cannot reach the controller at {args.controller} (the connection was closed; "
            "if it serves TLS, use tls://host:port)"
        ) from None
    except (OSError, TimeoutError) as exc:
        reason = getattr(exc, "strerror", None) or type(exc).__name__
        raise AdminError(f"cannot reach the controller at {args.controller} ({reason})") from None
    finally:
        channel.close()


def _grpc_error(uri: str, what: str, exc: GRPCError) -> AdminError:
    message = exc.message or exc.status.name
    if exc.status == Status.UNAUTHENTICATED:
        return AdminError(
            f"{what}: the controller at {uri} refused the credentials (UNAUTHENTICATED): {message}; "
            f"set {USERNAME_ENVS[0]} and {PASSWORD_ENVS[0]}"
        )
    if exc.status == Status.PERMISSION_DENIED:
        return AdminError(f"{what}: not allowed (PERMISSION_DENIED): {message}")
    if exc.status == Status.INVALID_ARGUMENT:
        return AdminError(f"{what}: invalid input: {message}", EXIT_INVALID)
    if exc.status == Status.NOT_FOUND:
        return AdminError(f"{what}: not found: {message}")
    if exc.status == Status.ALREADY_EXISTS:
        return AdminError(f"{what}: already exists: {message}")
    if exc.status in (Status.UNAVAILABLE, Status.DEADLINE_EXCEEDED):
        return AdminError(f"{what}: the controller at {uri} is unavailable ({exc.status.name}): {message}")
    return AdminError(f"{what}: the controller answered {exc.status.name}: {message}")


def rest(args: argparse.Namespace, what: str, method: str, path: str) -> Any:
    """One REST call at `args.rest_url` with the environment's credentials; its JSON body."""
    base: str = args.rest_url
    headers = {"Accept": "application/json"}
    header = authorization(os.environ)
    if header is not None:
        headers["Authorization"] = header
    request = urllib.request.Request(base.rstrip("/") + path, method=method, headers=headers)
    context = _tls(args) if args.tls_trust_file is not None and base.startswith("https") else None
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S, context=context) as response:
            raw = response.read()
            return json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        raise _http_error(base, what, exc) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or type(exc).__name__
        raise AdminError(
            f"cannot reach the controller's REST API at {base} ({reason}) (--rest-url)"
        ) from None


def _http_error(base: str, what: str, exc: urllib.error.HTTPError) -> AdminError:
    try:
        body = json.loads(exc.read() or b"null")
    except ValueError:
        body = None
    message = (body.get("message") if isinstance(body, dict) else None) or exc.reason
    if exc.code == 401:
        return AdminError(
            f"{what}: the controller at {base} refused the credentials (401): {message}; "
            f"set {USERNAME_ENVS[0]} and {PASSWORD_ENVS[0]}"
        )
    if exc.code == 403:
        return AdminError(f"{what}: not allowed (403): {message}")
    if exc.code == 404:
        return AdminError(f"{what}: not found: {message}")
    if exc.code == 409:
        return AdminError(f"{what}: conflict: {message}")
    if exc.code in (400, 422):
        return AdminError(f"{what}: invalid input: {message}", EXIT_INVALID)
    return AdminError(f"{what}: the controller answered {exc.code}: {message}")


def qualified(text: str, what: str) -> tuple[str, str]:
    """`scope/name`, as Pravega's CLI names a stream or reader group."""
    scope, sep, name = text.partition("/")
    if not sep or not scope or not name or "/" in name:
        raise AdminError(f"a {what} is named scope/name, not {text!r}", EXIT_INVALID)
    return scope, name


def show(args: argparse.Namespace, data: Any, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """`data` as JSON with --json; else `rows` as a table under `headers`."""
    if args.json:
        print(json.dumps(data, indent=2, sort_keys=True))
        return
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def done(args: argparse.Namespace, data: dict[str, Any], line: str) -> None:
    """A change's outcome: JSON with --json, else one human line."""
    print(json.dumps(data, sort_keys=True) if args.json else line)
