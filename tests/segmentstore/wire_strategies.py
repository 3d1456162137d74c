"""Hypothesis strategies for every wire command, built from the same field annotations the codec reads.

Sizes are bounded so a property test stays quick; values span each wire type's whole range.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from hypothesis import strategies as st

from app.segmentstore.wire import commands as c
from app.segmentstore.wire.commands import Wire

i32s = st.integers(-(2**31), 2**31 - 1)
i64s = st.integers(-(2**63), 2**63 - 1)
u128s = st.integers(0, 2**128 - 1)
# Any Unicode text but lone surrogates (not encodable as UTF-8, and never a Pravega name).
texts = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)
blobs = st.binary(max_size=24)
table_keys = st.builds(c.TableKey, st.binary(min_size=1, max_size=16), i64s)
table_values = st.builds(c.TableValue, st.binary(max_size=16))


def _tuples(items: st.SearchStrategy[Any]) -> st.SearchStrategy[tuple[Any, ...]]:
    return st.lists(items, max_size=3).map(tuple)


def _field_strategy(kind: Wire) -> st.SearchStrategy[Any]:
    simple: dict[Wire, st.SearchStrategy[Any]] = {
        Wire.I32: i32s,
        Wire.I64: i64s,
        Wire.U8: st.integers(0, 255),
        Wire.BOOL: st.booleans(),
        Wire.U128: u128s,
        Wire.STR: texts,
        Wire.BYTES: blobs,
        Wire.REST: blobs,
        Wire.PADDING: st.integers(0, 32),
        Wire.EVENT: st.builds(c.Event, blobs),
        Wire.STRS: _tuples(texts),
        Wire.I64S: _tuples(i64s),
        Wire.TABLE_KEYS: _tuples(table_keys),
        Wire.TABLE_ENTRIES: _tuples(st.tuples(table_keys, table_values)),
    }
    if kind is Wire.ATTRIBUTE_UPDATES:
        return _tuples(instances(c.ConditionalAttributeUpdate))
    if kind is Wire.CHUNKS:
        return _tuples(instances(c.ChunkInfo))
    return simple[kind]


def instances(cls: type) -> st.SearchStrategy[Any]:
    """Any instance of a wire dataclass (command or nested structure)."""
    if cls is c.SegmentsBatchMerged:
        pairs = st.lists(st.tuples(texts, i64s), max_size=3)
        return st.builds(
            lambda rid, target, p: c.SegmentsBatchMerged(
                rid, target, tuple(s for s, _ in p), tuple(o for _, o in p)
            ),
            i64s,
            texts,
            pairs,
        )
    hints = typing.get_type_hints(cls, include_extras=True)
    fields = {}
    for field in dataclasses.fields(cls):
        (kind,) = (m for m in hints[field.name].__metadata__ if isinstance(m, Wire))
        fields[field.name] = _field_strategy(kind)
    return st.builds(cls, **fields)


any_command = st.sampled_from(sorted(c.COMMANDS.values(), key=lambda k: k.TYPE)).flatmap(instances)
