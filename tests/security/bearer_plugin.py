"""A test auth handler plugin: method `Bearer`, a fixed table of tokens, each granting one
permission on one scope (the scope and everything in it). Loaded by the tests through
`--auth-handlers tests.security.bearer_plugin:make`, as an operator would load their own."""

from __future__ import annotations

from typing import Any

from app.security.acl import Permission, of_scope
from app.security.authn import AuthenticationFailed, Principal
from app.settings import Settings

# token -> (principal, scope, permission)
TOKENS = {
    "reader-token": ("bearer-reader", "sc", Permission.READ),
    "writer-token": ("bearer-writer", "sc", Permission.READ_UPDATE),
}


class BearerHandler:
    name = "Bearer"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.asked: list[tuple[str, str]] = []  # (principal, resource) of every authorize call

    async def authenticate(self, token: str) -> Principal:
        entry = TOKENS.get(token)
        if entry is None:
            raise AuthenticationFailed("unknown bearer token")
        return Principal(entry[0])

    def authorize(self, resource: str, principal: Principal) -> Permission:
        self.asked.append((principal.name, resource))
        for name, scope, permission in TOKENS.values():
            own = of_scope(scope)
            if name == principal.name and (resource == own or resource.startswith(own + "/")):
                return permission
        return Permission.NONE


made: list[BearerHandler] = []


def make(settings: Settings) -> BearerHandler:
    handler = BearerHandler(settings)
    made.append(handler)
    return handler


class _FakeBasic(BearerHandler):
    name = "Basic"


def make_basic(settings: Settings) -> BearerHandler:
    """A plugin taking the method Basic (allowed only when named in --auth-handlers)."""
    return _FakeBasic(settings)


def failing(settings: Settings) -> BearerHandler:
    raise RuntimeError("the token table is unreachable")


def not_a_handler(settings: Settings) -> Any:
    return object()


NOT_CALLABLE = 42


class CrashyHandler:
    """A faulty plugin: `boom` crashes authenticate, `odd` returns no principal, `ok` logs in a
    principal whose every authorize call crashes. None of it may crash a call."""

    name = "Crashy"

    async def authenticate(self, token: str) -> Principal:
        if token == "boom":
            raise RuntimeError("the identity provider is down")
        if token == "odd":
            odd: Any = "not a principal"
            return odd  # type: ignore[no-any-return]
        return Principal("crashy")

    def authorize(self, resource: str, principal: Principal) -> Permission:
        raise RuntimeError("the policy engine is down")


def crashy(settings: Settings) -> CrashyHandler:
    return CrashyHandler()
