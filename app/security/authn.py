"""Authentication of a call's `Authorization` value `<method> <token>`: `Basic <base64
user:password>` (Pravega's built-in method) against the accounts, with a short-lived cache of
verified credentials, and any other method by the auth handler plugin registered under its name.

Invariants: a credential is trusted from the cache for at most `ttl_s`; after that the account's
version is read again and a changed (or removed) account is verified afresh. A cached credential
never waits for a password check. An uncached one is checked within the limits of
`app/security/guessing.py` (refused at once with TooManyAttempts past them), once however many
calls carry it at the same time, and a name without an account is refused in the time a wrong
password takes. Every principal remembers the handler that authenticated it, and its permissions
are asked of that handler only. No message raised here names a password, a hash or the credential
itself.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextvars
import functools
import hashlib
import hmac
import logging
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol, runtime_checkable

from app.domain.errors import NotFound, WriteConflict
from app.security.accounts import AccountStore
from app.security.acl import Acl, Permission, parse_acl
from app.security.guessing import CheckGate, GuessLimits, source_of
from app.security.passwords import BadPasswordHash, hash_password, verify_in_equal_time

log = logging.getLogger(__name__)

BASIC = "Basic"  # Pravega's AuthConstants.BASIC: the method name is compared exactly
MAX_HEADER_CHARS = 8 * 1024
DEFAULT_TTL_S = 5.0
DEFAULT_MAX_ENTRIES = 10_000


class AuthenticationFailed(Exception):
    """The call has no usable credentials; the message is safe to send to the caller."""


@runtime_checkable
class AuthHandler(Protocol):
    """Pravega's AuthHandler: `name` is the method it serves (getHandlerName), `authenticate`
    turns the token after the method into a principal or raises AuthenticationFailed, and
    `authorize` answers what that principal may do on a resource string (never raising)."""

    @property
    def name(self) -> str: ...

    async def authenticate(self, token: str) -> Principal: ...

    def authorize(self, resource: str, principal: Principal) -> Permission: ...


_NO_ACL = Acl(())


@dataclass(frozen=True, slots=True)
class Principal:
    """Who made a call. `acl_text`/`acl` are the account's for Basic; a plugin's principal may
    leave them empty, since its `handler` answers its permissions."""

    name: str
    acl_text: str = ""
    acl: Acl = _NO_ACL
    handler: AuthHandler | None = field(default=None, compare=False, repr=False)

    def permission_for(self, resource: str) -> Permission:
        if self.handler is None:
            return self.acl.permission_for(resource)
        try:
            permission = self.handler.authorize(resource, self)
        except Exception:
            # A plugin's fault must not fail the call with a crash: it grants nothing.
            log.exception("auth handler %s failed to authorize %s", self.handler.name, resource)
            return Permission.NONE
        return permission if isinstance(permission, Permission) else Permission.NONE

    def allows(self, resource: str, needed: Permission) -> bool:
        return self.permission_for(resource) >= needed


# The principal of the call being served, for handlers that filter what they list.
current_principal: contextvars.ContextVar[Principal | None] = contextvars.ContextVar(
    "pgcontroller_principal", default=None
)


def caller_permission(resource: str) -> Permission:
    """The delegation tokens' ACL lookup: what the principal of the call being served (set by
    the gRPC guard in the task that runs the handler) may do on `resource`; NONE without one."""
    principal = current_principal.get()
    return Permission.NONE if principal is None else principal.permission_for(resource)


@dataclass(frozen=True, slots=True)
class Credentials:
    method: str
    token: str


def split_header(value: str | None) -> Credentials | None:
    """`<method> <token>` (split at the first run of whitespace, as Pravega's interceptor does);
    None when absent or not in that form."""
    if not value:
        return None
    parts = value.strip().split(None, 1)
    if len(parts) != 2 or not parts[0]:
        return None
    return Credentials(parts[0], parts[1].strip())


def decode_basic(token: str) -> tuple[str, str]:
    """(user, password) of a Basic token; AuthenticationFailed when it is not base64 of
    UTF-8 `user:password`."""
    try:
        text = base64.b64decode(token, validate=True).decode("utf-8")
    except (binascii.Error, ValueError) as exc:
        raise AuthenticationFailed("malformed Basic credentials: not base64 of 'user:password'") from exc
    user, sep, password = text.partition(":")
    if not sep or not user:
        raise AuthenticationFailed("malformed Basic credentials: not base64 of 'user:password'")
    return user, password


@dataclass
class _Entry:
    principal: Principal
    version: int
    checked_at: float


class PasswordAuthHandler:
    """The built-in `Basic` handler (Pravega's PasswordAuthHandler), over the accounts table."""

    name = BASIC

    def __init__(
        self,
        accounts: AccountStore,
        now_ms: Callable[[], int],
        *,
        ttl_s: float = DEFAULT_TTL_S,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        monotonic: Callable[[], float] = time.monotonic,
        limits: GuessLimits = GuessLimits(),  # noqa: B008 - frozen, shared harmlessly
    ) -> None:
        self._accounts = accounts
        self._now_ms = now_ms
        self._ttl_s = ttl_s
        self._max_entries = max_entries
        self._monotonic = monotonic
        self._cache: OrderedDict[bytes, _Entry] = OrderedDict()
        # Cache keys are keyed hashes of the credential: nothing in memory is a password, and the
        # key differs per process.
        self._key = os.urandom(32)
        self.gate = CheckGate(limits, monotonic)
        # The check in progress of each credential: calls carrying it meanwhile (a client's first
        # calls go out together) wait for that one instead of each taking a check of its own.
        self._checks: dict[bytes, asyncio.Future[Principal]] = {}
        self.verifications = 0  # counted for tests and the figures: how often Argon2id ran

    def authorize(self, resource: str, principal: Principal) -> Permission:
        return principal.acl.permission_for(resource)

    async def authenticate(self, token: str, source: str = "") -> Principal:
        """The account's principal for a Basic token, or AuthenticationFailed; TooManyAttempts
        when a check is needed and `source` (app/security/guessing.source_of) or the process is
        past its limits."""
        user, password = decode_basic(token)
        # Of the decoded pair, so that every base64 spelling of one credential shares its entry.
        key = hmac.new(self._key, f"{user}:{password}".encode(), hashlib.sha256).digest()
        entry = self._cache.get(key)
        now = self._monotonic()
        if entry is not None and now - entry.checked_at < self._ttl_s:
            self._cache.move_to_end(key)
            return entry.principal
        if entry is not None:
            account = await self._accounts.get(user)
            if account is not None and entry.version == account.version and entry.principal.name == user:
                entry.checked_at = now
                self._cache.move_to_end(key)
                return entry.principal
            self._cache.pop(key, None)
        check = self._checks.get(key)
        if check is None:
            check = asyncio.ensure_future(self._check(key, user, password, source))
            self._checks[key] = check
            check.add_done_callback(functools.partial(self._checked, key))
        # Shielded: a caller that goes away does not cut short a check others wait for, and the
        # check keeps its slot until Argon2id's thread has really finished.
        return await asyncio.shield(check)

    def _checked(self, key: bytes, check: asyncio.Future[Principal]) -> None:
        if self._checks.get(key) is check:
            del self._checks[key]
        if not check.cancelled():
            check.exception()  # retrieved here, so no waiter left is needed to read it

    async def _check(self, key: bytes, user: str, password: str, source: str) -> Principal:
        async with self.gate.admitted(source) as ticket:
            # Read inside the limits: a refused guess costs no query either.
            account = await self._accounts.get(user)
            self.verifications += 1
            try:
                stored = None if account is None else account.password_hash
                verdict = await self.gate.run(
                    ticket, functools.partial(verify_in_equal_time, stored, password)
                )
            except BadPasswordHash:
                log.warning("account %s has an unreadable password hash; it cannot log in", user)
                raise AuthenticationFailed("wrong user name or password") from None
            if account is None or not verdict.ok:
                raise AuthenticationFailed("wrong user name or password")
            ticket.succeeded()
            new_hash = (
                await self.gate.run(ticket, functools.partial(hash_password, password))
                if verdict.rehash
                else None
            )
        version = account.version
        if new_hash is not None:
            version = await self._store_rehash(account.name, account.version, new_hash)
        principal = Principal(account.name, account.acl, parse_acl(account.acl), self)
        self._remember(key, _Entry(principal, version, self._monotonic()))
        return principal

    async def _store_rehash(self, name: str, version: int, new_hash: str) -> int:
        """The account's version after the re-hash is written (-1 when it lost to a change)."""
        try:
            # Conditional on the version read: an operator's concurrent change wins.
            return await self._accounts.update(name, version, self._now_ms(), password_hash=new_hash)
        except (WriteConflict, NotFound):
            log.info("account %s changed while its password was re-hashed; kept the change", name)
            return -1  # never equal to a stored version: the next call reads and verifies again

    def _remember(self, key: bytes, entry: _Entry) -> None:
        self._cache[key] = entry
        self._cache.move_to_end(key)
        while len(self._cache) > self._max_entries:
            self._cache.popitem(last=False)


class Authenticator:
    """Pravega's AuthHandlerManager: the handler of each method (the built-in Basic one over the
    accounts, plus `plugins`), and the dispatch of a call's `Authorization` value to it."""

    def __init__(
        self,
        accounts: AccountStore,
        now_ms: Callable[[], int],
        *,
        ttl_s: float = DEFAULT_TTL_S,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        monotonic: Callable[[], float] = time.monotonic,
        plugins: Sequence[AuthHandler] = (),
        limits: GuessLimits = GuessLimits(),  # noqa: B008 - frozen, shared harmlessly
    ) -> None:
        self.password = PasswordAuthHandler(
            accounts, now_ms, ttl_s=ttl_s, max_entries=max_entries, monotonic=monotonic, limits=limits
        )
        handlers: dict[str, AuthHandler] = {BASIC: self.password}
        for plugin in plugins:
            # The loader refuses duplicates; here a plugin named Basic was chosen explicitly.
            handlers[plugin.name] = plugin
        self._handlers = handlers

    @property
    def verifications(self) -> int:
        """How often Argon2id ran (the Basic handler's count, for tests and the figures)."""
        return self.password.verifications

    @property
    def methods(self) -> tuple[str, ...]:
        """The supported method names, Basic first."""
        return tuple(self._handlers)

    def handler(self, method: str) -> AuthHandler | None:
        return self._handlers.get(method)

    def serves(self, header: str | None) -> bool:
        """Whether a handler is registered for the header's method (absent or malformed: no)."""
        credentials = split_header(header)
        return credentials is not None and credentials.method in self._handlers

    async def authenticate(self, header: str | None, peer: str | None = None) -> Principal:
        """The principal of an `Authorization` value, or AuthenticationFailed; TooManyAttempts
        (app/security/guessing.py) when a password check is needed and the caller's address
        `peer` (or the process) is past its limits."""
        credentials = split_header(header)
        if credentials is None:
            raise AuthenticationFailed(f"authentication required: {self._how()}")
        handler = self._handlers.get(credentials.method)
        if handler is None:
            raise AuthenticationFailed(
                f"unsupported authentication method; supported: {', '.join(self.methods)}"
            )
        assert header is not None
        if len(header) > MAX_HEADER_CHARS:
            raise AuthenticationFailed("credentials too long")
        if handler is self.password:
            return await self.password.authenticate(credentials.token, source_of(peer))
        try:
            principal = await handler.authenticate(credentials.token)
        except AuthenticationFailed:
            raise
        except Exception:
            # A plugin's fault is the caller's refusal, not a crash; the token is not logged.
            log.exception("auth handler %s failed to authenticate a call", credentials.method)
            raise AuthenticationFailed(f"{credentials.method} authentication failed") from None
        if not isinstance(principal, Principal):
            log.error("auth handler %s returned %r, not a Principal", credentials.method, type(principal))
            raise AuthenticationFailed(f"{credentials.method} authentication failed")
        # The principal remembers its handler, so its permissions are asked of it alone.
        return principal if principal.handler is handler else replace(principal, handler=handler)

    def _how(self) -> str:
        basic = "send 'Authorization: Basic <base64 user:password>'"
        others = [m for m in self.methods if m != BASIC]
        if not others:
            return basic
        if BASIC not in self._handlers or self._handlers[BASIC] is not self.password:
            return f"send 'Authorization: <method> <token>' with a method of {', '.join(self.methods)}"
        return f"{basic} or a token of {', '.join(others)}"
