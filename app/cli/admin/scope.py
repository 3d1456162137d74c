"""`pgcontroller scope list|create|delete|info`: a running controller's scopes, over its gRPC
(`info` is Pravega's admin CLI `controller describe-scope`)."""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from typing import Any

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.cli.admin.common import EXIT_INVALID, AdminError, add_connection_options, call, done, expect, show


def add_parser(commands: Any) -> None:
    scope = commands.add_parser("scope", help="a running controller's scopes (list, create, delete, info)")
    actions = scope.add_subparsers(dest="scope_command", required=True)
    add_connection_options(actions.add_parser("list", help="list the scopes"))
    create = actions.add_parser("create", help="create a scope")
    create.add_argument("scope")
    add_connection_options(create)
    delete = actions.add_parser("delete", help="delete an empty scope")
    delete.add_argument("scope")
    delete.add_argument(
        "--recursive", action="store_true", help="also seal and delete its streams, reader groups and tables"
    )
    add_connection_options(delete)
    info = actions.add_parser("info", help="whether a scope exists (Pravega's describe-scope)")
    info.add_argument("scope")
    add_connection_options(info)


async def run(args: argparse.Namespace) -> None:
    if args.scope_command == "list":
        names = await list_scopes(args)
        show(args, {"scopes": names}, ["SCOPE"], [[n] for n in names])
    elif args.scope_command == "create":
        await create(args)
    elif args.scope_command == "info":
        what = f"scope {args.scope}"
        request = pb.ScopeInfo(scope=args.scope)
        found = await call(args, what, lambda stub, md: stub.checkScopeExists(request, metadata=md))
        if not found.exists:
            raise AdminError(f"{what}: not found")
        # The shape of Pravega's GET /v1/scopes/{scopeName}, which its describe-scope prints.
        show(args, {"scopeName": args.scope}, ["SCOPE"], [[args.scope]])
    else:
        await delete(args)


async def list_scopes(args: argparse.Namespace) -> list[str]:
    names: list[str] = []
    token = ""
    while True:
        page = await call(
            args,
            "list scopes",
            _page(pb.ScopesRequest(continuationToken=pb.ContinuationToken(token=token))),
        )
        names.extend(page.scopes)
        if not page.scopes or page.continuationToken.token in ("", token):
            return names
        token = page.continuationToken.token


def _page(request: pb.ScopesRequest) -> Callable[[ControllerServiceStub, Any], Awaitable[pb.ScopesResponse]]:
    return lambda stub, md: stub.listScopes(request, metadata=md)


async def create(args: argparse.Namespace) -> None:
    what = f"create scope {args.scope}"
    reply = await call(
        args, what, lambda stub, md: stub.createScope(pb.ScopeInfo(scope=args.scope), metadata=md)
    )
    status = pb.CreateScopeStatus
    expect(
        what,
        reply.status,
        status.Status,
        {
            status.SCOPE_EXISTS: "already exists",
            status.INVALID_SCOPE_NAME: (
                f"invalid input: {args.scope!r} is not a valid scope name",
                EXIT_INVALID,
            ),
        },
    )
    done(args, {"scope": args.scope, "created": True}, f"scope {args.scope} created")


async def delete(args: argparse.Namespace) -> None:
    what = f"delete scope {args.scope}"
    info = pb.ScopeInfo(scope=args.scope)
    if args.recursive:
        reply = await call(args, what, lambda stub, md: stub.deleteScopeRecursive(info, metadata=md))
    else:
        reply = await call(args, what, lambda stub, md: stub.deleteScope(info, metadata=md))
    status = pb.DeleteScopeStatus
    expect(
        what,
        reply.status,
        status.Status,
        {
            status.SCOPE_NOT_FOUND: "not found",
            status.SCOPE_NOT_EMPTY: "the scope is not empty (delete its streams first, or --recursive)",
        },
    )
    done(args, {"scope": args.scope, "deleted": True}, f"scope {args.scope} deleted")
