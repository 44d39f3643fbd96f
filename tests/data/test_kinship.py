"""KING-robust kinship and --king-cutoff: the bit-plane counts against the indicator-matrix
products they replaced, the related pairs and kept samples against the replaced dense
implementation (written out here as the oracle), the kinship and kept samples against
plink2's own answers on a fixture, the memory bound of the strips, bad input."""

from __future__ import annotations

import tracemalloc
from pathlib import Path
from typing import Any

import dask.array as da
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import daskstraggle as ds
from daskstraggle.data import kinship
from daskstraggle.data.genotypes import GenotypeQC, filter_variants
from daskstraggle.errors import InvalidParameterError


def _king_counts(bits: np.ndarray, start: int = 0,
                 stop: int | None = None) -> tuple[np.ndarray, ...]:
    """hethet, ibs0, het_hom and hom_het (int32, ``(stop - start, n_samples - start)``) of
    the pairs ``(start + r, start + c)``, ``c >= r``, counted by the kernel's tiles; zero
    below the diagonal."""
    stop = bits.shape[0] if stop is None else stop
    out = np.zeros((4, stop - start, bits.shape[0] - start), dtype=np.int32)
    with kinship._lock:
        kinship._kernels().pair_counts(np.ascontiguousarray(bits), start, stop, out)
    return tuple(out)

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "plink2_qc"
CUTOFFS = ["0.03", "0.0884", "0.177", "0.354"]
SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@st.composite
def dosage_matrices(draw: st.DrawFn) -> np.ndarray:
    """Diploid dosages (-1 missing) with relatives (samples copied from others, a share of
    their calls drawn again), monomorphic and all-missing variants and samples, any sample
    count (tiles of 32 samples and words of 64 variants end anywhere)."""
    n_variants = draw(st.integers(1, 200))
    n_samples = draw(st.integers(1, 90))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    freq = rng.choice([0.0, 0.05, 0.3, 0.5, 1.0], size=(n_variants, 1))
    x = rng.binomial(2, freq, size=(n_variants, n_samples)).astype(np.int8)
    _add_relatives(x, rng, draw(st.integers(0, n_samples)))
    rates = rng.choice([0.0, 0.05, 0.3, 1.0], size=(1, n_samples), p=[0.5, 0.3, 0.15, 0.05])
    x[rng.uniform(size=x.shape) < rates] = -1
    x[rng.uniform(size=n_variants) < 0.05] = -1  # variants with no call
    return x


def _add_relatives(x: np.ndarray, rng: np.random.Generator, count: int) -> None:
    """Copy ``count`` random samples' calls into others, each at a random share of the
    variants (a share near 1 a duplicate, near 0.5 a first-degree relative)."""
    n_variants, n_samples = x.shape
    for _ in range(count):
        a, b = rng.integers(0, n_samples, size=2)
        shared = rng.uniform(size=n_variants) < rng.uniform(0.3, 1.0)
        x[shared, b] = x[shared, a]


