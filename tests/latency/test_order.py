"""Tests of daskstraggle.latency.order (Monte Carlo order statistics)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from itertools import combinations
from math import comb
from typing import ClassVar

import numpy as np
import pytest

from daskstraggle.errors import InvalidParameterError
from daskstraggle.latency.base import Constant, LatencyModel, LatencySampler
from daskstraggle.latency.order import OrderStatistics, order_statistics

# --- test-only models (not registered) ---------------------------------------------------


class _ExponentialSampler(LatencySampler):
    stateless = True

    def __init__(self, rate, n_workers, streams):
        super().__init__(n_workers, streams)
        self.rate = np.broadcast_to(np.asarray(rate, dtype=float), (n_workers,))

    def sample(self, worker_index, *, time=0.0, iteration=0, load=1.0, measured=None,
               size=None):
        compute = self.streams[worker_index].exponential(load / self.rate[worker_index], size)
        return compute, (0.0 if size is None else np.zeros(size))


@dataclass(frozen=True, kw_only=True, slots=True)
class Exponential(LatencyModel):
    """Compute ~ Exp(rate_i) per unit load, no communication."""

    name: ClassVar[str] = "test-exponential"
    rate: float | tuple[float, ...] = 1.0

    def _make_sampler(self, n_workers, streams):
        return _ExponentialSampler(self.rate, n_workers, streams)


@dataclass(frozen=True, kw_only=True, slots=True)
class Scaling(LatencyModel):
    """A pure slow-down: no distribution of its own."""

    name: ClassVar[str] = "test-scaling"
    factor: float = 2.0

    @property
    def has_distribution(self) -> bool:
        return False

    def _make_sampler(self, n_workers, streams):  # pragma: no cover - never sampled
        raise AssertionError


# --- tests -----------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_iid_exponential_matches_closed_form(seed):
    n, mu = 6, 2.0
    stats = order_statistics(Exponential(rate=mu), n, n_samples=20_000, rng=seed)
    expected = np.array(
        [sum(1 / (j * mu) for j in range(n - w + 1, n + 1)) for w in range(1, n + 1)]
    )
    assert stats.mean.shape == (n,)
    np.testing.assert_array_less(np.abs(stats.mean - expected), 5 * stats.stderr + 1e-12)
    assert np.all(np.diff(stats.mean) > 0)


def _exponential_order_means(rates):
    """E[X_(w:N)] for independent Exp(rate_i) by inclusion-exclusion (exact)."""
    # E[X_(w)] = sum_{j=n-w+1}^{n} (-1)^(j-n+w-1) C(j-1, n-w) sum_{|S|=j} E[min_S],
    # with E[min_S] = 1 / sum(rates in S)
    n = len(rates)

    means = []
    for w in range(1, n + 1):
        total = 0.0
        for j in range(n - w + 1, n + 1):
            coef = (-1) ** (j - (n - w + 1)) * comb(j - 1, n - w)
            total += coef * sum(1 / sum(s) for s in combinations(rates, j))
        means.append(total)
    return np.array(means)


def test_closed_form_helper_is_right_for_iid():
    rates = (2.0, 2.0, 2.0, 2.0)
    expected = [sum(1 / (j * 2.0) for j in range(4 - w + 1, 5)) for w in range(1, 5)]
    np.testing.assert_allclose(_exponential_order_means(rates), expected)


@pytest.mark.parametrize("seed", [3, 4])
def test_non_identical_workers_match_exact_values(seed):
    rates = (1.0, 2.0, 4.0, 8.0)
    stats = order_statistics(Exponential(rate=rates), 4, n_samples=40_000, rng=seed)
    exact = _exponential_order_means(rates)
    np.testing.assert_array_less(np.abs(stats.mean - exact), 5 * stats.stderr)
    # the i.i.d. model with the pooled mean gets the fastest worker wrong
    pooled = order_statistics(Exponential(rate=1 / np.mean([1 / r for r in rates])), 4,
                              n_samples=40_000, rng=seed)
    assert abs(pooled.mean[0] - exact[0]) > 10 * pooled.stderr[0]


def test_non_identical_workers_match_brute_force_sorting():
    rates = (1.0, 3.0, 0.5)
    loads = np.array([1.0, 2.0, 0.5])
    stats = order_statistics(Exponential(rate=rates), 3, n_samples=500, load=loads, rng=9)
    sampler = Exponential(rate=rates).sampler(3, rng=9)
    draws = np.column_stack([
        sampler.streams[i].exponential(loads[i] / rates[i], 500) for i in range(3)
    ])
    brute = np.sort(draws, axis=1)
    np.testing.assert_allclose(stats.samples, brute)
    np.testing.assert_allclose(stats.mean, brute.mean(axis=0))
    np.testing.assert_allclose(stats.std, brute.std(axis=0, ddof=1))


def test_constant_model_is_exact():
    model = Constant(compute=(3.0, 1.0, 2.0, 5.0), communication=(0.5, 0.5, 0.0, 1.0))
    stats = order_statistics(model, 4, n_samples=7, load=[1.0, 2.0, 1.0, 0.2])
    # latencies: 3.5, 2.5, 2.0, 2.0
    np.testing.assert_array_equal(stats.mean, [2.0, 2.0, 2.5, 3.5])
    np.testing.assert_array_equal(stats.std, np.zeros(4))
    np.testing.assert_array_equal(stats.quantiles(0.5), [2.0, 2.0, 2.5, 3.5])
    assert stats.quantiles([0.05, 0.95]).shape == (2, 4)
    assert stats.n_samples == 7 and stats.n_workers == 4


def test_single_sample_has_zero_std():
    stats = order_statistics(Constant(compute=1.0), 2, n_samples=1)
    np.testing.assert_array_equal(stats.std, [0.0, 0.0])


def test_seed_reproducible_and_to_dict_json():
    a = order_statistics(Exponential(rate=(1.0, 2.0)), 2, n_samples=100, rng=5)
    b = order_statistics(Exponential(rate=(1.0, 2.0)), 2, n_samples=100, rng=5)
    np.testing.assert_array_equal(a.mean, b.mean)
    d = json.loads(json.dumps(a.to_dict()))
    assert set(d) == {"n_workers", "n_samples", "mean", "std", "q05", "q50", "q95"}
    assert len(d["q95"]) == 2
    assert all(lo <= hi for lo, hi in zip(d["q05"], d["q95"], strict=True))
    assert isinstance(a, OrderStatistics)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_workers": 0}, "The 'n_workers' parameter of order_statistics must be an int >= 1"),
        ({"n_samples": 0}, "The 'n_samples' parameter of order_statistics must be an int >= 1"),
        ({"load": 0.0}, "The 'load' parameter of order_statistics must be a finite number > 0"),
        ({"load": [1.0, 1.0]}, "an array of 3 of them (one per worker)"),
        ({"load": "1"}, "The 'load' parameter"),
        ({"time": -1.0}, "The 'time' parameter of order_statistics must be a finite number >= 0"),
        ({"iteration": -1}, "The 'iteration' parameter of order_statistics"),
        ({"model": Scaling()}, "base distribution such as 'gamma("),
        ({"model": "gamma"}, "must be a LatencyModel. Got str instead."),
        ({"model": Constant(compute=(1.0, 2.0))}, "has 2 values but there are 3 workers"),
        # overflow (issue 25): one line, no numpy warning, no inf in the result
        ({"model": Constant(compute=1e15), "load": 1e300}, "a latency times load that is not "
         "finite in float64 (inf); use smaller times in the model or a smaller load."),
        ({"model": Constant(compute=1e15), "load": [1.0, 1e293, 1.0], "n_samples": 3},
         "a mean that is not finite in float64"),
    ],
)
def test_bad_input(kwargs, match):
    args = {"model": Constant(compute=1.0), "n_workers": 3, **kwargs}
    with pytest.raises(InvalidParameterError, match=re.escape(match)):
        order_statistics(args.pop("model"), args.pop("n_workers"), **args)


def test_many_workers_are_sorted_from_one_stream(monkeypatch):
    """Above PER_WORKER_STREAMS_MAX (here 2) the draws of every worker come at once."""
    from daskstraggle.latency import base
    from daskstraggle.latency.models import Gamma

    monkeypatch.setattr(base, "PER_WORKER_STREAMS_MAX", 2)
    monkeypatch.setattr(base.WorkerStreams, "__getitem__", None)  # no stream per worker
    model = Gamma(mean=(1.0, 2.0, 3.0), var=1e-6)
    stats = order_statistics(model, 3, n_samples=500, rng=1)
    assert stats.samples.shape == (500, 3) and np.all(np.diff(stats.samples, axis=1) >= 0)
    np.testing.assert_allclose(stats.mean, [1.0, 2.0, 3.0], rtol=1e-3)


def test_bad_quantile_level():
    stats = order_statistics(Constant(compute=1.0), 2, n_samples=3)
    with pytest.raises(InvalidParameterError, match=r"'q' parameter .* in \[0, 1\]"):
        stats.quantiles(1.5)


def test_stateful_models_are_refused_with_a_pointer_to_simulate():
    from daskstraggle.errors import InvalidParameterError
    from daskstraggle.latency.models import Gamma, TwoStateMarkov

    model = TwoStateMarkov(base=Gamma(mean=1.0, var=0.01), p_slow=0.5, slow_factor=10.0)
    with pytest.raises(InvalidParameterError, match=r"has state .* Use simulate\(\)"):
        order_statistics(model, 2)
