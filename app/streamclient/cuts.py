"""Stream cuts: a position in every segment across the key space, as Pravega's StreamCut.

Two textual forms are understood: Pravega's own (`StreamCut.asText()`: gzip, then base64, of
`0:scope/stream:numbers:epochs:offsets`), so a cut taken by a Java application can be given as
it is, and JSON (`{"<segment id>": offset, ...}`, or that object under `"positions"` with the
stream named beside it), which is what this client writes (Spark's checkpoints hold it).

Invariant: a `StreamCut` holds only non-negative offsets of non-negative segment ids of one
stream; anything else is refused here as InvalidStreamCut, before a controller is asked.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import json
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from app.streamclient.errors import InvalidStreamCut

# StreamCutImpl.TO_STRING_VERSION.
_TEXT_VERSION: Final = "0"
_EPOCH_SHIFT: Final = 32
_NUMBER_MASK: Final = (1 << 32) - 1
_MAX_ID: Final = (1 << 63) - 1


def segment_number(segment_id: int) -> int:
    return segment_id & _NUMBER_MASK


def segment_epoch(segment_id: int) -> int:
    return segment_id >> _EPOCH_SHIFT


def segment_id_of(number: int, epoch: int) -> int:
    return (epoch << _EPOCH_SHIFT) | number


@dataclass(frozen=True)
class StreamCut:
    scope: str
    stream: str
    positions: Mapping[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for segment, offset in self.positions.items():
            if not 0 <= segment <= _MAX_ID or not 0 <= offset <= _MAX_ID:
                raise InvalidStreamCut(
                    f"a stream cut of {self.scope}/{self.stream} has segment {segment} at offset {offset}"
                )

    def to_json(self) -> str:
        return json.dumps(self.as_offset(), sort_keys=True)

    def as_offset(self) -> dict[str, object]:
        """The cut as a JSON-able dict (Spark's streaming offsets are such dicts)."""
        return {
            "scope": self.scope,
            "stream": self.stream,
            "positions": {str(s): o for s, o in sorted(self.positions.items())},
        }

    def as_text(self) -> str:
        """Pravega's StreamCut.asText()."""
        items = sorted(self.positions.items())
        text = ":".join(
            [
                _TEXT_VERSION,
                f"{self.scope}/{self.stream}",
                ",".join(str(segment_number(s)) for s, _ in items),
                ",".join(str(segment_epoch(s)) for s, _ in items),
                ",".join(str(o) for _, o in items),
            ]
        )
        return base64.b64encode(gzip.compress(text.encode())).decode()


def parse_cut(text: str, scope: str, stream: str) -> StreamCut:
    """A cut of `scope/stream` from either textual form; InvalidStreamCut with the reason."""
    stripped = text.strip()
    if not stripped:
        raise InvalidStreamCut(f"an empty stream cut of {scope}/{stream}")
    if stripped.startswith("{"):
        return _from_json(stripped, scope, stream)
    return _from_pravega_text(stripped, scope, stream)


def cut_from_offset(offset: Mapping[str, object], scope: str, stream: str) -> StreamCut:
    """The cut of `as_offset()`'s dict (a Spark checkpoint's offset)."""
    return _from_object(offset, scope, stream, "a checkpointed offset")


def _from_json(text: str, scope: str, stream: str) -> StreamCut:
    try:
        loaded = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidStreamCut(f"a stream cut of {scope}/{stream} is not valid JSON: {exc}") from exc
    if not isinstance(loaded, dict):
        raise InvalidStreamCut(f"a stream cut of {scope}/{stream} is a JSON object, not {text!r}")
    return _from_object(loaded, scope, stream, "a JSON stream cut")


def _from_object(loaded: Mapping[str, object], scope: str, stream: str, what: str) -> StreamCut:
    positions = loaded.get("positions", loaded)
    for key, named in (("scope", scope), ("stream", stream)):
        if key in loaded and loaded[key] != named:
            raise InvalidStreamCut(f"{what} is of {key} {loaded[key]!r}, not of {scope}/{stream}")
    if not isinstance(positions, Mapping):
        raise InvalidStreamCut(f"{what}'s positions are an object of segment id to offset")
    parsed: dict[int, int] = {}
    for key, value in positions.items():
        if key in ("scope", "stream"):
            continue
        try:
            segment = int(str(key))
        except ValueError:
            raise InvalidStreamCut(f"{what} names segment {key!r}, not a segment id") from None
        if not isinstance(value, int) or isinstance(value, bool):
            raise InvalidStreamCut(f"{what} puts segment {segment} at {value!r}, not an offset")
        parsed[segment] = value
    if not parsed:
        raise InvalidStreamCut(f"{what} of {scope}/{stream} names no segment")
    return StreamCut(scope, stream, parsed)


def _from_pravega_text(text: str, scope: str, stream: str) -> StreamCut:
    try:
        decoded = gzip.decompress(base64.b64decode(text, validate=True)).decode()
    except (binascii.Error, OSError, EOFError, zlib.error, UnicodeDecodeError):
        raise InvalidStreamCut(
            f"a stream cut of {scope}/{stream} is neither JSON nor Pravega's StreamCut.asText(): "
            f"{text[:60]!r}"
        ) from None
    parts = decoded.split(":", 4)
    if len(parts) != 5 or parts[0] != _TEXT_VERSION:
        raise InvalidStreamCut(f"Pravega's stream cut text {decoded[:80]!r} has not its five parts")
    if parts[1] != f"{scope}/{stream}":
        raise InvalidStreamCut(f"a stream cut of {parts[1]} was given for {scope}/{stream}")
    try:
        numbers, epochs, offsets = ([int(v) for v in p.split(",")] if p else [] for p in parts[2:])
    except ValueError:
        raise InvalidStreamCut(f"Pravega's stream cut text {decoded[:80]!r} holds a non-number") from None
    if not len(numbers) == len(epochs) == len(offsets) or not numbers:
        raise InvalidStreamCut(f"Pravega's stream cut text {decoded[:80]!r} has lists of unequal length")
    return StreamCut(
        scope, stream, {segment_id_of(n, e): o for n, e, o in zip(numbers, epochs, offsets, strict=True)}
    )
