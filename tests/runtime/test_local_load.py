"""LocalRuntime loads partitions and runs units in parallel threads: same results.

Units and passes over small blocks (under ``_INLINE_BYTES`` per logical worker) run inline
in the driving thread instead; the thread tests below lower that bound to 0.

The statistics are folded in partition order and the units' results delivered in
submission order, so a fit is bit for bit the one the sequential runtime gives; a failing
partition is reported as the sequential load would (the first in partition order).
"""

from __future__ import annotations

import numpy as np
import pytest

from daskstraggle import fit_pca, open_matrix
from daskstraggle.api import run_on
from daskstraggle.errors import NonFiniteDataError
from daskstraggle.runtime import local


@pytest.fixture
def matrix() -> np.ndarray:
    return np.random.default_rng(5).normal(size=(700, 9))


@pytest.mark.parametrize(("method", "params"), [
    ("gram", {}), ("gd", {}), ("block", {}), ("dsag", {"n_wait": 2}),
    ("coded", {"scheme": "cyclic-repetition", "n_stragglers": 1, "rng": 0}),
    ("sgd", {"n_wait": 3}), ("partial", {"rng": 0}),
])
def test_parallel_and_sequential_runtimes_give_the_same_fit(matrix, monkeypatch, method,
                                                            params):
    fits = {}
    monkeypatch.setattr(local, "_INLINE_BYTES", 0)  # threads even for these small blocks
    for cores in (1, 3):
        monkeypatch.setattr(local, "_cores", lambda cores=cores: cores)
        fits[cores] = fit_pca(open_matrix(matrix, chunk_rows=60), 3, method=method,
                              runtime="local", n_workers=4, max_iter=30, tol=None, rng=0,
                              method_params=params)
    for name in ("components", "singular_values", "explained_variance"):
        np.testing.assert_array_equal(fits[1].fitted[name], fits[3].fitted[name])
    np.testing.assert_array_equal(fits[1].trace["objective"], fits[3].trace["objective"])


def test_blas_threads_are_limited_during_a_run_and_restored_after(matrix, monkeypatch):
    from threadpoolctl import threadpool_info

    from daskstraggle.problems import PCA

    before = [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]
    seen = []

    class Watching(PCA):
        def kernel(self, block, iterate):
            seen.append({lib["num_threads"] for lib in threadpool_info()
                         if lib["user_api"] == "blas"})
            return super().kernel(block, iterate)

        def kernel_sum(self, blocks, iterate):  # what the units call
            seen.append({lib["num_threads"] for lib in threadpool_info()
                         if lib["user_api"] == "blas"})
            return super().kernel_sum(blocks, iterate)

    monkeypatch.setattr(local, "_cores", lambda: 2)
    monkeypatch.setattr(local, "_INLINE_BYTES", 0)  # threads even for these small blocks
    with local.LocalRuntime(n_workers=2) as runtime:
        from daskstraggle.methods import GD
        from daskstraggle.runtime import StopRule

        run_on(runtime, GD(), Watching(n_components=2), open_matrix(matrix, chunk_rows=100),
                    stop=StopRule(max_iter=3, tol=None), rng=0)
    assert seen and all(threads == {1} for threads in seen)
    after = [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]
    assert after == before


@pytest.mark.parametrize(("inline_bytes", "inline"), [(None, True), (0, False)])
def test_small_blocks_run_inline_and_large_ones_in_threads(matrix, monkeypatch, inline_bytes,
                                                           inline):
    """Units and passes over small blocks run in the driving thread: no hand-offs."""
    import threading

    from daskstraggle.methods import GD
    from daskstraggle.problems import PCA
    from daskstraggle.runtime import StopRule

    threads = set()

    class Watching(PCA):
        def kernel(self, block, iterate):
            threads.add(threading.current_thread() is threading.main_thread())
            return super().kernel(block, iterate)

        def kernel_sum(self, blocks, iterate):  # what the units call
            threads.add(threading.current_thread() is threading.main_thread())
            return super().kernel_sum(blocks, iterate)

    monkeypatch.setattr(local, "_cores", lambda: 2)
    if inline_bytes is not None:
        monkeypatch.setattr(local, "_INLINE_BYTES", inline_bytes)
    with local.LocalRuntime(n_workers=2) as runtime:
        res = run_on(runtime, GD(), Watching(n_components=2), open_matrix(matrix, chunk_rows=100),
                          stop=StopRule(max_iter=3, tol=None), rng=0)
    assert threads == {inline}
    assert res.n_iter == 3


def test_the_first_bad_partition_in_order_is_reported(matrix, monkeypatch):
    matrix[130, 2] = np.nan  # partition 2
    matrix[610, 0] = np.inf  # partition 10
    monkeypatch.setattr(local, "_cores", lambda: 4)
    with pytest.raises(NonFiniteDataError, match=r"Partition 2 \(rows 120-180\)"):
        fit_pca(open_matrix(matrix, chunk_rows=60), 2, runtime="local", n_workers=2)


def test_ordered_map_keeps_the_order_and_bounds_the_waiting_results(monkeypatch):
    import threading
    import time

    monkeypatch.setattr(local, "_cores", lambda: 3)
    running, peak, lock = [0], [0], threading.Lock()

    def work(i):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.002 * (i % 4))
        with lock:
            running[0] -= 1
        return i * i

    got = []
    for value in local._ordered_map(work, range(40)):
        got.append(value)
        time.sleep(0.001)
    assert got == [i * i for i in range(40)]
    assert peak[0] <= 3


def test_ordered_map_raises_the_first_error_in_order_and_stops(monkeypatch):
    monkeypatch.setattr(local, "_cores", lambda: 2)
    started = []

    def work(i):
        started.append(i)
        if i in (3, 4):
            raise ValueError(f"item {i}")
        return i

    with pytest.raises(ValueError, match="item 3"):
        list(local._ordered_map(work, range(100)))
    assert len(started) < 10
