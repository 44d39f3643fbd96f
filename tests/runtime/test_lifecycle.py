"""The run's lifecycle lives outside the runtimes: ``runtime.lifecycle.run`` returns an
``Outcome`` (plain values and the trace's rows), the face builds the ``Result``, and
``Runtime.run`` is a deprecated alias of ``api.run_on``."""

from __future__ import annotations

import numpy as np
import pytest

from daskstraggle import open_matrix
from daskstraggle.api import run_on
from daskstraggle.engine.recorder import TraceRecorder
from daskstraggle.methods import GD
from daskstraggle.problems import PCA
from daskstraggle.runtime import LocalRuntime, SimRuntime, StopRule
from daskstraggle.runtime.lifecycle import Outcome, run
from daskstraggle.trace import Result

X = np.random.default_rng(0).normal(size=(120, 5)) @ np.diag([3.0, 2.0, 1.0, 1.0, 0.5])
STOP = StopRule(max_iter=12, tol=None)


def test_the_lifecycle_returns_an_outcome_the_face_turns_into_the_same_result():
    with LocalRuntime(3) as rt:
        outcome = run(rt, GD(), PCA(n_components=2), open_matrix(X), stop=STOP, rng=0,
                      record_iterates=True)
        direct = run_on(rt, GD(), PCA(n_components=2), open_matrix(X), stop=STOP, rng=0,
                        record_iterates=True)
    assert isinstance(outcome, Outcome) and isinstance(outcome.rows, TraceRecorder)
    assert len(outcome.rows) == 12 and outcome.exact_objectives.shape == (12,)
    np.testing.assert_array_equal(outcome.rows.column("objective"),
                                  direct.trace["objective"].values)
    result = Result.from_outcome(outcome)
    np.testing.assert_array_equal(result.iterate, direct.iterate)
    np.testing.assert_array_equal(result.trace["exact_objective"].values,
                                  direct.trace["exact_objective"].values)
    assert result.attrs["runtime"] == "local" and result.stop_reason == "max_iter"


@pytest.mark.parametrize("runtime", [lambda: LocalRuntime(3), lambda: SimRuntime(3)])
def test_runtime_run_warns_and_gives_run_ons_result(runtime):
    with runtime() as rt:
        with pytest.warns(DeprecationWarning, match=r"Runtime\.run moved to "
                          r"daskstraggle\.api\.run_on: call run_on\(runtime, method"):
            old = rt.run(GD(), PCA(n_components=2), open_matrix(X), stop=STOP, rng=0)
        new = run_on(rt, GD(), PCA(n_components=2), open_matrix(X), stop=STOP, rng=0)
    assert isinstance(old, Result)
    np.testing.assert_array_equal(old.iterate, new.iterate)


def test_a_recorders_columns_and_per_worker_arrays():
    rows = TraceRecorder(2)
    assert rows.column("objective").shape == (0,)
    rows.add(wall_time=1.0, iteration_duration=1.0, objective=None, gap=None, n_fresh=2,
             n_stale=0, workers_used=(0, 1), compute_durations={0: 0.5},
             latencies={0: 0.75, 1: 0.25}, extras={"optimality": 0.1})
    assert np.isnan(rows.column("objective")[0]) and rows.column("optimality")[0] == 0.1
    compute, latency, communication = rows.per_worker()
    np.testing.assert_array_equal(latency, [[0.75, 0.25]])
    assert compute[0, 0] == 0.5 and np.isnan(compute[0, 1])
    assert communication[0, 0] == 0.25 and np.isnan(communication[0, 1])
