"""Smoke test of ``pipelines/dsag_comparison.py`` (simulated part, quick sizes).

Checks what must hold whatever the latency draws: GD on the (strongly convex) logistic
problem reaches a tiny exact gap; DSAG, SAG and SGD over subpartitions see the same
latency draws and stop at the same iteration cap, and there DSAG (stale results cached,
variance reduced) is far below SGD's noise floor; the ideal-MDS curve carries GD's
iterates; the JSON holds every section, method and target.
"""

from __future__ import annotations

import json
import math


def test_quick_simulated_comparison(tmp_path, capsys, load_pipeline):
    out = tmp_path / "dsag.json"
    results = load_pipeline("dsag_comparison").main(
        ["--quick", "--sections", "sim", "--out", str(out)])
    saved = json.loads(out.read_text())
    assert saved["quick"] is True and "cluster" not in saved
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

    logistic = results["sim"]["logistic"]["median"]
    assert logistic["gd"]["final_gap"] < 1e-8
    same = [logistic[k]["iterations"] for k in ("sgd-sub w=2", "sag w=2", "dsag w=2")]
    assert len(set(same)) == 1
    assert logistic["dsag w=2"]["final_gap"] < 0.05 * logistic["sgd-sub w=2"]["final_gap"]
    assert logistic["dsag w=2"]["final_gap"] < 0.05 * logistic["sgd w=2"]["final_gap"]
    assert "t<=1e-08" in capsys.readouterr().out
