"""Opaque continuation tokens for listings, shaped as Pravega's clients expect.

A token is the base64 of the last name returned. Every non-empty page carries a non-empty
token; the end is an empty page whose token equals the one the caller sent.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

from app.domain.errors import InvalidInput

PAGE_LIMIT = 1000
# How much of a malformed token an error quotes: the rest is only its length. A token may be as long
# as a message allows, and gRPC carries the error's text in a header (a long one breaks the call).
QUOTED_TOKEN_CHARS = 32


@dataclass(frozen=True, slots=True)
class Page:
    names: list[str]
    token: str


def decode_token(token: str) -> str:
    if not token:
        return ""
    try:
        raw = base64.b64decode(token.encode("ascii"), altchars=b"-_", validate=True)
        return raw.decode("utf-8")
    except (binascii.Error, UnicodeError, ValueError) as exc:
        quoted = token[:QUOTED_TOKEN_CHARS]
        more = f" ({len(token)} characters)" if len(token) > QUOTED_TOKEN_CHARS else ""
        raise InvalidInput(f"malformed continuation token {quoted!r}{more}") from exc


def encode_token(last_name: str) -> str:
    return base64.urlsafe_b64encode(last_name.encode("utf-8")).decode("ascii")


def page_of(names: list[str], request_token: str) -> Page:
    if not names:
        return Page([], request_token)
    return Page(names, encode_token(names[-1]))