def _oracle_counts(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The replaced counts: products of indicator matrices (samples x samples)."""
    het, ref, alt = ((x == k).astype(np.int64) for k in (1, 0, 2))
    opposite = ref.T @ alt
    het_hom = het.T @ (ref + alt)
    return het.T @ het, opposite + opposite.T, het_hom, het_hom.T


def _oracle_kinship(x: np.ndarray) -> np.ndarray:
    """The replaced kinship matrix (NaN where nothing is compared, 0.5 on the diagonal)."""
    hethet, ibs0, het_hom, hom_het = _oracle_counts(x)
    denominator = 4 * (hethet + np.minimum(het_hom, hom_het))
    with np.errstate(divide="ignore", invalid="ignore"):
        phi = 0.5 - (4 * ibs0 + het_hom + hom_het) / denominator.astype(np.float64)
    phi[denominator == 0] = np.nan
    np.fill_diagonal(phi, 0.5)
    return phi


def _oracle_related(x: np.ndarray, cutoff: float) -> np.ndarray:
    """The replaced dense matrix of related pairs."""
    related = np.nan_to_num(_oracle_kinship(x), nan=-np.inf) > cutoff
    np.fill_diagonal(related, False)
    return related


def _oracle_prune(related: np.ndarray) -> np.ndarray:
    """The replaced pruning, on the dense matrix of related pairs."""
    related = related.copy()
    degree = related.sum(axis=1)
    keep = np.ones(related.shape[0], dtype=bool)
    while degree.any():
        ones = np.flatnonzero(degree == 1)
        drop = (int(np.flatnonzero(related[ones[0]])[0]) if ones.size
                else int(np.argmax(degree)))
        partners = np.flatnonzero(related[drop])
        related[drop, partners] = related[partners, drop] = False
        degree[partners] -= 1
        degree[drop] = 0
        keep[drop] = False
    return keep


def _matrix(x: np.ndarray, rows: int) -> Any:
    """A genotype matrix of dosages ``x``, one partition per ``rows`` variants."""
    return ds.open_matrix(da.from_array(x, chunks=(rows, -1)),
                          genotype_dims=("variants", "samples"))


def _ids() -> np.ndarray:
    return np.array([line.split()[1] for line in
                     (FIXTURE / "king.fam").read_text().splitlines()])


def _plink2_kept(cutoff: str) -> set[str]:
    lines = (FIXTURE / f"{cutoff}.king.cutoff.in.id").read_text().splitlines()
    return {line.split()[-1] for line in lines if not line.startswith("#")}


def test_counts_are_the_pairwise_definitions() -> None:
    rng = np.random.default_rng(0)
    x = rng.integers(-1, 3, size=(50, 7)).astype(np.int8)
    hethet, ibs0, het_hom, hom_het = _king_counts(kinship.king_bits(x))
    for i in range(7):
        for j in range(i, 7):
            both = (x[:, i] >= 0) & (x[:, j] >= 0)
            a, b = x[both, i], x[both, j]
            assert hethet[i, j] == np.sum((a == 1) & (b == 1))
            assert ibs0[i, j] == np.sum(np.abs(a.astype(int) - b) == 2)
            assert het_hom[i, j] == np.sum((a == 1) & (b != 1))
            assert hom_het[i, j] == np.sum((a != 1) & (b == 1))


@SETTINGS
@given(dosage_matrices(), st.data())
def test_bit_counts_are_the_indicator_products(x: np.ndarray, data: st.DataObject) -> None:
    """Any strip of rows of the pair matrix: the replaced products on and above the
    diagonal, zeros below it."""
    n = x.shape[1]
    start = data.draw(st.integers(0, n - 1))
    stop = data.draw(st.integers(start + 1, n))
    counts = _king_counts(kinship.king_bits(x), start, stop)
    upper = np.triu(np.ones((n, n), dtype=bool))[start:stop, start:]
    for ours, oracle in zip(counts, _oracle_counts(x), strict=True):
        assert ours.shape == (stop - start, n - start)
        np.testing.assert_array_equal(ours, np.where(upper, oracle[start:stop, start:], 0))


def test_counts_span_the_word_blocks_of_a_tile() -> None:
    """More variants than a tile reads at a time (64 x WORDS)."""
    from daskstraggle.data import _numba_king

    rng = np.random.default_rng(1)
    x = rng.integers(-1, 3, size=(64 * _numba_king.WORDS + 70, 5)).astype(np.int8)
    x[:, 3] = x[:, 1]
    counts = _king_counts(kinship.king_bits(x))
    for ours, oracle in zip(counts, _oracle_counts(x), strict=True):
        np.testing.assert_array_equal(ours, np.triu(oracle))


@SETTINGS
@given(dosage_matrices(), st.sampled_from([float(c) for c in CUTOFFS]), st.data())
def test_related_pairs_and_kept_samples_are_the_replaced_ones(
        x: np.ndarray, cutoff: float, data: st.DataObject) -> None:
    """The pairs above the cutoff with their kinships (exactly), and the samples kept, for
    any strip height."""
    n = x.shape[1]
    related = kinship.king_related(kinship.king_bits(x), cutoff,
                                   max_pairs=data.draw(st.integers(1, n * n)))
    upper = np.triu(_oracle_related(x, cutoff))
    np.testing.assert_array_equal(related.pairs, np.argwhere(upper).reshape(-1, 2))
    np.testing.assert_array_equal(related.kinship, _oracle_kinship(x)[upper])
    np.testing.assert_array_equal(kinship.king_prune(n, related.pairs),
                                  _oracle_prune(_oracle_related(x, cutoff)))


@pytest.mark.parametrize("rows", [37, 64, 100])
def test_king_keep_over_partitions_is_the_replaced_pass(rows: int) -> None:
    """Bit planes of partitions that end inside a word, joined: the same pairs and kept
    samples as the replaced pass."""
    rng = np.random.default_rng(rows)
    x = rng.binomial(2, rng.uniform(0.05, 0.5, size=(300, 1)), size=(300, 45)).astype(np.int8)
    _add_relatives(x, rng, 12)
    x[rng.uniform(size=x.shape) < 0.02] = -1
    keep, related = kinship.king_keep(_matrix(x, rows), 0.177)
    dense = _oracle_related(x, 0.177)
    assert dense.any()
    np.testing.assert_array_equal(related.pairs, np.argwhere(np.triu(dense)))
    np.testing.assert_array_equal(keep, _oracle_prune(dense))


def test_memory_does_not_grow_with_the_square_of_the_samples(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Beyond the bit planes, one strip of pairs at a time: no array of the pair matrix's
    size (the replaced pass held three float32 samples x samples matrices and a float64
    kinship matrix, 20 bytes a pair)."""
    n = 3000
    rng = np.random.default_rng(2)
    x = rng.binomial(2, 0.3, size=(500, n)).astype(np.int8)
    x[:, 1] = x[:, 0]
    kinship.king_keep(_matrix(x[:, :40], 64), 0.177)  # compile or load the kernels
    monkeypatch.setattr(kinship, "STRIP_PAIRS", 4 * n, raising=False)
    tracemalloc.start()
    try:
        keep, related = kinship.king_keep(_matrix(x, 100), 0.177)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < n * n  # under a byte a pair: the strips hold 4 n pairs
    assert related.pairs.tolist() == [[0, 1]] and not keep[1] and keep.sum() == n - 1
    # the largest array the kernel fills is a strip of at most STRIP_PAIRS pairs
    from daskstraggle.data import _numba_king

    strips: list[int] = []
    kernel = _numba_king.pair_kinship

    def spy(bits: np.ndarray, start: int, stop: int, out: np.ndarray) -> None:
        strips.append(out.size)
        kernel(bits, start, stop, out)

    monkeypatch.setattr(_numba_king, "pair_kinship", spy)
    assert kinship.king_keep(_matrix(x, 100), 0.177)[1].pairs.tolist() == [[0, 1]]
    assert max(strips) <= 4 * n and sum(strips) >= n * (n - 1) // 2


def test_a_duplicate_has_kinship_one_half_and_no_heterozygote_is_never_related() -> None:
    x = np.array([[0, 0, 2], [1, 1, 1], [2, 2, 0], [1, 1, 2]], dtype=np.int8)
    related = kinship.king_related(kinship.king_bits(x), 0.49)
    assert related.pairs.tolist() == [[0, 1]] and related.kinship.tolist() == [0.5]
    homs = np.array([[0, 2], [2, 0]], dtype=np.int8)  # no heterozygous call: no kinship
    assert kinship.king_related(kinship.king_bits(homs), -1.0).pairs.size == 0


def test_kinship_is_plink2s() -> None:
    """plink2 --make-king-table on the fixture (pairs above 0.2, six significant digits)."""
    matrix = ds.open_matrix(FIXTURE / "king.bed", chunk_rows=128)
    _, related = kinship.king_keep(matrix, 0.177)
    rows = [line.split() for line in (FIXTURE / "king.kin0").read_text().splitlines()[1:]]
    assert len(rows) > 100
    index = {name: k for k, name in enumerate(_ids())}
    ours = dict(zip(map(tuple, related.pairs.tolist()), related.kinship, strict=True))
    theirs = {tuple(sorted((index[row[1]], index[row[3]]))): float(row[7]) for row in rows}
    assert set(theirs) <= set(ours)  # the pairs plink2 lists (above 0.2) are above 0.177
    assert {pair for pair, phi in ours.items() if phi > 0.2 + 1e-6} <= set(theirs)
    for pair, phi in theirs.items():
        assert ours[pair] == pytest.approx(phi, abs=1e-6)


@pytest.mark.parametrize("cutoff", CUTOFFS)
def test_kept_samples_are_plink2s(cutoff: str) -> None:
    matrix = ds.open_matrix(FIXTURE / "king.bed", chunk_rows=128,
                            qc=GenotypeQC(king_cutoff=float(cutoff)))
    report = matrix.attrs["qc"]
    kept = set(_ids()[report.samples_kept])
    assert kept == _plink2_kept(cutoff)
    assert matrix.n_columns == len(kept) < 66
    assert report.samples_removed == {"king": 66 - len(kept)}
    assert report.kept.all()  # no variant removed


def test_the_graph_is_pruned_as_plink2_does() -> None:
    def keep(n: int, pairs: list[tuple[int, int]]) -> list[bool]:
        return kinship.king_prune(n, np.array(pairs)).tolist()

    # a path 0-1-2-3: 0 has one partner, so 1 goes; then 2-3: 2 has one, so 3 goes
    assert keep(4, [(0, 1), (1, 2), (2, 3)]) == [True, False, True, False]
    # a triangle: no sample with one partner, so the first of most partners (0) goes; then
    # 1 has one partner, so 2 goes
    assert keep(3, [(0, 1), (1, 2), (0, 2)]) == [False, True, False]
    # a star around 2: its leaves have one partner each, so the centre goes
    assert keep(4, [(2, 0), (2, 1), (2, 3)]) == [True, True, False, True]
    assert keep(3, []) == [True, True, True]


@st.composite
def graphs(draw: st.DrawFn) -> tuple[int, list[tuple[int, int]]]:
    """A number of samples and distinct pairs of them."""
    n = draw(st.integers(1, 40))
    pair = st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)).filter(lambda p: p[0] < p[1])
    return n, sorted(draw(st.sets(pair, max_size=120)))


