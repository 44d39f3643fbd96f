"""BGEN input (cbgen): expected ALT counts for PCA, plink2's hard calls for quality control,
the same answers as the .bed of the same calls, sample ids, and one-line refusals.

Every .bgen is written here by ``tests/data/_bgen_writer.py`` (layout 2, zlib)."""

from __future__ import annotations

import struct
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import daskstraggle as ds
from daskstraggle.data.genotypes import GenotypeQC
from daskstraggle.errors import CorruptDataError, DataNotFoundError, InvalidDataError
from daskstraggle.testing import assert_exact_components, one_error_line, reference_matrix
from tests.data._bgen_writer import hard_call_probabilities, write_bgen

pytest.importorskip("cbgen")

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "plink2_qc"
BED = FIXTURE / "ld.bed"


def _raw(matrix: ds.Matrix, *, counts: bool = True) -> np.ndarray:
    if counts:
        matrix = replace(matrix, source=matrix.source.count_source())
    return np.concatenate([matrix.loader(p)().values for p in range(matrix.n_partitions)])


def _bed_calls() -> tuple[np.ndarray, np.ndarray, list[list[str]]]:
    """The fixture's A1 counts (-1 missing), sample ids and .bim lines."""
    bed = ds.open_matrix(BED)
    return _raw(bed), bed.columns, [line.split() for line in
                                     BED.with_suffix(".bim").read_text().splitlines()]


@pytest.fixture(scope="module")
def bed_as_bgen(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ld.bed's calls as a .bgen: REF (the .bim's A2) first, so a call's ALT count is the
    .bed's A1 count; the sample ids in the file."""
    dosage, samples, bim = _bed_calls()
    probabilities, missing = hard_call_probabilities(dosage)
    path = tmp_path_factory.mktemp("bgen") / "ld.bgen"
    return write_bgen(path, probabilities, missing=missing, samples=list(samples),
                      rsids=[b[1] for b in bim], chromosomes=[b[0] for b in bim],
                      positions=[int(b[3]) for b in bim], alleles=[(b[5], b[4]) for b in bim])


