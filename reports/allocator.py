"""Freed arrays go back to the system at once (glibc only; elsewhere nothing changes).

glibc serves an allocation of at least M_MMAP_THRESHOLD bytes (128 KiB) with a mapping of its own,
returned to the system when it is freed; but after each such free it raises the threshold, up to
32 MiB, so the arrays of a few MB that a report makes and drops by the hundred (a year of results in
slices) come from the heap afterwards, and the heap does not shrink: a process doing that holds
hundreds of MB it no longer uses. Setting the threshold explicitly keeps it where it is. The report's
two processes set it (a year of nightlies: about 70 MB less at the side process's peak)."""
from __future__ import annotations

import ctypes
import ctypes.util

M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h)
THRESHOLD_BYTES = 128 * 1024


def keep_mmap_threshold(nbytes: int = THRESHOLD_BYTES) -> bool:
    """Fix glibc's mmap threshold at `nbytes`; False where the C library has no mallopt."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.mallopt(M_MMAP_THRESHOLD, nbytes))
    except (OSError, AttributeError):  # not glibc: its allocator has its own policy
        return False
