"""PLINK 2 .pgen input (pgenlib): the same dosages, variants and answers as the .bed plink2
wrote from the same calls, selections, errors."""

from __future__ import annotations

import shutil
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import daskstraggle as ds
from daskstraggle.data.genotypes import GenotypeQC, filter_variants
from daskstraggle.errors import DataNotFoundError, InvalidDataError, InvalidParameterError

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "plink2_qc"
PGEN, BED = FIXTURE / "ld.pgen", FIXTURE / "ld.bed"


def _raw(matrix: ds.Matrix) -> np.ndarray:
    raw = replace(matrix, source=matrix.source.count_source())
    return np.concatenate([raw.loader(p)().values for p in range(raw.n_partitions)])


def test_the_dosages_and_variants_are_the_beds() -> None:
    pgen, bed = ds.open_matrix(PGEN, chunk_rows=64), ds.open_matrix(BED, chunk_rows=64)
    assert pgen.source.kind == "plink-pgen" and pgen.shape == bed.shape == (400, 80)
    np.testing.assert_array_equal(pgen.columns, bed.columns)
    values = _raw(pgen)
    assert (values < 0).any()  # missing calls, as -1
    np.testing.assert_array_equal(values, _raw(bed))
    np.testing.assert_array_equal(pgen.variants.keys(), bed.variants.keys())
    for name in ("variant_contig", "variant_position", "variant_id"):
        np.testing.assert_array_equal(pgen.variants.get(name), bed.variants.get(name))


@pytest.mark.parametrize("storage", ["int8", "packed"])
def test_pca_and_quality_control_match_the_bed(storage: str) -> None:
    qc = GenotypeQC(min_maf=0.05, ld_prune="20,5,0.2")
    pgen = ds.open_matrix(PGEN, qc=qc, genotype_storage=storage)
    bed = ds.open_matrix(BED, qc=qc, genotype_storage=storage)
    np.testing.assert_array_equal(pgen.attrs["qc"].kept, bed.attrs["qc"].kept)
    a = ds.fit_pca(pgen, n_components=3, runtime="local", rng=0)
    b = ds.fit_pca(bed, n_components=3, runtime="local", rng=0)
    np.testing.assert_allclose(a.iterate, b.iterate, atol=1e-12)


def test_selected_samples_and_variants_in_any_order() -> None:
    pgen, bed = ds.open_matrix(PGEN), ds.open_matrix(BED)
    columns, rows = np.array([30, 2, 71, 5]), np.array([3, 17, 250, 399])
    a = pgen.select_columns(columns).select_rows(rows)
    b = bed.select_columns(columns).select_rows(rows)
    np.testing.assert_array_equal(_raw(a), _raw(b))


def test_mind_and_king_cutoff_read_the_pgen() -> None:
    qc = GenotypeQC(max_sample_missing=0.05, king_cutoff=0.2)
    a = ds.open_matrix(PGEN, qc=qc).attrs["qc"]
    b = ds.open_matrix(BED, qc=qc).attrs["qc"]
    np.testing.assert_array_equal(a.samples_kept, b.samples_kept)


def test_missing_companions_and_a_foreign_psam_are_one_line(tmp_path: Path) -> None:
    for suffix in (".pgen", ".pvar"):
        shutil.copy(FIXTURE / f"ld{suffix}", tmp_path / f"ld{suffix}")
    with pytest.raises(DataNotFoundError, match=r"has no \.psam"):
        ds.open_matrix(tmp_path / "ld.pgen")
    (tmp_path / "ld.psam").write_text("#IID\ns0\ns1\n")
    with pytest.raises(InvalidDataError, match="lists 2 samples"):
        ds.open_matrix(tmp_path / "ld.pgen")
    with pytest.raises(DataNotFoundError, match=r"No PLINK 2 \.pgen|does not exist"):
        ds.open_matrix(tmp_path / "none.pgen")


def test_without_pgenlib_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pgenlib", None)
    with pytest.raises(ImportError, match=r"daskstraggle\[genomics\]"):
        ds.open_matrix(PGEN)


def test_the_cli_reads_a_pgen(capsys: pytest.CaptureFixture[str]) -> None:
    from daskstraggle.cli import main

    assert main(["pca", str(PGEN), "-k", "2", "--runtime", "local", "--max-iter", "5",
                 "--tol", "1e-3"]) == 0
    captured = capsys.readouterr()
    # the fixture's variant v303 has no call: removed, with a warning
    assert "1 variant(s) (first: ['v303']) have no called genotype" in captured.err
    assert "pca of a 399 x 80 matrix (plink-pgen)" in captured.out


@pytest.mark.cluster
def test_process_workers_read_the_pgen(dask_client: Any) -> None:
    matrix = ds.open_matrix(PGEN, chunk_rows=64)
    pruned = filter_variants(matrix, GenotypeQC(ld_prune="20,20,0.05,order=1"),
                             client=dask_client)
    expected = set((FIXTURE / "20_20_0.05.order1.prune.in").read_text().split())
    ids = np.array([line.split()[2] for line in
                    (FIXTURE / "ld.pvar").read_text().splitlines()[1:]])
    assert set(ids[pruned.attrs["qc"].kept]) == expected


