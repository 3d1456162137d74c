"""`pgcontroller kvt get|put|remove|list` against a real controller and its segment store: what
it prints, and that a refused condition is one line on stderr and exit code 1."""

from __future__ import annotations

import pytest

from app.cli import build_parser
from app.cli.kvt import kvt_command
from tests.kvtclient.conftest import SC, Cluster


async def kvt(kvc: Cluster, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    args = build_parser().parse_args(["kvt", "--controller", kvc.address, *argv])
    code = await kvt_command(args)
    out, err = capsys.readouterr()
    return code, out, err


async def test_put_get_list_and_remove_from_the_shell(
    kvc: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    create = (
        "create",
        SC,
        "t",
        "--partitions",
        "2",
        "--primary-key-length",
        "4",
        "--secondary-key-length",
        "2",
    )
    assert await kvt(kvc, capsys, *create) == (0, "", "created\n")
    assert await kvt(kvc, capsys, *create) == (0, "", "exists already\n")
    code, out, _ = await kvt(kvc, capsys, "put", SC, "t", "acme", "--secondary", "01", "hello")
    assert code == 0
    version = out.strip()
    assert await kvt(kvc, capsys, "get", SC, "t", "acme", "--secondary", "01") == (
        0,
        f"hello\t{version}\n",
        "",
    )

    code, _, err = await kvt(kvc, capsys, "put", SC, "t", "acme", "--secondary", "01", "again", "--if-absent")
    assert code == 1 and err.startswith("pgcontroller: BadKeyVersion:")
    code, out, _ = await kvt(
        kvc, capsys, "put", SC, "t", "acme", "--secondary", "01", "new", "--version", version
    )
    assert code == 0
    newer = out.strip()
    code, _, err = await kvt(
        kvc, capsys, "remove", SC, "t", "acme", "--secondary", "01", "--version", version
    )
    assert code == 1 and "BadKeyVersion" in err

    await kvt(kvc, capsys, "put", SC, "t", "beta", "--secondary", "02", "b")
    code, out, _ = await kvt(kvc, capsys, "list", SC, "t")
    assert code == 0
    assert [line.split("\t")[:2] for line in out.splitlines()] == [["acme 01", "new"], ["beta 02", "b"]]
    assert (await kvt(kvc, capsys, "--hex", "list", SC, "t", "--limit", "1"))[1].split("\t")[:2] == [
        "61636d65 3031",
        "6e6577",
    ]

    assert (await kvt(kvc, capsys, "remove", SC, "t", "acme", "--secondary", "01", "--version", newer))[
        0
    ] == 0
    code, _, err = await kvt(kvc, capsys, "get", SC, "t", "acme", "--secondary", "01")
    assert code == 1 and "no key 'acme'" in err

    assert await kvt(kvc, capsys, "delete", SC, "t") == (0, "", "")
    assert await kvt(kvc, capsys, "delete", SC, "t") == (1, "", f"pgcontroller: no table {SC}/t\n")
    assert await kvc.stored("t") == {}


async def test_a_missing_table_or_a_bad_key_is_one_line_and_exit_code_1(
    kvc: Cluster,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = await kvt(kvc, capsys, "get", SC, "nothing", "k")
    assert code == 1 and err.startswith("pgcontroller: TableNotFound:") and err.count("\n") == 1
    await kvc.create_table("t", partitions=1, primary=4)
    code, _, err = await kvt(kvc, capsys, "put", SC, "t", "toolong", "v")
    assert code == 1 and "InvalidKey" in err and "4 bytes, not 7" in err
    code, _, err = await kvt(kvc, capsys, "put", SC, "t", "abcd", "v", "--version", "nonsense")
    assert code == 1 and "not a key version" in err
    code, _, err = await kvt(
        kvc, capsys, "create", "noscope", "t", "--partitions", "1", "--primary-key-length", "4"
    )
    assert code == 1 and err.startswith("pgcontroller: ScopeNotFound:")
    code, _, err = await kvt(kvc, capsys, "create", SC, "u", "--partitions", "0", "--primary-key-length", "4")
    assert code == 1 and err.startswith("pgcontroller: InvalidTable:") and "partitionCount" in err
    code, _, err = await kvt(
        kvc, capsys, "create", SC, "bad_name", "--partitions", "1", "--primary-key-length", "4"
    )
    assert code == 1 and err.startswith("pgcontroller: InvalidTable:")
