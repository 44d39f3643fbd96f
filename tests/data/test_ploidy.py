"""Mixed ploidy in VCF Zarr: an allele -2 pads a call of lower ploidy, it is not missing.

A haploid call (chrX of a male) in a diploid store is ``[a, -2]``; its dosage is its
alternate alleles scaled to the ploidy (0 or 2, as PLINK counts haploid X). Every
expectation here comes from an independent computation: a per-call Python loop over the
allele indices, or the genotype strings of a VCF file.
"""

from __future__ import annotations

import numpy as np
import pytest
import zarr

from daskstraggle import fit_pca, open_matrix
from daskstraggle.data.sources import genotype_rows
from daskstraggle.problems.block import Block
from daskstraggle.testing import reference_dosages, reference_matrix


def _rows_as_dense(calls: np.ndarray, *, scaling: str) -> np.ndarray:
    rows = genotype_rows(calls, missing="mean", scaling=scaling)
    block = Block(rows.values, fill=rows.fill, center=rows.center, scale=rows.scale)
    return np.vstack([tile.copy() for _, _, tile in block.tiles(tile_rows=3)])


def _dense(matrix) -> np.ndarray:
    """All rows of a matrix as the kernels see them, loaded partition by partition."""
    return np.vstack([tile.copy() for p in range(matrix.n_partitions)
                      for _, _, tile in matrix.loader(p)().tiles()])


def _calls(rng: np.random.Generator, n_variants: int, n_samples: int,
           haploid: np.ndarray) -> np.ndarray:
    """Diploid calls; samples in ``haploid`` get [a, -2]; about 5% missing alleles."""
    calls = rng.integers(0, 2, size=(n_variants, n_samples, 2)).astype(np.int8)
    calls[:, haploid, 1] = -2
    missing = rng.random((n_variants, n_samples)) < 0.05
    calls[missing, 0] = -1
    return calls


# ----------------------------------------------------------------------- decoding
@pytest.mark.parametrize("scaling", ["none", "patterson"])
def test_haploid_calls_count_their_alleles_scaled_to_the_ploidy(scaling):
    rng = np.random.default_rng(3)
    calls = _calls(rng, 30, 9, haploid=np.arange(4))
    calls[0, 5] = [-2, -2]  # only padding: missing
    calls[1, 6] = [-1, -2]  # a missing haploid call
    calls[2, 7] = [2, -2]  # a second alternate allele counts as alternate
    dosage = reference_dosages(calls)
    assert np.isnan(dosage[0, 5]) and np.isnan(dosage[1, 6]) and dosage[2, 7] == 2
    assert set(np.unique(dosage[:, :4][~np.isnan(dosage[:, :4])])) == {0.0, 2.0}
    expected = reference_matrix(dosage, 2, patterson=scaling == "patterson")
    np.testing.assert_allclose(_rows_as_dense(calls, scaling=scaling), expected, atol=1e-12)
    assert genotype_rows(calls, missing="mean", scaling=scaling).values.dtype == np.int8


def test_high_ploidy_with_padding_does_not_overflow():
    # a dodecaploid array (e.g. sugarcane) with calls of lower ploidy: alt * ploidy reaches
    # 144, beyond int8; the per-call loop is the oracle
    rng = np.random.default_rng(5)
    calls = rng.integers(0, 2, size=(20, 6, 12)).astype(np.int8)
    calls[:, :3, 8:] = -2  # 8 real alleles out of 12
    calls[0, 0, 0] = -1
    expected = reference_matrix(reference_dosages(calls), 12, patterson=False)
    np.testing.assert_allclose(_rows_as_dense(calls, scaling="none"), expected, atol=1e-12)


def test_fractional_dosages_of_a_lower_ploidy_call_are_kept_exactly():
    calls = np.array([[[1, 1, -2], [1, 0, -2], [0, 1, 1], [1, -2, -2]],
                      [[0, 0, 0], [1, 1, 1], [0, -2, -2], [-1, 0, -2]]], dtype=np.int8)
    dosage = reference_dosages(calls)
    np.testing.assert_array_equal(dosage, [[3.0, 1.5, 2.0, 3.0], [0.0, 3.0, 0.0, np.nan]])
    rows = genotype_rows(calls, missing="mean", scaling="none")
    assert rows.values.dtype == np.float64
    np.testing.assert_array_equal(_rows_as_dense(calls, scaling="none"),
                                  reference_matrix(dosage, 3, patterson=False))


