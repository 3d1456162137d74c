"""What a stream operation of the stream client can fail with.

Invariant: every failure the client reports is a `StreamError`, and its message says what was
asked and why it failed in one line a user can act on (which stream, which segment, which
option); the transport's own exceptions never leave the package.
"""

from __future__ import annotations


class StreamError(Exception):
    """Any failure of a stream operation."""


class StreamNotFound(StreamError):
    """The scope or the stream does not exist, or it was deleted (its segments are gone)."""


class InvalidStreamCut(StreamError, ValueError):
    """A stream cut that is malformed, names segments the stream does not have, or is not a
    consistent cut of the stream (the controller's isStreamCutValid)."""


class StreamTruncated(StreamError):
    """Data to be read lies before a segment's start: the stream was truncated past it (`start`
    -1: the whole segment was deleted by a truncation)."""

    def __init__(self, segment: str, asked: int, start: int) -> None:
        where = "it is deleted" if start < 0 else f"it is truncated at offset {start}"
        super().__init__(f"segment {segment} cannot be read from offset {asked}: {where}")
        self.segment = segment
        self.asked = asked
        self.start = start


class AccessRefused(StreamError):
    """The controller or a segment store refused the credentials or their rights."""


class TransactionFailed(StreamError):
    """A transaction could not be created, written, committed or aborted as asked (it timed out,
    the stream was sealed, the controller refused)."""


class StreamUnavailable(StreamError):
    """The controller or a segment store did not answer, or answered something unexpected,
    after the client's retries."""
