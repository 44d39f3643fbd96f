"""Hardy-Weinberg quality control: the exact test against its closed form, and the filter.

The p-values also equal plink2 --hardy's to its printed digits, and the kept variants
plink2 --hwe's at 1e-2, 1e-4 and 1e-6 (pipelines/genotype_pca.py --sections qc)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import xarray as xr
import zarr

import daskstraggle as ds
from daskstraggle.cli import main
from daskstraggle.data.datasets import make_genotypes
from daskstraggle.data.genotypes import call_counts
from daskstraggle.data.hwe import hwe_exact_p, hwe_exact_p_counts
from daskstraggle.errors import InvalidParameterError


def closed_form_p(het: int, hom_1: int, hom_2: int) -> float:
    """P(k hets | n, n_a) = n! / (n_AA! k! n_BB!) 2^k n_a! n_b! / (2n)!, summed over the k
    at most as likely as the observed: each term from factorials (log-gamma)."""
    n = het + hom_1 + hom_2
    n_a = 2 * min(hom_1, hom_2) + het
    if n == 0 or n_a == 0:
        return 1.0

    def log_p(k: int) -> float:
        aa, bb = (n_a - k) // 2, n - k - (n_a - k) // 2
        return (math.lgamma(n + 1) - math.lgamma(aa + 1) - math.lgamma(k + 1)
                - math.lgamma(bb + 1) + k * math.log(2) + math.lgamma(n_a + 1)
                + math.lgamma(2 * n - n_a + 1) - math.lgamma(2 * n + 1))

    ks = [k for k in range(n_a % 2, n_a + 1, 2) if n - k - (n_a - k) // 2 >= 0]
    probs = np.exp([log_p(k) for k in ks])
    return float(min(1.0, probs[probs <= math.exp(log_p(het)) * (1 + 1e-7)].sum()))


def test_the_recurrence_equals_the_closed_form():
    rng = np.random.default_rng(0)
    for _ in range(500):
        n = int(rng.integers(1, 400))
        counts = rng.multinomial(n, rng.dirichlet([1.0, 1.0, 1.0]))
        hom_1, het, hom_2 = (int(c) for c in counts)
        assert hwe_exact_p(het, hom_1, hom_2) == pytest.approx(
            closed_form_p(het, hom_1, hom_2), rel=1e-9, abs=1e-300)
    assert hwe_exact_p(0, 0, 0) == 1.0 and hwe_exact_p(0, 30, 0) == 1.0
    assert hwe_exact_p(0, 50, 50) < 1e-25  # no heterozygote at p = 0.5


def full_recurrence_p(het: int, hom_1: int, hom_2: int) -> float:
    """The pure-Python test the compiled one replaced: every probability of the
    recurrence, normalised, summed where at most as likely as the observed."""
    rare_hom, n = min(hom_1, hom_2), het + hom_1 + hom_2
    rare = 2 * rare_hom + het
    if n == 0 or rare == 0:
        return 1.0
    mid = rare * (2 * n - rare) // (2 * n)
    mid += (mid % 2 != rare % 2)
    probs = np.zeros(rare + 1)
    probs[mid] = 1.0
    homr, homc = (rare - mid) // 2, n - mid - (rare - mid) // 2
    for k in range(mid, 1, -2):
        probs[k - 2] = probs[k] * k * (k - 1) / (4.0 * (homr + 1) * (homc + 1))
        homr, homc = homr + 1, homc + 1
    homr, homc = (rare - mid) // 2, n - mid - (rare - mid) // 2
    for k in range(mid, rare - 1, 2):
        probs[k + 2] = probs[k] * 4.0 * homr * homc / ((k + 2.0) * (k + 1.0))
        homr, homc = homr - 1, homc - 1
    probs /= probs.sum()
    return float(min(1.0, probs[probs <= probs[het] * (1.0 + 1e-7)].sum()))


def test_the_compiled_test_equals_the_full_recurrence_on_a_grid():
    """Every count triple with at most 30 calls, and random ones up to 20 000 calls (far
    from equilibrium too): the compiled test, which stops each side once its terms fall
    below 1e-17 of the observed, equals summing every term, to 1e-12."""
    grid = [(h, a, b) for n in range(31) for h in range(n + 1) for a in range(n - h + 1)
            for b in (n - h - a,)]
    rng = np.random.default_rng(7)
    for n in rng.integers(31, 20_000, size=300):
        f = rng.uniform(0.001, 0.5)
        h = int(rng.binomial(n, rng.choice([2 * f * (1 - f), 0.5 * f, 0.0])))
        a = int(rng.binomial(n - h, rng.choice([0.5, 1 - f, f])))
        grid.append((h, a, int(n) - h - a))
    het, hom_1, hom_2 = (np.array(c) for c in zip(*grid, strict=True))
    got = hwe_exact_p_counts(het, hom_1, hom_2)
    want = np.array([full_recurrence_p(*t) for t in grid])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-300)
    # shared triples are computed once and handed back to every variant that has them
    np.testing.assert_array_equal(hwe_exact_p_counts(np.r_[het, het], np.r_[hom_1, hom_1],
                                                     np.r_[hom_2, hom_2]), np.r_[got, got])
    assert hwe_exact_p_counts(np.array([], dtype=int), np.array([], dtype=int),
                              np.array([], dtype=int)).shape == (0,)


def test_the_counting_pass_counts_the_called_genotypes_only():
    rows = np.array([[0, 1, 1, 2, -1, -1], [0, 0, 0, 0, 0, 1], [-1, -1, -1, -1, -1, -1]])
    matrix = ds.open_matrix(rows, genotype_dims=("variants", "samples"))
    np.testing.assert_allclose(call_counts(matrix).hwe_p(), [closed_form_p(2, 1, 1),
                                                             closed_form_p(1, 5, 0), 1.0])


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return make_genotypes(tmp_path_factory.mktemp("hwe") / "g.vcz", n_variants=600,
                          n_samples=60, chunk_rows=150, missing_rate=0.03, seed=2)


def test_the_filter_keeps_the_variants_at_or_above_the_threshold(store):
    calls = zarr.open_group(str(store), mode="r")["call_genotype"][:]
    dosage = np.where((calls < 0).any(axis=2), -1, (calls > 0).sum(axis=2))
    expected = np.array([closed_form_p(int((row == 1).sum()), int((row == 0).sum()),
                                       int((row == 2).sum())) for row in dosage])
    threshold = float(np.quantile(expected, 0.1))  # about a tenth removed
    m = ds.open_matrix(store, qc={"hwe": threshold})
    report = m.attrs["qc"]
    np.testing.assert_array_equal(report.kept, expected >= threshold)
    assert report.removed == {"hwe": int((expected < threshold).sum())} and m.n_rows < 600
    both = ds.open_matrix(store, qc=ds.GenotypeQC(hwe=threshold, min_maf=0.05))
    assert list(both.attrs["qc"].removed) == ["hwe", "maf"]


def test_hwe_on_the_command_line_and_its_bad_values(store, capsys):
    assert main(["pca", str(store), "-k", "2", "--runtime", "local", "--hwe", "1e-3",
                 "--max-iter", "5", "--tol", "1e-3"]) == 0
    assert "hwe removed" in capsys.readouterr().out
    assert main(["pca", str(store), "--runtime", "local", "--hwe", "2"]) == 2
    assert "'hwe' parameter of GenotypeQC (CLI: --hwe) must be a number in [0, 1]" in \
        capsys.readouterr().err


def test_hwe_refuses_calls_that_are_not_diploid():
    calls = np.random.default_rng(0).integers(0, 2, size=(30, 8, 3)).astype(np.int8)
    ds_ = xr.Dataset({"call_genotype": (("variants", "samples", "ploidy"), calls)})
    with pytest.raises(InvalidParameterError, match="tests diploid genotypes; these calls "
                                                    "have ploidy 3"):
        ds.open_matrix(ds_, qc={"hwe": 1e-6})


def test_distinct_triples_beyond_the_packed_keys():
    """Counts of 2^21 calls and more are deduplicated row-wise: the same p-values as
    testing each triple alone."""
    het = np.array([3, 2**21, 3, 2**21, 7])
    hom_1 = np.array([5, 2**21 + 9, 5, 2**21 + 9, 0])
    hom_2 = np.array([2, 40, 2, 40, 1])
    alone = [hwe_exact_p(int(h), int(a), int(b)) for h, a, b in zip(het, hom_1, hom_2,
                                                                    strict=True)]
    np.testing.assert_array_equal(hwe_exact_p_counts(het, hom_1, hom_2), alone)
