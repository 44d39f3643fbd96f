"""Imported once in the forkserver that forks the workers of a LocalCluster started here.

It blocks SIGINT (the client's process alone handles Ctrl-C) and runs a tiny fit of each
problem, so every forked worker starts with the numba kernels in memory; it leaves no thread
running (forking with threads is unsafe).
"""

from __future__ import annotations

import gc
import logging
import signal
import warnings
from typing import Any

if hasattr(signal, "pthread_sigmask"):
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})

import numpy as np

import daskstraggle.data
import daskstraggle.runtime.dask  # noqa: F401  (the task functions)
from daskstraggle.api import fit_least_squares, fit_logistic, fit_pca


def _warm_kernels() -> None:
    """Run each problem's kernels once on a tiny matrix, in process, quietly."""
    X = np.random.default_rng(0).normal(size=(64, 5))
    labels = (X[:, 0] > 0).astype(np.float64)
    options: dict[str, Any] = {"runtime": "local", "n_workers": 1, "method": "gd",
                               "max_iter": 2}
    try:  # tqdm's monitor thread (started with a first bar, never stopped) stays off
        import tqdm

        tqdm.tqdm.monitor_interval = 0
    except ImportError:
        pass
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # not converged after 2 iterations: expected
        fit_pca(X, 2, **options)
        fit_least_squares(X, X[:, 0], **options)
        fit_logistic(X, labels, **options)


try:
    _warm_kernels()
except Exception:  # a warm-up only: an error here would stop the server from
    # forking any worker (multiprocessing skips only an ImportError), while a worker that
    # meets the same error in a task reports it to the client as usual
    logging.getLogger(__name__).warning("kernel warm-up in the forkserver failed",
                                        exc_info=True)

# what the server loaded stays out of the garbage collector's generations: a forked worker
# then shares those pages with the server instead of copying them on the first collection
# (Python's docs advise it before fork()), and the server's own exit skips collecting them
gc.freeze()
