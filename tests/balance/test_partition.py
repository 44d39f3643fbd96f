"""Partition formulas and Algorithm 2 against the DSAG paper's Examples 1-3."""

from __future__ import annotations

import numpy as np
import pytest

from daskstraggle.balance import (
    align,
    align_next,
    part_start,
    part_stop,
    part_trans,
    subpartition_bounds,
)
from daskstraggle.errors import InvalidParameterError
from daskstraggle.methods.cache import GradientCache
from daskstraggle.problems.base import KernelResult


def _r(value: float) -> KernelResult:
    return KernelResult(np.array([value]), np.array([0.0]), 1)


def _rows(n: int, p: int, k: int) -> tuple[int, int]:
    """1-based inclusive rows of subpartition k."""
    return part_start(n, p, k), part_stop(n, p, k)


def test_example_1_partitions():
    # 2 workers, n_1 = n_2 = 10, p = 2: X_1:5, X_6:10 on worker 1 (X_11:15, X_16:20 on 2)
    assert [_rows(10, 2, k) for k in (1, 2)] == [(1, 5), (6, 10)]
    assert [tuple(10 + r for r in _rows(10, 2, k)) for k in (1, 2)] == [(11, 15), (16, 20)]
    # p_1 <- 3: X_1:3, X_4:6, X_7:10
    assert [_rows(10, 3, k) for k in (1, 2, 3)] == [(1, 3), (4, 6), (7, 10)]
    # sending X_4:6 next evicts both cached entries of worker 1
    cache = GradientCache(20)
    for a, b in [(0, 5), (5, 10), (10, 15), (15, 20)]:
        cache.insert([(a, b)], 0, _r(1.0))
    cache.insert([(3, 6)], 1, _r(1.0))
    assert cache.n_evicted == 2
    assert cache.covered == 3 + 10


def test_example_3_alignment():
    # processed X_1:5 (k = 1), p 2 -> 3: Algorithm 2 walks k' = 2 (rows 4-6, not aligned
    # with row 6) back to k' = 1 (rows 1-3, aligned with row 1)
    assert part_trans(10, 2, 3, 2) == 2
    assert part_start(10, 3, 2) == 4 != part_start(10, 2, 2) == 6
    assert part_trans(10, 3, 2, 1) == 1
    assert align(10, 2, 3, 1) == 1
    # the paper's other aligned solution: n = 10, p 2 -> 4, k = 2 and k' = 3 (row 6)
    assert part_start(10, 4, 3) == 6 == part_start(10, 2, 2)
    assert align(10, 2, 4, 1) == 3


def test_example_2_cache_refills_with_one_missing_iteration_each():
    # after re-partitioning the worker sends X_1:3, X_4:6, X_7:10 in turn (Alg. 2 start)
    cache = GradientCache(20)
    for a, b in [(0, 5), (5, 10), (10, 20)]:
        cache.insert([(a, b)], 0, _r(1.0))
    k = align(10, 2, 3, 1)
    missing = []
    for version in (1, 2, 3):
        a, b = _rows(10, 3, k)
        cache.insert([(a - 1, b)], version, _r(1.0))
        missing.append(20 - cache.covered)
        k = k % 3 + 1
    # X_4:5 missing after the first (2 rows), X_7:10 after the second (4), none after
    assert missing == [2, 4, 0]
    # starting with X_4:6 instead leaves entries missing longer
    cache = GradientCache(20)
    for a, b in [(0, 5), (5, 10), (10, 20)]:
        cache.insert([(a, b)], 0, _r(1.0))
    late = []
    for version, k in enumerate((2, 3, 1), start=1):
        a, b = _rows(10, 3, k)
        cache.insert([(a - 1, b)], version, _r(1.0))
        late.append(20 - cache.covered)
    assert sum(late) > sum(missing)


@pytest.mark.parametrize("n", [1, 2, 7, 10, 33, 100])
def test_alignment_always_ends_on_a_shared_first_row(n):
    rng = np.random.default_rng(n)
    for _ in range(50):
        p, p_new = (int(v) for v in rng.integers(1, n + 1, size=2))
        k = int(rng.integers(1, p + 1))
        k_new = align(n, p, p_new, k)
        assert 1 <= k_new <= p_new
        old_starts = {part_start(n, p, j) for j in range(1, p + 1)}
        assert part_start(n, p_new, k_new) in old_starts
        # same p: Algorithm 2 is plain cyclic order
        assert align(n, p, p, k) == k % p + 1
        assert align_next(n, p, p_new, k % p) == k_new - 1


def test_trans_finds_the_containing_subpartition():
    for n in (5, 10, 37):
        for p in range(1, n + 1):
            for p_new in range(1, n + 1):
                for k in range(1, p + 1):
                    row = part_start(n, p, k)
                    j = part_trans(n, p, p_new, k)
                    assert part_start(n, p_new, j) <= row <= part_stop(n, p_new, j)


def test_bounds_match_the_paper_formula():
    for n in (1, 10, 11, 97):
        for p in range(1, min(n, 12) + 1):
            bounds = subpartition_bounds(n, p)
            assert bounds[0] == 0 and bounds[-1] == n
            for k in range(1, p + 1):
                assert (bounds[k - 1] + 1, bounds[k]) == _rows(n, p, k)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: align(10, 0, 3, 1), "'p' parameter of align"),
        (lambda: align(10, 2, 11, 1), "'p_new' parameter of align"),
        (lambda: align(10, 2, 3, 3), "'k' parameter of align"),
        (lambda: subpartition_bounds(5, 6), "'n_sub' parameter"),
        (lambda: part_start(0, 1, 1), "'n' parameter"),
    ],
)
def test_bad_arguments(call, match):
    with pytest.raises(InvalidParameterError, match=match):
        call()
