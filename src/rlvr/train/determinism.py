"""``train.deterministic``: the same numbers on any x86-64 CPU with AVX2, for the demos and for users who ask.

A CPU run's numbers depend on which kernels the libraries pick for the machine: ATen dispatches each vectorised
kernel to the widest instruction set the CPU has (AVX512 kernels reduce in another order than AVX2 ones), MKL's
matrix products follow the CPU's vendor and level unless its conditional numerical reproducibility mode fixes the
code path, oneDNN picks its own level, and several threads split reductions by the thread count. Pinning all four
to AVX2 and one thread gives bit-identical results on every x86-64 CPU made since about 2015 (docs/performance.md
measures the cost). ATen, MKL and oneDNN read their variables lazily, at their first kernel, so setting them from
Python works as long as no tensor operation has run yet in the process; ``pin_numerics`` checks that ATen took the
pin and warns, naming the variable to set before Python starts, when it was too late. Child processes (torchrun
ranks, Ray workers started by this process) inherit the variables.
"""

from __future__ import annotations

import os
import platform
import warnings
from pathlib import Path

# Read at the library's first kernel; children inherit them.
PINNED_ENV: dict[str, str] = {
    "ATEN_CPU_CAPABILITY": "avx2",  # ATen's vectorised kernels (aten/src/ATen/native/DispatchStub.cpp)
    "MKL_CBWR": "AVX2",  # MKL's conditional numerical reproducibility: one code path on every vendor's CPU
    "ONEDNN_MAX_CPU_ISA": "AVX2",  # oneDNN's primitives
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "CUBLAS_WORKSPACE_CONFIG": ":4096:8",  # what deterministic cuBLAS needs, should the run be on a GPU
}
PINNED_LEVEL = "AVX2"


def cpu_has_avx2(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether this is an x86-64 CPU with AVX2 and FMA (the pinned level); False where it cannot be told."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    try:
        flags = next((line for line in cpuinfo.read_text().splitlines() if line.startswith("flags")), "")
    except OSError:
        return False
    return {"avx2", "fma"} <= set(flags.split(":", 1)[-1].split())


def pin_numerics() -> str:
    """One thread, ATen/MKL/oneDNN kernels pinned to AVX2 and torch's deterministic algorithms; returns the
    capability ATen runs at. Call it before the process's first tensor operation; later, it warns."""
    pin_kernels = cpu_has_avx2()
    for key, value in PINNED_ENV.items():
        if key in ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA") and not pin_kernels:
            continue  # a CPU without AVX2 runs its own level; the warning below says so
        os.environ[key] = value
    import torch

    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass  # already set, or inter-op work has started: the inter-op pool runs whole ops, not parts of one
    torch.use_deterministic_algorithms(True, warn_only=True)  # an op without a deterministic kernel warns
    capability = torch.backends.cpu.get_cpu_capability()
    if not pin_kernels:
        warnings.warn(f"train.deterministic: this CPU has no AVX2 ({platform.machine()}); its kernels run at "
                      f"{capability}, so its numbers may differ from an x86-64 CPU with AVX2", stacklevel=2)
    elif capability != PINNED_LEVEL:
        warnings.warn(f"train.deterministic: ATen already chose its {capability} kernels before the pin; for the "
                      "same numbers on any CPU start the process with ATEN_CPU_CAPABILITY=avx2 MKL_CBWR=AVX2 "
                      "ONEDNN_MAX_CPU_ISA=AVX2 OMP_NUM_THREADS=1", stacklevel=2)
    return capability


def set_up_numerics(threads: int | None, deterministic: bool) -> None:
    """The process's numerics as ``train.threads`` and ``train.deterministic`` say; deterministic means one
    thread whatever ``threads`` says."""
    if deterministic:
        pin_numerics()
    elif threads:
        import torch

        torch.set_num_threads(threads)
