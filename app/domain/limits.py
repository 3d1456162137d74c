"""Bounds every input must stay within, so that whatever a client sends is something the system can
honour: arithmetic on it stays inside PostgreSQL's bigint, the work it causes is bounded, and the
event loop is never held by one request. docs/compatibility.md states them in users' terms.

Validation checks these before anything is written; adapters (gRPC, REST) share them.
"""

from typing import Final

# Segments in one epoch: at creation (minNumSegments), after a scale, or made by one auto-scale
# split. Creating this many is a few seconds of bounded, chunked work.
MAX_SEGMENTS_PER_EPOCH: Final = 10_000

# The latest timestamp accepted anywhere a client gives a time (scale timestamps, writer marks,
# stream-cut times): 9999-12-31T23:59:59.999Z. Far below 2^63-1, so time + lease or + 1 never
# overflows a bigint.
MAX_TIMESTAMP_MS: Final = 253_402_300_799_999

# Largest request a client may send: Pravega's controller uses gRPC's default of 4 MiB; REST
# bodies are small JSON documents.
MAX_GRPC_MESSAGE_BYTES: Final = 4 * 1024 * 1024
MAX_REST_BODY_BYTES: Final = 1024 * 1024

# Work proportional to a request's size (segments created, rows written) runs in batches of at
# most this many, each one await, so the event loop serves other clients between them.
SEGMENTS_PER_BATCH: Final = 1_000
