"""Host memory of a training process: large freed blocks go back to the operating system.

glibc's malloc serves a block of at least M_MMAP_THRESHOLD bytes (128 KiB at start) with its own mmap and returns it
to the system when freed; but each time such a block is freed, the threshold rises to that block's size (up to 32
MiB on 64-bit systems), and so does the heap's trim threshold (twice as much). After the first backward pass the
activations of a step (tensors of a few MiB each) are then carved out of the heap, and what a step frees stays in
the process: the resident set grows to the sum of each phase's high-water marks instead of following what is live,
and fragments further from step to step (glibc's mallopt(3), "M_MMAP_THRESHOLD"; the dynamic threshold is
described under "M_MMAP_THRESHOLD" / "Note"). Setting the threshold explicitly turns that adjustment off; this
module fixes it at 4 MiB, so the large activation blocks of bigger models follow the live tensors. Not lower:
every mapped block costs page faults when it is touched again, and at glibc's starting value (128 KiB) a
0.5M-parameter model's RL step spent about 5x more time in the kernel (30 steps of the demo's RL phase: 11.5 s of
system time instead of 2.2 s; 3.8 s at 4 MiB). Accelerator memory is not malloc's and is unaffected.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

M_MMAP_THRESHOLD = -3  # mallopt parameter number (malloc.h)
MMAP_THRESHOLD_BYTES = 4 * 1024 * 1024  # blocks from 4 MiB up (activations of bigger models) are mapped on their own


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
