"""Counts the gRPC calls being handled, so a shutdown can wait for them before closing the
server (grpclib's close cancels every call still running). Long-lived health watches are not
counted: they never end on their own.
"""

from __future__ import annotations

import asyncio

import grpclib.server
from grpclib.events import RecvRequest, listen

from app.waiting import wait_event

_UNCOUNTED_PREFIX = "/grpc.health.v1.Health/"


class InFlightCalls:
    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[object]] = set()
        self._idle = asyncio.Event()
        self._idle.set()

    def attach(self, server: grpclib.server.Server) -> None:
        listen(server, RecvRequest, self._on_request)

    @property
    def count(self) -> int:
        return len(self._tasks)

    async def wait_idle(self, timeout_s: float) -> bool:
        """True once no call is in flight; False when `timeout_s` passed first."""
        return await wait_event(self._idle, timeout_s)

    async def _on_request(self, event: RecvRequest) -> None:
        if event.method_name.startswith(_UNCOUNTED_PREFIX):
            return
        # grpclib dispatches this event inside the call's own task: that task is the call.
        task = asyncio.current_task()
        if task is None or task in self._tasks:
            return
        self._tasks.add(task)
        self._idle.clear()
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[object]) -> None:
        self._tasks.discard(task)
        if not self._tasks:
            self._idle.set()
