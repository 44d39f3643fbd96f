"""``pipelines/aggregation.py``: its cases, the answers' difference, and a quick run."""

from __future__ import annotations

import numpy as np
import pytest
from test_pipelines_load import run_quick


def test_every_job_runs_flat_and_tree_without_and_with_the_straggler(load_pipeline):
    pipeline = load_pipeline("aggregation")
    todo = pipeline.cases(pipeline.QUICK)
    assert [(job, label) for job, label, _ in todo] == [
        (job, label) for job in ("gram d=64", "least squares")
        for label in ("flat", "tree", "flat + straggler", "tree + straggler")]
    assert {options["aggregation"] for _, _, options in todo} == {"flat", "tree"}


def test_the_difference_of_two_bases_ignores_their_signs_and_order(load_pipeline):
    difference = load_pipeline("aggregation").difference
    basis = np.linalg.qr(np.random.default_rng(0).normal(size=(6, 2)))[0]
    assert difference(basis, -basis[:, ::-1], subspace=True) < 1e-15
    assert difference(basis, -basis, subspace=False) > 0.1


@pytest.mark.slow
@pytest.mark.cluster
def test_quick_run_writes_the_table(tmp_path):
    results, _ = run_quick("aggregation", tmp_path)
    assert results["quick"] is True
    for job, labels in results["median"].items():
        assert results["flat_vs_tree"][job] < 1e-8  # the same answer either way
        assert all(row["converged"] for row in labels.values())
    gram = results["median"]["gram d=64"]
    # three workers' messages against one
    assert gram["tree"]["bytes_vs_flat"] == pytest.approx(1 / 3)
