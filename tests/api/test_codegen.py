"""The committed gRPC modules are exactly what `make proto` generates from controller.proto."""

from __future__ import annotations

from pathlib import Path

from app.api.grpc import codegen
from app.api.grpc.proto import controller_pb2 as pb

ROOT = Path(__file__).resolve().parents[2]


def test_generated_code_is_current(tmp_path: Path) -> None:
    for generated in codegen.generate(tmp_path):
        committed = ROOT / codegen.PROTO_DIR / generated.name
        assert committed.read_text() == generated.read_text(), f"{committed} is stale: run `make proto`"


def test_wire_facts_match_pravega() -> None:
    service = pb.DESCRIPTOR.services_by_name["ControllerService"]
    assert service.full_name == "io.pravega.controller.stream.api.grpc.v1.ControllerService"
    assert len(service.methods) == 47
    assert pb.StreamConfig.DESCRIPTOR.fields_by_name["rolloverSizeBytes"].number == 6
    assert pb.UpdateStreamStatus.STREAM_SEALED == 4
    assert pb.PingTxnStatus.UNKNOWN == 7
    assert pb.ScaleResponse.DESCRIPTOR.fields_by_name["epoch"].number == 3
