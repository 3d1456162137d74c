"""How an operator command reads an answer's status: success passes, a known refusal says its own
words with its exit code, and any other status is named as Pravega's enum names it."""

from __future__ import annotations

import pytest

from app.api.grpc.proto import controller_pb2 as pb
from app.cli.admin.common import EXIT_FAILED, EXIT_INVALID, AdminError, expect

STATUS = pb.CreateScopeStatus
REFUSALS = {
    STATUS.SCOPE_EXISTS: "already exists",
    STATUS.INVALID_SCOPE_NAME: ("invalid input: 'a b' is not a valid scope name", EXIT_INVALID),
}


def test_success_passes() -> None:
    expect("create scope a", STATUS.SUCCESS, STATUS.Status, REFUSALS)


@pytest.mark.parametrize(
    ("status", "message", "code"),
    [
        (STATUS.SCOPE_EXISTS, "create scope a: already exists", EXIT_FAILED),
        (
            STATUS.INVALID_SCOPE_NAME,
            "create scope a: invalid input: 'a b' is not a valid scope name",
            EXIT_INVALID,
        ),
        (STATUS.FAILURE, "create scope a: the controller answered FAILURE", EXIT_FAILED),
    ],
)
def test_a_refusal_is_one_line_with_its_exit_code(status: int, message: str, code: int) -> None:
    with pytest.raises(AdminError) as refused:
        expect("create scope a", status, STATUS.Status, REFUSALS)
    assert (str(refused.value), refused.value.code) == (message, code)


def test_another_success_value_is_named() -> None:
    scale = pb.ScaleResponse
    expect("scale", scale.STARTED, scale.ScaleStreamStatus, {}, "STARTED")
    with pytest.raises(AdminError, match=r"^scale: the controller answered FAILURE$"):
        expect("scale", scale.FAILURE, scale.ScaleStreamStatus, {}, "STARTED")
