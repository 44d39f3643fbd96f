"""KING-robust kinship and --king-cutoff: the counts against brute force, the kinship and the
kept samples against plink2's own answers on a fixture, the pruning graph, bad input."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import daskstraggle as ds
from daskstraggle.data import kinship
from daskstraggle.data.genotypes import GenotypeQC, filter_variants
from daskstraggle.errors import InvalidParameterError

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "plink2_qc"
CUTOFFS = ["0.03", "0.0884", "0.177", "0.354"]


def _ids() -> np.ndarray:
    return np.array([line.split()[1] for line in
                     (FIXTURE / "king.fam").read_text().splitlines()])


def _plink2_kept(cutoff: str) -> set[str]:
    lines = (FIXTURE / f"{cutoff}.king.cutoff.in.id").read_text().splitlines()
    return {line.split()[-1] for line in lines if not line.startswith("#")}


def test_counts_are_the_pairwise_definitions() -> None:
    rng = np.random.default_rng(0)
    x = rng.integers(-1, 3, size=(50, 7)).astype(np.int8)
    hethet, ibs0, het_hom = kinship.king_counts(x)
    for i in range(7):
        for j in range(7):
            both = (x[:, i] >= 0) & (x[:, j] >= 0)
            a, b = x[both, i], x[both, j]
            assert hethet[i, j] == np.sum((a == 1) & (b == 1))
            assert ibs0[i, j] == np.sum(np.abs(a.astype(int) - b) == 2)
            assert het_hom[i, j] == np.sum((a == 1) & (b != 1))


def test_a_duplicate_has_kinship_one_half_and_no_heterozygote_is_nan() -> None:
    x = np.array([[0, 0, 2], [1, 1, 1], [2, 2, 0], [1, 1, 2]], dtype=np.int8)
    phi = kinship.king_kinship(*kinship.king_counts(x))
    assert phi[0, 1] == pytest.approx(0.5)
    homs = np.array([[0, 2], [2, 0]], dtype=np.int8)
    assert np.isnan(kinship.king_kinship(*kinship.king_counts(homs))[0, 1])


def test_kinship_is_plink2s() -> None:
    """plink2 --make-king-table on the fixture (pairs above 0.2, six significant digits)."""
    matrix = ds.open_matrix(FIXTURE / "king.bed", chunk_rows=128)
    _, phi = kinship.king_keep(matrix, 0.177)
    rows = [line.split() for line in (FIXTURE / "king.kin0").read_text().splitlines()[1:]]
    assert len(rows) > 100
    index = {name: k for k, name in enumerate(_ids())}
    for row in rows:
        assert phi[index[row[1]], index[row[3]]] == pytest.approx(float(row[7]), abs=1e-6)


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
    def related(n: int, pairs: list[tuple[int, int]]) -> np.ndarray:
        out = np.zeros((n, n), dtype=bool)
        for i, j in pairs:
            out[i, j] = out[j, i] = True
        return out

    # a path 0-1-2-3: 0 has one partner, so 1 goes; then 2-3: 2 has one, so 3 goes
    np.testing.assert_array_equal(kinship.king_prune(related(4, [(0, 1), (1, 2), (2, 3)])),
                                  [True, False, True, False])
    # a triangle: no sample with one partner, so the first of most partners (0) goes; then
    # 1 has one partner, so 2 goes
    np.testing.assert_array_equal(kinship.king_prune(related(3, [(0, 1), (1, 2), (0, 2)])),
                                  [False, True, False])
    # a star around 2: its leaves have one partner each, so the centre goes
    np.testing.assert_array_equal(kinship.king_prune(related(4, [(2, 0), (2, 1), (2, 3)])),
                                  [True, True, False, True])


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
def test_the_sum_on_process_workers_keeps_plink2s_samples(dask_client: Any) -> None:
    matrix = ds.open_matrix(FIXTURE / "king.bed", chunk_rows=64)
    pruned = filter_variants(matrix, GenotypeQC(king_cutoff=0.0884), client=dask_client)
    assert set(_ids()[pruned.attrs["qc"].samples_kept]) == _plink2_kept("0.0884")
