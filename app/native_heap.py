"""The C heap's thresholds for the data path's large buffers (glibc only).

A segment store allocates and frees buffers of a few MiB many times a second: a 2 MiB read
reply, the rows PostgreSQL sends for it, the chunks a group commit writes. With glibc's defaults
a buffer that large is mapped afresh from the kernel and unmapped when freed (its dynamic
threshold rises only past sizes already freed, and the heap's top is given back once more than
twice that is free), so each one costs a page fault and a zeroed page per 4 KiB it touches: in a
catch-up read, serve's own CPU per event read fell from about 2.1 to 1.3 µs once they were reused
(docs/performance.md, stop 62). Raising the mmap threshold above those sizes and the trim
threshold above it lets a freed buffer be reused in place; the price is that up to
`TRIM_THRESHOLD_BYTES` of freed memory stays mapped to the process.

Not higher: a buffer above the mmap threshold stays mapped on its own, grows by `mremap` and is
unmapped when freed, while one below it grows by copying within the heap and leaves holes there.
A connection's frame buffer grows towards Pravega's largest frame (16 MiB) as its bytes arrive;
with the threshold at glibc's maximum (32 MiB, stop 62) forty clients stalling in such frames
cost serve 89-106 MB of RSS (tests/e2e/test_hostile_store_port.py allows 100), at 4 MiB 63-76 MB,
with glibc's defaults 48-60 MB, and a catch-up read still faults nothing in (stop 63).

An operator's own tuning of glibc's malloc wins: with `MALLOC_MMAP_THRESHOLD_` or
`MALLOC_TRIM_THRESHOLD_` in the environment, or a `glibc.malloc.` tunable in `GLIBC_TUNABLES`,
nothing is changed.
"""

from __future__ import annotations

import ctypes
import os
import platform
from collections.abc import Mapping
from typing import Final

# mallopt's parameter numbers (malloc.h).
_M_TRIM_THRESHOLD: Final = -1
_M_MMAP_THRESHOLD: Final = -3

# Twice a read reply (at most 2 MiB) and the rows it is built from; what is larger is mapped on
# its own, as glibc does by default.
MMAP_THRESHOLD_BYTES: Final = 4 * 1024 * 1024
TRIM_THRESHOLD_BYTES: Final = 32 * 1024 * 1024

OPERATOR_VARIABLES: Final = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")
MALLOC_TUNABLES: Final = "glibc.malloc."


def _operator_tuned_malloc(environ: Mapping[str, str]) -> bool:
    return any(name in environ for name in OPERATOR_VARIABLES) or MALLOC_TUNABLES in environ.get(
        "GLIBC_TUNABLES", ""
    )


def keep_large_buffers() -> bool:
    """Sets the thresholds for the rest of the process's life; whether it did (False off glibc,
    or when the operator tuned glibc's malloc in the environment)."""
    if _operator_tuned_malloc(os.environ):
        return False
    if platform.libc_ver()[0] != "glibc":
        return False
    # The process's own symbols, libc's among them: no library search (find_library would run
    # ldconfig in a subprocess at every start).
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is None:
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    # The mmap threshold first: setting it also ends glibc's dynamic adjustment of both.
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
        mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    )
