"""The ports the core needs: what services and workers ask of storage, the segment store, locks
and time, one module per concern. Services and workers import only these Protocols; the
composition root wires concrete adapters in. Every name is re-exported here."""

from app.domain.hosts import HostAddress
from app.ports.autoscale import AutoScaleStore, ScaleReportSink
from app.ports.clock import Clock
from app.ports.cluster import ClusterStore, ClusterView
from app.ports.containers import ContainerMapStore, RegisteredHost, SegmentStoreLocator
from app.ports.kvtables import KvtCreation, KvtStore
from app.ports.locks import AdvisoryLocks
from app.ports.readergroups import ReaderGroupCreation, ReaderGroupStore
from app.ports.requests import RequestQueue
from app.ports.retention import RetentionContext, RetentionMember, RetentionStore, RetentionWrite
from app.ports.scopes import ScopeStore
from app.ports.segment_storage import SegmentStorageReport
from app.ports.segment_store import SegmentInfo, SegmentStore
from app.ports.state_views import StateViewStore
from app.ports.streams import StreamCreation, StreamStore
from app.ports.txns import CommitBatch, CommittingRecord, CreatedTxn, ExpiredTxn, TxnLookup, TxnStore
from app.ports.watermarks import (
    MarkChange,
    MarkStream,
    MarkTail,
    StoredWatermark,
    TxnWriterMarks,
    WatermarkAppend,
    WatermarkMember,
    WatermarkStore,
)

__all__ = [
    "AdvisoryLocks",
    "AutoScaleStore",
    "Clock",
    "ClusterStore",
    "ClusterView",
    "CommitBatch",
    "CommittingRecord",
    "ContainerMapStore",
    "CreatedTxn",
    "ExpiredTxn",
    "HostAddress",
    "KvtCreation",
    "KvtStore",
    "MarkChange",
    "MarkStream",
    "MarkTail",
    "ReaderGroupCreation",
    "ReaderGroupStore",
    "RegisteredHost",
    "RequestQueue",
    "RetentionContext",
    "RetentionMember",
    "RetentionStore",
    "RetentionWrite",
    "ScaleReportSink",
    "ScopeStore",
    "SegmentInfo",
    "SegmentStorageReport",
    "SegmentStore",
    "SegmentStoreLocator",
    "StateViewStore",
    "StoredWatermark",
    "StreamCreation",
    "StreamStore",
    "TxnLookup",
    "TxnStore",
    "TxnWriterMarks",
    "WatermarkAppend",
    "WatermarkMember",
    "WatermarkStore",
]
