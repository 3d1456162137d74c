"""Every wire command that names a segment, built from its declaration: the fields marked
`Names.SEGMENT` get the names asked for, everything else a plain value of its wire kind. Tests
driven by these cover a new command as soon as it is declared."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Sequence
from typing import Any

from app.segmentstore.wire import commands as wc
from app.segmentstore.wire.commands import Wire

# A list field of segment names gets this many.
LIST_LENGTH = 2

_PLAIN: dict[Wire, Any] = {
    Wire.I32: 0,
    Wire.I64: 0,
    Wire.U8: 0,
    Wire.BOOL: False,
    Wire.U128: 1,
    Wire.STR: "",
    Wire.BYTES: b"",
    Wire.REST: b"",
    Wire.PADDING: 0,
    Wire.EVENT: wc.Event(b""),
    Wire.STRS: (),
    Wire.I64S: (),
    Wire.TABLE_KEYS: (),
    Wire.TABLE_ENTRIES: (),
    Wire.ATTRIBUTE_UPDATES: (),
    Wire.CHUNKS: (),
}

NAMING_SEGMENTS: list[type[wc.Command]] = sorted(
    (cls for cls, fields in wc.SEGMENT_FIELDS.items() if fields), key=lambda cls: cls.TYPE
)


def annotations(cls: type) -> dict[str, tuple[Any, ...]]:
    """Each field's Annotated metadata (its Wire kind, and Names.SEGMENT where marked)."""
    hints = typing.get_type_hints(cls, include_extras=True)
    return {f.name: tuple(hints[f.name].__metadata__) for f in dataclasses.fields(cls)}


def name_count(cls: type[wc.Command]) -> int:
    """How many segment names `build` puts in a command of `cls`."""
    meta = annotations(cls)
    return sum(1 if Wire.STR in meta[f] else LIST_LENGTH for f in wc.SEGMENT_FIELDS[cls])


def build(cls: type[wc.Command], names: Sequence[str], token: str = "", request_id: int = 1) -> wc.Command:
    """A `cls` naming `names` (name_count(cls) of them, in wire order), carrying `token` if it
    carries one at all."""
    assert len(names) == name_count(cls), (cls.__name__, names)
    left = iter(names)
    values: dict[str, Any] = {}
    for field, meta in annotations(cls).items():
        (kind,) = (m for m in meta if isinstance(m, Wire))
        if wc.Names.SEGMENT in meta:
            values[field] = next(left) if kind is Wire.STR else tuple(next(left) for _ in range(LIST_LENGTH))
        elif field == "delegation_token":
            values[field] = token
        elif field == "request_id":
            values[field] = request_id
        elif kind is Wire.MERGED_OFFSETS:
            values[field] = (0,) * LIST_LENGTH  # one per source, which come first
        else:
            values[field] = _PLAIN[kind]
    return cls(**values)
