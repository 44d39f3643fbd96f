"""Smoke test of ``pipelines/straggler_table.py``: its whole ``--quick`` (every section).

What must hold whatever the draws in the simulated section: the same rounds for every case;
with a tenth of the workers slowed 8x, plain GD waits for them (several times the clean
time), DSAG waiting for the others does not (about the clean time), coded GD in between;
every exact method ends on the same objective (the same iterates), DSAG on its own. In the
cluster section every case ran, and ``auto``'s rows say what it ran: the quick data are
below its probing threshold, so its rule chose without a probe (issue 42: that crashed).
"""

from __future__ import annotations

import pytest
from test_pipelines_load import run_quick


@pytest.mark.slow  # tens of seconds of LocalClusters: --runslow (the suite within the CI limit)
@pytest.mark.cluster
def test_quick_table(tmp_path):
    saved, printed = run_quick("straggler_table", tmp_path)
    assert saved["quick"] is True
    median = saved["sim"]["median"]
    assert list(median) == ["gd clean"] + [
        f"{case} {name}" for name in ("slowdown", "markov", "artificial", "slow link")
        for case in ("gd", "coded s=2", "dsag w=18")]
    assert {row["iterations"] for row in median.values()} == {30}
    for straggler in ("slowdown", "slow link"):  # a tenth of the workers 8x slow, or their links
        assert median[f"gd {straggler}"]["vs_clean"] > 3
        assert median[f"dsag w=18 {straggler}"]["vs_clean"] < 1.5
    assert 1 < median["coded s=2 slowdown"]["speedup_vs_plain_with_straggler"] < \
        median["dsag w=18 slowdown"]["speedup_vs_plain_with_straggler"]
    exact = {round(row["objective"], 12) for label, row in median.items()
             if not label.startswith("dsag")}
    assert len(exact) == 1  # gd and coded under every straggler: the clean iterates

    cluster = saved["cluster"]
    assert list(cluster["logistic"]["median"]) == [
        "gd clean", "auto clean", "gd slowdown", "coded s=1 slowdown", "dsag w=1 slowdown",
        "auto slowdown"]
    assert list(cluster["pca"]["median"]) == [
        "gram clean", "auto clean", "gram slowdown", "gram coded s=1 slowdown", "auto slowdown"]
    for job, plain in (("logistic", "gd"), ("pca", "gram")):
        for label, row in cluster[job]["median"].items():
            assert row["iterations"] >= 1, (job, label)
            if label.startswith("auto"):  # not probed: the rule's pick, no prediction
                assert row["choices"] == [plain] and row["probe_s"] == 0
                assert row["predicted"] is None and row["achieved"] is None
    assert printed.count("not probed: its rule chose") == 4 + 4 * (saved["links"].get(
        "skipped") is None)

    links = saved["links"]  # the emulated cluster, where namespaces can be made
    if "skipped" not in links:
        assert list(links["pca"]["median"]) == [
            "gram clean", "auto clean", "gram slow link", "gram coded s=1 slow link",
            "auto slow link"]
        assert list(links["logistic"]["median"]) == [
            "gd clean", "auto clean", "gd slow link", "coded s=1 slow link",
            "dsag w=1 slow link", "auto slow link"]
        assert links["pca"]["median"]["gram slow link"]["speedup_vs_plain_with_straggler"] == 1


def test_the_cluster_cases_follow_the_chosen_stragglers_and_workers(load_pipeline):
    pipeline = load_pipeline("straggler_table")
    labels = [label for label, *_ in pipeline.regression_cases(8, ["artificial"])]
    assert labels == ["gd clean", "auto clean", "gd artificial", "coded s=1 artificial",
                      "dsag w=7 artificial", "auto artificial"]
    assert {straggler for *_, straggler in pipeline.pca_cases()} == {None, *pipeline.STRAGGLERS}
    assert set(pipeline.STRAGGLERS) == {"slowdown", "markov", "artificial"}
