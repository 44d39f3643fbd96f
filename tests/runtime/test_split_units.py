"""A unit split between a worker index's worker and a helper adds up to the unit (no Dask).

A worker that joins beyond the run's worker count computes part of the rows of the
slowest index: the two parts' kernel sums (or coded messages) added must be the unit's
result to rounding, for every kind of unit the methods send.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from daskstraggle.problems import PCA, Block, LeastSquares, Logistic, block_stats
from daskstraggle.runtime._resilience import (
    helper_targets,
    next_fraction,
    split_unit,
    stale_bound,
)
from daskstraggle.runtime.base import run_unit

ROWS = [7, 1, 12]  # three partitions, one of a single row


def _blocks(problem_name: str) -> tuple[list[Block], object, np.ndarray]:
    rng = np.random.default_rng(0)
    n = sum(ROWS)
    X = rng.normal(size=(n, 5))
    y = np.where(rng.normal(size=n) > 0, 1.0, -1.0)
    problem = {"pca": PCA(n_components=2), "logistic": Logistic(alpha=0.1),
               "least-squares": LeastSquares()}[problem_name]
    whole = Block(X, y=None if problem_name == "pca" else y)
    bound = problem.bind(block_stats(whole))
    edges = np.concatenate([[0], np.cumsum(ROWS)])
    blocks = [whole.slice(int(a), int(b)) for a, b in itertools.pairwise(edges)]
    return blocks, bound, bound.init_iterate(np.random.default_rng(1))


def _parts_sum(bound, x, blocks, parts):
    results = [run_unit(bound, x, *[blocks[k] for k in part.positions],
                        coefficients=part.coefficients, rows=part.rows)[0] for part in parts]
    first, second = results
    if isinstance(first, tuple):
        return tuple(a + b for a, b in zip(first, second, strict=True))
    return first + second


def _close(a, b) -> None:
    for got, want in zip(a if isinstance(a, tuple) else (a,),
                         b if isinstance(b, tuple) else (b,), strict=True):
        np.testing.assert_allclose(got.gradient, want.gradient, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(got.values, want.values, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("problem_name", ["pca", "logistic", "least-squares"])
@pytest.mark.parametrize("fraction", [0.05, 0.3, 0.5, 0.9])
def test_the_two_parts_add_up_to_the_unit(problem_name, fraction):
    blocks, bound, x = _blocks(problem_name)
    # a whole unit (gd), a row range (dsag's subpartitions), coded messages
    whole, _ = run_unit(bound, x, *blocks)
    parts = split_unit(ROWS, rows=None, coefficients=None, fraction=fraction)
    _close(_parts_sum(bound, x, blocks, parts), whole)
    ranged, _ = run_unit(bound, x, *blocks, rows=(3, 17))
    parts = split_unit(ROWS, rows=(3, 17), coefficients=None, fraction=fraction)
    assert sum(p.rows[1] - p.rows[0] for p in parts) == 14
    _close(_parts_sum(bound, x, blocks, parts), ranged)
    coef = np.array([[1.0, -2.0, 0.5], [0.0, 3.0, 1.0]])
    coded, _ = run_unit(bound, x, *blocks, coefficients=coef)
    parts = split_unit(ROWS, rows=None, coefficients=coef, fraction=fraction)
    _close(_parts_sum(bound, x, blocks, parts), coded)


def test_a_unit_too_small_to_split_is_not():
    assert split_unit([1], rows=None, coefficients=None, fraction=0.5) is None
    assert split_unit([5, 5], rows=(4, 5), coefficients=None, fraction=0.5) is None
    assert split_unit([5, 5], rows=(0, 2), coefficients=None, fraction=0.99) is not None
    first, second = split_unit([5, 5], rows=(0, 2), coefficients=None, fraction=0.99)
    assert first.rows == (0, 1) and second.rows == (1, 2)  # never an empty part


def test_the_share_follows_the_measured_speeds():
    f = 0.5
    for _ in range(20):  # the own worker 4 times slower per row than the helper
        f = next_fraction(f, own=4 * f, helper=1 - f)
    assert f == pytest.approx(0.2, abs=0.01)
    for _ in range(10):  # a helper infinitely faster: the own worker keeps 5 %
        f = next_fraction(f, own=100.0, helper=0.0)
    assert f == 0.05


def test_newcomers_help_the_slowest_indices_with_a_worker_of_their_own():
    latency = {0: 0.1, 1: 0.5, 2: 0.3}
    assert helper_targets(["a", "b", "c"], ["z", "y"], [], latency) == {"y": 1, "z": 2}
    assert helper_targets(["a", "b", "c"], ["y"], [1], latency) == {"y": 2}
    assert helper_targets(["a", "a", "c"], ["y"], [], latency) == {"y": 2}
    assert helper_targets(["a", "b"], ["x", "y", "z"], [], {}) == {"x": 0, "y": 1}


def test_the_stale_bound_is_relative_to_the_rounds_units_take():
    assert stale_bound(None, []) == 50
    assert stale_bound(None, [99] * 10) == 990  # asynchronous, 100 workers
    assert stale_bound(7, [99] * 10) == 7


@pytest.mark.parametrize("problem_name", ["pca", "logistic", "least-squares"])
@pytest.mark.parametrize("coefficients", [
    [[1.0, 1.0, 1.0]],                      # uncoded: one group, one kernel_sum
    [[0.5, 0.5, 2.0], [1.0, 1.0, -1.0]],    # partitions 0, 1 share a column
    [[1.0, 2.0, 3.0], [0.0, 1.0, 0.0]],     # every column its own
], ids=["uncoded", "shared", "distinct"])
def test_coded_messages_sum_partitions_that_share_their_coefficients(problem_name,
                                                                     coefficients):
    """run_unit sums the partitions with equal coefficients in every message in one
    ``kernel_sum`` call (one result held, not one per partition); the messages equal
    the coefficients' combinations of the per-partition kernels."""
    blocks, problem, x = _blocks(problem_name)
    coef = np.array(coefficients)
    calls = []
    real = type(problem).kernel_sum

    def spy(self, blocks, iterate):
        calls.append(len(blocks))
        return real(self, blocks, iterate)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(type(problem), "kernel_sum", spy)
        messages, _ = run_unit(problem, x, *blocks, coefficients=coef)
    groups = len({tuple(column) for column in coef.T})
    assert sorted(calls, reverse=True) == sorted(
        [list(map(tuple, coef.T)).count(c) for c in dict.fromkeys(map(tuple, coef.T))],
        reverse=True) and len(calls) == groups
    parts = [problem.kernel(b, x) for b in blocks]
    for row, message in zip(coef, messages, strict=True):
        np.testing.assert_allclose(message.gradient,
                                   sum(w * p.gradient for w, p in zip(row, parts, strict=True)),
                                   rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(message.values,
                                   sum(w * p.values for w, p in zip(row, parts, strict=True)),
                                   rtol=1e-12, atol=1e-12)
        assert message.n_rows == round(float(row @ np.array(ROWS)))
