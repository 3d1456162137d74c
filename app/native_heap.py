"""The C heap's thresholds for the data path's large buffers (glibc only).

A segment store allocates and frees buffers of a few MiB many times a second: a 2 MiB read
reply, the rows PostgreSQL sends for it, the chunks a group commit writes. With glibc's defaults
a buffer that large is mapped afresh from the kernel and unmapped when freed (its dynamic
threshold rises only past sizes already freed, and the heap's top is given back once more than
twice that is free), so each one costs a page fault and a zeroed page per 4 KiB it touches: in a
catch-up read, serve's own CPU per event read fell from about 2.1 to 1.3 µs once they were reused
(docs/performance.md, stop 62). Raising the mmap threshold to glibc's maximum and the trim
threshold above it lets a freed buffer be reused in place; the price is that up to
`TRIM_THRESHOLD_BYTES` of freed memory stays mapped to the process.

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

# glibc's ceiling for the mmap threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX): a request above
# it is still mapped afresh, and those are rare here (a read reply is at most 2 MiB).
MMAP_THRESHOLD_BYTES: Final = 32 * 1024 * 1024
TRIM_THRESHOLD_BYTES: Final = 128 * 1024 * 1024

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
