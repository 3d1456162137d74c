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
        # An empty tag cannot be listed by (listStreamsInScopeForTag needs a tag) nor told
        # apart from "no tag" by clients that send proto3 defaults.
        if not tag:
            raise InvalidInput("a tag must not be empty")
        if len(tag) > MAX_TAG_LENGTH:
            raise InvalidInput(f"a tag may be at most {MAX_TAG_LENGTH} characters, got {len(tag)}")
        require_text("tag", tag)


# PostgreSQL text cannot hold NUL: a string carrying one would fail in the driver, which a
# client would read as an outage. Every string that reaches the store is checked with this.
NUL = "\x00"


def require_text(field: str, value: str) -> None:
    if NUL in value:
        raise InvalidInput(f"{field} must not contain the NUL character (U+0000)")


def require_scope_name(name: str) -> None:
    """A scope a request names: present and within Pravega's scope-name rule."""
    _require_scope_or_stream_name("scope", name)


def require_stream_name(name: str) -> None:
    """A stream a request names: present and within Pravega's stream-name rule."""
    _require_scope_or_stream_name("stream", name)


def _require_scope_or_stream_name(kind: str, name: str) -> None:
    require_present(kind, name)
    if not is_valid_scope_or_stream_name(name):
        raise InvalidInput(
            f"invalid {kind} name {_shown(name)}: use 1-{MAX_SCOPE_OR_STREAM_NAME} of a-z, A-Z, 0-9, "
            "'.', '-', optionally after one leading '_'"
        )


def require_user_name(kind: str, name: str) -> None:
    """A reader group or key-value table a request names: Pravega's user-name rule."""
    require_present(kind, name)
    if not is_valid_user_name(name):
        raise InvalidInput(
            f"invalid {kind} name {_shown(name)}: use 1-{MAX_USER_NAME} of a-z, A-Z, 0-9, '.', '-'"
        )


def require_not_internal_scope(scope: str) -> None:
    """`_system` holds the controller's own streams in Pravega; no client may delete it."""
    if scope == INTERNAL_SCOPE:
        raise InvalidInput(f"scope {INTERNAL_SCOPE} is the controller's internal scope and cannot be deleted")


def _shown(name: str) -> str:
    # Long or binary names are cut and escaped, so the message stays readable in any terminal.
    return repr(name[:64] + ("..." if len(name) > 64 else ""))
