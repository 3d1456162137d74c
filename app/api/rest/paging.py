"""Optional paging of the REST listings that grow without bound (scopes, streams of a scope).
Without `limit` or `continuationToken` a listing answers everything, as Pravega's REST API does
and its tools expect; with either, one page of at most `limit` items and, while more may
follow, the `continuationToken` that asks for the next page."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiohttp import web

from app.domain.errors import InvalidInput
from app.services.paging import PAGE_LIMIT, Page

LIMIT = "limit"
CONTINUATION_TOKEN = "continuationToken"


@dataclass(frozen=True, slots=True)
class PageRequest:
    token: str
    limit: int


def page_request(request: web.Request) -> PageRequest | None:
    """The page asked for, or None when the caller wants Pravega's unpaged listing."""
    limit_text = request.query.get(LIMIT)
    token = request.query.get(CONTINUATION_TOKEN)
    if limit_text is None and token is None:
        return None
    limit = PAGE_LIMIT
    if limit_text is not None:
        try:
            limit = int(limit_text)
        except ValueError:
            raise InvalidInput(
                f"{LIMIT} must be an integer from 1 to {PAGE_LIMIT}, got {limit_text!r}"
            ) from None
        if not 1 <= limit <= PAGE_LIMIT:
            raise InvalidInput(f"{LIMIT} must be an integer from 1 to {PAGE_LIMIT}, got {limit}")
    return PageRequest(token or "", limit)


def with_continuation(body: dict[str, Any], page: Page, asked: PageRequest) -> dict[str, Any]:
    """`body` with the token of the next page when this one was full (more may follow); a
    short page is the last, and carries none."""
    if len(page.names) >= asked.limit:
        body[CONTINUATION_TOKEN] = page.token
    return body
