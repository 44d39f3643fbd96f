"""Aggregation: results held on the workers and summed there give the flat sum's iterates.

Every method runs once with its results local and once with each result replaced by a
held leaf (summed by the tree the Dask runtime submits, here in process): the methods do
not know the difference, and the iterates agree to rounding. Then on a real cluster:
the trace's bytes, a lost worker whose held result must be computed again, and the
options' refusals.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time

import numpy as np
import pytest

from daskstraggle import StopRule, fit_least_squares, fit_pca, open_matrix
from daskstraggle.api import _seeded, run_on
from daskstraggle.errors import InvalidParameterError, StraggleWarning
from daskstraggle.methods import make_method
from daskstraggle.problems import PCA, LeastSquares, Logistic
from daskstraggle.problems.held import HeldResult, Leaf
from daskstraggle.runtime import DaskRuntime, LocalRuntime, aggregate
from daskstraggle.runtime.aggregate import build_tree, tree_sum


class _Tree:
    def __init__(self) -> None:
        self.sums = 0

    def reduce(self, terms):
        self.sums += 1
        return build_tree([(w, leaf.message, leaf.handle) for w, leaf in terms],
                          lambda weights, messages, items: tree_sum(weights, messages, *items))


class HeldLocalRuntime(LocalRuntime):
    """The in-process runtime, its results handed to the method as held leaves."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.tree = _Tree()

    def _next(self, timeout=None):
        result = super()._next(timeout)
        if result is None:
            return None
        pair = (result.result, result.compute_duration)
        if isinstance(result.result, tuple):
            held = tuple(HeldResult.of(Leaf(pair, r.n_rows, self.tree, message=j))
                         for j, r in enumerate(result.result))
        else:
            held = HeldResult.of(Leaf(pair, result.result.n_rows, self.tree))
        return dataclasses.replace(result, result=held)


CASES = [
    *[("pca", name) for name in ("gd", "coded", "dsag", "sag", "sgd", "partial", "async",
                                 "ignore-stragglers", "gram", "block")],
    *[("least-squares", name) for name in ("gd", "nag", "coded", "dsag")],
    ("logistic", "gd"),
]


def _problem(name):
    return {"pca": lambda: PCA(n_components=3), "least-squares": LeastSquares,
            "logistic": Logistic}[name]()


@pytest.fixture
def matrix(low_rank_matrix):
    y = np.where(low_rank_matrix[:, 0] > np.median(low_rank_matrix[:, 0]), 1.0, -1.0)
    return open_matrix(low_rank_matrix, labels=y, n_partitions=8)


