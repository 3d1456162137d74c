"""A client of key-value tables for users of pgcontroller (and of Pravega): open a table through
the controller's gRPC, then put, insert, get, remove and iterate its entries over the segment
stores' wire protocol, keys routed to table segments exactly as Pravega's Java client routes them.
See docs/dataplane.md, "Key-value tables from Python"."""

from app.kvtclient.errors import (
    BadKeyVersion,
    ConditionalTableUpdateError,
    InvalidKey,
    InvalidTable,
    KvtError,
    NoSuchKey,
    ScopeNotFound,
    TableNotFound,
    TableUnavailable,
)
from app.kvtclient.manager import create_table, delete_table
from app.kvtclient.model import (
    NO_VERSION,
    NOT_EXISTS,
    EntryPage,
    Insert,
    KeyPage,
    Put,
    Remove,
    TableEntry,
    TableKey,
    Version,
)
from app.kvtclient.table import KeyValueTable

__all__ = [
    "NOT_EXISTS",
    "NO_VERSION",
    "BadKeyVersion",
    "ConditionalTableUpdateError",
    "EntryPage",
    "Insert",
    "InvalidKey",
    "InvalidTable",
    "KeyPage",
    "KeyValueTable",
    "KvtError",
    "NoSuchKey",
    "Put",
    "Remove",
    "ScopeNotFound",
    "TableEntry",
    "TableKey",
    "TableNotFound",
    "TableUnavailable",
    "Version",
    "create_table",
    "delete_table",
]
