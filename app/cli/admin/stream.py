"""`pgcontroller stream list|create|delete|seal|scale|info`: a running controller's streams, over
its gRPC. A stream is named scope/stream, as Pravega's CLI names it; `scale` waits until the
controller reports the scale done (checkScale), so a script can rely on the new segments."""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.cli.admin.common import (
    EXIT_INVALID,
    AdminError,
    add_connection_options,
    call,
    done,
    expect,
    qualified,
    show,
)

_SCALE_TYPES = {
    "fixed": pb.ScalingPolicy.FIXED_NUM_SEGMENTS,
    "events": pb.ScalingPolicy.BY_RATE_IN_EVENTS_PER_SEC,
    "kbytes": pb.ScalingPolicy.BY_RATE_IN_KBYTES_PER_SEC,
}
_SCALE_WAIT_S = 60.0
# Pravega's RetentionPolicy.byTime/bySize leave the maximum unbounded: Long.MAX_VALUE.
_NO_MAX = 2**63 - 1


def add_parser(commands: Any) -> None:
    stream = commands.add_parser("stream", help="a running controller's streams")
    actions = stream.add_subparsers(dest="stream_command", required=True)
    listing = actions.add_parser("list", help="list a scope's streams")
    listing.add_argument("scope")
    listing.add_argument("--tag", help="only the streams with this tag")
    listing.add_argument(
        "--internal", action="store_true", help="also the internal streams (_MARK..., names starting with _)"
    )
    add_connection_options(listing)
    create = actions.add_parser("create", help="create a stream")
    create.add_argument("stream", metavar="SCOPE/STREAM")
    create.add_argument("--segments", type=int, default=1, help="(minimum) number of segments (default 1)")
    create.add_argument(
        "--scale-type",
        choices=sorted(_SCALE_TYPES),
        default="fixed",
        help="the scaling policy (default fixed)",
    )
    create.add_argument(
        "--target-rate", type=int, default=0, help="events/s or KiB/s per segment (auto-scaling)"
    )
    create.add_argument("--scale-factor", type=int, default=0, help="segments a hot one splits into")
    retention = create.add_mutually_exclusive_group()
    retention.add_argument("--retention-time-ms", type=int, help="keep data at least this long")
    retention.add_argument("--retention-size-bytes", type=int, help="keep at least this many bytes")
    create.add_argument("--tag", action="append", default=[], help="a tag (repeatable)")
    add_connection_options(create)
    for name, text in (
        ("delete", "delete a sealed stream"),
        ("seal", "seal a stream: no more writes"),
        ("info", "a stream's configuration and current segments"),
    ):
        parser = actions.add_parser(name, help=text)
        parser.add_argument("stream", metavar="SCOPE/STREAM")
        add_connection_options(parser)
    scale = actions.add_parser("scale", help="seal segments and replace them with new key ranges")
    scale.add_argument("stream", metavar="SCOPE/STREAM")
    how = scale.add_mutually_exclusive_group(required=True)
    how.add_argument("--segments", type=int, help="replace all current segments with this many equal ones")
    how.add_argument("--seal", type=int, nargs="+", metavar="SEGMENT_ID", help="the segment ids to seal")
    scale.add_argument(
        "--range",
        action="append",
        default=[],
        metavar="START-END",
        help="a new key range with --seal, e.g. 0.0-0.5 (repeatable)",
    )
    add_connection_options(scale)


async def run(args: argparse.Namespace) -> None:
    command = args.stream_command
    if command == "list":
        await list_streams(args)
    elif command == "create":
        await create(args)
    elif command == "info":
        await info(args)
    elif command == "scale":
        await scale(args)
    else:
        await seal_or_delete(args)


def _info(args: argparse.Namespace) -> pb.StreamInfo:
    scope, name = qualified(args.stream, "stream")
    return pb.StreamInfo(scope=scope, stream=name)


async def list_streams(args: argparse.Namespace) -> None:
    names: list[str] = []
    token = ""
    what = f"list streams of scope {args.scope}"
    scope = pb.ScopeInfo(scope=args.scope)
    while True:
        cont = pb.ContinuationToken(token=token)
        if args.tag is None:
            request: Any = pb.StreamsInScopeRequest(scope=scope, continuationToken=cont)
            page = await call(args, what, _page(request))
        else:
            request = pb.StreamsInScopeWithTagRequest(scope=scope, tag=args.tag, continuationToken=cont)
            page = await call(args, what, _page(request))
        status = pb.StreamsInScopeResponse
        expect(
            what, page.status, status.Status, {status.SCOPE_NOT_FOUND: f"not found: no scope {args.scope}"}
        )
        names.extend(s.stream for s in page.streams)
        if not page.streams or page.continuationToken.token in ("", token):
            break
        token = page.continuationToken.token
    if not args.internal:
        # Internal streams (a stream's _MARK watermark stream, ...) are hidden as Pravega's REST
        # listing hides them unless showInternalStreams is asked for.
        names = [n for n in names if not n.startswith("_")]
    show(args, {"scope": args.scope, "streams": names}, ["STREAM"], [[n] for n in names])


