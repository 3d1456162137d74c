"""pgurl: every libpq URL form becomes the same understanding for asyncpg and pgjdbc; bad
parameters are refused by name; the password never shows in str, repr or messages."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

import pgurl
from app.security.certs import make_dev_certs
from pgurl import PgUrlError, connect_kwargs, jdbc_parts, masked, parse


@pytest.mark.parametrize(
    ("url", "hosts", "ports", "user", "password", "database"),
    [
        ("postgres://u:p@h/db", ("h",), (None,), "u", "p", "db"),
        ("postgresql://u%40x:p%3Aw%2Fd%40@h:6543/d%20b", ("h",), (6543,), "u@x", "p:w/d@", "d b"),
        ("postgresql://u@h1:1,h2,[::1]:3/db", ("h1", "h2", "::1"), (1, None, 3), "u", None, "db"),
        ("postgresql://[2001:db8::7]/db", ("2001:db8::7",), (None,), None, None, "db"),
        ("postgresql:///db?host=/var/run/postgresql", ("/var/run/postgresql",), (None,), None, None, "db"),
        ("postgresql://%2Ftmp%2Fsock:5444/db", ("/tmp/sock",), (5444,), None, None, "db"),
        ("postgresql://h/db?host=a,b&port=1,2&user=v&password=q&dbname=e", ("a", "b"), (1, 2), "v", "q", "e"),
        ("postgresql://", (), (), None, None, None),
        ("postgresql+asyncpg://u:p@h:1/db", ("h",), (1,), "u", "p", "db"),
    ],
)
def test_url_forms(
    url: str,
    hosts: tuple[str, ...],
    ports: tuple[int | None, ...],
    user: str | None,
    password: str | None,
    database: str | None,
) -> None:
    u = parse(url)
    assert (u.hosts, u.ports, u.user, u.password, u.database) == (hosts, ports, user, password, database)
    # The canonical form reads back as the same thing.
    assert parse(u.to_url()) == u


def test_asyncpg_arguments() -> None:
    kw = connect_kwargs(
        "postgres://u:p%40ss@h1:1,[::1]:2/db?application_name=app&connect_timeout=7"
        "&options=-c%20search_path%3Dx%20--statement_timeout%3D5s&target_session_attrs=read-write"
    )
    assert kw["host"] == ["h1", "::1"] and kw["port"] == [1, 2]
    assert (kw["user"], kw["password"], kw["database"], kw["timeout"]) == ("u", "p@ss", "db", 7.0)
    assert kw["server_settings"] == {"search_path": "x", "statement_timeout": "5s", "application_name": "app"}
    assert kw["target_session_attrs"] == "read-write"
    assert connect_kwargs("postgresql:///db?host=/run/pg&port=5433") == {
        "host": "/run/pg",
        "port": 5433,
        "database": "db",
    }
    assert connect_kwargs("postgresql://h/db", application_name="dflt")["server_settings"] == {
        "application_name": "dflt"
    }
    assert connect_kwargs("postgresql://h/db?passfile=/x/pw")["passfile"] == "/x/pw"


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("postgresql://h/db?foo=1", "unknown parameter 'foo'"),
        ("postgresql://h/db?sslmode=required", "sslmode='required'"),
        ("postgresql://h/db?hostaddr=1.2.3.4", "'hostaddr' is not supported"),
        ("postgresql://h/db?gssencmode=require", "gssencmode='require'"),
        ("postgresql://h:99999/db", "invalid port '99999'"),
        ("postgresql://h/db?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem", "sslrootcert: no readable"),
        ("postgresql://h/db?options=-d%205", "options:"),
        ("postgresql://h/db?connect_timeout=soon", "connect_timeout"),
        ("mysql://h/db", "postgresql://"),
        ("postgresql://::1/db", "brackets"),
        ("postgresql://h1,h2/db?port=1,2,3", "2 hosts but 3 ports"),
    ],
)
def test_refusals_name_the_fault(url: str, needle: str) -> None:
    with pytest.raises(PgUrlError, match=None) as caught:
        connect_kwargs(url)
    assert needle in str(caught.value)


def test_sslmodes_follow_libpq(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.postgresql/root.crt
    certs = make_dev_certs(tmp_path / "certs")
    ca = certs.ca_cert
    assert connect_kwargs("postgresql://h/db?sslmode=disable")["ssl"] is False
    assert connect_kwargs("postgresql://h/db?sslmode=prefer")["ssl"] == "prefer"
    assert connect_kwargs("postgresql://h/db?sslmode=allow")["ssl"] == "allow"
    assert "ssl" not in connect_kwargs("postgresql://h/db")
    require = connect_kwargs("postgresql://h/db?sslmode=require")["ssl"]
    assert isinstance(require, ssl.SSLContext)
    assert (require.verify_mode, require.check_hostname) == (ssl.CERT_NONE, False)
    assert require.minimum_version == ssl.TLSVersion.TLSv1_2
    # require with a root certificate checks the chain, as libpq does.
    checked = connect_kwargs(f"postgresql://h/db?sslmode=require&sslrootcert={ca}")["ssl"]
    assert (checked.verify_mode, checked.check_hostname) == (ssl.CERT_REQUIRED, False)
    verify_ca = connect_kwargs(f"postgresql://h/db?sslmode=verify-ca&sslrootcert={ca}")["ssl"]
    assert (verify_ca.verify_mode, verify_ca.check_hostname) == (ssl.CERT_REQUIRED, False)
    full = connect_kwargs(f"postgresql://h/db?sslmode=verify-full&sslrootcert={ca}")["ssl"]
    assert (full.verify_mode, full.check_hostname) == (ssl.CERT_REQUIRED, True)
    with pytest.raises(PgUrlError, match="needs a root certificate"):
        connect_kwargs("postgresql://h/db?sslmode=verify-full")
    # libpq's default root certificate is honoured.
    (tmp_path / ".postgresql").mkdir()
    (tmp_path / ".postgresql" / "root.crt").write_bytes(Path(ca).read_bytes())
    assert connect_kwargs("postgresql://h/db?sslmode=require")["ssl"].verify_mode == ssl.CERT_REQUIRED
    client = connect_kwargs(
        f"postgresql://h/db?sslmode=verify-full&sslrootcert={ca}"
        f"&sslcert={certs.client_cert}&sslkey={certs.client_key}"
    )["ssl"]
    assert isinstance(client, ssl.SSLContext)
    with pytest.raises(PgUrlError, match="cannot be loaded"):
        connect_kwargs(
            f"postgresql://h/db?sslmode=require&sslcert={certs.client_cert}&sslkey={certs.server_key}"
        )


def test_jdbc_names() -> None:
    parts = jdbc_parts(
        "postgresql://u:pw@h1:1,[::1]/db?sslmode=verify-full&sslrootcert=/c/ca.pem&sslcert=/c/c.pem"
        "&sslkey=/c/c.pk8&sslpassword=kp&application_name=a&connect_timeout=5&target_session_attrs=standby"
    )
    assert parts.url == (
        "jdbc:postgresql://h1:1,[::1]:5432/db?sslmode=verify-full&sslrootcert=/c/ca.pem&sslcert=/c/c.pem"
        "&sslkey=/c/c.pk8&ApplicationName=a&connectTimeout=5&targetServerType=secondary"
    )
    assert (parts.user, parts.password, dict(parts.secrets)) == ("u", "pw", {"sslpassword": "kp"})
    assert "kp" not in parts.url and "pw" not in repr(parts)
    with pytest.raises(PgUrlError, match="sslcrl"):
        jdbc_parts("postgresql://h/db?sslmode=verify-ca&sslcrl=/c/crl.pem")


def test_passfile_gives_the_password(tmp_path: Path) -> None:
    passfile = tmp_path / "pgpass"
    pgurl.write_pgpass(
        passfile, [("127.0.0.1", "*", "*", "svc", "s3cr:et\\x"), ("*", "*", "*", "*", "other")]
    )
    assert passfile.stat().st_mode & 0o777 == 0o600
    url = f"postgresql://svc@127.0.0.1:5/db?passfile={passfile}"
    assert jdbc_parts(url).password == "s3cr:et\\x"
    assert jdbc_parts(f"postgresql://x@10.0.0.1/db?passfile={passfile}").password == "other"
    passfile.chmod(0o644)  # others may read it: libpq ignores such a file, so do we
    assert jdbc_parts(url).password is None


def test_the_password_never_shows() -> None:
    url = "postgresql://u:Sup3rS3cret@h/db?sslmode=require&sslpassword=KeyS3cret"
    u = parse(url)
    for text in (str(u), repr(u), masked(url), u.to_url(show_password=False)):
        assert "Sup3rS3cret" not in text and "KeyS3cret" not in text
    assert masked("postgresql://u:pw@h1,h2/db?password=pw2") == "postgresql://u:***@h1,h2/db?password=***"
    with pytest.raises(PgUrlError) as caught:
        parse("postgresql://u:Sup3rS3cret@h/db?foo=1")
    assert "Sup3rS3cret" not in str(caught.value)


@pytest.mark.parametrize("command", [["db", "upgrade"], ["serve"], ["segment-store"]])
def test_a_bad_url_stops_the_command_in_one_line_without_the_secret(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    from app.cli import EXIT_USAGE, main

    assert main([*command, "--db-url", "postgresql://u:Sup3rS3cret@h/db?sslmod=require"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "unknown parameter 'sslmod'" in err and "Sup3rS3cret" not in err and len(err.splitlines()) == 1
