"""Tests of the load balancer's optimizer (DSAG Alg. 1)."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from daskstraggle.balance.optimizer import BalancePlan, _Contribution, optimize
from daskstraggle.errors import InvalidParameterError

N = 10


def _three_slow(n_wait: int, *, var: float = 0.0) -> BalancePlan:
    """10 workers, the first 3 twice as slow in compute; communication 1 % of compute."""
    e_z = np.ones(N)
    e_z[:3] = 2.0
    return optimize(
        np.full(N, 100), np.full(N, 10_000), e_z, var * e_z**2, np.full(N, 0.01),
        np.full(N, var * 1e-4), n_wait=n_wait, rng=0,
    )


def _h_all_fresh(p: tuple[int, ...] | np.ndarray, rows: np.ndarray) -> float:
    """h(p) when every worker delivers every iteration (u_i = 1)."""
    return float(np.sum(rows / rows.sum() / np.asarray(p)))


def test_twice_slower_workers_get_twice_the_subpartitions() -> None:
    plan = _three_slow(N)
    p = np.array(plan.subpartitions)
    assert plan.accepted
    assert p[:3].mean() / p[3:].mean() == pytest.approx(2.0, rel=0.1)
    assert plan.expected_latency.max() / plan.expected_latency.min() <= 1.1
    rows = np.full(N, 10_000)
    assert plan.h_min == pytest.approx(_h_all_fresh(np.full(N, 100), rows))
    assert plan.contribution == pytest.approx(_h_all_fresh(p, rows))
    assert plan.contribution >= 0.99 * plan.h_min
    assert plan.previous_imbalance == pytest.approx(2.01 / 1.01)
    assert plan.improvement == pytest.approx(1 - plan.imbalance / plan.previous_imbalance)


def test_step_three_stops_before_breaking_the_tolerance() -> None:
    # the paper returns one step past the tolerance; we return the last step inside it
    plan = _three_slow(N)
    rows = np.full(N, 10_000)
    p = np.array(plan.subpartitions)
    latency = 0.01 + np.where(np.arange(N) < 3, 2.0, 1.0) * 100 / p
    j = int(np.argmax(latency))
    beyond = p.copy()
    beyond[j] = max(math.ceil(1.01 * p[j]), p[j] + 1)
    assert _h_all_fresh(beyond, rows) < 0.99 * plan.h_min <= _h_all_fresh(p, rows)


def test_waiting_for_some_workers_balances_and_keeps_the_contribution() -> None:
    plan = _three_slow(7, var=0.01)
    p = np.array(plan.subpartitions)
    assert plan.accepted
    assert plan.imbalance < plan.previous_imbalance
    assert plan.imbalance <= 1.1
    assert p[:3].min() > p[3:].max()
    assert plan.contribution >= 0.99 * plan.h_min
    # common random numbers: the same seed gives the same plan
    again = _three_slow(7, var=0.01)
    assert again.subpartitions == plan.subpartitions
    assert again.contribution == plan.contribution


@pytest.mark.parametrize("n_wait", [N, 7])
def test_equal_workers_are_not_rebalanced(n_wait: int) -> None:
    e_z = np.ones(N)
    plan = optimize(np.full(N, 100), np.full(N, 1000), e_z, 0.01 * e_z, np.full(N, 0.01),
                    np.full(N, 1e-6), n_wait=n_wait)
    assert not plan.accepted
    assert plan.previous_imbalance == pytest.approx(1.0)


@pytest.mark.parametrize("n_wait", [N, 7])
def test_a_small_gain_is_accepted_only_below_the_margin(n_wait: int) -> None:
    # one worker 5 % slower: balancing gains about 3 %, less than margin=0.1
    e_z = np.ones(N)
    e_z[0] = 1.05
    args = (np.full(N, 100), np.full(N, 1000), e_z, 0.01 * e_z**2, np.full(N, 0.01),
            np.full(N, 1e-6))
    plan = optimize(*args, n_wait=n_wait, margin=0.1)
    assert not plan.accepted
    assert plan.improvement < 0.1
    small_margin = optimize(*args, n_wait=n_wait, margin=0.01)
    assert small_margin.accepted  # the margin, not something else, rejected it above
    assert small_margin.subpartitions[0] > 100


def test_communication_dominated_workers_keep_their_subpartitions() -> None:
    e_z = np.ones(N)
    e_z[:3] = 2.0
    e_z[9] = 0.05  # compute is 5 % of this worker's latency
    e_y = np.full(N, 0.01)
    e_y[9] = 1.0
    args = (np.full(N, 100), np.full(N, 1000), e_z, np.zeros(N), e_y, np.zeros(N))
    plan = optimize(*args, n_wait=N)
    assert plan.accepted
    assert plan.subpartitions[9] == 100
    assert plan.subpartitions[0] > 150
    assert optimize(*args, n_wait=N, comm_fraction=0.0).subpartitions[9] != 100


@pytest.mark.parametrize(
    ("h_min", "expected"),
    [
        # step (1): p'_0 = floor(0.3 * 31 / (0.1 + 0.9 - 0.1)) = 10, p'_1 = 30, so
        # h = 0.5/10 + 0.5/30 = 0.0667 >= 0.065; step (3) would move worker 0 to 11
        # (latency 1.03 > 1.0) with h = 0.0621 < 0.99 * 0.065: not taken
        (0.065, (10, 30)),
        # h = 0.0667 < 0.07, step (2): the fastest (worker 1) to 29, h = 0.0672; then the
        # fastest is worker 0 (1.03 < 1.031), to 9: h = 0.0728; step (3) would move worker
        # 0 (latency 1.133) back to 10, h = 0.0672 < 0.0693: not taken
        (0.07, (9, 29)),
    ],
)
def test_hand_worked_two_workers(h_min: float, expected: tuple[int, int]) -> None:
    plan = optimize([31, 30], [100, 100], [0.3, 0.9], [0.0, 0.0], [0.1, 0.1], [0.0, 0.0],
                    n_wait=2, h_min=h_min)
    assert plan.subpartitions == expected
    assert plan.previous == (31, 30)
    assert plan.contribution == pytest.approx(0.5 / expected[0] + 0.5 / expected[1])
    np.testing.assert_allclose(plan.expected_latency,
                               [0.1 + 9.3 / expected[0], 0.1 + 27.0 / expected[1]])
    np.testing.assert_allclose(plan.previous_latency, [0.4, 1.0])
    assert plan.accepted


def test_h_min_defaults_to_the_initial_subpartitions() -> None:
    rows = np.array([100, 300])
    plan = optimize([20, 20], rows, [1.0, 1.5], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0],
                    n_wait=2, p_initial=[10, 40])
    assert plan.h_min == pytest.approx(0.25 / 10 + 0.75 / 40)


def test_participation_is_floored_for_a_worker_never_fresh() -> None:
    p = np.array([10, 10, 10])
    e_z = np.array([1.0, 1.0, 50.0])  # worker 2 is never among the 2 fastest
    args = (p, np.full(3, 100), e_z, 0.01 * e_z**2, np.zeros(3), np.zeros(3))
    h = _Contribution(*args, n_wait=2, collect_window=0.02, n_iterations=100,
                      rng=np.random.default_rng(0))
    u = h.participation(p)
    assert u[2] > 0
    assert u[2] < 0.01  # only the floor: (0 + 1/3) / 1001
    np.testing.assert_allclose(u[:2], 1.0)
    all_fresh = _Contribution(*args, n_wait=3, collect_window=0.02, n_iterations=100,
                              rng=np.random.default_rng(0))
    np.testing.assert_array_equal(all_fresh.participation(p), np.ones(3))


def test_plan_to_dict_is_json_ready() -> None:
    plan = _three_slow(N)
    data = json.loads(json.dumps(plan.to_dict()))
    assert data["subpartitions"] == list(plan.subpartitions)
    assert data["accepted"] is True
    assert data["expected_latency"] == plan.expected_latency.tolist()


_GOOD = {
    "subpartitions": [2, 3],
    "rows": [10, 10],
    "compute_mean": [1.0, 2.0],
    "compute_var": [0.1, 0.1],
    "communication_mean": [0.01, 0.01],
    "communication_var": [0.0, 0.0],
    "n_wait": 2,
}


@pytest.mark.parametrize(
    ("change", "name"),
    [
        ({"margin": 0.0}, "margin"),
        ({"margin": 1.0}, "margin"),
        ({"margin": 1.5}, "margin"),
        ({"tolerance": 0.0}, "tolerance"),
        ({"comm_fraction": 1.0}, "comm_fraction"),
        ({"subpartitions": [0, 3]}, "subpartitions"),
        ({"subpartitions": [2.5, 3]}, "subpartitions"),
        ({"subpartitions": [11, 3]}, "subpartitions"),
        ({"p_initial": [2, 30]}, "p_initial"),
        ({"rows": [0, 10]}, "rows"),
        ({"rows": [10, 10, 10]}, "rows"),
        ({"compute_var": [0.1]}, "compute_var"),
        ({"compute_mean": [np.nan, 2.0]}, "compute_mean"),
        ({"compute_mean": [0.0, 2.0]}, "compute_mean"),
        ({"communication_var": [0.0, np.nan]}, "communication_var"),
        ({"communication_mean": [-1.0, 0.01]}, "communication_mean"),
        ({"n_wait": 3}, "n_wait"),
        ({"n_wait": 0}, "n_wait"),
        ({"h_min": -1.0}, "h_min"),
        ({"n_iterations": 0}, "n_iterations"),
    ],
)
def test_bad_parameters_raise_naming_the_parameter(change: dict[str, object], name: str) -> None:
    kwargs = {**_GOOD, **change}
    with pytest.raises(InvalidParameterError, match=re.escape(f"The {name!r} parameter of "
                                                              "optimize must be")):
        optimize(**kwargs)  # type: ignore[arg-type]


def test_good_parameters_do_not_raise() -> None:
    # the baseline of the parametrized test above is valid
    assert isinstance(optimize(**_GOOD), BalancePlan)  # type: ignore[arg-type]


def test_nan_statistics_point_at_the_profiler() -> None:
    with pytest.raises(InvalidParameterError, match=r"compute_var\[1\]=nan.*ready"):
        optimize(**{**_GOOD, "compute_var": [0.1, float("nan")]})  # type: ignore[arg-type]
