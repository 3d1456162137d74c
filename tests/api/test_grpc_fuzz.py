"""gRPC fuzzing (issue 16): generated messages, built from the proto descriptors, for every RPC of
ControllerService against a controller with workers over real gRPC. No answer may be INTERNAL, UNKNOWN
or UNAVAILABLE (the database is up), carry driver or SQL text, or take longer than the call timeout;
afterwards no stream may stay in a transient state and the server must still answer.

One test per RPC (`-k 'fuzz and scale'` runs a subset); the campaign is derandomized and bounded, and
the number of calls made is printed at the end of the module (terminal summary line "gRPC fuzz")."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from google.protobuf.message import DecodeError
from grpclib.const import Status
from hypothesis import HealthCheck, given, settings

from app.api.grpc.proto import controller_pb2 as pb
from tests.support.grpc_fuzz import MAX_HANGS_PER_RPC, SERVICE, Campaign, Violation, report, strategy_for

RPCS = [method.name for method in SERVICE.methods]
# The RPCs that change streams, transactions and members get more examples: their deep paths are
# where a bad value does harm.
DEEP = {
    "createStream",
    "updateStream",
    "truncateStream",
    "sealStream",
    "scale",
    "createTransaction",
    "commitTransaction",
    "pingTransaction",
    "noteTimestampFromWriter",
    "createReaderGroup",
    "updateReaderGroup",
    "updateSubscriberStreamCut",
    "createKeyValueTable",
}
EXAMPLES, DEEP_EXAMPLES = 40, 60
# A healthy server answers a campaign in a few seconds; past this its remaining examples are skipped.
CAMPAIGN_BUDGET_S = 90.0
# The RPCs after which the segments the world knows may have changed.
RESHAPING = {"createStream", "updateStream", "sealStream", "deleteStream", "scale", "deleteScopeRecursive"}

# Bytes that are not a valid protobuf message, or not one of the expected shape.
MALFORMED = {
    "truncated varint": b"\x08",
    "length past the end": b"\x0a\x10ab",
    "field number 0": b"\x00\x01",
    "invalid wire type": b"\x0f\x01",
    "invalid utf-8 in a string": b"\x0a\x02\xff\xfe",
    "end-group without start": b"\x0c",
    "random bytes": bytes(range(255, 0, -7)),
}
# gRPC frames that break the framing itself (the 5-byte prefix: compressed flag, big-endian length).
MALFORMED_FRAMES = {
    "no message at all": b"",
    "a prefix cut short": b"\x00\x00\x00",
    "length past the data": b"\x00\x00\x00\x00\x10\x0a\x01a",
    "compressed flag without an encoding": b"\x01\x00\x00\x00\x03\x0a\x01a",
    "two messages for a unary call": b"\x00\x00\x00\x00\x03\x0a\x01a" * 2,
}
MALFORMED_RPCS = ("createScope", "createStream", "scale", "createReaderGroup", "noteTimestampFromWriter")


@pytest.fixture(scope="module")
def campaign(pg_admin_url: str, request: pytest.FixtureRequest) -> Iterator[Campaign]:
    started = Campaign(pg_admin_url)
    started.start()
    try:
        yield started
    finally:
        started.close()
        per_rpc = ", ".join(f"{rpc} {n}" for rpc, n in sorted(started.calls_by_rpc.items()))
        line = f"gRPC fuzz: {started.calls} generated calls ({per_rpc})"
        capture = request.config.pluginmanager.get_plugin("capturemanager")
        reporter = request.config.pluginmanager.get_plugin("terminalreporter")
        if capture is not None and reporter is not None:
            # Shown even when output is captured: the note lists this count.
            with capture.global_and_fixture_disabled():
                reporter.write_line(line)


@pytest.mark.parametrize("rpc", RPCS)
def test_grpc_fuzz(campaign: Campaign, rpc: str) -> None:
    """Every generated message for `rpc` gets an answer of the contract, nothing is left stuck."""
    world = campaign.prepare(f"fz{RPCS.index(rpc)}")
    # Streams an earlier RPC's campaign left stuck were reported there; count only new ones here.
    stuck_before = frozenset(entry.split(" ")[0] for entry in campaign.stuck_streams(wait_s=0))
    violations: list[Violation] = []
    hangs = 0
    started = time.monotonic()

    @settings(
        max_examples=DEEP_EXAMPLES if rpc in DEEP else EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.large_base_example,
        ],
    )
    @given(strategy_for(rpc, world))
    def campaign_of(message: object) -> None:
        nonlocal hangs
        if hangs >= MAX_HANGS_PER_RPC or time.monotonic() - started > CAMPAIGN_BUDGET_S:
            # Bounded even when failing: each hang costs the call timeout, and a slow server makes
            # every call slow; the violations recorded so far already fail the test.
            return
        before = len(violations)
        reply = campaign.call(rpc, message, violations)  # type: ignore[arg-type]
        hangs += sum(1 for v in violations[before:] if v.category == "hang")
        campaign.learn(rpc, reply, world, message)  # type: ignore[arg-type]
        if rpc in RESHAPING:
            campaign.refresh(world)

    campaign_of()
    if time.monotonic() - started > CAMPAIGN_BUDGET_S:
        violations.append(
            Violation(
                rpc, "slow server", "BUDGET", f"campaign over {CAMPAIGN_BUDGET_S} s", pb.ServerRequest()
            )
        )
    stuck = campaign.stuck_streams(known=stuck_before)
    problems = [report(violations)] if violations else []
    if stuck:
        problems.append("streams left in a transient state after quiescence:\n  " + "\n  ".join(stuck))
    unhealthy = campaign.healthy()
    if unhealthy:
        problems.append(unhealthy)
    assert not problems, f"{rpc}:\n" + "\n".join(problems)


@pytest.mark.parametrize("rpc", MALFORMED_RPCS)
def test_malformed_protobuf_is_refused_as_invalid_argument(campaign: Campaign, rpc: str) -> None:
    """Bytes that do not decode as the request message are the client's error, not the server's."""
    request_type = getattr(pb, SERVICE.methods_by_name[rpc].input_type.name)
    violations: list[Violation] = []
    statuses = {}
    for name, body in MALFORMED.items():
        with pytest.raises(DecodeError):
            request_type.FromString(body)  # the body really is malformed for this message
        campaign.call_raw(rpc, body, violations)
        statuses[name] = campaign.last_status
    assert not violations, report(violations)
    assert all(s == Status.INVALID_ARGUMENT for s in statuses.values()), statuses
    assert campaign.healthy() is None


@pytest.mark.parametrize("rpc", MALFORMED_RPCS)
def test_malformed_grpc_frames_get_a_status_of_the_contract(campaign: Campaign, rpc: str) -> None:
    """A body whose gRPC framing is broken is answered with a status (never INTERNAL or UNKNOWN, never a
    reset), and the server keeps answering."""
    violations: list[Violation] = []
    statuses = {}
    for name, data in MALFORMED_FRAMES.items():
        campaign.call_framed(rpc, data, violations)
        statuses[name] = campaign.last_status
    assert not violations, report(violations) + f"\nstatuses: {statuses}"
    assert campaign.healthy() is None
