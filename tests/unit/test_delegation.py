"""DelegationTokens: each token capped at the caller's ACL lookup, internal streams authorized as
their owners (Pravega's StreamAuthParams), and no signer without a lookup."""

from __future__ import annotations

import jwt
import pytest

from app.security import acl
from app.security.acl import Permission
from app.security.delegation import DelegationTokens
from app.security.tokens import TokenSigner, stream_resource

KEY = b"a shared secret basis, as long as pyjwt likes HS512 keys to be: 64 bytes or more."


def claims(token: str) -> dict[str, str]:
    decoded = jwt.decode(token, KEY, algorithms=["HS512"], audience="segmentstore")
    return {k: v for k, v in decoded.items() if k.startswith("prn::")}


def tokens(acl_text: str) -> DelegationTokens:
    return DelegationTokens(TokenSigner(KEY), lambda resource: acl.permission_for(acl_text, resource))


def test_a_signer_without_an_acl_lookup_is_refused() -> None:
    with pytest.raises(ValueError, match="ACL lookup"):
        DelegationTokens(TokenSigner(KEY))
    assert DelegationTokens(None).for_stream("sc", "s", Permission.READ_UPDATE) == ""


def test_a_token_is_the_lower_of_wanted_and_held() -> None:
    reader = tokens("prn::/scope:sc/stream:s,READ")
    assert claims(reader.for_stream("sc", "s", Permission.READ_UPDATE)) == {
        stream_resource("sc", "s"): "READ"
    }
    assert claims(reader.for_stream("sc", "s", Permission.READ)) == {stream_resource("sc", "s"): "READ"}
    assert reader.for_stream("sc", "t", Permission.READ) == ""
    writer = tokens("prn::/scope:sc/*,READ_UPDATE")
    assert claims(writer.for_stream("sc", "s", Permission.READ)) == {stream_resource("sc", "s"): "READ"}


def test_internal_streams_are_authorized_as_their_owners_and_claimed_as_streams() -> None:
    group = tokens("prn::/scope:sc/reader-group:g,READ;prn::/scope:sc/stream:s,READ")
    # A reader group's writes need READ on the group (Pravega's default): a write token follows.
    assert claims(group.for_stream("sc", "_RGg", Permission.READ_UPDATE)) == {
        stream_resource("sc", "_RGg"): "READ_UPDATE"
    }
    assert group.for_stream("sc", "_RGother", Permission.READ_UPDATE) == ""
    # A mark stream is authorized as its stream, and its writes need READ there (Pravega's
    # requiredPermissionForWrites); a stream the caller cannot see gives nothing.
    assert claims(group.for_stream("sc", "_MARKs", Permission.READ_UPDATE)) == {
        stream_resource("sc", "_MARKs"): "READ_UPDATE"
    }
    assert group.for_stream("sc", "_MARKt", Permission.READ) == ""


def test_a_key_value_tables_token_is_authorized_on_the_table() -> None:
    kvt = tokens("prn::/scope:sc/key-value-table:t,READ_UPDATE")
    assert claims(kvt.for_table("sc", "t", Permission.READ_UPDATE)) == {
        stream_resource("sc", "t_kvtable"): "READ_UPDATE"
    }
    assert kvt.for_stream("sc", "t_kvtable", Permission.READ) == ""
