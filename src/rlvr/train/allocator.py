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

Mapping each large block afresh has its own price: every page is faulted in and zeroed again each time, which cost a
100M-parameter LoRA + checkpointing update about 40% of its time (docs/performance.md, benchmarks/allocator_update.py).
A caching allocator avoids both costs: TCMalloc (gperftools) keeps freed spans for reuse and coalesces them, so the
update runs at the speed of a warm heap while the resident set follows the live tensors. PyTorch's CPU launcher
(``torch.backends.xeon.run_cpu --enable-tcmalloc``) and vLLM's CPU backend preload it for the same reason. A process
cannot change its malloc once it runs, so the ``rlvr`` command does it at the start: ``train``, ``sft`` and ``demo``
start the program again with TCMalloc in LD_PRELOAD when it is installed (``relaunch_with_tcmalloc``), and the
relaunched process takes LD_PRELOAD back out of its environment, so what it starts (sandboxes, engines, launchers)
runs with the allocator it would have had. The environment variable RLVR_HOST_ALLOCATOR chooses: ``auto`` (the
default: TCMalloc when installed and LD_PRELOAD is not already set), ``tcmalloc`` (an error when it is not installed)
or ``system`` (the C library's malloc, with the fixed threshold above). A run records which one it ran with
(manifest.json, ``host_allocator``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from pathlib import Path

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


HOST_ALLOCATOR_ENV = "RLVR_HOST_ALLOCATOR"
HOST_ALLOCATORS = ("auto", "tcmalloc", "system")
TCMALLOC_PACKAGE = "libtcmalloc-minimal4 (Debian, Ubuntu), gperftools-libs (Fedora), gperftools (conda)"
TCMALLOC_FILES = ("libtcmalloc_minimal.so.4", "libtcmalloc.so.4", "libtcmalloc_minimal.so", "libtcmalloc.so")
# set for the relaunched process: "=" and the user's LD_PRELOAD, or "-" when the user had none
_RELAUNCHED = "RLVR_HOST_ALLOCATOR_RELAUNCHED"
# gperftools reports each allocation above this many bytes on stderr (1 GiB by default: a large model's embedding)
_LARGE_ALLOC_REPORT = "TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD"


def find_tcmalloc() -> str | None:
    """The path of an installed TCMalloc shared library (gperftools), or None."""
    if not sys.platform.startswith("linux"):
        return None
    import sysconfig

    conda = os.environ.get("CONDA_PREFIX")
    dirs = [Path(d) for d in (sysconfig.get_config_var("LIBDIR"), conda and f"{conda}/lib",
                              f"/usr/lib/{sysconfig.get_config_var('MULTIARCH') or ''}", "/usr/lib64", "/usr/lib",
                              "/usr/local/lib") if d]
    for name in TCMALLOC_FILES:
        for d in dirs:
            if (d / name).is_file():
                return str(d / name)
    found = ctypes.util.find_library("tcmalloc_minimal") or ctypes.util.find_library("tcmalloc")
    return found or None  # a bare soname, which the dynamic loader finds on its own search path


def host_allocator() -> str:
    """The malloc this process runs on: ``tcmalloc`` when TCMalloc serves malloc, else ``glibc``, else ``system``."""
    if not sys.platform.startswith("linux"):
        return "system"
    process = ctypes.CDLL(None)
    if hasattr(process, "tc_malloc"):
        address = ctypes.cast(process.malloc, ctypes.c_void_p).value
        if address == ctypes.cast(process.tc_malloc, ctypes.c_void_p).value:
            return "tcmalloc"
    return "glibc" if _glibc() is not None else "system"


def requested_host_allocator(environ: dict | None = None) -> str:
    """RLVR_HOST_ALLOCATOR's value (``auto`` when unset); a clear error for any other value."""
    from rlvr.errors import UserError

    value = (environ if environ is not None else os.environ).get(HOST_ALLOCATOR_ENV, "auto").strip().lower() or "auto"
    if value not in HOST_ALLOCATORS:
        raise UserError(f"{HOST_ALLOCATOR_ENV}={value!r}: expected one of {', '.join(HOST_ALLOCATORS)}")
    return value


def relaunch_environment(environ: dict, library: str) -> dict:
    """The environment of the program started again on ``library``: LD_PRELOAD names it, and the user's own
    LD_PRELOAD is kept aside for ``restore_environment``."""
    env = dict(environ)
    env[_RELAUNCHED] = "=" + environ["LD_PRELOAD"] if "LD_PRELOAD" in environ else "-"
    env["LD_PRELOAD"] = f"{library} {environ.get('LD_PRELOAD', '')}".strip()  # first, so that it serves malloc
    env.setdefault(_LARGE_ALLOC_REPORT, str(1 << 50))
    return env


def restore_environment(environ=os.environ) -> bool:
    """In a relaunched process, put LD_PRELOAD back as the user had it, so that the processes it starts do not
    inherit the preload; True when this process was relaunched."""
    saved = environ.pop(_RELAUNCHED, None)
    if saved is None:
        return False
    if saved.startswith("="):
        environ["LD_PRELOAD"] = saved[1:]
    else:
        environ.pop("LD_PRELOAD", None)
    return True


def relaunch_with_tcmalloc(argv: list[str] | None = None) -> None:
    """Start this program again with TCMalloc serving malloc, as RLVR_HOST_ALLOCATOR asks (module docstring).
    Returns only when the process keeps its allocator: asked not to (``system``), already on TCMalloc, not
    installed under ``auto``, LD_PRELOAD set by the user under ``auto``, or already relaunched once."""
    from rlvr.errors import UserError

    requested = requested_host_allocator()
    if restore_environment():
        if requested == "tcmalloc" and host_allocator() != "tcmalloc":
            raise UserError(f"{HOST_ALLOCATOR_ENV}=tcmalloc: the dynamic loader did not preload {find_tcmalloc()} "
                            "(its message is above); set RLVR_HOST_ALLOCATOR=system to run on the C library's malloc")
        return
    if requested == "system" or host_allocator() == "tcmalloc":
        return
    library = find_tcmalloc() if sys.executable else None  # an embedded interpreter cannot be started again
    if library is None:
        if requested == "tcmalloc":
            raise UserError(f"{HOST_ALLOCATOR_ENV}=tcmalloc: no TCMalloc library found (looked for "
                            f"{', '.join(TCMALLOC_FILES)}); install {TCMALLOC_PACKAGE}, or set "
                            f"{HOST_ALLOCATOR_ENV}=system")
        return
    if requested == "auto" and os.environ.get("LD_PRELOAD"):
        return  # the user preloads something already: theirs to choose
    argv = list(argv if argv is not None else sys.orig_argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, argv, relaunch_environment(dict(os.environ), library))


def set_up_host_memory() -> str:
    """What a training process does first about host memory: on glibc's malloc, fix the mmap threshold
    (``return_large_blocks_to_the_system``); TCMalloc needs nothing. Returns the allocator's name."""
    allocator = host_allocator()
    if allocator == "glibc":
        return_large_blocks_to_the_system()
    return allocator
