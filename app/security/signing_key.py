"""The delegation-token signing key of this process: from a file or an environment variable, never
from the command line, or made at start by `serve` for itself and its embedded store.

Invariant: with authentication on, a process that checks or signs tokens has a non-empty key, or
it refuses to start with one line naming where the key should come from (never the key itself).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Mapping
from dataclasses import replace

from app.settings import SettingError, Settings

log = logging.getLogger(__name__)

KEY_ENV = "PGCONTROLLER_AUTH_TOKEN_SIGNING_KEY"
_FLAG = "--auth-token-signing-key-file"


def read_signing_key(settings: Settings, environ: Mapping[str, str]) -> bytes | None:
    """The configured key (Pravega's signingKey.basis: the text's bytes), None when none is."""
    path = settings.auth_token_signing_key_file
    from_env = environ.get(KEY_ENV, "")
    if path is not None and from_env:
        raise SettingError(_FLAG, f"and {KEY_ENV} are both set; give the signing key once")
    if path is not None:
        try:
            text = path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise SettingError(_FLAG, f"cannot be read: {type(exc).__name__}") from None
        if not text:
            raise SettingError(_FLAG, "names an empty file")
        return text.encode()
    return from_env.strip().encode() or None


def with_signing_key(settings: Settings, environ: Mapping[str, str], *, generate: bool) -> Settings:
    """`settings` carrying the key when authentication is on. `generate`: make a random one if
    none is configured (serve and its embedded store share it; other stores cannot check its
    tokens, so a cluster of `segment-store` processes needs the key file)."""
    if not settings.auth_enabled:
        return settings
    key = read_signing_key(settings, environ)
    if key is None:
        if not generate:
            raise SettingError(_FLAG, f"(or {KEY_ENV}) is needed when authentication is on")
        key = secrets.token_urlsafe(48).encode()
        log.info("delegation tokens are signed with a key made for this run (no %s given)", _FLAG)
    return replace(settings, token_signing_key=key)
