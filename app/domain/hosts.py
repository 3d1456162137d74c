"""A segment store's address as configured (`--segment-store-hosts`) and as the container map
names it. Pure, so the settings that parse it and the adapters that dial it share it without
either importing the other.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.domain.errors import InvalidInput


@dataclass(frozen=True, slots=True)
class HostAddress:
    host: str
    port: int

    @staticmethod
    def parse(text: str) -> HostAddress:
        host, sep, port = text.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise InvalidInput(f"segment-store host must look like HOST:PORT, got {text!r}")
        return HostAddress(host.strip("[]"), int(port))
