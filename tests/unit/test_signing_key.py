"""The delegation-token signing key: from a file or the environment, never argv; made by serve."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.cli import main
from app.security.signing_key import KEY_ENV, with_signing_key
from app.settings import SettingError, Settings

ON = Settings(auth_enabled=True)


def test_auth_off_needs_no_key() -> None:
    assert with_signing_key(Settings(), {}, generate=False).token_signing_key is None


def test_the_key_comes_from_the_file(tmp_path: Path) -> None:
    path = tmp_path / "key"
    path.write_text("the basis\n")
    settings = Settings(auth_enabled=True, auth_token_signing_key_file=path)
    assert with_signing_key(settings, {}, generate=False).token_signing_key == b"the basis"


def test_the_key_comes_from_the_environment() -> None:
    assert with_signing_key(ON, {KEY_ENV: "from env"}, generate=False).token_signing_key == b"from env"


def test_serve_makes_a_key_when_none_is_given_and_it_never_shows() -> None:
    settings = with_signing_key(ON, {}, generate=True)
    key = settings.token_signing_key
    assert key is not None and len(key) >= 64
    assert with_signing_key(ON, {}, generate=True).token_signing_key != key
    assert key.decode() not in repr(settings)


@pytest.mark.parametrize("content", ["", "  \n"])
def test_an_empty_key_file_is_refused(tmp_path: Path, content: str) -> None:
    path = tmp_path / "key"
    path.write_text(content)
    with pytest.raises(SettingError, match="--auth-token-signing-key-file names an empty file"):
        with_signing_key(Settings(auth_enabled=True, auth_token_signing_key_file=path), {}, generate=True)


def test_a_missing_file_and_a_key_given_twice_are_refused(tmp_path: Path) -> None:
    missing = Settings(auth_enabled=True, auth_token_signing_key_file=tmp_path / "absent")
    with pytest.raises(SettingError, match="cannot be read"):
        with_signing_key(missing, {}, generate=True)
    (tmp_path / "key").write_text("k")
    twice = Settings(auth_enabled=True, auth_token_signing_key_file=tmp_path / "key")
    with pytest.raises(SettingError, match="both set"):
        with_signing_key(twice, {KEY_ENV: "k2"}, generate=True)


def test_a_segment_store_with_auth_and_no_key_refuses_to_start(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    assert main(["segment-store", "--auth-enabled"]) == 2
    assert (
        "--auth-token-signing-key-file (or PGCONTROLLER_AUTH_TOKEN_SIGNING_KEY) is needed"
        in capsys.readouterr().err
    )
