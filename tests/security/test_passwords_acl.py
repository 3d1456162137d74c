"""Password hashes (Argon2id, and Pravega's PBKDF2 digests) and ACL matching, as Pravega's basic
auth plugin matches them."""

from __future__ import annotations

import pytest

from app.security import acl
from app.security.acl import InvalidAcl, Permission, parse_acl, permission_for, validate_acl
from app.security.passwords import (
    BadPasswordHash,
    hash_password,
    parse_pravega_digest,
    pravega_digest,
    verify_password,
)

# The `admin` entry of the sample password file Pravega ships (config/passwd), written by its
# Java StrongPasswordProcessor; its documented password is 1111_aaaa.
PRAVEGA_ADMIN_DIGEST = (
    "353030303a633132666135376233353937356534613430383430373939343839333733616463363433616532363238"
    "653930346230333035393666643961316264616661393a36393763306236633966343438646432626633353264636530"
    "62613965336439613864306264323839633037626166663563613166333733653631383732353134643961303435613237"
    "653130353633633031653364366565316434626534656565636335663666306465663064376165313765646263656638"
    "373764396361"
)


def test_a_java_written_pravega_digest_verifies_and_asks_for_a_rehash() -> None:
    assert verify_password(PRAVEGA_ADMIN_DIGEST, "1111_aaaa").ok
    assert verify_password(PRAVEGA_ADMIN_DIGEST, "1111_aaaa").rehash
    assert not verify_password(PRAVEGA_ADMIN_DIGEST, "1111_aaab").ok


def test_our_pravega_digest_is_the_java_one() -> None:
    iterations, salt, _ = parse_pravega_digest(PRAVEGA_ADMIN_DIGEST)
    assert iterations == 5000 and len(salt) == 32
    assert pravega_digest("1111_aaaa", salt) == PRAVEGA_ADMIN_DIGEST


def test_argon2id_round_trip() -> None:
    stored = hash_password("s3cret")
    assert stored.startswith("$argon2id$")
    assert verify_password(stored, "s3cret").ok
    assert not verify_password(stored, "s3cret ").rehash
    assert not verify_password(stored, "other").ok


@pytest.mark.parametrize("stored", ["", "zz", "$argon2id$broken", "3a3a", (b"9999999999:00:00").hex()])
def test_unreadable_hashes_are_refused_without_echo(stored: str) -> None:
    with pytest.raises(BadPasswordHash) as caught:
        verify_password(stored, "pw")
    assert "pw" not in str(caught.value)


def test_resource_strings() -> None:
    assert acl.of_scopes() == "prn::/"
    assert acl.of_scope("s") == "prn::/scope:s"
    assert acl.of_stream("s", "t") == "prn::/scope:s/stream:t"
    assert acl.of_reader_group("s", "g") == "prn::/scope:s/reader-group:g"
    assert acl.of_key_value_table("s", "k") == "prn::/scope:s/key-value-table:k"
    assert acl.of_stream_or_internal("s", "_RGg") == "prn::/scope:s/reader-group:g"
    assert acl.of_stream_or_internal("s", "_MARKt") == "prn::/scope:s/stream:t"


@pytest.mark.parametrize(
    ("text", "resource", "expected"),
    [
        ("prn::*,READ_UPDATE", "prn::/scope:s/stream:t", Permission.READ_UPDATE),
        ("prn::/scope:s,READ", "prn::/scope:s", Permission.READ),
        ("prn::/scope:s,READ", "prn::/scope:s/stream:t", Permission.NONE),
        ("prn::/scope:s/*,READ_UPDATE", "prn::/scope:s/stream:t", Permission.READ_UPDATE),
        ("prn::/scope:s/*,READ_UPDATE", "prn::/scope:s", Permission.NONE),
        ("prn::/scope:s/stream:*,READ", "prn::/scope:s/reader-group:g", Permission.NONE),
        # first match wins, even when a later entry grants more (AclAuthorizerImpl)
        ("prn::/scope:s/*,READ;prn::*,READ_UPDATE", "prn::/scope:s/stream:t", Permission.READ),
        ("prn::/,READ_UPDATE;prn::/scope:s,READ;", "prn::/scope:s", Permission.READ),
        # malformed entries are skipped
        ("prn::/scope:s;prn::/scope:s,WRITE;prn::/scope:s,READ", "prn::/scope:s", Permission.READ),
        ("prn::/scope:(,READ", "prn::/scope:(", Permission.NONE),
        ("", "prn::/", Permission.NONE),
        # the old forms without the domain
        ("*,READ_UPDATE", "prn::/scope:s/stream:t", Permission.READ_UPDATE),
        ("/,READ_UPDATE", "prn::/", Permission.READ_UPDATE),
        ("/s,READ", "prn::/scope:s", Permission.READ),
        ("/s/t,READ_UPDATE", "prn::/scope:s/stream:t", Permission.READ_UPDATE),
        ("/s/*,READ", "prn::/scope:s/stream:t", Permission.READ),
    ],
)
def test_acl_matching(text: str, resource: str, expected: Permission) -> None:
    assert permission_for(text, resource) is expected


def test_validate_acl_names_the_bad_entry() -> None:
    validate_acl("prn::/scope:s,READ;prn::*,READ_UPDATE;")
    with pytest.raises(InvalidAcl, match="WRITE"):
        validate_acl("prn::/scope:s,WRITE")
    with pytest.raises(InvalidAcl):
        validate_acl("prn::/,READ\nprn::*,READ_UPDATE")
    assert parse_acl("x" * (acl.MAX_ACL_CHARS + 1) + ",READ").entries == ()
