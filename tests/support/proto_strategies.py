"""Hypothesis strategies built from protobuf descriptors: any message of the contract, each field drawn
across its whole range (edges included), with hooks that bias chosen messages or fields toward the
entities that exist, so generated calls reach past "not found"."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass
from hypothesis import strategies as st

from app.domain.limits import MAX_TIMESTAMP_MS

I32_MIN, I32_MAX = -(2**31), 2**31 - 1
I64_MIN, I64_MAX = -(2**63), 2**63 - 1
NOW_MS = 1_764_000_000_000  # a plausible "now": timestamps near it reach the real paths

INT32_EDGES = (0, 1, -1, 2, 3, 10, 127, 128, 255, 256, 10_000, 10_001, 100_000, I32_MAX, I32_MAX - 1, I32_MIN)
INT64_EDGES = (
    *INT32_EDGES,
    I32_MAX + 1,
    2**32,
    2**32 + 1,
    2**53 + 1,
    NOW_MS,
    MAX_TIMESTAMP_MS,
    MAX_TIMESTAMP_MS + 1,
    I64_MAX,
    I64_MAX - 1,
    I64_MIN,
    I64_MIN + 1,
)
DOUBLE_EDGES = (
    0.0,
    -0.0,
    0.5,
    1.0,
    0.25,
    0.75,
    1 / 3,
    2 / 3,
    -1.0,
    2.0,
    math.nextafter(1.0, 0.0),
    math.nextafter(0.0, 1.0),
    math.inf,
    -math.inf,
    math.nan,
    1e308,
)
# Longest generated string: far beyond every name bound, far below the message size limit.
LONG_STRING = 70_000
ODD_STRINGS = (
    "",
    "\x00",
    "a\x00b",
    " ",
    "_",
    "-",
    ".",
    "..",
    "a/b",
    "a b",
    "_system",
    "_MARKs",
    "_RGrg",
    "日本語",
    "é",
    "\U0001f600",
    "\u202eevil",
    "%s%n%x",
    "'; DROP TABLE streams; --",
    "\\",
    "\n",
    "a" * 250,
    "a" * 251,
    "a" * 255,
    "a" * 256,
)
VALID_NAMES = st.from_regex(r"_?[A-Za-z0-9.\-]{1,24}", fullmatch=True)

Bias = Callable[[st.SearchStrategy[Any]], st.SearchStrategy[Any]]


@dataclass(frozen=True)
class Hints:
    """How to bias the walk. `messages` maps a message's name (package left out, e.g.
    "StreamInfo", "SegmentsAtTime.SegmentLocation") and `fields` a field ("StreamInfo.scope") or a
    bare field name ("scope": a scalar field of that name in any message) to a function given the
    generic strategy and returning the one to use (usually a mixture of it and known entities)."""

    messages: Mapping[str, Bias] = field(default_factory=dict)
    fields: Mapping[str, Bias] = field(default_factory=dict)
    max_repeated: int = 6
    wide_repeated: int = 64


def _int(lo: int, hi: int, edges: tuple[int, ...]) -> st.SearchStrategy[int]:
    inside = tuple(e for e in edges if lo <= e <= hi)
    return st.one_of(
        st.sampled_from(inside), st.integers(-3, 20).filter(lambda v: lo <= v <= hi), st.integers(lo, hi)
    )


def strings() -> st.SearchStrategy[str]:
    """Valid Pravega names, odd and invalid ones, unicode (no lone surrogates: protobuf cannot
    carry them), and very long ones within LONG_STRING."""
    return st.one_of(
        VALID_NAMES,
        st.sampled_from(ODD_STRINGS),
        st.text(st.characters(exclude_categories=["Cs"]), max_size=40),
        st.builds(
            lambda n, c: c * n, st.integers(256, LONG_STRING), st.sampled_from(("x", "é", "_", "\x00"))
        ),
    )


_SCALARS: dict[int, Callable[[], st.SearchStrategy[Any]]] = {
    FieldDescriptor.TYPE_INT32: lambda: _int(I32_MIN, I32_MAX, INT32_EDGES),
    FieldDescriptor.TYPE_SINT32: lambda: _int(I32_MIN, I32_MAX, INT32_EDGES),
    FieldDescriptor.TYPE_SFIXED32: lambda: _int(I32_MIN, I32_MAX, INT32_EDGES),
    FieldDescriptor.TYPE_INT64: lambda: _int(I64_MIN, I64_MAX, INT64_EDGES),
    FieldDescriptor.TYPE_SINT64: lambda: _int(I64_MIN, I64_MAX, INT64_EDGES),
    FieldDescriptor.TYPE_SFIXED64: lambda: _int(I64_MIN, I64_MAX, INT64_EDGES),
    FieldDescriptor.TYPE_UINT32: lambda: _int(0, 2**32 - 1, INT64_EDGES),
    FieldDescriptor.TYPE_FIXED32: lambda: _int(0, 2**32 - 1, INT64_EDGES),
    FieldDescriptor.TYPE_UINT64: lambda: _int(0, 2**64 - 1, INT64_EDGES),
    FieldDescriptor.TYPE_FIXED64: lambda: _int(0, 2**64 - 1, INT64_EDGES),
    FieldDescriptor.TYPE_BOOL: st.booleans,
    FieldDescriptor.TYPE_DOUBLE: lambda: st.one_of(
        st.sampled_from(DOUBLE_EDGES), st.floats(0, 1), st.floats()
    ),
    FieldDescriptor.TYPE_FLOAT: lambda: st.one_of(st.sampled_from(DOUBLE_EDGES), st.floats(width=32)),
    FieldDescriptor.TYPE_STRING: strings,
    FieldDescriptor.TYPE_BYTES: lambda: st.binary(max_size=64),
}


def short_name(full_name: str, package: str) -> str:
    return full_name[len(package) + 1 :] if package and full_name.startswith(package + ".") else full_name


class ProtoStrategies:
    """Strategies for the messages of one file's descriptors, biased by `hints`."""

    def __init__(self, hints: Hints) -> None:
        self._hints = hints

    def message(self, descriptor: Descriptor) -> st.SearchStrategy[Message]:
        generic = self._generic(descriptor)
        bias = self._hints.messages.get(short_name(descriptor.full_name, descriptor.file.package))
        return bias(generic) if bias is not None else generic

    def _generic(self, descriptor: Descriptor) -> st.SearchStrategy[Message]:
        cls = GetMessageClass(descriptor)
        # None leaves a field unset, as a client that never sets it would.
        fields = {f.name: st.none() | self._field(f) for f in descriptor.fields}
        return st.fixed_dictionaries(fields).map(lambda values: _build(cls, descriptor, values))

    def _field(self, fd: FieldDescriptor) -> st.SearchStrategy[Any]:
        if _is_map(fd):
            key_fd = _message_type(fd).fields_by_name["key"]
            value_fd = _message_type(fd).fields_by_name["value"]
            generic: st.SearchStrategy[Any] = st.dictionaries(
                self._single(key_fd), self._single(value_fd), max_size=self._hints.max_repeated
            )
        elif fd.is_repeated:
            element = self._single(fd)
            generic = st.lists(element, max_size=self._hints.max_repeated) | st.lists(
                element, min_size=self._hints.max_repeated + 1, max_size=self._hints.wide_repeated
            )
        else:
            return self._single(fd)
        return self._biased(fd, generic)

    def _single(self, fd: FieldDescriptor) -> st.SearchStrategy[Any]:
        if fd.type == FieldDescriptor.TYPE_MESSAGE:
            value: st.SearchStrategy[Any] = st.deferred(lambda: self.message(_message_type(fd)))
        elif fd.type == FieldDescriptor.TYPE_ENUM:
            assert fd.enum_type is not None
            known = tuple(v.number for v in fd.enum_type.values)
            # Proto3 enums are open: any int32 arrives as itself.
            value = (
                st.sampled_from(known)
                | st.sampled_from((max(known) + 1, -1, I32_MAX))
                | _int(I32_MIN, I32_MAX, INT32_EDGES)
            )
        else:
            value = _SCALARS[fd.type]()
        if fd.is_repeated and not _is_map(fd):
            return value  # the list's bias applies to the whole list
        return self._biased(fd, value)

    def _biased(self, fd: FieldDescriptor, generic: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        containing = fd.containing_type
        assert containing is not None
        if containing.GetOptions().map_entry:
            return generic
        qualified = short_name(fd.full_name, containing.file.package)
        bias = self._hints.fields.get(qualified)
        if bias is None and fd.type != FieldDescriptor.TYPE_MESSAGE:
            # A bare name ("scope") means the scalar field of that name: StreamsInScopeRequest.scope
            # is a ScopeInfo message, biased through its own message hint.
            bias = self._hints.fields.get(fd.name)
        return bias(generic) if bias is not None else generic


def _message_type(fd: FieldDescriptor) -> Descriptor:
    assert fd.message_type is not None, fd.full_name
    return fd.message_type


def _is_map(fd: FieldDescriptor) -> bool:
    return (
        fd.is_repeated
        and fd.type == FieldDescriptor.TYPE_MESSAGE
        and _message_type(fd).GetOptions().map_entry
    )


def _build(cls: type[Message], descriptor: Descriptor, values: Mapping[str, Any]) -> Message:
    msg = cls()
    for name, value in values.items():
        if value is None:
            continue
        fd = descriptor.fields_by_name[name]
        target = getattr(msg, name)
        if _is_map(fd):
            value_fd = _message_type(fd).fields_by_name["value"]
            for key, item in value.items():
                if value_fd.type == FieldDescriptor.TYPE_MESSAGE:
                    target[key].CopyFrom(item)
                else:
                    target[key] = item
        elif fd.is_repeated:
            if fd.type == FieldDescriptor.TYPE_MESSAGE:
                for item in value:
                    target.add().CopyFrom(item)
            else:
                target.extend(value)
        elif fd.type == FieldDescriptor.TYPE_MESSAGE:
            target.CopyFrom(value)
        else:
            setattr(msg, name, value)
    return msg
