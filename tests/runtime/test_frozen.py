"""A frozen worker (SIGSTOP: a stopped process, a suspended VM) is a straggler that never
answers: once its work is overdue (``frozen_after`` seconds, or ``stale_after`` rounds for
methods that go on without it) its partitions move to another worker, and DSAG says how
stale its cache is; a slow one's units can be backed up on another worker (backup_after).
Real signals to real worker processes."""

from __future__ import annotations

import os
import re
import signal
import warnings

import numpy as np
import pytest
from dask import config as dask_config

import daskstraggle.config  # noqa: F401  (registers the daskstraggle defaults the fixture patches)
from daskstraggle import open_matrix
from daskstraggle._cli_format import format_result
from daskstraggle.api import run_on
from daskstraggle.errors import StraggleError, StraggleWarning
from daskstraggle.methods import DSAG, GD
from daskstraggle.problems import PCA, Logistic
from daskstraggle.runtime import DaskRuntime, LocalRuntime, StopRule
from daskstraggle.runtime._resilience import frozen_bound, overdue_workers

pytestmark = pytest.mark.cluster

SLOW = "gamma(mean=0.05, var=1e-6)"


@pytest.fixture(autouse=True)
def quick_cleanup(monkeypatch):
    # removing the injector waits for the frozen worker up to this bound (tested in
    # test_worker_loss with its real value)

    monkeypatch.setitem(dask_config.config["daskstraggle"]["timeouts"], "cleanup", 1.0)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(3000, 12)) * np.linspace(3.0, 1.0, 12)
    y = np.where(X[:, 0] + 0.5 * rng.normal(size=3000) > 0, 1.0, -1.0)
    return open_matrix(X, labels=y)


def test_the_frozen_bound_follows_the_run_latency():
    assert frozen_bound(None, []) == 30.0
    assert frozen_bound(None, [0.1] * 50) == 30.0
    assert frozen_bound(None, [4.0, 5.0, 6.0]) == 100.0
    assert frozen_bound(2.5, [100.0]) == 2.5
    assert overdue_workers([], now=5.0, bound=1.0) == {}
    assert overdue_workers([(2, 0.0), (2, 3.0), (0, 4.5)], now=5.0, bound=1.0) == {2: 5.0}


def _run_frozen(rt: DaskRuntime, index: int, method, problem, data, stop, at_round):
    """Run, freezing worker ``index`` once the run has recorded 5 rounds; return the
    result and its StraggleWarning messages."""
    address = rt.worker_names[index]
    pid = rt.client.run(os.getpid, workers=[address])[address]
    at_round(rt, 5, lambda: os.kill(pid, signal.SIGSTOP))
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            res = run_on(rt, method, problem, data, stop=stop, rng=0)
    finally:
        os.kill(pid, signal.SIGCONT)
    return res, [str(w.message) for w in caught if w.category is StraggleWarning]


def test_gd_moves_a_frozen_workers_rows_and_ends_with_the_clean_iterates(data, fault_cluster,
                                                                         at_round):
    stop = StopRule(max_iter=20, tol=None)
    clean = run_on(LocalRuntime(3), GD(), PCA(n_components=3), data, stop=stop, rng=0)
    with DaskRuntime(fault_cluster[1], stragglers=SLOW, rng=0, frozen_after=3.0) as rt:
        res, said = _run_frozen(rt, 1, GD(), PCA(n_components=3), data, stop, at_round)
    # bounded waits ended it, not the frozen worker: the 3 s bound moved its rows (the
    # warning says how long it had been silent: past the bound) ...
    moved = [m for m in said if re.search(r"has not answered for \d+ s \(frozen\?\); its "
                                          r"partitions \[1\] are reloaded", m)]
    assert moved, said
    assert all(int(re.search(r"for (\d+) s", m)[1]) >= 3 for m in moved), moved
    # ... and the 1 s bound on removing the injector from it (still frozen) ended that
    assert any("Could not remove the straggler injector (no answer within 1 s" in m
               for m in said), said
    np.testing.assert_allclose(res.iterate, clean.iterate, rtol=1e-9, atol=1e-12)
    (move,) = res.attrs["worker_losses"]
    assert move["worker_index"] == 1 and move["reason"].startswith("has not answered")
    assert "worker frozen " in format_result(res)


