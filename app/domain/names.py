"""Name rules and internal names, exactly as Pravega's NameUtils defines them.

Clients see these strings (segment names, mark streams), so they are wire facts, not style.
"""

import re

from app.domain.errors import InvalidInput

MAX_SCOPE_OR_STREAM_NAME = 255
MAX_USER_NAME = 250
MAX_TAGS = 127
MAX_TAG_LENGTH = 255

INTERNAL_SCOPE = "_system"
MARK_PREFIX = "_MARK"
READER_GROUP_STREAM_PREFIX = "_RG"
INTERNAL_NAME_PREFIX = "_"

_SCOPE_OR_STREAM = re.compile(r"_?[A-Za-z0-9.\-]+")
_USER_NAME = re.compile(r"[A-Za-z0-9.\-]+")


def is_valid_scope_or_stream_name(name: str) -> bool:
    return len(name) <= MAX_SCOPE_OR_STREAM_NAME and _SCOPE_OR_STREAM.fullmatch(name) is not None


def is_valid_user_name(name: str) -> bool:
    """Reader-group and key-value-table names: no underscore anywhere."""
    return len(name) <= MAX_USER_NAME and _USER_NAME.fullmatch(name) is not None


def require_present(kind: str, name: str) -> None:
    # Java throws before any work on an empty name; the API maps this to a gRPC error, not an enum.
    if not name:
        raise InvalidInput(f"{kind} name must not be empty")


def is_internal_stream(name: str) -> bool:
    return name.startswith(INTERNAL_NAME_PREFIX)


def mark_stream_name(stream: str) -> str:
    return f"{MARK_PREFIX}{stream}"


def validate_tags(tags: tuple[str, ...]) -> None:
    if len(tags) > MAX_TAGS:
        raise InvalidInput(f"a stream may carry at most {MAX_TAGS} tags, got {len(tags)}")
    for tag in tags:
        if len(tag) > MAX_TAG_LENGTH:
            raise InvalidInput(f"a tag may be at most {MAX_TAG_LENGTH} characters, got {len(tag)}")
