"""Bare grpclib baseline: the same ControllerService contract, answering from constants.

It does no work beyond protobuf and HTTP/2, so the ratio against it shows what pgcontroller
adds on top of the transport.
"""

from __future__ import annotations

import asyncio
import sys

import grpclib.server

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceBase


def _canned_segments() -> pb.SegmentRanges:
    info = pb.StreamInfo(scope="bench", stream="s")
    chunk = 1.0 / 10
    return pb.SegmentRanges(
        segmentRanges=[
            pb.SegmentRange(
                segmentId=pb.SegmentId(streamInfo=info, segmentId=i), minKey=i * chunk, maxKey=(i + 1) * chunk
            )
            for i in range(10)
        ]
    )


class Echo(ControllerServiceBase):
    segments = _canned_segments()
    uri = pb.NodeUri(endpoint="127.0.0.1", port=12345)

    async def getCurrentSegments(self, stream):  # type: ignore[no-untyped-def, override]
        await stream.recv_message()
        await stream.send_message(self.segments)

    async def getURI(self, stream):  # type: ignore[no-untyped-def, override]
        await stream.recv_message()
        await stream.send_message(self.uri)

    # Canned transaction answers of the real shapes, for bench/txns.py's `echo` part.
    created = pb.CreateTxnResponse(
        txnId=pb.TxnId(highBits=1, lowBits=2), activeSegments=_canned_segments().segmentRanges[:4]
    )
    pinged = pb.PingTxnStatus(status=pb.PingTxnStatus.OK)

    async def createTransaction(self, stream):  # type: ignore[no-untyped-def, override]
        await stream.recv_message()
        await stream.send_message(self.created)

    async def pingTransaction(self, stream):  # type: ignore[no-untyped-def, override]
        await stream.recv_message()
        await stream.send_message(self.pinged)


def _fill_abstract() -> None:
    async def unimplemented(self, stream):  # type: ignore[no-untyped-def]
        raise grpclib.exceptions.GRPCError(grpclib.const.Status.UNIMPLEMENTED)

    for name in list(Echo.__abstractmethods__):
        setattr(Echo, name, unimplemented)
    Echo.__abstractmethods__ = frozenset()


async def main(port: int, reuse_port: bool) -> None:
    _fill_abstract()
    server = grpclib.server.Server([Echo()])
    # With --reuse-port, several echoes share one port as `serve --processes N`'s children do.
    await server.start("127.0.0.1", port, reuse_port=reuse_port)
    print("ready", flush=True)
    await server.wait_closed()


if __name__ == "__main__":
    import grpclib.const
    import grpclib.exceptions

    asyncio.run(main(int(sys.argv[1]), "--reuse-port" in sys.argv[2:]))