def test_dsag_moves_rows_grown_too_stale_and_reports_the_staleness(data, fault_cluster,
                                                                    at_round, monkeypatch):
    problem = Logistic(alpha=0.01)
    # rounds take milliseconds, so the 1 s floor below lets ~45-65 pass before the move:
    # 200 leave the run as many again to converge (120 left the gap at 0.6-1.05e-3)
    stop = StopRule(max_iter=200, tol=None)
    # the exact optimum
    gd = run_on(LocalRuntime(3), GD(), problem, data, stop=stop, rng=0, reference=True)
    # no injected delay: rounds take milliseconds, and the frozen worker's rows move once
    # its unit is 10 rounds old, long before it is a minute late (and, lowered here, a
    # second: the floor that spares a fresh worker compiling its kernels)

    monkeypatch.setitem(dask_config.config["daskstraggle"]["stale"], "minimum-wait", 1.0)
    with DaskRuntime(fault_cluster[1], rng=0, stale_after=10, frozen_after=60.0) as rt:
        res, said = _run_frozen(rt, 2, DSAG(n_wait=2), problem, data, stop, at_round)
    # the rounds bound moved it (kind "stale" below), not the minute of frozen_after
    assert not [m for m in said if "(frozen?)" in m], said
    assert any(re.search(r"has not answered for \d+ rounds \(stale\); its partitions \[2\] "
                         "are reloaded", m) for m in said), said
    (move,) = res.attrs["worker_losses"]
    assert (move["worker_index"], move["kind"]) == (2, "stale")
    staleness = res.trace["staleness"].values
    summary = res.summary()
    # the frozen worker's rows grew stale, then were computed elsewhere again
    assert summary["max_staleness"] == int(staleness.max()) >= 10
    assert summary["final_staleness"] == int(staleness[-1]) <= 2
    assert "staleness   cache entries up to" in format_result(res)
    assert f"worker stale {move['lost']} (index 2)" in format_result(res)
    # and the run went on converging (the gap at the start is 0.5)
    assert res.objective - gd.reference_objective < 1e-3


def test_a_worker_frozen_before_the_injector_is_installed_is_one_line(data, monkeypatch,
                                                                      fault_cluster):
    from daskstraggle.engine import pool

    monkeypatch.setitem(dask_config.config["daskstraggle"]["timeouts"], "setup", 1.0)
    # the exact passes before it (the data's statistics, the start) back up the frozen
    # worker's partitions after this long (tested in test_worker_loss with its real value)
    monkeypatch.setattr(pool, "FOLD_BACKUP_MIN", 0.5)
    with DaskRuntime(fault_cluster[1], stragglers=SLOW, rng=0) as rt:
        address = rt.worker_names[0]
        pid = rt.client.run(os.getpid, workers=[address])[address]
        os.kill(pid, signal.SIGSTOP)
        try:
            with pytest.raises(StraggleError, match=r"Could not install the straggler injector: "
                               r"a worker did not answer within 1 s \(frozen\?\)"):
                run_on(rt, GD(), PCA(n_components=2), data, stop=StopRule(max_iter=5, tol=None),
                       rng=0)
        finally:
            os.kill(pid, signal.SIGCONT)


@pytest.mark.slow  # every run simulates it: test_sim_faults::test_backups_of_a_slow_workers_*
def test_backups_of_a_slow_workers_units_keep_the_clean_iterates(data, fault_cluster):
    # worker 1 takes ~0.4 s per unit, the others ~0.1 s: its units are sent again to
    # another worker after 1.3 x the median latency, and the first answer counts
    stop = StopRule(max_iter=15, tol=None)
    clean = run_on(LocalRuntime(3), GD(), PCA(n_components=3), data, stop=stop, rng=0)
    slow = "gamma(mean=0.1, var=1e-6) + slowdown(workers=1, factor=4)"
    with DaskRuntime(fault_cluster[1], stragglers=slow, rng=0, backup_after=1.3) as rt:
        res = run_on(rt, GD(), PCA(n_components=3), data, stop=stop, rng=0)
    assert res.attrs["backups"] >= 10  # about one per round, after the first few
    np.testing.assert_allclose(res.iterate, clean.iterate, rtol=1e-9, atol=1e-12)


def test_backup_after_needs_the_dask_runtime():
    from daskstraggle import fit_pca
    from daskstraggle.errors import InvalidParameterError

    X = np.random.default_rng(0).normal(size=(100, 4))
    with pytest.raises(InvalidParameterError, match=r"'backup_after' parameter of fit_pca "
                       r"\(CLI: --backup-after\) applies to the Dask or simulated runtime"):
        fit_pca(X, 2, runtime="local", backup_after=2.0)
    with pytest.raises(InvalidParameterError, match="backup_after"):
        fit_pca(X, 2, backup_after=-1.0)
