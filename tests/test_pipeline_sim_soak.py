"""The simulated soak's quick run: random losses, freezes, joins and retirements on 60
simulated workers, and every exact run on the clean answer (issue 26, part 6)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]


def test_quick_sim_soak_ends_every_trial_on_the_clean_answer(tmp_path):
    out = tmp_path / "sim_soak.json"
    done = subprocess.run([sys.executable, str(ROOT / "pipelines" / "sim_soak.py"), "--quick",
                           "--out", str(out)], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["all_ok"] and report["workers"] == 60 and report["cpu"]
    assert {t["method"] for t in report["trials"]} == {"gd", "coded"}
    for t in report["trials"]:
        assert t["ok"] and t["rounds"] == 40 and t["max_rel_diff"] <= 1e-9
        # every kind of fault happened and was acted on
        assert {"lost", "retired", "frozen"} <= set(t["moves"])
        assert t["simulated_s"] > t["clean_simulated_s"]
        for kind in ("loss(", "freeze(", "join(", "retire("):
            assert kind in t["faults"]
        # every fault fell within the run (placed within the clean run's time)
        assert t["faults_played"] == {kind: t["faults"].count(f"{kind}(")
                                      for kind in ("loss", "retire", "freeze", "join")}
        assert t["cpu_s"] > 0 and t["clean_cpu_s"] > 0
    assert report["command"].endswith("--quick --out " + str(out))
    assert not list(tmp_path.glob("results"))  # --out was honoured
