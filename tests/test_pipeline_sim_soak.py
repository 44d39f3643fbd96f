"""The simulated soak's quick run: random losses, freezes, joins and retirements on 60
simulated workers, and every exact run on the clean answer (issue 26, part 6)."""

from __future__ import annotations

from test_pipelines_load import run_quick


def test_quick_sim_soak_ends_every_trial_on_the_clean_answer(tmp_path):
    report, _ = run_quick("sim_soak", tmp_path)
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
    assert report["command"].endswith("--quick --out " + str(tmp_path / "sim_soak.json"))