def test_a_file_pgenlib_cannot_read_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "x.pgen").write_bytes(b"garbage")
    for suffix in (".pvar", ".psam"):
        shutil.copy(FIXTURE / f"ld{suffix}", tmp_path / f"x{suffix}")
    with pytest.raises(InvalidDataError) as info:
        ds.open_matrix(tmp_path / "x.pgen")
    message = str(info.value)
    assert "pgenlib cannot read" in message and "magic number" in message
    assert "\n" not in message and "b'" not in message and 'b"' not in message


def test_genotype_pca_refuses_merge_for_a_pgen_before_any_work(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import daskstraggle.api as api

    def no_fit(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the fit ran")

    monkeypatch.setattr(api, "fit_pca", no_fit)
    with pytest.raises(InvalidParameterError, match=r"PLINK \.bed or \.pgen fileset"):
        ds.genotype_pca(str(PGEN), 2, merge=True, runtime="local")


# ---------------------------------------------------------------- damaged filesets (issue 42)
def _copy(tmp_path: Path) -> Path:
    for suffix in (".pgen", ".pvar", ".psam"):
        shutil.copy(FIXTURE / f"ld{suffix}", tmp_path / f"ld{suffix}")
    return tmp_path / "ld.pgen"


def _truncate(path: Path, size: int) -> None:
    path.write_bytes(path.read_bytes()[:size])


def test_a_truncated_pgen_is_refused_when_opened(tmp_path: Path) -> None:
    path = _copy(tmp_path)
    _truncate(path, path.stat().st_size // 2)  # the header is whole, the records are not
    with pytest.raises(InvalidDataError, match=r"is truncated or damaged: pgenlib cannot read "
                       r"its last variant \(read\(\) error 4\)") as info:
        ds.open_matrix(path)
    assert "\n" not in str(info.value)


def test_a_pgen_damaged_after_opening_is_one_line_where_it_is_read(tmp_path: Path) -> None:
    from daskstraggle.errors import CorruptDataError

    path = _copy(tmp_path)
    matrix = ds.open_matrix(path)
    _truncate(path, path.stat().st_size - 1)
    with pytest.raises(CorruptDataError, match=r"pgenlib cannot read rows 0-400 of .*ld\.pgen"
                       r"' \(read_range\(\) error 4\): the file is damaged or changed"):
        matrix.loader(0)()


@pytest.mark.parametrize("keep", [200, 0])
def test_a_pvar_listing_fewer_variants_is_refused_when_opened(tmp_path: Path, keep: int) -> None:
    path = _copy(tmp_path)
    pvar = path.with_suffix(".pvar")
    lines = pvar.read_text().splitlines(keepends=True)
    pvar.write_text("".join(lines[:1 + keep]) + "\n")  # a blank line does not count
    with pytest.raises(InvalidDataError, match=rf"holds 400 variants but its \.pvar lists "
                                               rf"{keep}; the \.pvar is not this"):
        ds.open_matrix(path)


@pytest.mark.parametrize(("psam", "first"), [
    ("#FID\tIID\tSEX\nf0\ts0\tNA\nf1\ts1\tNA\nf0\ts0\tNA\n", "f0 s0"),
    ("#IID\ns0\ns1\ns1\ns0\n", "s1"),
    ("f0 s0 0 0 0 -9\nf0 s1 0 0 0 -9\nf0 s1 0 0 0 -9\n", "f0 s1"),  # headerless: a .fam
])
def test_a_sample_listed_twice_is_refused_as_plink2_does(tmp_path: Path, psam: str,
                                                         first: str) -> None:
    path = _copy(tmp_path)
    path.with_suffix(".psam").write_text(psam)
    with pytest.raises(InvalidDataError, match=rf"lists the sample '{first}' twice"):
        ds.open_matrix(path)


def test_the_same_iid_in_two_families_is_two_samples(tmp_path: Path) -> None:
    """plink2 keys samples by FID and IID: the same IID in two families is accepted."""
    from daskstraggle.data.pgen import read_psam

    psam = tmp_path / "x.psam"
    psam.write_text("#FID\tIID\nf0\ts0\nf1\ts0\n")
    assert read_psam(str(psam)).tolist() == ["s0", "s0"]


def test_a_folder_named_pgen_is_not_said_missing(tmp_path: Path) -> None:
    (tmp_path / "x.pgen").mkdir()
    with pytest.raises(DataNotFoundError, match=r"the path is a folder, not a file"):
        ds.open_matrix(tmp_path / "x.pgen")


def test_a_short_pvar_line_is_named(tmp_path: Path) -> None:
    """Not 'it lacks the columns [] or has short lines'."""
    from daskstraggle.data.pgen import read_pvar

    pvar = tmp_path / "x.pvar"
    pvar.write_text("1\t10\tv1\tA\tG\n")  # headerless: a .bim's 6 columns
    with pytest.raises(InvalidDataError, match="its variant 1 has fewer columns than the 6 "
                                               r"of a headerless \.pvar \(a \.bim's layout\)"):
        read_pvar(str(pvar))
    pvar.write_text("#CHROM\tPOS\tID\tREF\tALT\n1\t10\tv1\tA\tG\n2\t20\tv2\tA\n")
    with pytest.raises(InvalidDataError, match="its variant 2 has fewer columns than the 5 "
                                               "of its header"):
        read_pvar(str(pvar))
