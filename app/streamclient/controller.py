"""The controller's gRPC as the stream client needs it: whether a stream exists, its head and its
current segments, the segments between two cuts, where a segment lives, delegation tokens and
transactions. Any Pravega-compatible controller answers these (they are Pravega's RPCs).

Invariant: no grpclib exception leaves this module: UNAUTHENTICATED and PERMISSION_DENIED are
AccessRefused, NOT_FOUND StreamNotFound, anything else (an unreachable controller too)
StreamUnavailable, each naming the call that failed.
"""

from __future__ import annotations

import base64
import ssl
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Final, TypeVar

from grpclib.const import Status
from grpclib.exceptions import GRPCError, StreamTerminatedError

from app.api.grpc.proto import controller_pb2 as pb
from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.domain.hosts import HostAddress
from app.kvtclient.controller import CONTROLLER_TIMEOUT_S, open_channel
from app.streamclient.cuts import StreamCut
from app.streamclient.errors import (
    AccessRefused,
    InvalidStreamCut,
    StreamNotFound,
    StreamUnavailable,
    TransactionFailed,
)

T = TypeVar("T")

_READ: Final = pb.StreamInfo.AccessOperation.READ
_READ_WRITE: Final = pb.StreamInfo.AccessOperation.READ_WRITE


@dataclass(frozen=True, slots=True)
class Credentials:
    """A user name and password, sent as Pravega's clients send them (HTTP Basic)."""

    username: str
    password: str

    def metadata(self) -> dict[str, str]:
        pair = base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
        return {"authorization": f"Basic {pair}"}


@dataclass(frozen=True, slots=True)
class KeyRange:
    segment_id: int
    min_key: float
    max_key: float


@dataclass(frozen=True, slots=True)
class OpenedTxn:
    """What createTransaction answers: the id's halves, the segments it writes to, a token."""

    high: int
    low: int
    segments: tuple[KeyRange, ...]
    token: str

    @property
    def hex_id(self) -> str:
        return txn_hex((self.high, self.low))


def txn_hex(txn: tuple[int, int]) -> str:
    """A transaction id as Pravega prints it: its two halves in 16 hex digits each."""
    return f"{txn[0] & 0xFFFFFFFFFFFFFFFF:016x}{txn[1] & 0xFFFFFFFFFFFFFFFF:016x}"


