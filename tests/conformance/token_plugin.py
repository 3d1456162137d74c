"""The conformance suite's token-based credential on serve's side: the method `Bearer` with one
token, which may do everything (`--auth-handlers tests.conformance.token_plugin:make`). Pravega
standalone gets the same handler in Java (`oracle/src/.../TokenAuthHandler.java`), so the suite's
SecurityChecks hold a token credential against both servers; the token and the principal's name
must stay equal in all three places."""

from __future__ import annotations

from app.security.acl import Permission
from app.security.authn import AuthenticationFailed, Principal
from app.settings import Settings

TOKEN = "conformance-bearer-token"
PRINCIPAL = "token-user"


class TokenHandler:
    name = "Bearer"

    async def authenticate(self, token: str) -> Principal:
        if token != TOKEN:
            raise AuthenticationFailed("unknown bearer token")
        return Principal(PRINCIPAL)

    def authorize(self, resource: str, principal: Principal) -> Permission:
        return Permission.READ_UPDATE if principal.name == PRINCIPAL else Permission.NONE


def make(settings: Settings) -> TokenHandler:
    return TokenHandler()
