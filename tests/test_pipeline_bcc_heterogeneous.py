"""Smoke test of ``pipelines/bcc_heterogeneous.py`` (BCC paper §IV-C) in ``--quick`` mode."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from test_pipelines_load import run_quick


@pytest.mark.timeout(60)
def test_quick_run_writes_sane_json(tmp_path: Path) -> None:
    res, printed = run_quick("bcc_heterogeneous", tmp_path, "--seed", "3")
    assert "29.28" in printed

    for key in ("spec", "machine", "quick", "seed", "samples", "lb", "uniform", "bcc",
                "lower_bound", "upper_bound", "paper_reduction_percent", "runtime_s"):
        assert key in res, key
    assert res["quick"] is True and res["seed"] == 3
    assert set(res["bcc"]) == {"c=1", "c=2", "c=3", "theorem2"}

    # LB: 5 fast workers hold 51 examples each, so every run lasts at least a_i r_i = 1020;
    # E[max] is 1020 + 2.55 H_5 = 1025.8 (the slow workers finish by ~80).
    lb = res["lb"]
    assert lb["load_sum"] == 500 and lb["never_cover_fraction"] == 0.0
    assert lb["max_shift"] == 1020.0
    assert 1020.0 <= lb["mean"] <= 1035.0

    c1 = res["bcc"]["c=1"]
    # P2 is deterministic: s = floor(500 log 500) = 3107, lam = 23.19 (mu = 1) and 20.30
    # (mu = 20), t* = s / sum mu_i / (1 + mu_i lam_i) = 744.4, r_i = t* / lam_i = 32 / 37.
    assert c1["n_results"] == 3107
    assert c1["loads_per_group"] == [[32], [37]]
    assert c1["loads_match_p2_loads"]
    assert c1["t_star"] == pytest.approx(744.4, abs=0.5)
    assert c1["t_hat_mc"][0] == pytest.approx(c1["t_star"], rel=0.05)
    # About half of the random placements at c = 1 miss an example: P(cover) ~ exp(-500
    # prod_i (1 - r_i / m)) ~ 0.5. Measured 47.1 % over 40 000 trials (default mode) and
    # 41-55 % for quick seeds 0-99; at 400 trials the binomial standard error is 2.5 %.
    assert 0.35 <= c1["never_cover_fraction"] <= 0.65
    # Reduction over covering placements: 28.9 +- 0.04 % in default mode (paper: 29.28 %),
    # quick-mode standard error ~0.3 %, and seeds 0-99 of --quick all gave 28.4-29.5 %. The
    # band [24, 33] % is > 10 standard errors wide yet fails if P2 gives loads that never
    # cover (nan), that are proportional to mu (no gain), or that wait for every worker.
    red, red_se = c1["reduction_percent"]["covering"]
    assert 24.0 <= red <= 33.0, (red, red_se)
    # Counting non-covering runs as "wait for all" (+ recompute) can only make it slower.
    assert c1["counted_wait_all"][0] >= c1["covering"][0] - 3 * c1["covering"][1]
    assert c1["counted_wait_all_recompute"][0] >= c1["counted_wait_all"][0]

    for label in ("c=2", "c=3", "theorem2"):
        case = res["bcc"][label]
        assert case["never_cover_fraction"] < 0.02
        # larger c means r_i ~ c m log m / n examples per worker: slower than LB here
        assert case["reduction_percent"]["covering"][0] < 0.0
    # Not in the paper: r_i = m / n = 5 on disjoint blocks waits for all yet takes ~126
    # (shift 100 + max of 100 Exp(mean 5)), far below both schemes: the shift a_i r_i dominates.
    uniform = res["uniform"]
    assert uniform["loads_per_group"] == [[5], [5]]
    assert 100.0 <= uniform["mean"] < c1["covering"][0]
    assert res["bcc"]["theorem2"]["coverage_factor"] == pytest.approx(2.519, abs=1e-3)
    # Theorem 2: lower bound <= the best coverage time measured <= upper bound
    assert res["lower_bound"]["t_star"] < c1["covering"][0] < res["upper_bound"]
    assert all(math.isfinite(res["bcc"][k]["covering"][0]) for k in res["bcc"])
