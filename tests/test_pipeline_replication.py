"""``pipelines/replication.py``: the lost-work arithmetic, and a quick run on a cluster."""

from __future__ import annotations

import pytest
from test_pipelines_load import run_quick


def test_lost_rounds_count_the_rounds_since_the_last_state(load_pipeline):
    lost_rounds = load_pipeline("replication").lost_rounds
    assert lost_rounds([1, 2, 3], 3) == (0, 0)
    assert lost_rounds([], 4) == (2.5, 4)  # nothing written: everything is redone
    assert lost_rounds([2, 5], 6) == (pytest.approx((1 + 0 + 1 + 2 + 0 + 1) / 6), 2)


def test_every_bound_is_a_case_beside_the_baselines(load_pipeline):
    pipeline = load_pipeline("replication")
    labels = [label for label, _ in pipeline.cases(pipeline.QUICK)]
    assert labels == ["none", "file every 1", "file every 10", "replica 0.1", "replica 0.001"]


@pytest.mark.slow
@pytest.mark.cluster
def test_quick_run_writes_the_table(tmp_path):
    results, _ = run_quick("replication", tmp_path)
    assert results["quick"] is True
    median = results["median"]
    assert all(row["converged"] for row in median.values())
    assert len({round(row["objective"], 12) for row in median.values()}) == 1  # same iterates
    assert median["none"]["written"] == 0 and median["file every 1"]["mean_lost_rounds"] == 0
    # a tighter bound writes more often and loses less
    assert median["replica 0.001"]["written"] >= median["replica 0.1"]["written"]
    assert median["replica 0.001"]["mean_lost_rounds"] <= median["replica 0.1"]["mean_lost_rounds"]