def _page(request: Any) -> Callable[[ControllerServiceStub, Any], Awaitable[pb.StreamsInScopeResponse]]:
    if isinstance(request, pb.StreamsInScopeWithTagRequest):
        return lambda stub, md: stub.listStreamsInScopeForTag(request, metadata=md)
    return lambda stub, md: stub.listStreamsInScope(request, metadata=md)


async def create(args: argparse.Namespace) -> None:
    info = _info(args)
    what = f"create stream {args.stream}"
    if args.segments < 1:
        raise AdminError(f"{what}: invalid input: --segments must be at least 1", EXIT_INVALID)
    retention = pb.RetentionPolicy()
    if args.retention_time_ms is not None:
        retention = pb.RetentionPolicy(
            retentionType=pb.RetentionPolicy.TIME, retentionParam=args.retention_time_ms, retentionMax=_NO_MAX
        )
    elif args.retention_size_bytes is not None:
        retention = pb.RetentionPolicy(
            retentionType=pb.RetentionPolicy.SIZE,
            retentionParam=args.retention_size_bytes,
            retentionMax=_NO_MAX,
        )
    config = pb.StreamConfig(
        streamInfo=info,
        scalingPolicy=pb.ScalingPolicy(
            scaleType=_SCALE_TYPES[args.scale_type],
            targetRate=args.target_rate,
            scaleFactor=args.scale_factor,
            minNumSegments=args.segments,
        ),
        retentionPolicy=retention,
        tags=pb.Tags(tag=args.tag),
    )
    reply = await call(args, what, lambda stub, md: stub.createStream(config, metadata=md))
    status = pb.CreateStreamStatus
    expect(
        what,
        reply.status,
        status.Status,
        {
            status.STREAM_EXISTS: "already exists",
            status.SCOPE_NOT_FOUND: f"not found: no scope {info.scope}",
            status.INVALID_STREAM_NAME: (
                f"invalid input: {info.stream!r} is not a valid stream name",
                EXIT_INVALID,
            ),
        },
    )
    done(args, {"scope": info.scope, "stream": info.stream, "created": True}, f"stream {args.stream} created")


async def seal_or_delete(args: argparse.Namespace) -> None:
    info = _info(args)
    if args.stream_command == "seal":
        what = f"seal stream {args.stream}"
        sealed = await call(args, what, lambda stub, md: stub.sealStream(info, metadata=md))
        updated = pb.UpdateStreamStatus
        expect(
            what,
            sealed.status,
            updated.Status,
            {
                updated.STREAM_NOT_FOUND: "not found",
                updated.SCOPE_NOT_FOUND: f"not found: no scope {info.scope}",
            },
        )
        done(
            args, {"scope": info.scope, "stream": info.stream, "sealed": True}, f"stream {args.stream} sealed"
        )
        return
    what = f"delete stream {args.stream}"
    deleted = await call(args, what, lambda stub, md: stub.deleteStream(info, metadata=md))
    removed = pb.DeleteStreamStatus
    expect(
        what,
        deleted.status,
        removed.Status,
        {
            removed.STREAM_NOT_FOUND: "not found",
            removed.STREAM_NOT_SEALED: "the stream is not sealed (seal it first)",
        },
    )
    done(args, {"scope": info.scope, "stream": info.stream, "deleted": True}, f"stream {args.stream} deleted")


def _segment_rows(ranges: Any) -> list[dict[str, Any]]:
    # A segment id carries its creation epoch in the high 32 bits (Pravega's NameUtils).
    return [
        {
            "segmentId": r.segmentId.segmentId,
            "number": r.segmentId.segmentId & 0xFFFFFFFF,
            "epoch": r.segmentId.segmentId >> 32,
            "minKey": r.minKey,
            "maxKey": r.maxKey,
        }
        for r in sorted(ranges, key=lambda r: r.minKey)
    ]


async def _current(args: argparse.Namespace, info: pb.StreamInfo, what: str) -> list[dict[str, Any]]:
    current = await call(args, what, lambda stub, md: stub.getCurrentSegments(info, metadata=md))
    return _segment_rows(current.segmentRanges)