def _fractional(n_variants: int = 120, n_samples: int = 45, seed: int = 0
                ) -> tuple[np.ndarray, np.ndarray]:
    """Genotype probabilities of three populations, a third of them uncertain, 3 % missing."""
    rng = np.random.default_rng(seed)
    pop = np.repeat([0, 1, 2], n_samples // 3)
    freq = np.clip(rng.uniform(0.1, 0.9, (n_variants, 1))
                   + rng.normal(0, 0.2, (n_variants, 3)), 0.05, 0.95)[:, pop]
    certain = (rng.binomial(2, freq)[..., None] == np.arange(3)).astype(float)
    weight = np.where(rng.random((n_variants, n_samples)) < 0.3,
                      rng.random((n_variants, n_samples)), 0.0)[..., None]
    probabilities = (1 - weight) * certain + weight * rng.dirichlet([1, 1, 1],
                                                                    (n_variants, n_samples))
    return probabilities, rng.random((n_variants, n_samples)) < 0.03


# ---------------------------------------------------------------------------- hard calls
def test_the_calls_variants_and_samples_are_the_beds(bed_as_bgen: Path) -> None:
    bgen, bed = ds.open_matrix(bed_as_bgen, chunk_rows=64), ds.open_matrix(BED, chunk_rows=64)
    assert bgen.source.kind == "bgen" and bgen.shape == bed.shape == (400, 80)
    np.testing.assert_array_equal(bgen.columns, bed.columns)
    counts = _raw(bgen)
    assert (counts < 0).any()  # missing calls, as -1
    np.testing.assert_array_equal(counts, _raw(bed))
    values = _raw(bgen, counts=False)
    assert values.dtype == np.int8  # whole expected counts are held as int8
    np.testing.assert_array_equal(values, _raw(bed, counts=False))
    for name in ("variant_contig", "variant_position", "variant_id", "variant_allele"):
        np.testing.assert_array_equal(bgen.variants.get(name), bed.variants.get(name))


@pytest.mark.parametrize("storage", ["int8", "packed"])
def test_pca_and_quality_control_match_the_bed(bed_as_bgen: Path, storage: str) -> None:
    qc = GenotypeQC(min_maf=0.05, max_sample_missing=0.1, king_cutoff=0.2, hwe=1e-6,
                    ld_prune="20,5,0.2")
    bgen = ds.open_matrix(bed_as_bgen, qc=qc, genotype_storage=storage)
    bed = ds.open_matrix(BED, qc=qc, genotype_storage=storage)
    np.testing.assert_array_equal(bgen.attrs["qc"].kept, bed.attrs["qc"].kept)
    np.testing.assert_array_equal(bgen.attrs["qc"].samples_kept, bed.attrs["qc"].samples_kept)
    a = ds.fit_pca(bgen, n_components=3, runtime="local", rng=0)
    b = ds.fit_pca(bed, n_components=3, runtime="local", rng=0)
    np.testing.assert_allclose(a.iterate, b.iterate, atol=1e-12)


def test_selected_samples_and_variants_in_any_order(bed_as_bgen: Path) -> None:
    bgen, bed = ds.open_matrix(bed_as_bgen), ds.open_matrix(BED)
    columns, rows = np.array([30, 2, 71, 5]), np.array([3, 17, 250, 399])
    a = bgen.select_columns(columns).select_rows(rows)
    b = bed.select_columns(columns).select_rows(rows)
    np.testing.assert_array_equal(_raw(a), _raw(b))
    np.testing.assert_array_equal(a.variants.get("variant_id"), b.variants.get("variant_id"))


# ---------------------------------------------------------------------------- dosages
def _expected(probabilities: np.ndarray, missing: np.ndarray) -> np.ndarray:
    dosage = probabilities[..., 1] + 2 * probabilities[..., 2]
    return np.where(missing, np.nan, dosage)


def test_uncertain_calls_give_expected_counts_and_plink2s_hard_calls(tmp_path: Path) -> None:
    probabilities, missing = _fractional()
    path = write_bgen(tmp_path / "f.bgen", probabilities, missing=missing, bits=16)
    matrix = ds.open_matrix(path, genotype_scaling="none")
    expected = _expected(probabilities, missing)
    values = _raw(matrix, counts=False)
    assert values.dtype == np.float64
    np.testing.assert_allclose(np.where(values < 0, np.nan, values), expected, atol=4e-5)
    # plink2 --hard-call-threshold 0.1: the nearest count when within 0.1 of it, else missing
    nearest = np.rint(expected)
    distance = np.abs(expected - nearest)
    sure = distance < 0.1 - 1e-4  # away from the threshold, where 16-bit rounding decides
    hard = _raw(matrix)
    assert hard.dtype == np.int8
    np.testing.assert_array_equal(hard[sure], nearest[sure])
    far = ~np.isnan(expected) & (distance > 0.1 + 1e-4)
    assert far.sum() > 100 and (hard[far] == -1).all()
    assert (hard[missing] == -1).all()


def test_pca_of_dosages_is_numpys(tmp_path: Path) -> None:
    probabilities, missing = _fractional(seed=1)
    path = write_bgen(tmp_path / "f.bgen", probabilities, missing=missing, bits=16)
    values = _raw(ds.open_matrix(path), counts=False)
    dense = reference_matrix(np.where(values < 0, np.nan, values), 2, patterson=True)
    result = ds.fit_pca(path, 3, runtime="local", method="gram", rng=0)
    assert_exact_components(result, dense, 3, center=False, rtol=1e-8)
    # the stored counts are the file's probabilities to 16 bits
    np.testing.assert_allclose(np.where(values < 0, np.nan, values),
                               _expected(probabilities, missing), atol=4e-5)


@pytest.mark.parametrize("compression", ["zlib", "none"])
def test_a_bgen_1_1_file_layout_1(tmp_path: Path, compression: str) -> None:
    probabilities, missing = _fractional(n_variants=30, n_samples=9, seed=4)
    path = write_bgen(tmp_path / "v11.bgen", probabilities, missing=missing, layout=1,
                      compression=compression, rsids=[f"r{i}" for i in range(30)])
    matrix = ds.open_matrix(path, genotype_scaling="none")
    values = _raw(matrix, counts=False)
    np.testing.assert_allclose(np.where(values < 0, np.nan, values),
                               _expected(probabilities, missing), atol=1e-4)
    assert matrix.variants.get("variant_id").tolist() == [f"r{i}" for i in range(30)]


def test_haploid_and_phased_calls(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    ploidy = np.array([2, 2, 1, 2, 1, 2])
    unphased = rng.dirichlet([1, 1, 1], (5, 6))
    unphased[:, ploidy == 1, 2] = 0
    unphased[:, ploidy == 1, :2] /= unphased[:, ploidy == 1, :2].sum(-1, keepdims=True)
    path = write_bgen(tmp_path / "u.bgen", unphased, ploidy=ploidy, bits=16)
    alt = unphased[..., 1] + 2 * unphased[..., 2]
    expected = np.where(ploidy == 1, 2 * alt, alt)  # a haploid call counts double, as PLINK's
    np.testing.assert_allclose(_raw(ds.open_matrix(path), counts=False), expected, atol=1e-4)
    haplotypes = rng.random((5, 6, 2))
    missing = np.zeros((5, 6), bool)
    missing[1, 3] = True
    path = write_bgen(tmp_path / "p.bgen", haplotypes, ploidy=ploidy, missing=missing,
                      phased=True, bits=16)
    expected = np.where(ploidy == 1, 2 * haplotypes[..., 0], haplotypes.sum(-1))
    values = _raw(ds.open_matrix(path), counts=False)
    assert values[1, 3] == -1
    np.testing.assert_allclose(np.delete(values.ravel(), 9), np.delete(expected.ravel(), 9),
                               atol=1e-4)


def test_hard_calls_asked_for_and_packed_storage(tmp_path: Path) -> None:
    from daskstraggle.data.bgen import open_bgen

    probabilities, missing = _fractional(seed=2)
    path = write_bgen(tmp_path / "f.bgen", probabilities, missing=missing, bits=16)
    dosage = ds.open_matrix(path)
    hard = open_bgen(path, calls="hard")
    assert hard.source.describe()["calls"] == "hard"
    np.testing.assert_array_equal(_raw(hard, counts=False), _raw(dosage))
    packed = ds.open_matrix(path, genotype_storage="packed")
    from daskstraggle.problems._packing import unpack_dosages

    rows = packed.loader(0)()
    np.testing.assert_array_equal(unpack_dosages(rows.values, rows.packed_columns),
                                  _raw(dosage)[: rows.values.shape[0]])


def test_the_memory_a_run_holds_counts_expected_counts_as_float64(tmp_path: Path) -> None:
    """The default runtime's size estimate (rows x row_nbytes) counts 8 bytes a value for
    expected counts, 1 for hard calls, a quarter of that packed."""
    from daskstraggle.data.bgen import open_bgen

    probabilities, missing = _fractional(seed=2)
    path = write_bgen(tmp_path / "f.bgen", probabilities, missing=missing, bits=16)
    dosage = ds.open_matrix(path)
    n = dosage.n_columns
    assert dosage.row_nbytes == 8 * n + 24
    assert open_bgen(path, calls="hard").row_nbytes == n + 24
    assert ds.open_matrix(path, genotype_storage="packed").row_nbytes == -(-n // 4) + 24


def test_genotype_pca_of_a_bgen_needs_merge_false(bed_as_bgen: Path) -> None:
    """A .bgen has no Dataset to merge into: refused before it is opened, as a .bed is."""
    from daskstraggle.errors import InvalidParameterError

    for path in (bed_as_bgen, bed_as_bgen.parent / "nowhere.BGEN"):
        with pytest.raises(InvalidParameterError, match=r"'merge' parameter.*\.bgen file"):
            ds.genotype_pca(path, 2, runtime="local")


# ---------------------------------------------------------------------------- sample ids
def test_without_sample_ids_the_sample_file_names_the_samples(tmp_path: Path) -> None:
    probabilities, missing = _fractional(n_variants=4, n_samples=6)
    path = write_bgen(tmp_path / "x.bgen", probabilities, missing=missing, sample_block=False)
    with pytest.raises(DataNotFoundError, match=r"stores no sample ids and its \.sample file "
                                                r"'.*x\.sample' does not exist") as info:
        ds.open_matrix(path)
    assert "\n" not in str(info.value)
    rows = "".join(f"f{i} i{i} 0\n" for i in range(6))
    (tmp_path / "x.sample").write_text(f"ID_1 ID_2 missing\n0 0 0\n{rows}")
    assert ds.open_matrix(path).columns.tolist() == [f"i{i}" for i in range(6)]
    (tmp_path / "x.sample").write_text(f"ID_1 ID_2 missing\n0 0 0\n{rows}f9 i9 0\n")
    with pytest.raises(InvalidDataError, match=r"holds 6 samples but its \.sample file"):
        ds.open_matrix(path)
    (tmp_path / "x.sample").write_text(f"ID_1 ID_2 missing\n0 0 0\n{rows[:-8]}f0 i0 0\n")
    with pytest.raises(InvalidDataError, match=r"lists the sample 'f0 i0' twice"):
        ds.open_matrix(path)
    (tmp_path / "x.sample").write_text(rows)
    with pytest.raises(InvalidDataError, match=r"is not an Oxford \.sample file"):
        ds.open_matrix(path)


def test_the_sample_file_is_a_companion_no_output_may_replace(bed_as_bgen: Path) -> None:
    from daskstraggle._output import source_paths

    assert source_paths(str(bed_as_bgen)) == [str(bed_as_bgen),
                                              str(bed_as_bgen.with_suffix(".sample"))]


# ---------------------------------------------------------------------------- refusals
def _header_flags(path: Path, flags: int) -> Path:
    data = bytearray(path.read_bytes())
    length = struct.unpack("<I", data[4:8])[0]
    data[length:length + 4] = struct.pack("<I", flags)
    path.write_bytes(bytes(data))
    return path


def test_damaged_and_unsupported_files_are_one_line_before_any_work(
        bed_as_bgen: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    data = bed_as_bgen.read_bytes()
    cases = {
        "truncated": (data[: len(data) // 2], r"is truncated or damaged: variant \d+ of 400 "
                                              r"runs past the end of the file"),
        # the last variant's compressed probabilities overwritten: zlib refuses them
        "damaged": (data[:-40] + bytes(40), r"is damaged: cbgen cannot read its last variant "
                                            r"\(.+\)"),
        "short": (data[:10], r"fewer than a BGEN header's 24: it is empty or truncated"),
        "magic": (data[:16] + b"gneb" + data[20:], r"is not a BGEN file"),
    }
    for name, (content, message) in cases.items():
        path = tmp_path / f"{name}.bgen"
        path.write_bytes(content)
        with pytest.raises(InvalidDataError, match=message) as info:
            ds.open_matrix(path)
        assert "\n" not in str(info.value) and str(path) in str(info.value), name
    flags = struct.unpack("<I", data[20:24])[0]  # after a 20-byte header block, from byte 4
    path = tmp_path / "flags.bgen"
    for bad, message in ((flags | 3, "unsupported BGEN layout 2 / compression 3"),
                         ((flags & ~0b111100) | (5 << 2), "unsupported BGEN layout 5"),
                         (flags & ~3, "uncompressed layout-2 BGEN file, which cbgen cannot")):
        path.write_bytes(data)
        with pytest.raises(InvalidDataError, match=message):
            ds.open_matrix(_header_flags(path, bad))
    assert "ERROR" not in capfd.readouterr().err  # cbgen's own report is in the message


def test_an_uncompressed_file_is_refused_not_misread(tmp_path: Path) -> None:
    probabilities, _ = _fractional(n_variants=3, n_samples=6)
    path = write_bgen(tmp_path / "u.bgen", probabilities, compression="none")
    with pytest.raises(InvalidDataError, match="uncompressed layout-2"):
        ds.open_matrix(path)


def test_a_file_changed_after_opening_is_one_line_where_it_is_read(bed_as_bgen: Path,
                                                                    tmp_path: Path) -> None:
    path = tmp_path / "x.bgen"
    path.write_bytes(bed_as_bgen.read_bytes())
    matrix = ds.open_matrix(path)
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(CorruptDataError, match=r"not the \d+ it had when opened; the file "
                                               r"changed"):
        matrix.loader(0)()


def test_without_cbgen_the_error_names_the_extra(bed_as_bgen: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cbgen", None)
    with pytest.raises(ImportError, match=r"daskstraggle\[bgen\]"):
        ds.open_matrix(bed_as_bgen)


def test_importing_daskstraggle_does_not_import_cbgen() -> None:
    code = ("import sys, daskstraggle, daskstraggle.cli; from daskstraggle.data.backends import "
            "guess_source; assert guess_source('x.BGEN').name == 'bgen'; "
            "assert 'cbgen' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


# ---------------------------------------------------------------------------- the CLI
def test_the_cli_reads_a_bgen_as_it_reads_the_bed(bed_as_bgen: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from daskstraggle.cli import main

    tables = {}
    for path in (bed_as_bgen, BED):
        assert main(["pca", str(path), "-k", "2", "--runtime", "local", "--min-maf",
                     "0.05"]) == 0
        captured = capsys.readouterr()
        assert "error" not in captured.err.lower(), captured.err
        tables[path.suffix] = captured.out.splitlines()
    assert tables[".bgen"][0] == tables[".bed"][0].replace("(plink-bed)", "(bgen)")
    rows = [n for n, line in enumerate(tables[".bed"]) if line.strip().startswith("PC")]
    assert rows and all(tables[".bgen"][n] == tables[".bed"][n] for n in rows)


def test_the_cli_refuses_a_truncated_bgen_in_one_line(bed_as_bgen: Path, tmp_path: Path,
                                                      capfd: pytest.CaptureFixture[str]
                                                      ) -> None:
    from daskstraggle.cli import main

    path = tmp_path / "x.bgen"
    path.write_bytes(bed_as_bgen.read_bytes()[:5000])
    assert main(["pca", str(path), "-k", "2", "--runtime", "local"]) == 2
    line = one_error_line(capfd.readouterr().err)
    assert "x.bgen" in line and "truncated or damaged" in line
