"""The unbiased pass@k estimator (Chen et al., 2021) against its closed form and brute force."""

import itertools
import math

import pytest

from rlvr.eval import pass_at_k


@pytest.mark.parametrize(
    "n, c, k, expected",
    [(1, 0, 1, 0.0), (1, 1, 1, 1.0), (10, 3, 1, 0.3), (5, 5, 5, 1.0), (5, 0, 5, 0.0), (5, 1, 5, 1.0), (4, 2, 2, 1 - 1 / 6)],
)
def test_hand_made_cases(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected)


@pytest.mark.parametrize("n", range(1, 7))
def test_matches_brute_force_over_all_k_subsets(n):
    for c in range(n + 1):
        outcomes = [1] * c + [0] * (n - c)
        for k in range(1, n + 1):
            subsets = list(itertools.combinations(outcomes, k))
            brute = sum(any(s) for s in subsets) / len(subsets)
            assert pass_at_k(n, c, k) == pytest.approx(brute)
            assert pass_at_k(n, c, k) == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k))


@pytest.mark.parametrize("n, c, k", [(3, 4, 1), (3, 1, 4), (3, 1, 0), (3, -1, 1)])
def test_rejects_impossible_arguments(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)
