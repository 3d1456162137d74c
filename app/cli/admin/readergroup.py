"""`pgcontroller readergroup list|create|delete|info`: a running controller's reader groups. The
list comes from REST (the controller's gRPC has no listing, as in Pravega, whose admin CLI lists
them over REST too); the rest over gRPC. A group is named scope/group."""

from __future__ import annotations

import argparse
import uuid
from typing import Any
from urllib.parse import quote

from app.api.grpc.proto import controller_pb2 as pb
from app.cli.admin.common import (
    EXIT_INVALID,
    AdminError,
    add_connection_options,
    call,
    done,
    expect,
    qualified,
    rest,
    show,
)

# ReaderGroupConfig's builder defaults in Pravega's client.
_REFRESH_MS = 3000
_CHECKPOINT_MS = 30000
_OUTSTANDING_CHECKPOINTS = 3
_RETENTION = {"none": 0, "manual": 1, "automatic": 2}


def add_parser(commands: Any) -> None:
    group = commands.add_parser("readergroup", help="a running controller's reader groups")
    actions = group.add_subparsers(dest="readergroup_command", required=True)
    listing = actions.add_parser("list", help="list a scope's reader groups (over REST)")
    listing.add_argument("scope")
    add_connection_options(listing, rest=True)
    create = actions.add_parser("create", help="create a reader group reading streams from their heads")
    create.add_argument("group", metavar="SCOPE/GROUP")
    create.add_argument(
        "--stream",
        action="append",
        required=True,
        metavar="SCOPE/STREAM",
        help="a stream to read (repeatable)",
    )
    create.add_argument(
        "--retention", choices=sorted(_RETENTION), default="none", help="stream-cut retention"
    )
    add_connection_options(create)
    for name, text in (("delete", "delete a reader group"), ("info", "a reader group's configuration")):
        parser = actions.add_parser(name, help=text)
        parser.add_argument("group", metavar="SCOPE/GROUP")
        add_connection_options(parser)


async def run(args: argparse.Namespace) -> None:
    command = args.readergroup_command
    if command == "list":
        body = rest(
            args,
            f"list reader groups of scope {args.scope}",
            "GET",
            f"/v1/scopes/{quote(args.scope, safe='')}/readergroups",
        )
        names = [g["readerGroupName"] for g in body.get("readerGroups", [])]
        show(args, {"scope": args.scope, "readerGroups": names}, ["READER GROUP"], [[n] for n in names])
    elif command == "create":
        await create(args)
    elif command == "info":
        config = await _config(args, f"reader group {args.group}")
        data = _json(config)
        rows = [[k, v] for k, v in data.items() if k not in ("startingStreamCuts", "endingStreamCuts")]
        rows += [["stream", f"{c['stream']} from {c['cut'] or 'head'}"] for c in data["startingStreamCuts"]]
        show(args, data, ["FIELD", "VALUE"], rows)
    else:
        what = f"delete reader group {args.group}"
        config = await _config(args, what)
        request = pb.ReaderGroupInfo(
            scope=config.scope, readerGroup=config.readerGroupName, readerGroupId=config.readerGroupId
        )
        reply = await call(args, what, lambda stub, md: stub.deleteReaderGroup(request, metadata=md))
        status = pb.DeleteReaderGroupStatus
        expect(what, reply.status, status.Status, {status.RG_NOT_FOUND: "not found"})
        done(
            args,
            {"scope": config.scope, "readerGroup": config.readerGroupName, "deleted": True},
            f"reader group {args.group} deleted",
        )


async def _config(args: argparse.Namespace, what: str) -> pb.ReaderGroupConfiguration:
    scope, name = qualified(args.group, "reader group")
    request = pb.ReaderGroupInfo(scope=scope, readerGroup=name)
    reply = await call(args, what, lambda stub, md: stub.getReaderGroupConfig(request, metadata=md))
    status = pb.ReaderGroupConfigResponse
    expect(what, reply.status, status.Status, {status.RG_NOT_FOUND: "not found"})
    config: pb.ReaderGroupConfiguration = reply.config
    return config


def _json(config: pb.ReaderGroupConfiguration) -> dict[str, Any]:
    def cuts(items: Any) -> list[dict[str, Any]]:
        return [
            {
                "stream": f"{c.streamInfo.scope}/{c.streamInfo.stream}",
                "cut": {str(k): v for k, v in sorted(c.cut.items())},
            }
            for c in items
        ]

    retention = {v: k.upper() for k, v in _RETENTION.items()}
    return {
        "scope": config.scope,
        "readerGroupName": config.readerGroupName,
        "readerGroupId": config.readerGroupId,
        "generation": config.generation,
        "groupRefreshTimeMillis": config.groupRefreshTimeMillis,
        "automaticCheckpointIntervalMillis": config.automaticCheckpointIntervalMillis,
        "maxOutstandingCheckpointRequest": config.maxOutstandingCheckpointRequest,
        "retentionType": retention.get(config.retentionType, str(config.retentionType)),
        "startingStreamCuts": cuts(config.startingStreamCuts),
        "endingStreamCuts": cuts(config.endingStreamCuts),
    }


async def create(args: argparse.Namespace) -> None:
    scope, name = qualified(args.group, "reader group")
    what = f"create reader group {args.group}"
    streams = [qualified(s, "stream") for s in args.stream]
    # An empty cut is Pravega's StreamCut.UNBOUNDED: read from the stream's head.
    config = pb.ReaderGroupConfiguration(
        scope=scope,
        readerGroupName=name,
        groupRefreshTimeMillis=_REFRESH_MS,
        automaticCheckpointIntervalMillis=_CHECKPOINT_MS,
        maxOutstandingCheckpointRequest=_OUTSTANDING_CHECKPOINTS,
        retentionType=_RETENTION[args.retention],
        generation=0,
        readerGroupId=str(uuid.uuid4()),
        startingStreamCuts=[pb.StreamCut(streamInfo=pb.StreamInfo(scope=s, stream=n)) for s, n in streams],
        endingStreamCuts=[pb.StreamCut(streamInfo=pb.StreamInfo(scope=s, stream=n)) for s, n in streams],
    )
    reply = await call(args, what, lambda stub, md: stub.createReaderGroup(config, metadata=md))
    status = pb.CreateReaderGroupResponse
    expect(
        what,
        reply.status,
        status.Status,
        {
            status.SCOPE_NOT_FOUND: f"not found: no scope {scope}",
            status.INVALID_RG_NAME: (
                f"invalid input: {name!r} is not a valid reader group name",
                EXIT_INVALID,
            ),
        },
    )
    if reply.config.readerGroupId != config.readerGroupId:
        # Pravega's createReaderGroup answers SUCCESS with the existing group's configuration.
        raise AdminError(f"{what}: already exists")
    done(
        args,
        {"scope": scope, "readerGroup": name, "readerGroupId": config.readerGroupId, "created": True},
        f"reader group {args.group} created",
    )
