"""Held kernel sums: symbolic arithmetic that reads one sum from the workers."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from daskstraggle.problems.base import KernelResult, combine
from daskstraggle.problems.held import HeldResult, Leaf, payload_bytes
from daskstraggle.runtime.aggregate import FAN_IN, build_tree, tree_sum


class Tree:
    """An in-process reducer: the same tree of sums the Dask runtime submits."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def reduce(self, terms):
        self.calls.append(len(terms))
        return build_tree([(w, leaf.message, leaf.handle) for w, leaf in terms],
                          lambda weights, messages, items: tree_sum(weights, messages, *items))


def _kernel(rng, n_rows=10):
    return KernelResult(rng.normal(size=(4, 2)), rng.normal(size=2), n_rows)


def _held(result, tree, message=None):
    # a leaf's handle is what a unit task returns: (result, seconds)
    return HeldResult.of(Leaf((result, 0.0), result.n_rows, tree, message=message))


def test_a_sum_of_leaves_is_read_once_and_equals_the_local_sum():
    rng, tree = np.random.default_rng(0), Tree()
    results = [_kernel(rng, n) for n in (3, 4, 5, 6, 7, 8)]
    total = _held(results[0], tree)
    for r in results[1:]:
        total = total + _held(r, tree)
    assert tree.calls == [] and total.n_rows == 33  # nothing read yet
    expected = results[0]
    for r in results[1:]:
        expected = expected + r
    np.testing.assert_allclose(total.gradient, expected.gradient, rtol=1e-14)
    np.testing.assert_allclose(total.values, expected.values, rtol=1e-14)
    total.values  # noqa: B018 - read again: no second sum
    assert tree.calls == [6]


def test_weights_merge_by_leaf_and_follow_kernel_result_rules():
    rng, tree = np.random.default_rng(1), Tree()
    a, b = _kernel(rng, 3), _kernel(rng, 5)
    ha, hb = _held(a, tree), _held(b, tree)
    total = (ha + hb).scaled(2.0) + ha  # 3 a + 2 b, with n_rows as KernelResult counts
    eager = (a + b).scaled(2.0) + a
    assert total.n_rows == eager.n_rows == 11
    assert len(total.leaves) == 2
    np.testing.assert_allclose(total.gradient, eager.gradient, rtol=1e-14)
    # a leaf whose weights cancel is not summed at all
    gone = ha + hb + ha.scaled(-1.0)
    assert gone.leaves == [hb.leaves[0]]


def test_combine_of_held_and_local_results_matches_the_eager_combine():
    rng, tree = np.random.default_rng(2), Tree()
    results = [_kernel(rng, n) for n in (4, 6, 9)]
    weights = np.array([0.5, -1.25, 2.0])
    mixed = [_held(results[0], tree), results[1], _held(results[2], tree)]
    held = combine(mixed, weights)
    eager = combine(results, weights)
    assert isinstance(held, HeldResult) and held.n_rows == eager.n_rows
    np.testing.assert_allclose(held.gradient, eager.gradient, rtol=1e-14)
    np.testing.assert_allclose(held.values, eager.values, rtol=1e-14)
    assert tree.calls == [2]  # the local result was added at the client


def test_a_local_result_plus_a_held_one_stays_held():
    rng, tree = np.random.default_rng(3), Tree()
    a, b = _kernel(rng), _kernel(rng)
    total = a + _held(b, tree)
    assert isinstance(total, HeldResult)
    np.testing.assert_allclose(total.gradient, (a + b).gradient, rtol=1e-14)
    assert 0 + _held(a, tree) is not None  # sum() starts from 0


def test_messages_of_a_coded_result_are_leaves_of_one_task():
    rng, tree = np.random.default_rng(4), Tree()
    messages = (_kernel(rng, 2), _kernel(rng, 3))
    pair = (messages, 0.1)
    leaves = [HeldResult.of(Leaf(pair, m.n_rows, tree, message=j))
              for j, m in enumerate(messages)]
    decoded = combine(leaves, [1.5, -0.5])
    np.testing.assert_allclose(decoded.gradient,
                               combine(list(messages), [1.5, -0.5]).gradient, rtol=1e-14)


def test_the_tree_has_fan_in_levels():
    submitted: list[int] = []

    def submit(weights, messages, items):
        submitted.append(len(items))
        return tree_sum(weights, messages, *items)

    rng = np.random.default_rng(5)
    n = FAN_IN ** 2 + 1
    leaves = [(1.0, None, (_kernel(rng), 0.0)) for _ in range(n)]
    gradient, _ = build_tree(leaves, submit)
    levels, width = [], n
    while width > 1 or not levels:
        width = -(-width // FAN_IN)
        levels.append(width)
    assert max(submitted) <= FAN_IN and len(submitted) == sum(levels)  # 5 + 2 + 1
    np.testing.assert_allclose(gradient, sum(item[0].gradient for _, _, item in leaves),
                               rtol=1e-13)


def test_pickling_a_held_result_keeps_its_value_not_the_worker_reference():
    rng, tree = np.random.default_rng(6), Tree()
    a = _kernel(rng, 7)
    restored = pickle.loads(pickle.dumps(_held(a, tree) + _held(a, tree)))
    assert type(restored) is KernelResult and restored.n_rows == 14
    np.testing.assert_allclose(restored.gradient, 2 * a.gradient)


def test_a_read_sum_lets_its_leaves_go():
    rng, tree = np.random.default_rng(7), Tree()
    total = _held(_kernel(rng), tree) + _held(_kernel(rng), tree)
    total.gradient  # noqa: B018
    assert total.leaves == []  # the workers may free the data
    again = total + _held(_kernel(rng), tree)
    again.gradient  # noqa: B018
    assert tree.calls == [2, 1]


def test_payload_bytes_counts_local_arrays_and_not_held_ones():
    rng, tree = np.random.default_rng(8), Tree()
    a = _kernel(rng)
    assert payload_bytes(a) == (8 + 2) * 8
    assert payload_bytes((a, a)) == 2 * (8 + 2) * 8
    assert payload_bytes(_held(a, tree)) == 0


def test_an_empty_held_result_is_refused():
    with pytest.raises(ValueError, match="empty"):
        HeldResult({}, 0).gradient  # noqa: B018
