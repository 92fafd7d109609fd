"""Host memory of a training process: large freed blocks go back to the operating system.

glibc's malloc serves a block of at least M_MMAP_THRESHOLD bytes (128 KiB at start) with its own mmap and returns it
to the system when freed; but each time such a block is freed, the threshold rises to that block's size (up to 32
MiB on 64-bit systems), and so does the heap's trim threshold (twice as much). After the first backward pass the
activations of a step (tensors of a few MiB each) are then carved out of the heap, and what a step frees stays in
the process: the resident set grows to the sum of each phase's high-water marks instead of following what is live,
and fragments further from step to step (glibc's mallopt(3), "M_MMAP_THRESHOLD"; the dynamic threshold is
described under "M_MMAP_THRESHOLD" / "Note"). Setting the threshold explicitly turns that adjustment off; this
module sets it to glibc's own starting value, so CPU training memory follows the live tensors. Allocations below
the threshold (per-token sampling temporaries) are unchanged. Accelerator memory is not malloc's and is unaffected.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

M_MMAP_THRESHOLD = -3  # mallopt parameter number (malloc.h)
MMAP_THRESHOLD_BYTES = 128 * 1024  # glibc's default starting threshold


def _glibc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    # gnu_get_libc_version exists only in glibc; other C libraries (musl) ignore or lack mallopt's parameters
    return libc if hasattr(libc, "gnu_get_libc_version") and hasattr(libc, "mallopt") else None


def return_large_blocks_to_the_system(threshold: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Fix glibc's mmap threshold at ``threshold`` bytes for this process (blocks this large are mapped on their
    own and unmapped when freed). True when set; False where the C library is not glibc (nothing changes)."""
    libc = _glibc()
    if libc is None:
        return False
    return bool(libc.mallopt(ctypes.c_int(M_MMAP_THRESHOLD), ctypes.c_int(threshold)))
