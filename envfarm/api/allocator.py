"""Keep freed memory in the server process instead of handing it back to the kernel at once.

A groups page is megabytes: each trajectory's text is encoded and the page joined into one
body. glibc maps blocks that large fresh from the kernel and trims freed memory at the top of
its heap, so every page paid about a thousand page faults per copy (4.5 ms to join 4 MB here,
against 0.9 ms in memory already faulted in; bench/RESULTS.md). Raising the mmap and trim
thresholds keeps a few pages' worth of memory in the process to be reused: the server's
resident memory stays at its high-water mark of pages in flight. Anything but glibc is left
as it is.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD = 32 << 20
"""glibc's own ceiling for its dynamic threshold (64-bit)."""
TRIM_THRESHOLD = 256 << 20


def keep_freed_memory() -> bool:
    """True when glibc took the thresholds."""
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt if name else None
    except (OSError, AttributeError):
        mallopt = None
    if mallopt is None:
        return False
    taken = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    taken = bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)) and taken
    log.debug("malloc thresholds %s", "raised" if taken else "refused")
    return taken