async def info(args: argparse.Namespace) -> None:
    info = _info(args)
    what = f"stream {args.stream}"
    config = await call(args, what, lambda stub, md: stub.getStreamConfiguration(info, metadata=md))
    segments = await _current(args, info, what)
    policy = config.scalingPolicy
    retention = config.retentionPolicy
    data: dict[str, Any] = {
        "scope": info.scope,
        "stream": info.stream,
        "scalingPolicy": {
            "scaleType": pb.ScalingPolicy.ScalingPolicyType.Name(policy.scaleType),
            "targetRate": policy.targetRate,
            "scaleFactor": policy.scaleFactor,
            "minNumSegments": policy.minNumSegments,
        },
        "retentionPolicy": None
        if retention.retentionType == pb.RetentionPolicy.UNKNOWN
        else {
            "retentionType": pb.RetentionPolicy.RetentionPolicyType.Name(retention.retentionType),
            "retentionParam": retention.retentionParam,
            "retentionMax": retention.retentionMax,
        },
        "tags": list(config.tags.tag),
        "currentSegments": segments,
    }
    if args.json:
        show(args, data, [], [])
        return
    scaling = data["scalingPolicy"]
    print(f"stream      {info.scope}/{info.stream}")
    print(
        f"scaling     {scaling['scaleType']} min {scaling['minNumSegments']} "
        f"target {scaling['targetRate']} factor {scaling['scaleFactor']}"
    )
    kept = data["retentionPolicy"]
    print(
        f"retention   {'none' if kept is None else kept['retentionType'] + ' ' + str(kept['retentionParam'])}"
    )
    print(f"tags        {', '.join(data['tags']) or '-'}")
    print()
    show(
        args,
        data,
        ["SEGMENT", "NUMBER", "EPOCH", "FROM", "TO"],
        [[s["segmentId"], s["number"], s["epoch"], s["minKey"], s["maxKey"]] for s in segments],
    )


def _ranges(args: argparse.Namespace, what: str) -> list[tuple[float, float]]:
    ranges: list[tuple[float, float]] = []
    for text in args.range:
        start, sep, end = text.partition("-")
        try:
            ranges.append((float(start), float(end)))
        except ValueError:
            raise AdminError(
                f"{what}: invalid input: a --range is START-END, not {text!r}", EXIT_INVALID
            ) from None
        if not sep:
            raise AdminError(f"{what}: invalid input: a --range is START-END, not {text!r}", EXIT_INVALID)
    return ranges


async def scale(args: argparse.Namespace) -> None:
    info = _info(args)
    what = f"scale stream {args.stream}"
    if args.segments is not None:
        if args.segments < 1 or args.range:
            raise AdminError(f"{what}: invalid input: --segments N (N >= 1) takes no --range", EXIT_INVALID)
        sealed = [s["segmentId"] for s in await _current(args, info, what)]
        if not sealed:
            raise AdminError(f"{what}: the stream has no current segments (sealed, or no such stream)")
        step = 1.0 / args.segments
        ranges = [(i * step, 1.0 if i == args.segments - 1 else (i + 1) * step) for i in range(args.segments)]
    else:
        sealed = list(args.seal)
        ranges = _ranges(args, what)
        if not ranges:
            raise AdminError(f"{what}: invalid input: --seal needs at least one --range", EXIT_INVALID)
    request = pb.ScaleRequest(
        streamInfo=info,
        sealedSegments=sealed,
        newKeyRanges=[pb.ScaleRequest.KeyRangeEntry(start=a, end=b) for a, b in ranges],
        scaleTimestamp=int(time.time() * 1000),
    )
    reply = await call(args, what, lambda stub, md: stub.scale(request, metadata=md))
    refused = (
        "refused (PRECONDITION_FAILED): the segments to seal are not all current, or the new ranges "
        "do not cover exactly theirs"
    )
    status = pb.ScaleResponse
    expect(what, reply.status, status.ScaleStreamStatus, {status.PRECONDITION_FAILED: refused}, "STARTED")
    await _await_scale(args, info, reply.epoch, what)
    # The answer's epoch is the one the scale started from (checkScale's argument); the new
    # segments carry the epoch they begin.
    created = _segment_rows(reply.segments)
    epoch = max((s["epoch"] for s in created), default=reply.epoch + 1)
    done(
        args,
        {"scope": info.scope, "stream": info.stream, "epoch": epoch, "segments": created},
        f"stream {args.stream} scaled: epoch {epoch}, {len(created)} new segment(s)",
    )


async def _await_scale(args: argparse.Namespace, info: pb.StreamInfo, epoch: int, what: str) -> None:
    request = pb.ScaleStatusRequest(streamInfo=info, epoch=epoch)
    deadline = time.monotonic() + _SCALE_WAIT_S
    pause = 0.05
    while True:
        state = await call(args, what, lambda stub, md: stub.checkScale(request, metadata=md))
        if state.status == pb.ScaleStatusResponse.SUCCESS:
            return
        if state.status != pb.ScaleStatusResponse.IN_PROGRESS:
            raise AdminError(
                f"{what}: the scale ended {pb.ScaleStatusResponse.ScaleStatus.Name(state.status)}"
            )
        if time.monotonic() > deadline:
            raise AdminError(
                f"{what}: still in progress after {_SCALE_WAIT_S:.0f} s (it goes on; see `stream info`)"
            )
        await asyncio.sleep(pause)
        pause = min(pause * 2, 1.0)
