"""Smoke test of ``pipelines/bench_latency.py``: its whole ``--quick`` (all four parts).

Checks the report's shape and that every number is one (no assertion on a time or a
ratio of times: the machine running the suite is busy).
"""

from __future__ import annotations

import math

import pytest
from test_pipelines_load import run_quick


@pytest.mark.slow  # two LocalClusters, injected delays and a throttle (~35 s): run with --runslow
@pytest.mark.cluster
def test_quick_bench_latency(tmp_path):
    saved, printed = run_quick("bench_latency", tmp_path)
    assert saved["quick"] is True and saved["machine"]
    for method in ("vectorised", "event"):
        assert saved["simulator"][method]["median_s"] > 0
    assert list(saved["sim_runtime"]) == ["100"]
    prediction = saved["prediction"]
    assert len(prediction["repeats"]) == 1 and set(prediction["checks"]) == {
        "per_worker_within_10pct", "sim_own_fit_within_10pct", "naive_worse_than_sim"}
    for key in ("measured_wth_s", "per_worker_rel_error", "iid_rel_error"):
        assert len(prediction["median"][key]) == 4
        assert all(math.isfinite(v) for v in prediction["median"][key]), key
    assert set(saved["throttle"]) == {"before", "factor_2", "factor_4", "after"}
    assert all(v > 0 for v in saved["throttle"].values())
    for part in ("(a) simulator", "(b) SimRuntime", "(c) prediction", "(d) throttle"):
        assert part in printed
