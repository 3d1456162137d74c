"""A controller served over loopback with `--auth-enabled`, and accounts made in its database."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from grpclib.client import Channel

from app.api.grpc.proto.controller_grpc import ControllerServiceStub
from app.security.passwords import hash_password
from app.store.accounts import PgAccountStore
from app.testing.controller import Services, serving

ADMIN = ("admin", "admin-pw", "prn::*,READ_UPDATE")


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")


@dataclass
class Secured:
    services: Services
    grpc_port: int
    rest_port: int
    accounts: PgAccountStore
    channel: Channel

    @property
    def rest_base(self) -> str:
        return f"http://127.0.0.1:{self.rest_port}"

    @property
    def stub(self) -> ControllerServiceStub:
        return ControllerServiceStub(self.channel)

    async def add_user(self, name: str, password: str, acl: str) -> str:
        """The account's Basic `authorization` value."""
        await self.accounts.add(name, hash_password(password), acl, 1)
        return basic(name, password)


@pytest.fixture
async def secured(services: Services) -> AsyncIterator[Secured]:
    async with serving(services, auth_enabled=True) as servers:
        channel = Channel("127.0.0.1", servers.grpc_port)
        try:
            yield Secured(
                services,
                servers.grpc_port,
                servers.rest_port,
                PgAccountStore(services.resources.pool),
                channel,
            )
        finally:
            channel.close()
