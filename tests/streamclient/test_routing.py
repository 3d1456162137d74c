"""Routing keys land where Pravega's Java writer puts them."""

from __future__ import annotations

from app.streamclient import KeyRange
from app.streamclient.routing import SegmentRouter, hash_routing_key


def test_keys_spread_over_the_key_space_and_pick_the_ceiling_range() -> None:
    hashes = [hash_routing_key(f"key-{i}") for i in range(2000)]
    assert all(0.0 <= h < 1.0 for h in hashes)
    assert min(hashes) < 0.01 and max(hashes) > 0.99
    router = SegmentRouter([KeyRange(1, 0.5, 1.0), KeyRange(0, 0.0, 0.5)])
    for i, h in enumerate(hashes):
        assert router.segment_for(f"key-{i}") == (0 if h <= 0.5 else 1)
    # Java hashes the string's UTF-16 code units: a key outside the BMP is two of them.
    assert hash_routing_key("\U0001f600") != hash_routing_key("\u00f6")
