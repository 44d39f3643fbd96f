"""The soak pipeline's quick run: a clean, a killed and a frozen worker all end correct."""

from __future__ import annotations

import pytest
from test_pipelines_load import run_quick


@pytest.mark.slow  # ~50 s of real faults; tests/runtime/test_worker_loss.py keeps one of each in CI
@pytest.mark.cluster
def test_quick_soak_ends_every_trial_correct(tmp_path):
    report, _ = run_quick("soak", tmp_path, timeout=300)
    trials = {t["fault"]: t for t in report["trials"]}
    assert set(trials) == {"none", "kill", "freeze"}
    assert all(t["ok"] and t["stray_processes"] == 0 for t in trials.values())
    assert trials["kill"]["moves"][0] == "left the cluster"
    assert trials["freeze"]["moves"][0].startswith("has not answered")
    assert trials["kill"]["max_abs_diff"] <= 1e-9
    assert trials["freeze"]["max_abs_diff"] <= 1e-9
