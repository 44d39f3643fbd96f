"""Smoke test of ``pipelines/bench_foundation.py``: its whole ``--quick`` (kernels with a
cold numba compile, the overhead on a LocalCluster, the dask-glm comparison or its skip).

Checks the report's shape and that every number is one (no assertion on a time or a
ratio of times: the machine running the suite is busy).
"""

from __future__ import annotations

import importlib.util

import pytest
from test_pipelines_load import run_quick


@pytest.mark.slow  # a cold numba compile and a LocalCluster (~40 s): run with --runslow
@pytest.mark.cluster
def test_quick_bench_foundation(tmp_path):
    saved, printed = run_quick("bench_foundation", tmp_path)
    assert saved["config"]["quick"] is True
    kernel = saved["kernel"]
    assert {case["block"] for case in kernel["cases"]} >= {"float64", "gram"}
    assert all(case["time_s"]["median"] > 0 for case in kernel["cases"])
    startup = kernel["numba_startup"]["ours"]
    assert kernel["numba_startup_only"] == ["LeastSquares", "float64"]
    assert startup["cold_s"] > 0 and startup["cached_s"] > 0
    assert "first calls of LeastSquares's kernels on float64 (--quick)" in printed
    assert list(saved["overhead"]["by_workers"]) == ["2"]
    if importlib.util.find_spec("dask_glm") is None:  # a peer's rows: skipped, and said so
        assert saved["glm"] == {"skipped": "dask-glm is not installed (pip install -e "
                                           "'.[bench]')"}
        assert "(c) dask-glm rows skipped" in printed
    else:
        assert saved["glm"]["ours"]["gap"]["median"] >= 0
