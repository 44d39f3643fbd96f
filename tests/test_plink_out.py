"""A genotype PCA as plink2's --pca files: layouts, scalings, and allele weights that plink2's
``--score ... variance-standardize`` (replicated here from its documented formula; the real
plink2 runs in pipelines/genotype_pca.py) turns into the scores PCA.transform gives."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr

import daskstraggle as ds
from daskstraggle import open_matrix
from daskstraggle.cli import main
from daskstraggle.data.datasets import make_genotypes
from daskstraggle.errors import InvalidParameterError, OutputExistsError, OutputNotWritableError

K = 3
GENOTYPES = {"n_variants": 400, "n_samples": 40, "chunk_rows": 100, "missing_rate": 0.02,
             "seed": 4}


@pytest.fixture(scope="module")
def fileset(tmp_path_factory):
    folder = tmp_path_factory.mktemp("plink_out")
    bed = make_genotypes(folder / "g.bed", **GENOTYPES)
    vcz = make_genotypes(folder / "g.vcz", **GENOTYPES)  # the same calls, to read dosages
    return bed, vcz


def _table(path: Path) -> tuple[list[str], list[list[str]]]:
    lines = [line.split("\t") for line in path.read_text().splitlines()]
    return lines[0], lines[1:]


def _alt_dosages(vcz: Path) -> np.ndarray:
    """ALT counts (variants x samples), NaN where a call is missing: read with zarr."""
    calls = zarr.open_group(str(vcz), mode="r")["call_genotype"][:]
    dosage = (calls > 0).sum(axis=2).astype(np.float64)
    dosage[(calls < 0).any(axis=2)] = np.nan
    return dosage


def _plink2_score_sums(allele_file: Path, afreq: Path, dosage: np.ndarray) -> np.ndarray:
    """plink2 --read-freq AFREQ --score FILE 2 5 header-read no-mean-imputation
    variance-standardize cols=+scoresums: per sample and PC, the sum over the file's lines
    of weight x (count of the line's A1 - 2 f) / sqrt(2 f (1 - f)), f the A1's frequency
    from AFREQ; a missing call adds nothing."""
    _, freq_rows = _table(afreq)
    alt_freq = {row[1]: float(row[4]) for row in freq_rows}
    header, rows = _table(allele_file)
    k = len(header) - 5
    index = {row[1]: v for v, row in enumerate(freq_rows)}
    sums = np.zeros((dosage.shape[1], k))
    for row in rows:
        v, ref, alt, a1 = index[row[1]], row[2], row[3], row[4]
        f = alt_freq[row[1]] if a1 == alt else 1.0 - alt_freq[row[1]]
        count = dosage[v] if a1 == alt else 2.0 - dosage[v]
        z = np.nan_to_num((count - 2 * f) / np.sqrt(2 * f * (1 - f)))
        assert a1 in (ref, alt)
        sums += np.outer(z, np.array(row[5:], dtype=np.float64))
    return sums


def test_the_files_have_plink2s_layout_and_scaling(fileset, tmp_path):
    bed, _ = fileset
    matrix = open_matrix(bed)
    res = ds.fit_pca(matrix, K, runtime="local", rng=0)  # gram: exact
    paths = res.to_plink(tmp_path / "out", matrix)
    assert [p.name for p in paths] == ["out.eigenvec", "out.eigenval", "out.eigenvec.allele",
                                       "out.afreq"]
    header, rows = _table(paths[0])
    assert header == ["#FID", "IID", "PC1", "PC2", "PC3"]
    fam = [line.split() for line in bed.with_suffix(".fam").read_text().splitlines()]
    assert [row[:2] for row in rows] == [line[:2] for line in fam]
    np.testing.assert_allclose(np.array([row[2:] for row in rows], dtype=float).T,
                               res.fitted["components"], rtol=1e-9, atol=1e-12)
    eigenval = np.loadtxt(paths[1])
    M = matrix.n_rows
    np.testing.assert_allclose(eigenval, res.fitted["singular_values"] ** 2 / (2 * M),
                               rtol=1e-9)
    header, rows = _table(paths[2])
    assert header == ["#CHROM", "ID", "REF", "ALT", "A1", "PC1", "PC2", "PC3"]
    bim = [line.split() for line in bed.with_suffix(".bim").read_text().splitlines()]
    _, freq_rows = _table(paths[3])
    assert [r[1] for r in freq_rows] == [b[1] for b in bim]  # the .bim's ids, in order
    polymorphic = [r[1] for r in freq_rows if 0 < float(r[4]) < 1]
    assert [r[1] for r in rows[::2]] == polymorphic and 0 < len(polymorphic) <= M
    for ref_line, alt_line in zip(rows[::2], rows[1::2], strict=True):
        assert ref_line[4] == ref_line[2] and alt_line[4] == alt_line[3]
        np.testing.assert_array_equal(-np.array(ref_line[5:], dtype=float),
                                      np.array(alt_line[5:], dtype=float))


def test_plink2s_score_of_the_allele_weights_is_pca_transform(fileset, tmp_path):
    bed, vcz = fileset
    matrix = open_matrix(bed)
    res = ds.fit_pca(matrix, K, runtime="local", rng=0)
    paths = res.to_plink(tmp_path / "out", matrix)
    dosage = _alt_dosages(vcz)
    sums = _plink2_score_sums(paths[2], paths[3], dosage)
    pca = ds.PCA(K, runtime="local", random_state=0).fit(bed)
    transformed = pca.transform(bed)
    scale = np.abs(transformed).max()
    np.testing.assert_allclose(sums, transformed, atol=1e-8 * scale)
    # the training samples' scores, B S, too
    np.testing.assert_allclose(sums, (res.fitted["components"] * res.fitted["singular_values"]
                                      [:, None]).T, atol=1e-8 * scale)


def test_without_the_matrix_only_the_eigenvectors_and_values(fileset, tmp_path):
    _, vcz = fileset
    res = ds.fit_pca(str(vcz), K, runtime="local", rng=0)
    paths = res.to_plink(tmp_path / "v")
    assert [p.name for p in paths] == ["v.eigenvec", "v.eigenval"]
    header, rows = _table(paths[0])
    assert header[:2] == ["#IID", "PC1"] and len(rows) == GENOTYPES["n_samples"]


def test_what_cannot_be_written_is_one_line_and_writes_nothing(fileset, tmp_path):
    bed, _ = fileset
    X = np.random.default_rng(0).normal(size=(50, 4))
    with pytest.raises(InvalidParameterError, match="to_plink writes a genotype PCA"):
        ds.fit_pca(X, 2, runtime="local").to_plink(tmp_path / "x")
    res = ds.fit_pca(str(bed), K, runtime="local", rng=0)
    with pytest.raises(InvalidParameterError, match="must be the genotypes the result was "
                                                    "fitted on, 400 variants x 40 samples"):
        res.to_plink(tmp_path / "x", open_matrix(str(bed), qc={"min_maf": 0.2}))
    (tmp_path / "x.eigenval").write_text("mine\n")
    with pytest.raises(OutputExistsError, match=r"x\.eigenval' exists"):
        res.to_plink(tmp_path / "x")
    assert not (tmp_path / "x.eigenvec").exists()
    assert (tmp_path / "x.eigenval").read_text() == "mine\n"
    res.to_plink(tmp_path / "x", overwrite=True)
    assert (tmp_path / "x.eigenval").read_text() != "mine\n"
    with pytest.raises(OutputNotWritableError, match="does not exist"):
        res.to_plink(tmp_path / "no" / "x")


def test_cli_plink_out(fileset, tmp_path, capsys):
    bed, _ = fileset
    prefix = tmp_path / "cli"
    code = main(["pca", str(bed), "-k", "2", "--runtime", "local", "--min-maf", "0.05",
                 "--plink-out", str(prefix), "--json"])
    out = capsys.readouterr().out
    assert code == 0 and '"plink": [' in out
    header, rows = _table(Path(f"{prefix}.eigenvec.allele"))
    kept = open_matrix(str(bed), qc={"min_maf": 0.05}).n_rows
    assert header[5:] == ["PC1", "PC2"] and len(rows) == 2 * kept < 2 * 400
    # with samples removed the .eigenvec keeps their family ids
    matrix = open_matrix(str(bed)).select_columns(np.arange(5, 40))
    res = ds.fit_pca(matrix, 2, runtime="local", rng=0)
    header, rows = _table(res.to_plink(tmp_path / "sub")[0])
    fam = [line.split() for line in bed.with_suffix(".fam").read_text().splitlines()][5:40]
    assert header[:2] == ["#FID", "IID"] and [r[:2] for r in rows] == [f[:2] for f in fam]
    assert main(["pca", str(bed), "--runtime", "local", "--plink-out", str(prefix)]) == 2
    assert "exists" in capsys.readouterr().err
    X = tmp_path / "plain.zarr"
    zarr.open_group(str(X), mode="w").create_array("X", data=np.ones((20, 3)))
    assert main(["pca", str(X), "--runtime", "local", "--plink-out", str(tmp_path / "p")]) == 2
    assert "writes a genotype PCA" in capsys.readouterr().err


def test_a_vcf_zarr_store_with_variable_width_strings_writes_the_files(fileset, tmp_path):
    """bio2zarr's stores under zarr 3 hold contig ids and alleles as numpy StringDType."""
    _, vcz = fileset
    matrix = ds.open_matrix(vcz)
    assert matrix.variants.whole("contig_id").dtype.kind in "TUO"
    res = ds.fit_pca(matrix, 2, runtime="local", rng=0)
    paths = res.to_plink(tmp_path / "v", matrix)
    header, rows = _table(paths[2])
    assert header[:5] == ["#CHROM", "ID", "REF", "ALT", "A1"]
    assert rows and all(row[0] == "1" for row in rows)
