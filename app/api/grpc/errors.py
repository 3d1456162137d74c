"""Turns a domain error into the gRPC error its row of app/api/errors.py names; RPCs whose
outcomes are status enums of the contract answer those instead and never come here."""

from __future__ import annotations

from grpclib.exceptions import GRPCError

from app.api.errors import message_for, row_for
from app.domain.errors import DomainError


def grpc_error_for(exc: DomainError) -> GRPCError:
    return GRPCError(row_for(exc).grpc, message_for(exc))
