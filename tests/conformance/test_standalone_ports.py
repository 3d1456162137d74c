"""The oracle's start survives a port taken between free_port() and the JVM's bind: while the
suite runs in parallel, any process's outgoing connection may get that port as its ephemeral one
(a CI run failed so), and the standalone is then started again on fresh ports."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.conformance import pravega_standalone
from tests.conformance.pravega_standalone import start_standalone

pytestmark = pytest.mark.timeout(600)


def test_a_port_taken_before_the_jvm_binds_it_is_picked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    taken = held.getsockname()[1]
    real = pravega_standalone.free_port
    picked: list[int] = []

    def pick() -> int:
        # The first port picked (ZooKeeper's) is the one another process holds.
        port = taken if not picked else real()
        picked.append(port)
        return port

    monkeypatch.setattr(pravega_standalone, "free_port", pick)
    try:
        oracle = start_standalone(tmp_path)
    finally:
        held.close()
    try:
        # Two starts: four ports each.
        assert len(picked) == 8 and picked[0] == taken
        assert taken not in (oracle.controller_port, oracle.segment_store_port)
        assert pravega_standalone.accepts(oracle.controller_port)
    finally:
        oracle.stop()
