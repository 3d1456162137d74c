"""A host's address, the one type for it: a segment store's as configured
(`--segment-store-hosts`), registered and named by the container map, and a controller's as
getControllerServerList answers it. Pure, so the settings that parse it, the ports that name it
and the adapters that dial it share it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.domain.errors import InvalidInput


@dataclass(frozen=True, slots=True, order=True)
class HostAddress:
    host: str
    port: int

    def __str__(self) -> str:
        # Brackets keep an IPv6 literal's colons apart from the port's.
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @staticmethod
    def parse(text: str) -> HostAddress:
        host, sep, port = text.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise InvalidInput(f"segment-store host must look like HOST:PORT, got {text!r}")
        return HostAddress(host.strip("[]"), int(port))
