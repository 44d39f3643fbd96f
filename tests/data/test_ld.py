"""LD pruning (plink2's --indep-pairwise): the bit-plane counts and band against numpy
oracles, the compiled scan against the replaced Python scan (written out here as the
reference), the scan against plink2's own answers on a fixture, the pass split across
partitions, the memory bound, bad input."""

from __future__ import annotations

import functools
import itertools
from pathlib import Path
from typing import Any

import dask.array as da
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import daskstraggle as ds
from daskstraggle.data import ld
from daskstraggle.data.genotypes import GenotypeQC, filter_variants
from daskstraggle.errors import InvalidDataError, InvalidParameterError

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "plink2_qc"
SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def _pairwise_r2(x: np.ndarray, i: int, j: int) -> tuple[float, float, float]:
    """cov, var_i, var_j (times n squared) over the samples called at both, in floats."""
    both = (x[i] >= 0) & (x[j] >= 0)
    a, b = x[i, both].astype(float), x[j, both].astype(float)
    n = both.sum()
    return (n * (a @ b) - a.sum() * b.sum(), n * (a @ a) - a.sum() ** 2,
            n * (b @ b) - b.sum() ** 2)


def _calls(rng: np.random.Generator, n: int = 120, m: int = 70, missing: float = 0.05):
    base = rng.integers(0, 3, size=(n // 4, m))
    x = np.repeat(base, 4, axis=0)[:n]
    flip = rng.random(x.shape) < 0.15
    x = np.where(flip, rng.integers(0, 3, size=x.shape), x).astype(np.int8)
    x[rng.random(x.shape) < missing] = -1
    return x


def _band_exceeds(x: np.ndarray, contig: np.ndarray | None, window: int,
                  r2: float) -> np.ndarray:
    """The band (rows x window - 1) of one partition of dosages ``x``, of ploidy the largest."""
    planes, _ = ld.bit_planes(x, int(max(2, np.asarray(x).max(initial=0))))
    return ld._plane_band(planes, ld._contig_codes(contig, planes.shape[0]), window, r2)


def _row_stats(x: np.ndarray, ploidy: int = 2) -> tuple[np.ndarray, np.ndarray]:
    planes, factor = ld.bit_planes(x, ploidy)
    return ld._row_stats(planes, factor, ploidy)


# ---------------------------------------------------------------- oracles and the reference
def _oracle_counts(x: np.ndarray, i: int, j: int) -> tuple[int, ...]:
    """n, sum x, sum y, sum x², sum y², sum xy of rows i (x) and j (y) over the samples
    called at both, in exact integers."""
    both = (x[i] >= 0) & (x[j] >= 0)
    a, b = x[i, both].astype(np.int64), x[j, both].astype(np.int64)
    return int(both.sum()), int(a.sum()), int(b.sum()), int(a @ a), int(b @ b), int(a @ b)


def _oracle_band(x: np.ndarray, contig: np.ndarray | None, window: int, r2: float
                 ) -> np.ndarray:
    """plink2's test on every pair of the band, from :func:`_oracle_counts`."""
    n = x.shape[0]
    band = np.zeros((n, window - 1), dtype=bool)
    for i in range(n):
        for j in range(i + 1, min(i + window, n)):
            if contig is None or contig[i] == contig[j]:
                n_both, sx, sy, qx, qy, dot = _oracle_counts(x, i, j)
                cov = float(dot * n_both - sx * sy)
                var_x, var_y = float(qx * n_both - sx * sx), float(qy * n_both - sy * sy)
                band[i, j - i - 1] = cov * cov > r2 * (1.0 + 2.0**-44) * var_x * var_y
    return band


def _oracle_stats(x: np.ndarray, ploidy: int) -> tuple[np.ndarray, np.ndarray]:
    """The replaced per-row statistics, on the dosages: major allele frequency, constant."""
    called = x >= 0
    n = np.count_nonzero(called, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = np.where(called, x, 0).sum(axis=1, dtype=np.float64) / (n * ploidy)
    low = np.where(called, x, 127).min(axis=1)
    high = np.where(called, x, -1).max(axis=1)
    return np.maximum(p, 1.0 - p), (n == 0) | (low == high)


def _reference_keep(band: np.ndarray, major: np.ndarray, constant: np.ndarray,
                    contig: np.ndarray | None, window: int, step: int, order: int
                    ) -> np.ndarray:
    """The replaced Python scan (plink2's --indep-pairwise over the band), as it was."""
    n = band.shape[0]
    removed = np.zeros(n, dtype=bool)
    if contig is None:
        runs = [(0, n)]
    else:
        cuts = np.flatnonzero(contig[1:] != contig[:-1]) + 1
        edges = np.concatenate([[0], cuts, [n]])
        runs = [(int(a), int(b)) for a, b in itertools.pairwise(edges)]
    for a, b in runs:
        if b - a > 1:
            removed[a:b] |= constant[a:b]
            _reference_contig(band, major, removed, a, b, window, step, order)
    return ~removed


def _reference_contig(band: np.ndarray, major: np.ndarray, removed: np.ndarray, first: int,
                      end: int, window: int, step: int, order: int) -> None:
    scan = _reference_backwards if order == 2 else _reference_forwards
    start, stop = first, min(first + window, end)
    members: list[int] = []
    unchecked: dict[int, int] = {}
    loaded, split = first, 0
    while True:
        members.extend(range(loaded, stop))
        unchecked.update((v, v + 1) for v in range(loaded, stop))
        loaded = stop
        scan(band, major, removed, members, split, stop, unchecked)
        if stop == end:
            return
        start += step
        stop = min(start + window, end)
        members = [v for v in members if not removed[v] and v >= start]
        split = len(members)


def _drops_second(major: np.ndarray, first: int, second: int) -> bool:
    return bool(major[first] <= major[second] * (1.0 + 2.0**-44))


def _reference_backwards(band: np.ndarray, major: np.ndarray, removed: np.ndarray,
                         members: list[int], split: int, stop: int,
                         unchecked: dict[int, int]) -> None:
    for pos in range(len(members) - 1, max(split, 1) - 1, -1):
        second = members[pos]
        for earlier in range(pos - 1, -1, -1):
            other = members[earlier]
            if removed[other] or not band[other, second - other - 1]:
                continue
            if _drops_second(major, other, second):
                removed[second] = True
                break
            removed[other] = True


def _reference_forwards(band: np.ndarray, major: np.ndarray, removed: np.ndarray,
                        members: list[int], split: int, stop: int,
                        unchecked: dict[int, int]) -> None:
    while True:
        before = int(removed[members].sum()) if members else 0
        for pos, first in enumerate(members):
            if removed[first] or unchecked[first] == stop:
                continue
            later = [q for q in range(pos + 1, len(members))
                     if not removed[members[q]] and members[q] >= unchecked[first]]
            unchecked[first] = stop
            for q in later:
                second = members[q]
                if not band[first, second - first - 1]:
                    continue
                if not _drops_second(major, first, second):
                    removed[first] = True
                else:
                    removed[second] = True
                    rest = [r for r in range(q + 1, len(members)) if not removed[members[r]]]
                    unchecked[first] = members[rest[0]] if rest else stop
                break
        if (int(removed[members].sum()) if members else 0) == before:
            return


@st.composite
def dosage_rows(draw: st.DrawFn, ploidies: tuple[int, ...] = (2, 2, 1, 4)
                ) -> tuple[np.ndarray, int]:
    """Dosages (-1 missing) of variants in LD (a variant copies the one before it at a
    share of the samples), with missing calls, monomorphic and all-missing variants, any
    sample count (words of 64 samples end anywhere, odd counts), ploidy 1, 2 or 4."""
    n_rows = draw(st.integers(1, 50))
    n_samples = draw(st.integers(1, 150))
    ploidy = draw(st.sampled_from(ploidies))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    freq = rng.choice([0.0, 0.1, 0.5, 1.0], size=(n_rows, 1))
    x = rng.binomial(ploidy, freq, size=(n_rows, n_samples))
    for i in range(1, n_rows):
        if rng.uniform() < 0.7:
            shared = rng.uniform(size=n_samples) < rng.uniform(0.5, 1.0)
            x[i, shared] = x[i - 1, shared]
    rates = rng.choice([0.0, 0.02, 0.3], size=(n_rows, 1))
    x[rng.uniform(size=x.shape) < rates] = -1
    x[rng.uniform(size=n_rows) < 0.05] = -1  # variants with no call
    return x.astype(np.int8), ploidy


def _contigs(seed: int, n: int, n_contigs: int) -> np.ndarray | None:
    if n_contigs == 1:
        return None
    return np.sort(np.random.default_rng(seed).integers(0, n_contigs, size=n))


@functools.cache
def _counts_kernel() -> Any:
    """A compiled loop writing the kernel's counts of the pairs ``first[k]``, ``second[k]``
    (n, sum x, sum y, sum x², sum y², sum xy) into ``out[k]``."""
    import numba

    counts = ld._numba()._counts

    @numba.njit
    def run(planes: np.ndarray, first: np.ndarray, second: np.ndarray, out: np.ndarray) -> None:
        for k in range(first.shape[0]):
            pair = counts(planes, first[k], second[k])
            for c in range(6):
                out[k, c] = pair[c]

    return run


def _window_pairs(n: int, window: int) -> tuple[np.ndarray, np.ndarray]:
    pairs = np.array([(i, j) for i in range(n) for j in range(i + 1, min(i + window, n))],
                     dtype=np.int64).reshape(-1, 2)
    return pairs[:, 0].copy(), pairs[:, 1].copy()


@SETTINGS
@given(data=dosage_rows(), window=st.integers(2, 12))
def test_pair_counts_are_exact_and_r2_is_numpys(data: tuple[np.ndarray, int],
                                                window: int) -> None:
    x, ploidy = data
    planes, factor = ld.bit_planes(x, ploidy)
    assert factor == 1 and planes.dtype == np.uint64 and planes.shape[2] % 8 == 0
    assert planes.shape[1] == (3 if x.max() <= 2 else 4)  # the diploid kernel: dosages 0-2
    first, second = _window_pairs(x.shape[0], window)
    counts = np.empty((first.size, 6), dtype=np.int64)
    _counts_kernel()(planes, first, second, counts)
    expected = [_oracle_counts(x, i, j) for i, j in zip(first, second, strict=True)]
    np.testing.assert_array_equal(counts, np.array(expected, dtype=np.int64).reshape(-1, 6))
    for (n, sx, sy, qx, qy, dot), i, j in zip(counts, first, second, strict=True):
        both = (x[i] >= 0) & (x[j] >= 0)
        a, b = x[i, both].astype(np.float64), x[j, both].astype(np.float64)
        if n < 2 or a.std() == 0 or b.std() == 0:
            continue
        r2 = float(dot * n - sx * sy) ** 2 / float((qx * n - sx * sx) * (qy * n - sy * sy))
        assert abs(r2 - np.corrcoef(a, b)[0, 1] ** 2) <= 1e-12


@SETTINGS
@given(data=dosage_rows(), window=st.integers(2, 12), r2=st.sampled_from([0.0, 0.1, 0.5, 0.9]),
       n_contigs=st.integers(1, 3), seed=st.integers(0, 99))
def test_band_is_the_oracles(data: tuple[np.ndarray, int], window: int, r2: float,
                             n_contigs: int, seed: int) -> None:
    x, _ = data
    contig = _contigs(seed, x.shape[0], n_contigs)
    np.testing.assert_array_equal(_band_exceeds(x, contig, window, r2),
                                  _oracle_band(x, contig, window, r2))


@SETTINGS
@given(data=dosage_rows(), window=st.integers(2, 12), r2=st.sampled_from([0.05, 0.3, 0.7]),
       n_contigs=st.integers(1, 3), seed=st.integers(0, 99),
       cuts=st.lists(st.integers(1, 49), max_size=5), step=st.integers(1, 12),
       order=st.sampled_from([1, 2]))
def test_partitions_and_the_compiled_scan_keep_the_replaced_set(
        data: tuple[np.ndarray, int], window: int, r2: float, n_contigs: int, seed: int,
        cuts: list[int], step: int, order: int) -> None:
    """Partitions of any length (shorter than the window too): the band, the per-variant
    statistics and the kept set are the oracle's and the replaced scan's."""
    x, ploidy = data
    n = x.shape[0]
    contig = _contigs(seed, n, n_contigs)
    bounds = np.unique(np.clip([0, n, *cuts], 0, n))
    parts = [ld.ld_partition(x[a:b], None if contig is None else contig[a:b], window, r2,
                             ploidy) for a, b in itertools.pairwise(bounds)]
    band = np.concatenate([p["band"] for p in parts])
    ld._cross_pairs(parts, bounds, band, contig, window, r2)
    np.testing.assert_array_equal(band, _oracle_band(x, contig, window, r2))
    major = np.concatenate([p["major"] for p in parts])
    constant = np.concatenate([p["constant"] for p in parts])
    expected_major, expected_constant = _oracle_stats(x, ploidy)
    np.testing.assert_array_equal(major, expected_major)
    np.testing.assert_array_equal(constant, expected_constant)
    step = min(step, window)
    np.testing.assert_array_equal(
        ld.prune_band(band, major, constant, contig, window, step, order),
        _reference_keep(band, major, constant, contig, window, step, order))


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 80), window=st.integers(2, 15),
       step=st.integers(1, 15), order=st.sampled_from([1, 2]),
       density=st.sampled_from([0.05, 0.3, 0.8]), n_contigs=st.integers(1, 3))
def test_the_compiled_scan_is_the_replaced_scan(seed: int, n: int, window: int, step: int,
                                                order: int, density: float,
                                                n_contigs: int) -> None:
    """Any band (dense ones too, which dosages seldom give), ties of the major allele
    frequency within and beyond 2^-44, NaN frequencies and constant variants."""
    rng = np.random.default_rng(seed)
    band = rng.uniform(size=(n, window - 1)) < density
    major = rng.choice([0.5, 0.6, 0.6 * (1 + 2.0**-46), 0.6 * (1 + 2.0**-40), 0.9, np.nan],
                       size=n)
    constant = rng.uniform(size=n) < 0.1
    contig = _contigs(seed, n, n_contigs)
    step = min(step, window)
    np.testing.assert_array_equal(
        ld.prune_band(band, major, constant, contig, window, step, order),
        _reference_keep(band, major, constant, contig, window, step, order))


@settings(SETTINGS, max_examples=15)
@given(data=dosage_rows(ploidies=(2,)), rows=st.integers(1, 20), window=st.integers(2, 60),
       step=st.integers(1, 60), order=st.sampled_from([1, 2]))
def test_the_pass_keeps_the_replaced_set(data: tuple[np.ndarray, int], rows: int,
                                         window: int, step: int, order: int) -> None:
    """ld_prune_keep end to end, on partitions of ``rows`` variants."""
    x, _ = data
    step = min(step, window)
    matrix = ds.open_matrix(da.from_array(x, chunks=(rows, -1)),
                            genotype_dims=("variants", "samples"))
    keep = ld.ld_prune_keep(matrix, ld.LDPrune(window, step, 0.2, order))
    fitted = max(2, min(window, x.shape[0]))  # a window longer than the data: the data's
    major, constant = _oracle_stats(x, 2)
    expected = _reference_keep(_oracle_band(x, None, fitted, 0.2), major, constant, None,
                               fitted, min(step, fitted), order)
    np.testing.assert_array_equal(keep, expected)


def test_fractional_dosages_are_made_whole() -> None:
    """Dosages of calls of lower ploidy scaled to fractions: r² does not change with the
    factor that makes them whole; the frequencies are those of the fractions."""
    x = _calls(np.random.default_rng(5), n=40, m=30)
    halves = np.where(x >= 0, x / 2.0, -1.0)
    assert ld.bit_planes(halves, 1)[1] == 2
    np.testing.assert_array_equal(_band_exceeds(halves, None, 6, 0.2),
                                  _band_exceeds(x, None, 6, 0.2))
    part = ld.ld_partition(halves, None, 6, 0.2, 1)
    major, constant = _oracle_stats(x, 2)
    np.testing.assert_allclose(part["major"], major, rtol=1e-15)
    np.testing.assert_array_equal(part["constant"], constant)
    thirds = np.where(x >= 0, x / 3.0, -1.0)
    assert ld.bit_planes(thirds, 2)[1] == 3
    with pytest.raises(InvalidDataError, match="whole multiples"):
        ld.bit_planes(np.where(x >= 0, x * 0.123456, -1.0), 2)


@pytest.mark.parametrize("r2", [0.05, 0.3, 0.8])
def test_band_is_the_pairwise_complete_r2_test(r2: float) -> None:
    rng = np.random.default_rng(0)
    x = _calls(rng, n=300)  # more than one tile of 256 rows
    window = 9
    band = _band_exceeds(x, None, window, r2)
    expected = np.zeros_like(band)
    for i in range(x.shape[0]):
        for d in range(1, window):
            if i + d < x.shape[0]:
                cov, v1, v2 = _pairwise_r2(x, i, i + d)
                expected[i, d - 1] = cov * cov > r2 * (1 + 2.0**-44) * v1 * v2
    assert band.any() and not band.all()
    np.testing.assert_array_equal(band, expected)


def test_band_stops_at_a_contig_edge() -> None:
    x = np.tile(np.array([[0, 1, 2, 2, 1, 0, -1, 2]], dtype=np.int8), (6, 1))
    contig = np.array([0, 0, 0, 1, 1, 1])
    band = _band_exceeds(x, contig, 4, 0.5)
    assert band[0, :2].all() and not band[0, 2]  # rows 1, 2 on its contig; row 3 is not
    assert not band[2].any() and band[3, :2].all()


def test_a_pair_keeps_the_variant_whose_minor_allele_is_more_common() -> None:
    rarer = np.array([0, 1, 2, 1, 0, 0, 0, 0], dtype=np.int8)  # p = 0.25: major 0.75
    common = np.array([0, 1, 2, 1, 0, 2, 1, 1], dtype=np.int8)  # correlated, p = 0.5
    for x, kept in ((np.stack([rarer, common]), [False, True]),
                    (np.stack([common, rarer]), [True, False])):
        band = _band_exceeds(x, None, 2, 0.1)
        assert band[0, 0]
        major, constant = _row_stats(x)
        np.testing.assert_array_equal(ld.prune_band(band, major, constant, None, 2, 1), kept)
        np.testing.assert_array_equal(
            ld.prune_band(band, major, constant, None, 2, 1, order=1), kept)
    # a tie drops the later variant
    same = np.stack([common, common])
    major, constant = _row_stats(same)
    keep = ld.prune_band(_band_exceeds(same, None, 2, 0.1), major, constant, None, 2, 1)
    np.testing.assert_array_equal(keep, [True, False])


def test_threshold_is_strict_and_constant_variants_go() -> None:
    a = np.array([0, 0, 2, 2], dtype=np.int8)
    b = np.array([0, 2, 0, 2], dtype=np.int8)  # r2 with a: 0
    c = np.array([1, 1, 1, 1], dtype=np.int8)  # every call heterozygous: no variance
    x = np.stack([a, b, c])
    major, constant = _row_stats(x)
    np.testing.assert_array_equal(constant, [False, False, True])
    keep = ld.prune_band(_band_exceeds(x, None, 3, 0.0), major, constant, None, 3, 1)
    np.testing.assert_array_equal(keep, [True, True, False])  # 0 > 0 is false


def _fixture_ids() -> np.ndarray:
    return np.array([line.split()[1] for line in
                     (FIXTURE / "ld.bim").read_text().splitlines()])


def _cases() -> list[tuple[str, int]]:
    return sorted((p.name.split(".order")[0], int(p.name.split(".order")[1][0]))
                  for p in FIXTURE.glob("*.prune.in"))


@pytest.mark.parametrize(("case", "order"), _cases())
def test_kept_set_is_plink2s(case: str, order: int) -> None:
    """plink2's .prune.in, written by plink2 itself on the fixture (see its make.py)."""
    window, step, r2 = case.split("_")
    expected = set((FIXTURE / f"{case}.order{order}.prune.in").read_text().split())
    matrix = ds.open_matrix(FIXTURE / "ld.bed", chunk_rows=64,
                            qc=GenotypeQC(ld_prune=f"{window},{step},{r2},order={order}"))
    report = matrix.attrs["qc"]
    kept = set(_fixture_ids()[report.kept])
    assert kept == expected
    assert report.removed["ld"] == report.kept.size - len(expected)


def test_both_orders_have_answers_from_plink2() -> None:
    orders = {order for _, order in _cases()}
    assert orders == {1, 2}, "make.py with a plink2 from alpha 5 on writes order 2's"


def test_partitions_do_not_change_the_answer() -> None:
    rng = np.random.default_rng(3)
    x = _calls(rng, n=200)
    contig = np.repeat([0, 1, 2], [90, 1, 109])
    whole = ld.ld_partition(x, contig, 12, 0.2, 2)
    for cut in ([0, 5, 7, 50, 200], [0, 91, 95, 200], [0, 200]):
        parts = [ld.ld_partition(x[a:b], contig[a:b], 12, 0.2, 2)
                 for a, b in itertools.pairwise(cut)]
        band = np.concatenate([p["band"] for p in parts])
        ld._cross_pairs(parts, np.array(cut), band, contig, 12, 0.2)
        np.testing.assert_array_equal(band, whole["band"])


def test_pass_runs_after_the_other_steps_and_reports(tmp_path: Path) -> None:
    matrix = ds.open_matrix(FIXTURE / "ld.bed", chunk_rows=50)
    one = filter_variants(matrix, GenotypeQC(min_maf=0.1, ld_prune="20,5,0.2"))
    report = one.attrs["qc"]
    assert list(report.removed) == ["maf", "ld"]
    # the same as pruning the MAF-filtered matrix
    first = filter_variants(matrix, GenotypeQC(min_maf=0.1))
    second = filter_variants(first, GenotypeQC(ld_prune="20,5,0.2"))
    np.testing.assert_array_equal(second.attrs["qc"].kept, report.kept)
    assert report.to_dict()["ld_prune"] == "20,5,0.2"
    assert GenotypeQC(**report.qc.to_dict()) == report.qc


@pytest.mark.parametrize(("value", "match"), [
    ("50kb,1,0.2", "kilobases"),
    ("50", "WINDOW,STEP,R2"),
    ("1,1,0.2", "at least 2"),
    ("10,11,0.2", "STEP is in"),
    ("10,2,1.0", r"R2 is in \[0, 1\)"),
    ("10,2,x", "whole numbers"),
    ("10,2,0.2,order=3", "1 or 2"),
    ("50,,0.2", "a field is empty"),
    ("50,5,0.2,", "a field is empty"),
    (3.5, "WINDOW,STEP,R2"),
])
def test_bad_ld_prune_is_one_line(value: object, match: str) -> None:
    with pytest.raises(InvalidParameterError, match=match) as info:
        GenotypeQC(ld_prune=value)
    assert "--ld-prune" in str(info.value) and "\n" not in str(info.value)


def test_spellings() -> None:
    assert ld.parse_ld_prune("50 5 0.2") == ld.LDPrune(50, 5, 0.2)
    assert ld.parse_ld_prune("50,0.2") == ld.LDPrune(50, 1, 0.2)
    assert ld.parse_ld_prune((50, 5, 0.2), order=1) == ld.LDPrune(50, 5, 0.2, 1)
    assert str(ld.LDPrune(50, 5, 0.2, 1)) == "50,5,0.2,order=1"
    assert ld.parse_ld_prune(str(ld.LDPrune(50, 5, 0.2, 1))) == ld.LDPrune(50, 5, 0.2, 1)


def test_ld_prune_on_the_command_line_and_its_bad_values(capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    from daskstraggle.cli import main

    bed = str(FIXTURE / "ld.bed")
    expected = len((FIXTURE / "50_5_0.2.order1.prune.in").read_text().split())
    assert main(["pca", bed, "-k", "2", "--runtime", "local", "--ld-prune", "50,5,0.2",
                 "--ld-prune-order", "1", "--max-iter", "5", "--tol", "1e-3"]) == 0
    out = capsys.readouterr().out
    assert f"variants    {expected} of 400 kept by quality control (ld removed " \
           f"{400 - expected})" in out
    assert main(["pca", bed, "--runtime", "local", "--ld-prune", "50kb,1,0.2"]) == 2
    err = capsys.readouterr().err
    assert "(CLI: --ld-prune)" in err and "kilobases" in err and "Traceback" not in err
    assert main(["pca", bed, "--runtime", "local", "--ld-prune-order", "1"]) == 2
    assert "give --ld-prune WINDOW,STEP,R2 too" in capsys.readouterr().err


@pytest.mark.cluster
def test_the_pass_on_process_workers_keeps_plink2s_set(dask_client: Any) -> None:
    expected = set((FIXTURE / "20_20_0.05.order1.prune.in").read_text().split())
    matrix = ds.open_matrix(FIXTURE / "ld.bed", chunk_rows=32)
    pruned = filter_variants(matrix, GenotypeQC(ld_prune="20,20,0.05,order=1"),
                             client=dask_client)
    assert set(_fixture_ids()[pruned.attrs["qc"].kept]) == expected


# ------------------------------------------------------- windows longer than the data (issue 42)
@pytest.mark.parametrize("order", [1, 2])
def test_a_window_longer_than_every_contig_is_that_contigs_length(order: int) -> None:
    """--ld-prune 1000000000,5,0.2 asked for a band of 1.8 TiB: a window that spans a whole
    contig keeps what the contig's own length keeps (the fixture's longest has 250)."""
    kept = [ds.open_matrix(FIXTURE / "ld.bed",
                           qc=GenotypeQC(ld_prune=f"{w},5,0.2,order={order}")).attrs["qc"].kept
            for w in (1_000_000_000, 250, 400)]
    np.testing.assert_array_equal(kept[0], kept[1])
    np.testing.assert_array_equal(kept[0], kept[2])


def test_a_window_that_does_not_fit_in_memory_is_refused_naming_the_largest_that_does(
        monkeypatch: pytest.MonkeyPatch) -> None:
    free = 200_000  # bytes: the band of 250 x 400 and the planes of 80 samples need 396 kB
    monkeypatch.setattr(ld, "_available_memory", lambda: free)
    with pytest.raises(InvalidParameterError, match=r"a window of 250 variants \(the longest "
                       r"contig has 250\) over 400 variants compares pairs that need about .* "
                       r"GiB, more than the .* GiB of memory free; give a WINDOW of at most "
                       r"(\d+) variants") as info:
        ds.open_matrix(FIXTURE / "ld.bed", qc=GenotypeQC(ld_prune="1000000000,5,0.2"))
    assert "--ld-prune" in str(info.value) and "\n" not in str(info.value)
    bound = int(str(info.value).split("at most ")[1].split()[0])
    assert 2 <= bound < 250
    # the largest that fits: the band's byte a pair, the edge rows' bit planes (80 samples,
    # 8 words of 3 planes) and a boundary's pairs, in the one partition of 400 variants
    bounds, row_bytes = np.array([0, 400]), 3 * 8 * 8
    assert ld._pairs_memory(bound, bounds, row_bytes) <= free
    assert ld._pairs_memory(bound + 1, bounds, row_bytes) > free
    ds.open_matrix(FIXTURE / "ld.bed", qc=GenotypeQC(ld_prune=f"{bound},5,0.2"))  # fits
