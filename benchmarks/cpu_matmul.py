"""Float32 products on the CPU: torch's F.linear (the BLAS library torch was built with, MKL for the x86-64 wheels)
against oneDNN on the same dense weight, and against oneDNN on a weight packed for it once, for the shapes of
benchmarks/memory.py's 100m model (hidden 768, MLP 2560).

    python benchmarks/cpu_matmul.py [--threads 2] [--rows 8,192,2240]

Rows: 8 is one decoding step of 8 sequences, 192 a prefill, 2240 a training forward of 8 x 280 tokens. Each
product runs over 12 different weights in turn (one per layer), so that weights come from memory rather than the
cache, as they do in a real pass. Prints microseconds per product and the largest difference from F.linear relative
to the largest output (float32 rounding is about 1e-7 per addition).
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

SHAPES = {"q/k/v/o 768x768": (768, 768), "gate/up 2560x768": (2560, 768), "down 768x2560": (768, 2560)}
LAYERS = 12


def _time(fn, repeats: int) -> float:
    fn()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) / repeats / LAYERS * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rows", default="8,192,2240")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if not torch.backends.mkldnn.is_available():
        raise SystemExit("this torch build has no oneDNN")
    onednn = torch.ops.mkldnn._linear_pointwise
    print(f"torch {torch.__version__}, {args.threads} threads; microseconds per product")
    print(f"{'weight':<18}{'rows':>6}{'F.linear':>10}{'oneDNN':>10}{'packed':>10}{'F.linear/oneDNN':>17}{'max rel diff':>14}")
    for name, (out_features, in_features) in SHAPES.items():
        g = torch.Generator().manual_seed(0)
        weights = [torch.randn(out_features, in_features, generator=g) / in_features ** 0.5 for _ in range(LAYERS)]
        for rows in (int(r) for r in args.rows.split(",")):
            x = torch.randn(rows, in_features, generator=g)
            packed = [torch.ops.mkldnn._reorder_linear_weight(w, rows) for w in weights]
            repeats = max(2, 2000 // rows)
            blas = _time(lambda: [F.linear(x, w) for w in weights], repeats)
            dense = _time(lambda: [onednn(x, w, None, "none", [], "") for w in weights], repeats)
            pack = _time(lambda: [onednn(x, p, None, "none", [], "") for p in packed], repeats)
            reference = F.linear(x, weights[0])
            diff = (onednn(x, weights[0], None, "none", [], "") - reference).abs().max() / reference.abs().max()
            print(f"{name:<18}{rows:>6}{blas:>10.0f}{dense:>10.0f}{pack:>10.0f}{blas / dense:>16.2f}x{diff.item():>14.1e}")


if __name__ == "__main__":
    main()
