"""The embedded segment stores of one `serve --processes N` run: N processes behind one port
(SO_REUSEPORT), so a reader's connection and a writer's may land in different processes. Each
store tells the others of every change to a segment (so a read parked at its tail in one process
wakes on an append through another), and sends its traffic observations to store 0, which alone
judges auto-scaling (Pravega's one monitor per segment) from the sum of what every process saw.
Store 0, whose storage writer alone knows the long-term tier's backlog, also tells the others
which containers' appends the tier throttles (app/store/tier_throttle.py), after each of its
writer's passes.

Each store binds a datagram socket `store-<index>.sock` in the run's directory (made by the
supervisor, private to its user) and sends to the others' with `sendto`, once per event-loop turn
for all that turn's changes.

Invariants: a change is sent only after the storage call that made it returned (so after its
commit); a peer whose queue is full is sent the rest later, in order, never dropped while it
lives (up to MAX_BACKLOG datagrams, past which the oldest go and its parked reads answer at their
bound instead); a peer that is down (no socket, nobody bound) is skipped, since it has no parked
reads and its restarted self reads everything afresh. A lost observation only delays an auto-scale
report, as in a restarted Pravega store. Nothing received is trusted blindly: a malformed datagram
is logged and dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Final

from app.turns import EndOfTurn

log = logging.getLogger("pgcontroller.segment-store.peers")

JUDGE: Final = 0  # the store that judges auto-scaling for the run
# A datagram's payload stays far below AF_UNIX's limit (the socket's send buffer).
MAX_DATAGRAM: Final = 32 * 1024
# Datagrams kept for one peer whose queue is full before the oldest are dropped.
MAX_BACKLOG: Final = 4096
RETRY_S: Final = 0.005
_SUN_PATH_MAX: Final = 107

Observation = list[Any]


def socket_path(directory: Path, index: int) -> Path:
    return directory / f"store-{index}.sock"


class PeerError(ValueError):
    """The run's directory or this store's place in it cannot work."""


class StorePeers:
    def __init__(self, directory: Path, index: int, size: int) -> None:
        if size < 2:
            raise PeerError(f"a group of segment stores has at least 2 members, got {size}")
        if not 0 <= index < size:
            raise PeerError(f"segment store index {index} is outside its group of {size}")
        self.directory = directory
        self.index = index
        self.size = size
        self._path = socket_path(directory, index)
        if len(bytes(self._path)) > _SUN_PATH_MAX:
            raise PeerError(f"the peers' socket path is too long for a Unix socket: {self._path}")
        self._peers = [socket_path(directory, i) for i in range(size) if i != index]
        self._judge_path = socket_path(directory, JUDGE)
        self._sock: socket.socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # This turn's changes and observations, sent together at the end of the turn.
        self._changed: dict[str, None] = {}
        self._observations: list[Observation] = []
        self._appends: dict[str, int] = {}  # segment -> its coalesced "appended" in _observations
        self._turn = EndOfTurn(self._flush)
        self._backlog: dict[Path, deque[bytes]] = {}
        self._retry: asyncio.TimerHandle | None = None
        self._on_changed: Callable[[str], None] = lambda _segment: None
        self._on_observed: Callable[[Observation], None] | None = None
        self._on_throttled: Callable[[list[int]], None] | None = None
        self._throttled: list[int] | None = None  # the judge's latest, sent at the end of the turn
        self.sent = 0
        self.received = 0
        self.deferred = 0  # datagrams held back while their peer's queue was full
        self.dropped = 0

    @property
    def judges(self) -> bool:
        """Whether this store judges auto-scaling (the others send it their observations)."""
        return self.index == JUDGE

    def on_changed(self, callback: Callable[[str], None]) -> None:
        """Called with each segment another store of the run changed."""
        self._on_changed = callback

    def on_observed(self, callback: Callable[[Observation], None]) -> None:
        """The judge's: called with each traffic observation another store of the run made."""
        self._on_observed = callback

    def on_throttled(self, callback: Callable[[list[int]], None]) -> None:
        """The others': called with the containers whose appends the judge's tier throttles."""
        self._on_throttled = callback

    def start(self) -> None:
        """Binds this store's socket (replacing one left by an earlier life of this index)."""
        self._loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            sock.setblocking(False)
            with contextlib.suppress(FileNotFoundError):
                self._path.unlink()
            sock.bind(str(self._path))
        except OSError as exc:
            sock.close()
            what = f"segment store {self.index} cannot bind its group socket {self._path}"
            raise PeerError(f"{what}: {exc}") from exc
        self._sock = sock
        self._loop.add_reader(sock.fileno(), self._receive)

    def close(self) -> None:
        if self._retry is not None:
            self._retry.cancel()
        sock, self._sock = self._sock, None
        if sock is None:
            return
        if self._loop is not None:
            self._loop.remove_reader(sock.fileno())
        sock.close()
        with contextlib.suppress(FileNotFoundError):
            self._path.unlink()

    # --- sending --------------------------------------------------------------------------------

    def changed(self, segment: str) -> None:
        """`segment` changed here (committed): the others wake their reads parked on it."""
        self._changed[segment] = None
        self._schedule()

    def observe(self, observation: Observation) -> None:
        """A traffic observation for the judge; a turn's appends to one segment are summed."""
        if self.judges:
            raise PeerError("the judging store applies its own observations")
        if observation[0] == "appended":
            at = self._appends.get(observation[1])
            if at is not None:
                pending = self._observations[at]
                pending[2] += observation[2]
                pending[3] += observation[3]
                return
            self._appends[observation[1]] = len(self._observations)
        else:
            # Later appends must not be summed into ones before this (a merge, say).
            self._appends.clear()
        self._observations.append(list(observation))
        self._schedule()

    def throttled(self, containers: Iterable[int]) -> None:
        """The judge's: the containers whose appends its tier throttles now (every pass, changed
        or not, so a store restarted meanwhile learns it too)."""
        if not self.judges:
            raise PeerError("only the judging store runs the storage writer")
        self._throttled = sorted(containers)
        self._schedule()

    def _schedule(self) -> None:
        if self._sock is not None:
            self._turn.ask()

    def _flush(self) -> None:
        changed, self._changed = list(self._changed), {}
        observations, self._observations = self._observations, []
        self._appends.clear()
        wakes = _datagrams("changed", changed)
        if self._throttled is not None:
            # An empty list is news too: nothing is throttled any more.
            wakes.append(_datagram("throttled", [json.dumps(c) for c in self._throttled]))
            self._throttled = None
        for peer in self._peers:
            datagrams = wakes + (_datagrams("observed", observations) if peer == self._judge_path else [])
            if datagrams:
                self._send(peer, datagrams)

    def _send(self, peer: Path, datagrams: Sequence[bytes]) -> None:
        backlog = self._backlog.get(peer)
        if backlog:
            self._queue(peer, backlog, datagrams)  # keep the order: after what waits already
            return
        for i, datagram in enumerate(datagrams):
            outcome = self._sendto(peer, datagram)
            if outcome == "full":
                self._queue(peer, self._backlog.setdefault(peer, deque()), datagrams[i:])
                return
            if outcome == "down":
                return

    def _sendto(self, peer: Path, datagram: bytes) -> str:
        sock = self._sock
        if sock is None:
            return "down"
        try:
            sock.sendto(datagram, str(peer))
        except BlockingIOError:
            return "full"
        except (FileNotFoundError, ConnectionRefusedError):
            return "down"  # not started yet, or dead: no parked reads to wake there
        except OSError as exc:
            log.warning("could not tell segment store %s of changes: %r", peer.name, exc)
            return "down"
        self.sent += 1
        return "sent"

    def _queue(self, peer: Path, backlog: deque[bytes], datagrams: Sequence[bytes]) -> None:
        backlog.extend(datagrams)
        self.deferred += len(datagrams)
        while len(backlog) > MAX_BACKLOG:
            backlog.popleft()
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 1000 == 0:
                log.warning(
                    "segment store %s reads its wake-ups too slowly: %d dropped (its parked reads "
                    "answer at their bound instead)",
                    peer.name,
                    self.dropped,
                )
        if self._retry is None and self._loop is not None:
            self._retry = self._loop.call_later(RETRY_S, self._resend)

    def _resend(self) -> None:
        self._retry = None
        for peer, backlog in list(self._backlog.items()):
            while backlog:
                outcome = self._sendto(peer, backlog[0])
                if outcome == "full":
                    break
                backlog.popleft()
                if outcome == "down":
                    backlog.clear()
            if not backlog:
                del self._backlog[peer]
        if self._backlog and self._loop is not None:
            self._retry = self._loop.call_later(RETRY_S, self._resend)

    # --- receiving ------------------------------------------------------------------------------

    def _receive(self) -> None:
        sock = self._sock
        while sock is not None:
            try:
                datagram = sock.recv(MAX_DATAGRAM + 1024)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                log.warning("reading the other segment stores' changes failed: %r", exc)
                return
            self.received += 1
            self._deliver(datagram)

    def _deliver(self, datagram: bytes) -> None:
        try:
            kind, items = json.loads(datagram)
            if not isinstance(items, list):
                raise TypeError(f"items of {kind!r} are not a list")
            if kind == "changed":
                for segment in items:
                    if not isinstance(segment, str):
                        raise TypeError(f"a changed segment's name is {type(segment).__name__}")
                for segment in items:
                    self._on_changed(segment)
            elif kind == "observed" and self._on_observed is not None:
                for observation in items:
                    self._on_observed(observation)
            elif kind == "throttled":
                if not all(type(c) is int for c in items):
                    raise TypeError("a throttled container is not an int")
                if self._on_throttled is not None:
                    self._on_throttled(items)
            elif kind != "observed":
                raise ValueError(f"unknown message {kind!r}")
        except Exception as exc:
            log.warning("dropped a malformed message from another segment store: %r", exc)


def _datagrams(kind: str, items: Sequence[Any]) -> list[bytes]:
    """`items` in as few datagrams as fit MAX_DATAGRAM (an item too large alone still goes alone)."""
    out: list[bytes] = []
    batch: list[str] = []
    size = 0
    for item in items:
        encoded = json.dumps(item)
        if batch and size + len(encoded) + 1 > MAX_DATAGRAM:
            out.append(_datagram(kind, batch))
            batch, size = [], 0
        batch.append(encoded)
        size += len(encoded) + 1
    if batch:
        out.append(_datagram(kind, batch))
    return out


def _datagram(kind: str, encoded_items: list[str]) -> bytes:
    return f'["{kind}",[{",".join(encoded_items)}]]'.encode()
