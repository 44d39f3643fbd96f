"""Smoke test of ``pipelines/age_comparison.py`` (quick sizes, all three scenarios).

Beyond the JSON's keys it checks what must hold whatever the latency draws in the
near-deterministic scenario (every fast worker's first, degree-1 codeword arrives before
any second codeword, and the needed count equals the number of fast workers): each
iteration recovers exactly the first entries of the fast workers' lists, so static RCS
recovers the same partitions every iteration and never the other S (their age grows to the
number of iterations), while RCS-1 cycles through all L list positions and recovers every
partition that some fast worker holds at least once every L iterations (age <= L - 1).
"""

from __future__ import annotations

import math

from test_pipelines_load import run_quick


def test_quick_age_comparison(tmp_path, load_pipeline):
    module = load_pipeline("age_comparison")
    saved, printed = run_quick("age_comparison", tmp_path)
    assert saved["quick"] is True
    assert set(module.SECTIONS) <= set(saved)
    spec = saved["spec"]
    n_iter = spec["quick"]["iterations"]
    L = sum(spec["run"]["degrees"])
    threshold = spec["run"]["age_threshold"]
    for section in module.SECTIONS:
        assert saved[section], section
        for setting in saved[section].values():
            assert set(setting["median"]) == {"static", "shift", "age"}
            for m in setting["median"].values():
                assert set(module.SCALARS) <= set(m)
                assert len(m["gap_curve"]) == n_iter
                assert len(m["average_age_sorted"]) == spec["quick"]["workers"]
                assert 0.0 <= m["eq14"] <= 1.0
                assert math.isfinite(m["test_mse"]) and m["test_mse"] >= 0
                assert m["max_age"] <= n_iter
            for runs in setting["runs"].values():
                assert len(runs) == len(spec["quick"]["seeds"])

    block = saved["deterministic"]
    n_workers = spec["quick"]["workers"]
    n_slow = spec["quick"]["deterministic_stragglers"]
    for setting in block.values():
        assert math.ceil((1 - setting["tolerance"]) * n_workers) == n_workers - n_slow
        for r in setting["runs"]["static"]:
            assert r["never_recovered"] == n_slow
            assert r["max_age"] == n_iter
            # the S never-recovered partitions are aged from iteration A_th on
            assert r["eq14"] >= n_slow / n_workers * (n_iter - threshold) / n_iter - 1e-12
            assert all(s == 0 for s in r["shift_curve"])
        for r in setting["runs"]["shift"]:
            assert r["never_recovered"] == r["unrecoverable"]
            assert r["max_age_recoverable"] <= L - 1
        for r in setting["runs"]["age"]:
            # design property of RCS-adaptive here (not a theorem): no partition a fast
            # worker holds is starved, and the order does move (no shift-0 freeze)
            assert r["never_recovered"] == r["unrecoverable"]
            assert r["max_age_recoverable"] <= L - 1
            assert len(set(r["shift_curve"])) > 1
        med = setting["median"]
        assert med["static"]["worst_average_age"] > max(med["shift"]["worst_average_age"],
                                                        med["age"]["worst_average_age"])
        # the static order stalls at a biased point: it ends farther from the optimum
        assert med["static"]["median_last_gap"] > med["shift"]["median_last_gap"]

    for section in ("persistent", "markov"):
        for setting in saved[section].values():
            need = math.ceil((1 - setting["tolerance"]) * n_workers - 1e-9)
            for runs in setting["runs"].values():
                for r in runs:
                    # equal partitions: each step uses at least `need` of them
                    assert r["coverage_mean"] >= need / n_workers - 1e-12
                    # the reference is the optimum: gaps are non-negative
                    assert min(r["gap_curve"]) >= -1e-9
    assert "(deterministic) extra: near-deterministic latency" in printed
    assert "RCS-adaptive" in printed