@SETTINGS
@given(graphs())
def test_pruning_the_pairs_is_the_replaced_dense_pruning(
        graph: tuple[int, list[tuple[int, int]]]) -> None:
    n, edges = graph
    dense = np.zeros((n, n), dtype=bool)
    for i, j in edges:
        dense[i, j] = dense[j, i] = True
    pairs = np.array(edges, dtype=np.int64).reshape(-1, 2)
    np.testing.assert_array_equal(kinship.king_prune(n, pairs), _oracle_prune(dense))
    # neither the order of the pairs nor of their samples matters
    np.testing.assert_array_equal(kinship.king_prune(n, pairs[::-1, ::-1]), _oracle_prune(dense))


def test_mind_then_king_compose_over_the_input() -> None:
    matrix = ds.open_matrix(FIXTURE / "king.bed", chunk_rows=128)
    both = filter_variants(matrix, GenotypeQC(max_sample_missing=0.025, king_cutoff=0.177))
    report = both.attrs["qc"]
    assert set(report.samples_removed) == {"mind", "king"}
    assert report.samples_kept.size == 66
    assert int(report.samples_kept.sum()) == both.n_columns
    assert 66 - both.n_columns == sum(report.samples_removed.values())
    assert report.to_dict()["samples_removed"] == report.samples_removed


