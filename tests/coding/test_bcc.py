"""Tests of the BCC schemes, the §IV-C comparison helpers and the idealised MDS baseline."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from daskstraggle.coding import make_scheme
from daskstraggle.coding.bcc import (
    BCC,
    HeterogeneousBCC,
    IdealMDS,
    bcc_coverage_probability,
    coverage_time,
    harmonic_number,
    p2_loads,
    proportional_loads,
)
from daskstraggle.errors import InvalidParameterError


def _decodes_exactly(a, weights):
    A, labels = a.encoding_matrix()
    combo = np.zeros(a.n_partitions)
    for key, w in weights.items():
        combo += w * A[labels.index(key)]
    return np.max(np.abs(combo - 1.0)) < 1e-12


@pytest.mark.parametrize("r", [1, 5, 10, 20])
def test_bcc_mean_results_needed_matches_coupon_collector(r):
    m, n_workers, trials = 100, 3000, 200
    rng = np.random.default_rng(r)
    scheme = BCC(batch_size=r, n_partitions=m)
    counts = []
    for _ in range(trials):
        a = scheme.assign(n_workers, rng=rng)
        assert a.info["covers"]
        order = rng.permutation(n_workers)
        batches = np.asarray(a.info["batch_of_worker"])[order]
        _, first = np.unique(batches, return_index=True)
        counts.append(first.max() + 1)
    b = math.ceil(m / r)
    expected = b * harmonic_number(b)
    assert a.info["expected_results"] == pytest.approx(expected)
    se = np.std(counts, ddof=1) / math.sqrt(trials)
    assert abs(np.mean(counts) - expected) < 3 * se + 1e-9


@pytest.mark.parametrize(("n_batches", "n_workers"), [(5, 8), (10, 20), (20, 60), (4, 4)])
def test_bcc_coverage_probability_matches_monte_carlo(n_batches, n_workers):
    rng = np.random.default_rng(0)
    picks = rng.integers(0, n_batches, size=(20000, n_workers))
    covered = np.array([np.unique(row).size == n_batches for row in picks])
    p = bcc_coverage_probability(n_batches, n_workers)
    exact = sum((-1) ** j * math.comb(n_batches, j) * (1 - j / n_batches) ** n_workers
                for j in range(n_batches + 1))
    assert p == pytest.approx(exact, abs=1e-12)
    se = math.sqrt(p * (1 - p) / covered.size) + 1e-4
    assert abs(covered.mean() - p) < 4 * se
    a = BCC(batch_size=1, n_partitions=n_batches).assign(n_workers, rng=1)
    assert a.info["coverage_probability"] == pytest.approx(p)


@pytest.mark.parametrize("seed", range(5))
def test_bcc_decode_exact_after_coverage_none_before(seed):
    a = BCC(batch_size=3, n_partitions=10).assign(30, rng=seed)
    rng = np.random.default_rng(seed)
    order = [(int(i), 0) for i in rng.permutation(30)]
    seen: set[int] = set()
    for k, label in enumerate(order, start=1):
        seen.add(a.info["batch_of_worker"][label[0]])
        weights = a.decode(order[:k])
        if len(seen) < a.info["n_batches"]:
            assert weights is None
        else:
            assert weights is not None and set(weights) <= set(order[:k])
            assert all(w == 1.0 for w in weights.values())
            assert _decodes_exactly(a, weights)


def test_bcc_default_partitions_and_never_covering_assignment():
    a = BCC(batch_size=1).assign(5, rng=0)
    assert a.n_partitions == 5 and a.info["n_batches"] == 5
    assert a.info["covers"] == (len(set(a.info["batch_of_worker"])) == 5)
    if not a.info["covers"]:
        assert a.decode([(i, 0) for i in range(5)]) is None


def test_heterogeneous_loads_beat_load_proportional_section_iv_c():
    mu = [1.0] * 95 + [20.0] * 5
    m = 500
    scheme = HeterogeneousBCC(shift=20.0, rate=mu, n_partitions=m, coverage_factor=1.0)
    c, s = scheme.samples_target(100)
    assert (c, s) == (1.0, math.floor(m * math.log(m)))
    loads = scheme.loads(100)
    bcc = coverage_time(loads, shift=20.0, rate=mu, n_partitions=m, n_trials=200, rng=0)
    lb = coverage_time(proportional_loads(mu, m), shift=20.0, rate=mu, n_partitions=m,
                       n_trials=200, rng=0, disjoint=True)
    assert lb.never_cover_fraction == 0.0
    # with c = 1 many random placements never cover (about half here)
    assert 0.2 < bcc.never_cover_fraction < 0.9
    reduction = 1 - bcc.mean_time / lb.mean_time
    assert 0.15 < reduction < 0.4  # paper: 29.28 %; about 28 % here


def test_heterogeneous_theorem_2_factor_covers_and_decodes():
    mu = [1.0] * 8 + [5.0] * 2
    scheme = HeterogeneousBCC(shift=[2.0] * 10, rate=mu, n_partitions=30)
    a = scheme.assign(10, rng=0)
    assert a.info["coverage_factor"] > 2 and a.info["covers"]
    assert list(a.info["loads"]) == [len(p) for p in a.placement]
    _, labels = a.encoding_matrix()
    rng = np.random.default_rng(0)
    order = [labels[i] for i in rng.permutation(len(labels))]
    for k in range(len(order) + 1):
        weights = a.decode(order[:k])
        covered = {a.placement[i][j] for i, j in order[:k]}
        if len(covered) < 30:
            assert weights is None
        else:
            assert weights is not None and _decodes_exactly(a, weights)
            assert len(weights) == 30
            break


def test_proportional_allocation_is_disjoint_and_needs_everyone():
    scheme = HeterogeneousBCC(shift=1.0, rate=[1.0, 2.0, 3.0], n_partitions=12,
                              allocation="proportional")
    a = scheme.assign(3, rng=0)
    assert a.info["loads"] == (2, 4, 6) and sorted(sum(a.placement, ())) == list(range(12))
    _, labels = a.encoding_matrix()
    assert a.decode(labels[:-1]) is None
    assert _decodes_exactly(a, a.decode(labels))


def test_p2_loads_balance_expected_results():
    loads = p2_loads([1.0, 2.0], [1.0, 1.0], n_partitions=1000, n_samples=100)
    assert loads[0] > loads[1] >= 1  # the smaller shift gets more
    assert p2_loads(0.0, 1.0, n_partitions=7, n_samples=3, n_workers=2).tolist() == [7, 7]


@pytest.mark.parametrize("rate", [0.25, 0.5, 0.7, 1.0])
def test_ideal_mds_needs_ceil_rn(rate):
    n = 8
    a = make_scheme("mds-ideal", rate=rate).assign(n)
    k = math.ceil(rate * n)
    assert a.info["latency_only"] and a.info["recovery_threshold"] == k
    rng = np.random.default_rng(0)
    for size in range(n + 1):
        subset = [(int(i), 0) for i in rng.choice(n, size=size, replace=False)]
        weights = a.decode(subset)
        assert (weights is None) == (size < k)
        if weights is not None:
            assert _decodes_exactly(a, weights)


@pytest.mark.parametrize(
    ("build", "param"),
    [
        (lambda: BCC(batch_size=0), "batch_size"),
        (lambda: BCC(batch_size=5, n_partitions=4), "batch_size"),
        (lambda: BCC(batch_size=5).assign(4), "batch_size"),
        (lambda: IdealMDS(rate=0.0), "rate"),
        (lambda: IdealMDS(rate=1.5), "rate"),
        (lambda: HeterogeneousBCC(shift=-1.0, rate=1.0, n_partitions=5), "shift"),
        (lambda: HeterogeneousBCC(shift=1.0, rate=0.0, n_partitions=5), "rate"),
        (lambda: HeterogeneousBCC(shift=[1.0, 1.0], rate=[1.0], n_partitions=5), "shift"),
        (lambda: HeterogeneousBCC(shift=[1.0, 1.0], rate=1.0, n_partitions=5).assign(3),
         "shift"),
        (lambda: HeterogeneousBCC(shift=1.0, rate=1.0, n_partitions=5, allocation="x"),
         "allocation"),
        (lambda: make_scheme("bcc-homogeneous"), "scheme"),
    ],
)
def test_bad_parameters(build, param):
    with pytest.raises(InvalidParameterError, match=re.escape(f"The {param!r} parameter")):
        build()
