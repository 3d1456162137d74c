"""The example of docs/dataplane.md ("Key-value tables from Python") runs as printed against a
served controller, so the guide cannot drift from the client."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from app.api.grpc.proto import controller_pb2 as pb
from tests.kvtclient.conftest import Cluster

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "dataplane.md"


def example() -> str:
    text = GUIDE.read_text()
    section = text[text.index("## Key-value tables from Python") :]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match is not None
    return match.group(1)


async def test_the_guides_example_runs(kvc: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    code = example()
    assert 'controller = "127.0.0.1:9090"' in code and "asyncio.run(main())" in code
    code = code.replace('"127.0.0.1:9090"', repr(kvc.address)).replace("asyncio.run(main())", "")
    await kvc.stub.createScope(pb.ScopeInfo(scope="demo"))
    namespace: dict[str, Any] = {}
    exec(compile(code, str(GUIDE), "exec"), namespace)
    await namespace["main"]()
    printed = capsys.readouterr().out.splitlines()
    # The two entries left after the batch, in key order, both in the segment of "alice---".
    pattern = r"TableKey\(primary=b'alice---', secondary=b'(\w+)\.'\) b'(\d+)' (\d+):\d+$"
    found = [re.match(pattern, line) for line in printed]
    assert all(found), printed
    assert [(m.group(1), m.group(2)) for m in found if m] == [("bal", "70"), ("lim", "500")]
    assert len({m.group(3) for m in found if m}) == 1
    assert await kvc.stored("accounts") == {}