@pytest.mark.parametrize(("problem", "method"), CASES)
def test_held_results_give_every_method_the_flat_iterates(problem, method, matrix):
    stop = StopRule(max_iter=12, tol=None)
    runs = []
    for runtime in (LocalRuntime(n_workers=4), HeldLocalRuntime(n_workers=4)):
        with runtime as rt:
            meth = make_method(method, **_seeded(method, {}, 0))
            runs.append(run_on(rt, meth, _problem(problem), matrix, stop=stop, rng=0))
        if isinstance(rt, HeldLocalRuntime):
            assert rt.tree.sums > 0  # the method read held sums
    flat, held = runs
    assert held.n_iter == flat.n_iter
    np.testing.assert_allclose(held.iterate, flat.iterate, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(held.trace["objective"], flat.trace["objective"], rtol=1e-9)


class _SlowTree(_Tree):
    """A tree whose sum takes at least ``FETCH`` seconds to reach the coordinator."""

    FETCH = 0.3

    def reduce(self, terms):
        import time

        time.sleep(self.FETCH)
        return super().reduce(terms)


@pytest.mark.parametrize("method", ["gram", "gd"])
def test_a_round_of_held_results_ends_when_their_sum_arrived(method, matrix):
    """Reading a held sum fetches it: the runtime reads the round's summary (Summarise),
    so every round's recorded time includes its own fetch, the only round of ``gram``
    and the last of ``gd`` too (the fetch used to fall after the round's end)."""
    with HeldLocalRuntime(n_workers=4) as rt:
        rt.tree = _SlowTree()
        result = run_on(rt, make_method(method), PCA(n_components=3), matrix,
                        stop=StopRule(max_iter=3, tol=None), rng=0)
    rounds = result.trace["iteration_duration"].values
    assert rt.tree.sums >= len(rounds) and (rounds >= _SlowTree.FETCH).all(), rounds


def test_the_trace_counts_the_bytes_that_reach_the_coordinator(matrix):
    with LocalRuntime(n_workers=4) as rt:
        result = run_on(rt, make_method("gd"), PCA(n_components=3), matrix,
                        stop=StopRule(max_iter=3, tol=None), rng=0)
    # four workers each send the 12 x 3 product and 3 captured variances
    assert (result.trace["bytes_to_coordinator"] == 4 * (12 * 3 + 3) * 8).all()


@pytest.mark.cluster
@pytest.mark.parametrize("method", ["gd", "coded", "gram", "block", "dsag"])
def test_a_tree_on_dask_workers_gives_the_flat_iterates_with_one_message(
        dask_client, zarr_matrix, method):
    stop = StopRule(max_iter=8, tol=None)
    runs = {}
    for aggregation in ("flat", "tree"):
        with DaskRuntime(dask_client, aggregation=aggregation) as rt:
            runs[aggregation] = run_on(rt, make_method(method, **_seeded(method, {}, 0)),
                                       PCA(n_components=3), zarr_matrix, stop=stop, rng=0)
    flat, tree = runs["flat"], runs["tree"]
    assert tree.n_iter == flat.n_iter
    np.testing.assert_allclose(tree.iterate, flat.iterate, rtol=1e-9, atol=1e-12)
    flat_bytes = flat.trace["bytes_to_coordinator"].values
    tree_bytes = tree.trace["bytes_to_coordinator"].values
    if method in ("gd", "gram", "block"):
        # every round: one message instead of one per worker (3 workers)
        np.testing.assert_allclose(flat_bytes, 3 * tree_bytes)
    elif method == "coded":  # a round decodes from 2 or 3 answers, late ones come later
        assert (tree_bytes == tree_bytes[0]).all() and (flat_bytes >= 2 * tree_bytes).all()
    assert (tree_bytes <= flat_bytes).all() and tree_bytes.sum() < flat_bytes.sum()


@pytest.mark.cluster
@pytest.mark.parametrize("method", ["gd", "coded"])
def test_a_worker_lost_before_the_sum_is_read_is_computed_again(fault_cluster, zarr_matrix,
                                                                monkeypatch, method):
    _, client = fault_cluster
    stop = StopRule(max_iter=6, tol=None)
    with DaskRuntime(client) as rt:
        clean = run_on(rt, make_method(method, **_seeded(method, {}, 0)), PCA(n_components=3),
                       zarr_matrix, stop=stop, rng=0)
    killed = []
    reduce = aggregate.TreeReducer.reduce

    def kill_then_reduce(self, terms):
        if not killed and self.trees >= 3:  # round 3's results are held: kill one holder
            victim = terms[-1][1].handle.address
            pid = client.run(os.getpid, workers=[victim])[victim]
            os.kill(pid, signal.SIGKILL)
            killed.append(victim)
        return reduce(self, terms)

    monkeypatch.setattr(aggregate.TreeReducer, "reduce", kill_then_reduce)
    with DaskRuntime(client, aggregation="tree") as rt, pytest.warns(
            StraggleWarning, match="left the cluster; its partitions"):
        tree = run_on(rt, make_method(method, **_seeded(method, {}, 0)), PCA(n_components=3),
                      zarr_matrix, stop=stop, rng=0)
        assert killed and rt._reducer is not None and rt._reducer.recomputed >= 1
    assert tree.n_iter == clean.n_iter
    np.testing.assert_allclose(tree.iterate, clean.iterate, rtol=1e-9, atol=1e-12)


def test_aggregation_is_refused_in_one_line_where_nothing_sums_on_workers(low_rank_matrix):
    with pytest.raises(InvalidParameterError, match=r"'aggregation'.*one of"):
        fit_pca(low_rank_matrix, aggregation="ring", runtime="local")
    with pytest.raises(InvalidParameterError, match="runtime='local' sums its results"):
        fit_pca(low_rank_matrix, aggregation="tree", runtime="local")
    with LocalRuntime(n_workers=2) as rt, pytest.raises(
            InvalidParameterError, match=r"DaskRuntime\(aggregation='tree'\)"):
        fit_least_squares(low_rank_matrix, low_rank_matrix[:, 0], aggregation="tree",
                          runtime=rt)
    with pytest.raises(InvalidParameterError, match="'aggregation'"):
        DaskRuntime(aggregation="ring")


class _SlowToSend:
    """A computed sum whose fetch takes ``seconds``: a fetch given less time is cut short
    (TimeoutError) and starts over on the next call, as a Dask fetch does."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.fetches = 0

    def add_done_callback(self, fn) -> None:
        fn(self)  # computed already

    def result(self, timeout=None):
        self.fetches += 1
        if timeout is not None and timeout < self.seconds:
            raise TimeoutError
        return np.ones(3), np.zeros(1)


def test_a_sum_slower_to_send_than_a_poll_is_fetched_once_whole():
    """Over a slow link the root sum took longer to send than the reducer's poll: fetched
    with the poll's timeout, every fetch was cut short and started over until the stall
    bound (a 4-worker run on a 10 Mbit/s link stalled for minutes). It is fetched once,
    with the time left."""
    reducer = aggregate.TreeReducer(None, live=set, recompute=None, timeout=3.0)
    root = _SlowToSend(seconds=10 * aggregate.POLL)
    gradient, _ = reducer._wait(root, [], deadline=time.perf_counter() + 3.0)
    assert root.fetches == 1
    np.testing.assert_array_equal(gradient, np.ones(3))
