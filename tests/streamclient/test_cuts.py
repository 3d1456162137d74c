"""Stream cuts in both textual forms: Pravega's StreamCut.asText() and this client's JSON."""

from __future__ import annotations

import base64
import gzip

import pytest

from app.streamclient import InvalidStreamCut, StreamCut, cut_from_offset, parse_cut
from app.streamclient.cuts import segment_id_of


def pravega_text(text: str) -> str:
    """What Java's ToStringUtils.compressToBase64 makes of a cut's text."""
    return base64.b64encode(gzip.compress(text.encode())).decode()


def test_pravega_text_is_read_as_java_writes_it() -> None:
    # Segment numbers, epochs and offsets in three lists, as StreamCutImpl.getText() joins them.
    cut = parse_cut(pravega_text("0:sc/st:0,5,6:0,1,1:100,0,42"), "sc", "st")
    assert cut.positions == {0: 100, segment_id_of(5, 1): 0, segment_id_of(6, 1): 42}
    assert parse_cut(cut.as_text(), "sc", "st") == cut


def test_json_round_trips_and_takes_the_bare_map() -> None:
    cut = StreamCut("sc", "st", {0: 10, (2 << 32) | 3: 7})
    assert parse_cut(cut.to_json(), "sc", "st") == cut
    assert cut_from_offset(cut.as_offset(), "sc", "st") == cut
    assert parse_cut('{"0": 10, "8589934595": 7}', "sc", "st") == cut


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "an empty stream cut"),
        ("{", "not valid JSON"),
        ("[1, 2]", "neither JSON nor"),
        ('{"x": 1}', "names segment 'x'"),
        ('{"0": "ten"}', "not an offset"),
        ('{"0": true}', "not an offset"),
        ('{"0": -1}', "at offset -1"),
        ("{}", "names no segment"),
        ('{"scope": "other", "positions": {"0": 1}}', "of scope 'other'"),
        ("not base64 at all!", "neither JSON nor"),
        (base64.b64encode(b"plain, not gzip").decode(), "neither JSON nor"),
    ],
)
def test_a_malformed_cut_is_refused_with_the_reason(text: str, reason: str) -> None:
    with pytest.raises(InvalidStreamCut, match=reason):
        parse_cut(text, "sc", "st")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("0:other/st:0:0:1", "a stream cut of other/st was given for sc/st"),
        ("1:sc/st:0:0:1", "has not its five parts"),
        ("0:sc/st:0,1:0:1", "lists of unequal length"),
        ("0:sc/st:a:0:1", "holds a non-number"),
    ],
)
def test_a_malformed_pravega_text_is_refused_with_the_reason(text: str, reason: str) -> None:
    with pytest.raises(InvalidStreamCut, match=reason):
        parse_cut(pravega_text(text), "sc", "st")