@pytest.mark.parametrize("value", [0, 0.6, -0.1, "0.1", True, float("nan")])
def test_bad_cutoff_is_one_line(value: object) -> None:
    with pytest.raises(InvalidParameterError, match=r"king_cutoff.*--king-cutoff.*\(0, 0.5\]"):
        GenotypeQC(king_cutoff=value)


def test_king_refuses_calls_that_are_not_diploid() -> None:
    import xarray as xr

    calls = np.random.default_rng(0).integers(0, 2, size=(30, 8, 3)).astype(np.int8)
    data = xr.Dataset({"call_genotype": (("variants", "samples", "ploidy"), calls)})
    with pytest.raises(InvalidParameterError, match="compares diploid genotypes"):
        ds.open_matrix(data, qc={"king_cutoff": 0.1})


def test_king_cutoff_on_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    from daskstraggle.cli import main

    kept = len(_plink2_kept("0.177"))
    assert main(["pca", str(FIXTURE / "king.bed"), "-k", "2", "--runtime", "local",
                 "--king-cutoff", "0.177", "--max-iter", "5", "--tol", "1e-3"]) == 0
    assert (f"samples     {kept} of 66 kept by quality control (king removed {66 - kept})"
            in capsys.readouterr().out)
    assert main(["pca", str(FIXTURE / "king.bed"), "--runtime", "local",
                 "--king-cutoff", "0.7"]) == 2
    err = capsys.readouterr().err
    assert "(CLI: --king-cutoff)" in err and "Traceback" not in err


@pytest.mark.cluster
def test_bit_planes_on_process_workers_keep_plink2s_samples(dask_client: Any) -> None:
    matrix = ds.open_matrix(FIXTURE / "king.bed", chunk_rows=64)
    pruned = filter_variants(matrix, GenotypeQC(king_cutoff=0.0884), client=dask_client)
    assert set(_ids()[pruned.attrs["qc"].samples_kept]) == _plink2_kept("0.0884")
