"""A reply serialized ahead of time, and the codec's rule for sending one: the bytes as they are,
only as the message type the method answers (as grpclib refuses a message of another type).
"""

from __future__ import annotations

from typing import Any

from google.protobuf.message import Message


class PreEncoded:
    """A reply already serialized as `message_type`; the server's codec sends `data` unchanged."""

    __slots__ = ("data", "message_type")

    def __init__(self, data: bytes, message_type: type[Message]) -> None:
        self.data = data
        self.message_type = message_type

    def decoded(self) -> Message:
        """The message these bytes encode (tests, and anything that must look inside)."""
        message = self.message_type()
        message.ParseFromString(self.data)
        return message


def encode_reply(message: Any, message_type: Any) -> bytes | None:
    """The bytes of a pre-encoded reply of the right type; None when `message` is an ordinary
    message (the codec serializes it). A pre-encoded reply of another type is a programming
    error, refused as grpclib refuses a message of the wrong type."""
    if not isinstance(message, PreEncoded):
        return None
    if message.message_type is not message_type:
        raise TypeError(f"pre-encoded {message.message_type.__name__} sent as {message_type.__name__}")
    return message.data
