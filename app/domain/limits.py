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

# A split of one segment by auto-scaling makes at most scaleFactor pieces: bounded so that one
# split can never ask for more segments than an epoch may hold.
MAX_SCALE_FACTOR: Final = MAX_SEGMENTS_PER_EPOCH

# Rates are Java ints on the wire (targetRate in KiB/s or events/s).
MAX_TARGET_RATE: Final = 2**31 - 1

# Any duration a client gives (retention time, timestamp aggregation timeout): no longer than
# the whole timestamp range, so time + duration stays far inside a bigint.
MAX_DURATION_MS: Final = MAX_TIMESTAMP_MS

# Any byte count a client gives (retention size, rollover size, stream-cut offsets): at most
# 2^62, so a sum or difference of two of them still fits in a bigint.
MAX_BYTES: Final = 2**62

# Java's Long.MAX_VALUE: the retentionMax every client sends for "no maximum". Accepted as
# that sentinel only, never as a size or a time.
UNBOUNDED_RETENTION: Final = 2**63 - 1

# Java's Long.MIN_VALUE: a writer's "no timestamp" on commitTransaction and noteTimestamp.
NO_TIMESTAMP: Final = -(2**63)

# Free-form strings a client names things by that are stored as text (writer ids, tags are
# bounded by the tag rule): bounded so an index entry stays small.
MAX_WRITER_ID_LENGTH: Final = 1024

# Work proportional to a request's size (segments created, rows written) runs in batches of at
# most this many, each one await, so the event loop serves other clients between them.
SEGMENTS_PER_BATCH: Final = 1_000