class StreamController:
    """One channel to a controller; `close()` when done."""

    def __init__(
        self,
        address: str,
        *,
        tls: ssl.SSLContext | None = None,
        credentials: Credentials | None = None,
        timeout_s: float = CONTROLLER_TIMEOUT_S,
    ) -> None:
        self.address = address
        self._channel = open_channel(address, tls)
        self._stub = ControllerServiceStub(self._channel)
        self._metadata = credentials.metadata() if credentials is not None else None
        self._timeout_s = timeout_s

    def close(self) -> None:
        self._channel.close()

    async def stream_exists(self, scope: str, stream: str) -> bool:
        answer = await self._ask(
            f"whether {scope}/{stream} exists",
            self._stub.checkStreamExists(_info(scope, stream), **self._call()),
        )
        return bool(answer.exists)

    async def head(self, scope: str, stream: str) -> tuple[StreamCut, str]:
        """The stream's head (getSegments at time 0: where it was last truncated) and a token."""
        answer = await self._ask(
            f"the head of {scope}/{stream}",
            self._stub.getSegments(
                pb.GetSegmentsRequest(streamInfo=_info(scope, stream), timestamp=0), **self._call()
            ),
        )
        positions = {s.segmentId.segmentId: s.offset for s in answer.segments}
        return StreamCut(scope, stream, positions), answer.delegationToken

    async def current_segments(self, scope: str, stream: str) -> tuple[list[KeyRange], str]:
        answer = await self._ask(
            f"the current segments of {scope}/{stream}",
            self._stub.getCurrentSegments(_info(scope, stream), **self._call()),
        )
        ranges = [KeyRange(r.segmentId.segmentId, r.minKey, r.maxKey) for r in answer.segmentRanges]
        return ranges, answer.delegationToken

    async def segments_between(self, start: StreamCut, end: StreamCut | None) -> list[int]:
        """Every segment holding data between the cuts (getSegmentsBetween; `end` None: up to
        the current segments)."""
        request = pb.StreamCutRange(
            streamInfo=_info(start.scope, start.stream),
            to={} if end is None else dict(end.positions),
        )
        getattr(request, "from").update(start.positions)
        answer = await self._ask(
            f"the segments of {start.scope}/{start.stream} between two cuts",
            self._stub.getSegmentsBetween(request, **self._call()),
            invalid=InvalidStreamCut,
        )
        return [s.segmentId for s in answer.segments]

    async def cut_is_valid(self, cut: StreamCut) -> bool:
        answer = await self._ask(
            f"whether a cut of {cut.scope}/{cut.stream} is valid",
            self._stub.isStreamCutValid(
                pb.StreamCut(streamInfo=_info(cut.scope, cut.stream), cut=dict(cut.positions)), **self._call()
            ),
            invalid=InvalidStreamCut,
        )
        return bool(answer.response)

    async def successors(self, scope: str, stream: str, segment_id: int) -> dict[int, list[int]]:
        """The segments that replaced a sealed one, each with all of its predecessors."""
        answer = await self._ask(
            f"the successors of segment {segment_id} of {scope}/{stream}",
            self._stub.getSegmentsImmediatelyFollowing(
                pb.SegmentId(streamInfo=_info(scope, stream), segmentId=segment_id), **self._call()
            ),
        )
        return {e.segment.segmentId.segmentId: list(e.value) for e in answer.segments}

    async def endpoint(self, scope: str, stream: str, segment_id: int) -> HostAddress:
        answer = await self._ask(
            f"where segment {segment_id} of {scope}/{stream} is",
            self._stub.getURI(
                pb.SegmentId(streamInfo=_info(scope, stream), segmentId=segment_id), **self._call()
            ),
        )
        return HostAddress(answer.endpoint, answer.port)

    async def token(self, scope: str, stream: str, *, write: bool) -> str:
        """A fresh delegation token for reading (and writing) the stream's segments."""
        answer = await self._ask(
            f"a delegation token for {scope}/{stream}",
            self._stub.getDelegationToken(
                _info(scope, stream, _READ_WRITE if write else _READ), **self._call()
            ),
        )
        return str(answer.delegationToken)

    async def create_txn(self, scope: str, stream: str, lease_ms: int) -> OpenedTxn:
        answer = await self._ask(
            f"a transaction on {scope}/{stream}",
            self._stub.createTransaction(
                pb.CreateTxnRequest(streamInfo=_info(scope, stream), lease=lease_ms), **self._call()
            ),
            invalid=TransactionFailed,
        )
        return OpenedTxn(
            answer.txnId.highBits,
            answer.txnId.lowBits,
            tuple(KeyRange(r.segmentId.segmentId, r.minKey, r.maxKey) for r in answer.activeSegments),
            answer.delegationToken,
        )

    async def ping_txn(self, scope: str, stream: str, txn: tuple[int, int], lease_ms: int) -> int:
        """The PingTxnStatus.Status it answered (OK: the lease runs `lease_ms` from now)."""
        answer = await self._ask(
            f"a ping of a transaction on {scope}/{stream}",
            self._stub.pingTransaction(
                pb.PingTxnRequest(streamInfo=_info(scope, stream), txnId=_txn_id(txn), lease=lease_ms),
                **self._call(),
            ),
        )
        return int(answer.status)

    async def commit_txn(self, scope: str, stream: str, txn: tuple[int, int]) -> int:
        """The TxnStatus.Status: SUCCESS once the controller has taken the commit on (it then
        completes it even if this client dies)."""
        answer = await self._ask(
            f"the commit of a transaction on {scope}/{stream}",
            self._stub.commitTransaction(
                pb.TxnRequest(streamInfo=_info(scope, stream), txnId=_txn_id(txn)), **self._call()
            ),
        )
        return int(answer.status)

    async def abort_txn(self, scope: str, stream: str, txn: tuple[int, int]) -> int:
        answer = await self._ask(
            f"the abort of a transaction on {scope}/{stream}",
            self._stub.abortTransaction(
                pb.TxnRequest(streamInfo=_info(scope, stream), txnId=_txn_id(txn)), **self._call()
            ),
        )
        return int(answer.status)

    async def txn_state(self, scope: str, stream: str, txn: tuple[int, int]) -> int:
        """The TxnState.State (OPEN, COMMITTING, COMMITTED, ABORTING, ABORTED, UNKNOWN)."""
        answer = await self._ask(
            f"the state of a transaction on {scope}/{stream}",
            self._stub.checkTransactionState(
                pb.TxnRequest(streamInfo=_info(scope, stream), txnId=_txn_id(txn)), **self._call()
            ),
        )
        return int(answer.state)

    def _call(self) -> dict[str, object]:
        return {"timeout": self._timeout_s, "metadata": self._metadata}

    async def _ask(
        self,
        what: str,
        call: Awaitable[T],
        invalid: type[InvalidStreamCut] | type[TransactionFailed] | None = None,
    ) -> T:
        try:
            return await call
        except GRPCError as exc:
            if exc.status in (Status.UNAUTHENTICATED, Status.PERMISSION_DENIED):
                raise AccessRefused(f"{what}: the controller refused: {exc.message}") from exc
            if exc.status == Status.NOT_FOUND:
                raise StreamNotFound(f"{what}: {exc.message}") from exc
            if exc.status == Status.INVALID_ARGUMENT and invalid is not None:
                raise invalid(f"{what}: {exc.message}") from exc
            raise StreamUnavailable(
                f"{what}: the controller at {self.address} answered {exc.status.name}: {exc.message}"
            ) from exc
        except (OSError, StreamTerminatedError, TimeoutError) as exc:
            raise StreamUnavailable(
                f"{what}: the controller at {self.address} cannot be reached: {exc!r}"
            ) from exc


def _info(scope: str, stream: str, access: pb.StreamInfo.AccessOperation = _READ) -> pb.StreamInfo:
    return pb.StreamInfo(scope=scope, stream=stream, accessOperation=access)


def _txn_id(txn: tuple[int, int]) -> pb.TxnId:
    return pb.TxnId(highBits=txn[0], lowBits=txn[1])
