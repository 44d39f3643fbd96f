"""Smoke test of ``pipelines/dsag_comparison.py``: its whole ``--quick`` (both sections).

Checks what must hold whatever the latency draws: GD on the (strongly convex) logistic
problem reaches a tiny exact gap; DSAG, SAG and SGD over subpartitions see the same
latency draws and stop at the same iteration cap, and there DSAG (stale results cached,
variance reduced) is far below SGD's noise floor; the ideal-MDS curve carries GD's
iterates; the JSON holds every section, method and target. On the quick cluster every
method ran for the horizon.
"""

from __future__ import annotations

import math

import pytest
from test_pipelines_load import run_quick


@pytest.mark.slow  # tens of seconds of LocalClusters: --runslow (the suite within the CI limit)
@pytest.mark.cluster
def test_quick_comparison(tmp_path):
    saved, printed = run_quick("dsag_comparison", tmp_path)
    assert saved["quick"] is True
    sim = saved["sim"]
    labels = {"gd", "sgd w=2", "sgd-sub w=2", "sag w=2", "dsag w=2", "ideal-mds"}
    for problem in ("pca", "logistic"):
        block = sim[problem]
        assert set(block["median"]) == labels == set(block["runs"])
        for label, m in block["median"].items():
            assert set(m["time_to"]) == {"0.01", "0.0001", "1e-06", "1e-08"}
            assert math.isfinite(m["final_gap"]) and m["final_gap"] >= 0, label
        # the ideal-MDS curve is GD's sequence of gaps on another time axis
        gd, mds = block["runs"]["gd"][0], block["runs"]["ideal-mds"][0]
        n = min(len(gd["gap"]), len(mds["gap"]))
        assert mds["gap"][:n] == gd["gap"][:n]
        assert block["median"]["gd"]["vs_gd"]["0.01"] == 1.0

    logistic = saved["sim"]["logistic"]["median"]
    assert logistic["gd"]["final_gap"] < 1e-8
    same = [logistic[k]["iterations"] for k in ("sgd-sub w=2", "sag w=2", "dsag w=2")]
    assert len(set(same)) == 1
    assert logistic["dsag w=2"]["final_gap"] < 0.05 * logistic["sgd-sub w=2"]["final_gap"]
    assert logistic["dsag w=2"]["final_gap"] < 0.05 * logistic["sgd w=2"]["final_gap"]
    assert printed.count("t<=1e-08") == 4  # both problems in both sections

    cluster = saved["cluster"]
    assert cluster["workers"] == saved["spec"]["quick"]["cluster_workers"]
    for problem in ("pca", "logistic"):
        block = cluster[problem]
        assert set(block["median"]) == {"gd", "sgd-sub w=2", "sag w=2", "dsag w=2", "ideal-mds"}
        for label, m in block["median"].items():
            assert m["iterations"] >= 1 and math.isfinite(m["final_gap"]), (problem, label)
