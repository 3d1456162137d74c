"""`pgcontroller --version`, and the flags taken on either side of a command: the same value
whichever side gives it, the one after the command winning, a refused level in one line."""

from __future__ import annotations

import argparse
import os

import pytest

from app.cli import build_parser, main
from app.cli.globals import _commands, package_version
from app.settings import resolve


def _parsed(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def _settings(*argv: str) -> dict[str, object]:
    resolved = resolve(_parsed(*argv), {})
    return {name: getattr(resolved.settings(), name) for name in resolved.names}


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out == f"pgcontroller {package_version()}\n"
    assert package_version() == "0.1.0"  # pyproject.toml's version, as installed


@pytest.mark.parametrize(
    "argv",
    [
        ("--log-level", "DEBUG", "serve"),
        ("serve", "--log-level", "DEBUG"),
        ("serve", "--log-level", "debug"),
        ("--log-level", "INFO", "serve", "--log-level", "DEBUG"),
    ],
)
def test_log_level_on_either_side(argv: tuple[str, ...]) -> None:
    assert str(_settings(*argv)["log_level"]).upper() == "DEBUG"


def test_db_url_and_data_dir_on_either_side() -> None:
    url = "postgresql://u@db.example:5432/pg"
    for argv in (("--db-url", url, "db", "upgrade"), ("db", "upgrade", "--db-url", url)):
        assert _settings(*argv)["db_url"] == url
    for argv in (("--data-dir", "/srv/d", "db", "url"), ("db", "url", "--data-dir", "/srv/d")):
        assert str(_settings(*argv)["data_dir"]) == "/srv/d"
    assert _settings("--db-url", url, "serve", "--db-url", url + "2")["db_url"] == url + "2"


def test_every_command_takes_log_level_after_it() -> None:
    commands = _commands(build_parser())
    assert len(commands) > 15
    for command in commands:
        assert "--log-level" in command._option_string_actions, command.prog


@pytest.mark.parametrize(
    "argv",
    [
        ("--log-level", "LOUD", "db", "url"),
        ("db", "url", "--log-level", "LOUD"),
        ("serve", "--log-level", "LOUD"),
    ],
)
def test_a_bad_level_is_one_line_and_exit_2(
    argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(list(argv)) == 2
    err = capsys.readouterr().err
    assert err == "pgcontroller: --log-level must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL, got LOUD\n"


def test_a_flag_before_a_command_that_does_not_read_it_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--db-url", "postgresql://u@h/d", "db", "stop"])
    assert done.value.code == 2
    assert capsys.readouterr().err == "pgcontroller: --db-url is not read by this command\n"


def test_the_environment_still_fills_an_absent_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    resolved = resolve(_parsed("serve"), {**os.environ, "PGCONTROLLER_LOG_LEVEL": "ERROR"})
    assert resolved.settings().log_level.upper() == "ERROR"
