"""A client of streams for users of pgcontroller (and of Pravega): stream cuts, the segments and
byte ranges between two cuts, the events of a range, and writing events into transactions, over
the controller's gRPC and the segment stores' wire protocol only, so it works against any
Pravega-compatible cluster. The `pravega` Spark data source (spark/datasource/) is built on it."""

from app.streamclient.controller import Credentials, KeyRange, OpenedTxn, StreamController
from app.streamclient.cuts import StreamCut, cut_from_offset, parse_cut
from app.streamclient.errors import (
    AccessRefused,
    InvalidStreamCut,
    StreamError,
    StreamNotFound,
    StreamTruncated,
    StreamUnavailable,
    TransactionFailed,
)
from app.streamclient.planning import check_cut, head_cut, spans_between, tail_cut
from app.streamclient.segments import SegmentInfo, Span, StreamSegments, qualified_name
from app.streamclient.txn import TxnWriter, abort_all, commit_all, wait_committed
from app.streamclient.window import read_part

__all__ = [
    "AccessRefused",
    "Credentials",
    "InvalidStreamCut",
    "KeyRange",
    "OpenedTxn",
    "SegmentInfo",
    "Span",
    "StreamController",
    "StreamCut",
    "StreamError",
    "StreamNotFound",
    "StreamSegments",
    "StreamTruncated",
    "StreamUnavailable",
    "TransactionFailed",
    "TxnWriter",
    "abort_all",
    "check_cut",
    "commit_all",
    "cut_from_offset",
    "head_cut",
    "parse_cut",
    "qualified_name",
    "read_part",
    "spans_between",
    "tail_cut",
    "wait_committed",
]
