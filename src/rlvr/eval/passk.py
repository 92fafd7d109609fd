"""pass@k: the chance that at least one of k samples is correct, estimated without bias from n >= k samples."""

from __future__ import annotations

import math


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased estimator 1 - C(n-c, k) / C(n, k) (Chen et al., 2021, "Evaluating Large Language Models Trained
    on Code", Eq. 1) for n samples of which c are correct; computed as a product to stay exact for large n."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod((n - c - i) / (n - i) for i in range(k))