# ------------------------------------------------------------------ a VCF Zarr store
@pytest.fixture(scope="module")
def chrx(tmp_path_factory) -> tuple[object, np.ndarray]:
    """VCF Zarr layout (zarr v2 like bio2zarr): 60 chrX variants, samples 0-5 haploid males."""
    rng = np.random.default_rng(8)
    n_samples = 14
    freq = rng.uniform(0.1, 0.9, size=(60, 1, 1))
    calls = (rng.random((60, n_samples, 2)) < freq).astype(np.int8)
    calls[:, :6, 1] = -2
    calls[rng.random((60, n_samples)) < 0.03, 0] = -1
    path = tmp_path_factory.mktemp("ploidy") / "chrx.vcz"
    group = zarr.open_group(path, mode="w", zarr_format=2)
    group.create_array("call_genotype", shape=calls.shape, chunks=(20, n_samples, 2),
                       dtype="i1")[:] = calls
    ids = np.array([f"M{i}" for i in range(6)] + [f"F{i}" for i in range(8)])
    group.create_array("sample_id", shape=(n_samples,), dtype=str)[:] = ids
    return path, calls


def test_store_rows_equal_the_reference_dosage_matrix(chrx):
    path, calls = chrx
    dosage = reference_dosages(calls)
    for scaling in ("none", "patterson"):
        m = open_matrix(path, genotype_scaling=scaling, n_partitions=3)
        expected = reference_matrix(dosage, 2, patterson=scaling != "none")
        np.testing.assert_allclose(_dense(m), expected, atol=1e-12, err_msg=scaling)


def test_haploid_samples_get_real_pc_scores(chrx):
    """Before the fix every male was mean-imputed on every variant and sat at 0 on every PC."""
    path, calls = chrx
    dense = reference_matrix(reference_dosages(calls), 2, patterson=True)
    kw = {"runtime": "local", "n_workers": 3, "rng": 0, "max_iter": 300, "tol": None}
    geno = fit_pca(path, 2, **kw)
    reference = fit_pca(dense, 2, center=False, **kw)
    np.testing.assert_allclose(geno.fitted["components"], reference.fitted["components"],
                               atol=1e-10)
    _, s, vt = np.linalg.svd(dense, full_matrices=False)
    np.testing.assert_allclose(geno.fitted["explained_variance"],
                               s[:2] ** 2 / (dense.shape[0] - 1), rtol=1e-6)
    np.testing.assert_allclose(np.abs(geno.fitted["components"] @ vt[:2].T), np.eye(2),
                               atol=1e-5)
    males = geno.fitted["components"][:, :6]
    assert np.abs(males).max() > 0.05, males


# ------------------------------------------------------------- a real VCF via bio2zarr
def test_bio2zarr_haploid_gt_in_a_diploid_vcf(tmp_path):
    """The real-world path: GT ``1`` (haploid) beside ``0/1`` in one VCF, through vcf2zarr."""
    pytest.importorskip("cyvcf2", reason="bio2zarr.vcf needs cyvcf2")
    import bio2zarr.vcf

    rng = np.random.default_rng(4)
    names = ["F1", "F2", "F3", "M1", "M2", "M3"]
    lines = ["##fileformat=VCFv4.3", "##contig=<ID=X,length=100000>",
             '##FORMAT=<ID=GT,Number=1,Type=String,Description="Genotype">',
             "#" + "\t".join(["CHROM", "POS", "ID", "REF", "ALT", "QUAL", "FILTER", "INFO",
                              "FORMAT", *names])]
    gts = []
    for v in range(40):
        row = [rng.choice(["0/0", "0/1", "1/0", "1/1", "./."], p=[.3, .2, .2, .25, .05])
               for _ in range(3)]
        row += [rng.choice(["0", "1", "."], p=[.5, .45, .05]) for _ in range(3)]
        gts.append(row)
        lines.append("\t".join(["X", str(100 * (v + 1)), ".", "A", "G", ".", "PASS", ".", "GT",
                                *row]))
    (tmp_path / "chrx.vcf").write_text("\n".join(lines) + "\n")
    store = tmp_path / "chrx.vcz"
    bio2zarr.vcf.convert([str(tmp_path / "chrx.vcf")], str(store), worker_processes=0)

    def gt_dosage(gt: str) -> float:  # straight from the VCF text
        alleles = gt.replace("|", "/").split("/")
        if "." in alleles:
            return np.nan
        return sum(a != "0" for a in alleles) * 2 / len(alleles)

    expected = np.array([[gt_dosage(gt) for gt in row] for row in gts])
    assert set(np.unique(expected[:, 3:][~np.isnan(expected[:, 3:])])) == {0.0, 2.0}
    assert (zarr.open_group(store, mode="r")["call_genotype"][:, 3:, 1] == -2).all()
    m = open_matrix(store, genotype_scaling="none")
    assert list(m.columns) == names
    np.testing.assert_allclose(_dense(m), reference_matrix(expected, 2, patterson=False),
                               atol=1e-12)
