"""Smoke test of ``pipelines/straggler_table.py`` (simulated section, quick sizes).

What must hold whatever the draws: the same rounds for every case; with a tenth of the
workers slowed 8x, plain GD waits for them (several times the clean time), DSAG waiting for
the others does not (about the clean time), coded GD in between; every exact method ends on
the same objective (the same iterates), DSAG on its own.
"""

from __future__ import annotations

import json


def test_quick_simulated_table(tmp_path, load_pipeline):
    out = tmp_path / "table.json"
    results = load_pipeline("straggler_table").main(
        ["--quick", "--sections", "sim", "--out", str(out)])
    saved = json.loads(out.read_text())
    assert saved["quick"] is True and "cluster" not in saved
    median = results["sim"]["median"]
    assert list(median) == ["gd clean"] + [
        f"{case} {name}" for name in ("slowdown", "markov", "artificial")
        for case in ("gd", "coded s=2", "dsag w=18")]
    assert {row["iterations"] for row in median.values()} == {30}
    assert median["gd slowdown"]["vs_clean"] > 3
    assert median["dsag w=18 slowdown"]["vs_clean"] < 1.5
    assert 1 < median["coded s=2 slowdown"]["speedup_vs_plain_with_straggler"] < \
        median["dsag w=18 slowdown"]["speedup_vs_plain_with_straggler"]
    exact = {round(row["objective"], 12) for label, row in median.items()
             if not label.startswith("dsag")}
    assert len(exact) == 1  # gd and coded under every straggler: the clean iterates


def test_the_cluster_cases_follow_the_chosen_stragglers_and_workers(load_pipeline):
    pipeline = load_pipeline("straggler_table")
    labels = [label for label, *_ in pipeline.regression_cases(8, ["artificial"])]
    assert labels == ["gd clean", "auto clean", "gd artificial", "coded s=1 artificial",
                      "dsag w=7 artificial", "auto artificial"]
    assert {straggler for *_, straggler in pipeline.pca_cases()} == {None, *pipeline.STRAGGLERS}
    assert set(pipeline.STRAGGLERS) == {"slowdown", "markov", "artificial"}
