"""The soak pipeline's quick run: a clean, a killed and a frozen worker all end correct."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]


@pytest.mark.slow  # ~50 s of real faults; tests/runtime/test_worker_loss.py keeps one of each in CI
@pytest.mark.cluster
def test_quick_soak_ends_every_trial_correct(tmp_path):
    out = tmp_path / "soak.json"
    done = subprocess.run([sys.executable, str(ROOT / "pipelines" / "soak.py"), "--quick",
                           "--out", str(out)], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(out.read_text())
    trials = {t["fault"]: t for t in report["trials"]}
    assert set(trials) == {"none", "kill", "freeze"}
    assert all(t["ok"] and t["stray_processes"] == 0 for t in trials.values())
    assert trials["kill"]["moves"][0] == "left the cluster"
    assert trials["freeze"]["moves"][0].startswith("has not answered")
    assert trials["kill"]["max_abs_diff"] <= 1e-9
    assert trials["freeze"]["max_abs_diff"] <= 1e-9
