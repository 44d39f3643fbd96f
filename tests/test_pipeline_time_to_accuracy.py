"""Smoke test of ``pipelines/time_to_accuracy.py`` (quick sizes, both cases, no dask-ml).

Checks what holds whatever the timings: GD, coded GD and DSAG reach the target gap (the
quick spec has no time budget, only an iteration cap well above what they need); coded GD
follows GD's iterates (exact gradients); every gap is >= 0 and the library's exact gaps
agree with the client-side Gram matrix; the JSON has its keys and the dask-ml rows are
reported as skipped. No assertion on a time or a ratio.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_pipelines_load import run_quick

OURS = ("gd", "dsag", "dsag-eta1", "sag", "sgd", "coded-cyclic", "coded-fractional")
REACH = ("gd", "dsag", "dsag-eta1", "coded-cyclic", "coded-fractional")


@pytest.mark.slow  # real LocalClusters, 14 runs (~60 s): run it when changing the pipeline
@pytest.mark.cluster
def test_quick_time_to_accuracy(tmp_path):
    saved, printed = run_quick("time_to_accuracy", tmp_path)
    assert saved["quick"] is True
    assert {"spec", "settings", "machine", "data", "cases", "tables", "targets",
            "elapsed_s"} <= set(saved)
    assert set(saved["cases"]) == {"throttled", "unthrottled"}
    assert saved["cases"]["throttled"]["stragglers"] == "throttle(workers=1, factor=4)"
    assert saved["cases"]["unthrottled"]["stragglers"] is None
    target = saved["settings"]["target_gap"]
    assert saved["settings"]["budget_factor"] == 0  # quick: iteration cap only

    for case, block in saved["cases"].items():
        # dask-ml is off in --quick: its rows are skipped, not missing silently
        assert "dask_ml_skipped" in block
        assert not any(k.startswith("dask-ml") for k in block["runs"])
        assert set(block["median"]) == set(OURS) == set(block["ratios"])
        for name in OURS:
            (run,) = block["runs"][name]
            gap = np.asarray(run["curve"]["exact_gap"])
            wall = np.asarray(run["curve"]["wall_time"])
            assert gap.size == wall.size == run["iterations"] > 0
            assert np.all(np.diff(wall) > 0)
            assert np.all(np.isfinite(gap)) and gap.min() > -1e-10, (case, name)
            assert run["reached"] == math.isfinite(run["time_to_target_s"])
            if run["reached"]:
                assert gap[run["iterations_to_target"] - 1] <= target
                assert np.all(gap[: run["iterations_to_target"] - 1] > target)
                assert run["time_to_target_s"] == wall[run["iterations_to_target"] - 1]
        for name in REACH:
            assert block["runs"][name][0]["reached"], (case, name)
        # exact gradients: coded GD steps exactly as GD does
        gd = block["runs"]["gd"][0]
        for name in ("coded-cyclic", "coded-fractional"):
            coded = block["runs"][name][0]
            assert coded["iterations_to_target"] == gd["iterations_to_target"]
            assert block["checks"][f"{name}_vs_gd_same_iterations"]
            assert block["checks"][f"{name}_vs_gd_max_gap_difference"] < 1e-9
        assert block["ratios"]["gd"]["gd_over_this"] == 1.0
        # one reference for every run, and the library's gaps match the client's Gram matrix
        assert block["checks"]["reference_spread"] < 1e-12
        assert block["checks"]["max_final_gap_vs_client_gap"] < 1e-9

    assert "time to target s" in printed and "dask-ml rows skipped" in printed
    assert "unthrottled: DSAG time / GD time" in printed
