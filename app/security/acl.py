"""Pravega's resource strings, permissions and ACL text: parsing an account's ACL and answering
the permission it grants on one resource, matched exactly as Pravega's basic auth plugin does.

Invariant: a malformed entry grants nothing (it is skipped, as Pravega skips it); it never
raises while a call is being authorized.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from functools import lru_cache

DOMAIN = "prn::"
ROOT = f"{DOMAIN}/"
# Pravega's internal stream names: reader-group state streams and watermark mark streams.
INTERNAL_PREFIX = "_"
READER_GROUP_STREAM_PREFIX = "_RG"
MARK_PREFIX = "_MARK"
# Bounds on ACL text, so a stored ACL cannot make each check compile or scan without end.
MAX_ACL_CHARS = 64 * 1024
MAX_PATTERN_CHARS = 1024


class Permission(enum.IntEnum):
    """AuthHandler.Permissions, ordered: a higher value includes the lower ones. The one type of
    the accounts' ACLs, the guards and the delegation tokens (their claims carry its names)."""

    NONE = 0
    READ = 1
    READ_UPDATE = 2

    def includes(self, other: Permission) -> bool:
        return self >= other


# --- resource strings (AuthorizationResourceImpl) ---------------------------------------------


def of_scopes() -> str:
    return ROOT


def of_scope(scope: str) -> str:
    return f"{DOMAIN}/scope:{scope}"


def of_stream(scope: str, stream: str) -> str:
    return f"{of_scope(scope)}/stream:{stream}"


def of_reader_group(scope: str, group: str) -> str:
    return f"{of_scope(scope)}/reader-group:{group}"


def of_key_value_table(scope: str, table: str) -> str:
    return f"{of_scope(scope)}/key-value-table:{table}"


def of_stream_or_internal(scope: str, stream: str) -> str:
    """StreamAuthParams.toResourceString: a reader group's state stream is authorized as its
    reader group, a mark stream as its stream, anything else as a stream."""
    if stream.startswith(READER_GROUP_STREAM_PREFIX):
        return of_reader_group(scope, stream.replace(READER_GROUP_STREAM_PREFIX, ""))
    if stream.startswith(MARK_PREFIX):
        return of_stream(scope, stream.replace(MARK_PREFIX, ""))
    return of_stream(scope, stream)


def permission_for_writes(stream: str) -> Permission:
    """StreamAuthParams.requiredPermissionForWrites, with reader-group writes on READ (Pravega's
    default, `controller.security.rgStreamWritesWithReadPermissions.enabled`)."""
    if not stream.startswith(INTERNAL_PREFIX):
        return Permission.READ_UPDATE
    if stream.startswith(READER_GROUP_STREAM_PREFIX) or stream.startswith(MARK_PREFIX):
        return Permission.READ
    return Permission.READ_UPDATE


# --- ACL text ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Entry:
    """One access control entry: a resource pattern (Pravega's: every `*` becomes `.*`, then the
    whole resource must match it) and the permission it grants."""

    pattern: str
    permission: Permission

    def matches(self, resource: str) -> bool:
        compiled = _compile(self.pattern)
        return compiled is not None and compiled.fullmatch(resource) is not None


@dataclass(frozen=True, slots=True)
class Acl:
    entries: tuple[Entry, ...]

    def permission_for(self, resource: str) -> Permission:
        """The first matching entry's permission (AclAuthorizerImpl: first match wins, even if a
        later entry grants more); NONE when no entry matches."""
        domain = resource.split("::")[0]
        for entry in self.entries:
            if entry.pattern.startswith(domain) and entry.matches(resource):
                return entry.permission
        return Permission.NONE


class InvalidAcl(ValueError):
    """Raised by `validate_acl` only (the account commands): at run time bad entries are skipped."""


# Pravega's `(?!=.)\*`: despite its comment it rewrites every `*` (the look-ahead is for the two
# characters "=."), so `prn::/*` becomes `prn::/.*` and `prn::/.*` becomes `prn::/..*`.
_STAR = re.compile(r"(?!=.)\*")


def parse_acl(text: str) -> Acl:
    """Entries `resource,PERMISSION` separated by `;` (a trailing `;` is allowed). The old forms
    without the `prn::` domain (`*`, `/`, `/scope`, `/scope/stream`, `/scope/*`) are read as their
    `prn::` equivalents, so an older password file keeps its meaning."""
    if len(text) > MAX_ACL_CHARS:
        return Acl(())
    entries = []
    for ace in text.strip().split(";"):
        entry = _parse_entry(ace)
        if entry is not None:
            entries.append(entry)
    return Acl(tuple(entries))


def validate_acl(text: str) -> None:
    """Raises InvalidAcl naming the first entry Pravega would skip (for the account commands)."""
    if len(text) > MAX_ACL_CHARS:
        raise InvalidAcl(f"ACL longer than {MAX_ACL_CHARS} characters")
    if any(ch in text for ch in "\n\r\x00"):
        raise InvalidAcl("ACL must be one line of text")
    for ace in text.strip().split(";"):
        if not ace.strip():
            continue
        entry = _parse_entry(ace)
        if entry is None:
            raise InvalidAcl(f"invalid ACL entry {ace.strip()!r}: expected 'resource,READ|READ_UPDATE|NONE'")
        if _compile(entry.pattern) is None:
            raise InvalidAcl(f"invalid ACL entry {ace.strip()!r}: the resource is not a valid pattern")


def _parse_entry(ace: str) -> Entry | None:
    parts = ace.split(",")
    while parts and not parts[-1]:
        parts.pop()  # Java's String.split drops trailing empty strings
    if len(parts) != 2 or not parts[0] or not parts[1]:
        return None
    resource, permission = parts[0].strip(), parts[1].strip()
    if permission not in Permission.__members__ or len(resource) > MAX_PATTERN_CHARS:
        return None
    return Entry(_STAR.sub(".*", _legacy_to_prn(resource)), Permission[permission])


def _legacy_to_prn(resource: str) -> str:
    if resource.startswith(DOMAIN) or not (resource == "*" or resource.startswith("/")):
        return resource
    if resource == "*":
        return f"{DOMAIN}*"
    parts = [p for p in resource.split("/") if p]
    if not parts:
        return ROOT
    if parts == ["*"]:
        return f"{DOMAIN}/*"
    translated = f"{DOMAIN}/scope:{parts[0]}"
    if len(parts) > 1:
        translated += "/*" if parts[1] == "*" else f"/stream:{parts[1]}"
    return translated


@lru_cache(maxsize=4096)
def _compile(pattern: str) -> re.Pattern[str] | None:
    try:
        return re.compile(pattern)
    except re.error:
        return None


def permission_for(acl_text: str, resource: str) -> Permission:
    """The permission the ACL text grants on `resource` (for the delegation-token code)."""
    return _parsed(acl_text).permission_for(resource)


@lru_cache(maxsize=1024)
def _parsed(acl_text: str) -> Acl:
    return parse_acl(acl_text)
