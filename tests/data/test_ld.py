"""LD pruning (plink2's --indep-pairwise): the band against brute force, the scan against
plink2's own answers on a fixture, the pass split across partitions, bad input."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import daskstraggle as ds
from daskstraggle.data import ld
from daskstraggle.data.genotypes import GenotypeQC, filter_variants
from daskstraggle.errors import InvalidParameterError

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "plink2_qc"


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


@pytest.mark.parametrize("r2", [0.05, 0.3, 0.8])
def test_band_is_the_pairwise_complete_r2_test(r2: float) -> None:
    rng = np.random.default_rng(0)
    x = _calls(rng, n=300)  # more than one tile of 256 rows
    window = 9
    band = ld.band_exceeds(x, None, window, r2)
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
    band = ld.band_exceeds(x, contig, 4, 0.5)
    assert band[0, :2].all() and not band[0, 2]  # rows 1, 2 on its contig; row 3 is not
    assert not band[2].any() and band[3, :2].all()


def test_a_pair_keeps_the_variant_whose_minor_allele_is_more_common() -> None:
    rarer = np.array([0, 1, 2, 1, 0, 0, 0, 0], dtype=np.int8)  # p = 0.25: major 0.75
    common = np.array([0, 1, 2, 1, 0, 2, 1, 1], dtype=np.int8)  # correlated, p = 0.5
    for x, kept in ((np.stack([rarer, common]), [False, True]),
                    (np.stack([common, rarer]), [True, False])):
        band = ld.band_exceeds(x, None, 2, 0.1)
        assert band[0, 0]
        major, constant = ld._row_stats(x, 2)
        np.testing.assert_array_equal(ld.prune_band(band, major, constant, None, 2, 1), kept)
        np.testing.assert_array_equal(
            ld.prune_band(band, major, constant, None, 2, 1, order=1), kept)
    # a tie drops the later variant
    same = np.stack([common, common])
    major, constant = ld._row_stats(same, 2)
    keep = ld.prune_band(ld.band_exceeds(same, None, 2, 0.1), major, constant, None, 2, 1)
    np.testing.assert_array_equal(keep, [True, False])


def test_threshold_is_strict_and_constant_variants_go() -> None:
    a = np.array([0, 0, 2, 2], dtype=np.int8)
    b = np.array([0, 2, 0, 2], dtype=np.int8)  # r2 with a: 0
    c = np.array([1, 1, 1, 1], dtype=np.int8)  # every call heterozygous: no variance
    x = np.stack([a, b, c])
    major, constant = ld._row_stats(x, 2)
    np.testing.assert_array_equal(constant, [False, False, True])
    keep = ld.prune_band(ld.band_exceeds(x, None, 3, 0.0), major, constant, None, 3, 1)
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
    free = 8_000_000  # bytes
    monkeypatch.setattr(ld, "_available_memory", lambda: free)
    with pytest.raises(InvalidParameterError, match=r"a window of 250 variants \(the longest "
                       r"contig has 250\) over 400 variants compares pairs that need about .* "
                       r"GiB, more than the .* GiB of memory free; give a WINDOW of at most "
                       r"(\d+) variants") as info:
        ds.open_matrix(FIXTURE / "ld.bed", qc=GenotypeQC(ld_prune="1000000000,5,0.2"))
    assert "--ld-prune" in str(info.value) and "\n" not in str(info.value)
    bound = int(str(info.value).split("at most ")[1].split()[0])
    assert 2 <= bound < 250
    ds.open_matrix(FIXTURE / "ld.bed", qc=GenotypeQC(ld_prune=f"{bound},5,0.2"))  # fits
