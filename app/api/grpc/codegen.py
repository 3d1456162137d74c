"""Regenerates the protobuf and grpclib modules from controller.proto (`make proto`).

The generated files are committed; tests/api/test_codegen.py regenerates into a temporary
directory and fails if the committed copies differ, so the two can never drift.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[3]
PROTO_DIR = Path("app/api/grpc/proto")
PROTO = PROTO_DIR / "controller.proto"
GENERATED = ("controller_pb2.py", "controller_pb2.pyi", "controller_grpc.py")


def generate(out_root: Path) -> list[Path]:
    """Writes the generated modules under out_root/app/api/grpc/proto and returns their paths."""
    from grpc_tools import protoc  # a dev dependency: only code generation needs it

    # protoc finds the grpclib plugin on PATH; it is installed beside this interpreter.
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    (out_root / PROTO_DIR).mkdir(parents=True, exist_ok=True)
    args = [
        "protoc",
        f"--proto_path={_ROOT}",
        f"--python_out={out_root}",
        f"--pyi_out={out_root}",
        f"--grpclib_python_out={out_root}",
        str(_ROOT / PROTO),
    ]
    if protoc.main(args) != 0:
        raise RuntimeError("protoc failed")
    return [out_root / PROTO_DIR / name for name in GENERATED]


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for path in generate(Path(tmp)):
            shutil.copyfile(path, _ROOT / PROTO_DIR / path.name)
            print(f"wrote {PROTO_DIR / path.name}")


if __name__ == "__main__":
    main()
