"""Contig names as plink2 writes them: ``chr22`` is ``22``, ``chrX``/``23`` are ``X``,
``chrM``/``26`` are ``MT`` in the ids and ``#CHROM`` column of ``--plink-out`` and when a fit's
variants are found in new data. The table of names is what PLINK v2.00a3.5 wrote (``--vcf`` of a
one-variant VCF, ``--allow-extra-chr --set-all-var-ids @:#:$r:$a --make-bed``); the last test
runs the real plink2 where it is installed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import daskstraggle as ds
from daskstraggle.cli import main
from daskstraggle.data._bed_writer import write_bed
from daskstraggle.data._contigs import chrom_code
from daskstraggle.data.datasets import make_genotypes
from daskstraggle.errors import InvalidParameterError

#: A contig name in a VCF -> the .bim's CHROM (and the ``@`` of the ids) plink2 wrote.
PLINK2_WROTE = {
    "22": "22", "chr22": "22", "Chr22": "22", "CHR22": "22", "01": "1", "chr01": "1",
    "02": "2", "00": "0", "0": "0", "chr0": "0",
    "23": "X", "chr23": "X", "x": "X", "chrx": "X", "X": "X", "0X": "X", "0x": "X", "chr0X": "X",
    "24": "Y", "Y": "Y", "chrY": "Y", "0Y": "Y",
    "25": "XY", "XY": "XY", "xy": "XY", "chrXY": "XY", "cHrXy": "XY",
    "26": "MT", "chr26": "MT", "M": "MT", "MT": "MT", "mt": "MT", "chrM": "MT", "chrm": "MT",
    "CHRM": "MT", "chrMT": "MT", "0M": "MT", "0m": "MT", "chr0M": "MT",
    "27": "PAR1", "chr27": "PAR1", "28": "PAR2", "PAR1": "PAR1", "par1": "PAR1", "Par2": "PAR2",
    # not chromosome codes: contigs of their own, kept as given
    "chrPAR1": "chrPAR1", "100": "100", "chr100": "chr100", "022": "022", "0XY": "0XY",
    "chr1_random": "chr1_random", "chrUn_x": "chrUn_x", "HLA-A*01": "HLA-A*01", "chr": "chr",
    "ch22": "ch22", "chrchr22": "chrchr22", "X22": "X22", "1A": "1A", "1e1": "1e1",
}
#: Two spellings of three contigs, and the codes plink2 writes for both.
CHR_SPELLING, NUMBER_SPELLING, CODES = ["chr22", "chrX", "chrM"], ["22", "23", "26"], [
    "22", "X", "MT"]
GENOTYPES = {"n_variants": 300, "n_samples": 30, "chunk_rows": 100, "missing_rate": 0.02,
             "seed": 7}
FIT = {"runtime": "local", "method": "gram", "n_workers": 2}


@pytest.mark.parametrize(("name", "code"), PLINK2_WROTE.items())
def test_chrom_code_is_what_plink2_writes(name, code):
    assert chrom_code(name) == code
    assert chrom_code(code) == code  # a code is its own code


def _respelled(source: Path, path: Path, names: list[str]) -> Path:
    """A copy of a VCF Zarr store whose variants lie on ``names``, in runs of equal length."""
    view = xr.open_zarr(source, consolidated=False).compute().drop_encoding()
    view = view.drop_vars(["contig_id", "contig_length", "region_index"], errors="ignore")
    n = view.sizes["variants"]
    view["variant_contig"] = ("variants", np.arange(n) * len(names) // n)
    view["contig_id"] = ("contigs", np.array(names, dtype=object))
    view.to_zarr(path, zarr_format=2)
    return path


@pytest.fixture(scope="module")
def spellings(tmp_path_factory):
    folder = tmp_path_factory.mktemp("contigs")
    vcz = make_genotypes(folder / "g.vcz", **GENOTYPES)
    return (_respelled(vcz, folder / "chr.vcz", CHR_SPELLING),
            _respelled(vcz, folder / "number.vcz", NUMBER_SPELLING))


def _rows(path: Path) -> list[list[str]]:
    return [line.split("\t") for line in path.read_text().splitlines()[1:]]


def test_plink_out_writes_contigs_and_ids_as_plink2(spellings, tmp_path):
    """Both spellings give the same files: ``#CHROM`` and ``@`` of ``@:#:$r:$a`` as plink2's."""
    written = []
    for store, name in zip(spellings, ["chr", "number"], strict=True):
        matrix = ds.open_matrix(store)
        paths = ds.fit_pca(matrix, 2, **FIT).to_plink(tmp_path / name, matrix)
        written.append([p.read_text() for p in paths])
        rows = _rows(paths[3])  # .afreq: every variant, in order
        positions = matrix.variants.get("variant_position")
        codes = np.array(CODES)[np.arange(len(rows)) * 3 // len(rows)]
        assert [row[0] for row in rows] == codes.tolist()
        assert [row[1] for row in rows] == [f"{c}:{p}:{r[2]}:{r[3]}" for c, p, r in
                                            zip(codes, positions, rows, strict=True)]
        assert {row[0] for row in _rows(paths[2])} == set(CODES)
    assert written[0] == written[1]


def test_a_fit_on_one_spelling_transforms_the_other(spellings, tmp_path):
    chr_store, number_store = spellings
    pca = ds.PCA(3, **FIT).fit(str(chr_store))
    own = pca.transform(str(chr_store))
    np.testing.assert_allclose(pca.transform(str(number_store)), own, rtol=0, atol=1e-12)
    assert pca.variant_keys_[0].startswith("22:") and pca.variant_keys_[-1].startswith("MT:")
    back = ds.PCA(3, **FIT).fit(str(number_store))
    np.testing.assert_allclose(back.transform(str(chr_store)), own, rtol=0, atol=1e-12)
    # a fileset written from the chr store says 22, X, MT (as plink2 --make-bed), and a fit
    # on it finds its variants in the chr store
    write_bed(chr_store, tmp_path / "g")
    bim = [line.split("\t") for line in (tmp_path / "g.bim").read_text().splitlines()]
    assert sorted({row[0] for row in bim}) == sorted(CODES)
    assert all(row[1] == f"{row[0]}:{row[3]}:{row[5]}:{row[4]}" for row in bim)
    on_bed = ds.PCA(3, **FIT).fit(str(tmp_path / "g.bed"))
    np.testing.assert_allclose(on_bed.transform(str(chr_store)), own, rtol=0, atol=1e-9)


# ------------------------------------------------------------------------ the real plink2
def _vcf(path: Path, contig: str, n_variants: int, n_samples: int) -> Path:
    rng = np.random.default_rng(5)
    names = [f"s{j}" for j in range(n_samples)]
    lines = ["##fileformat=VCFv4.3", f"##contig=<ID={contig},length=50000000>",
             '##FORMAT=<ID=GT,Number=1,Type=String,Description="Genotype">',
             "#" + "\t".join(["CHROM", "POS", "ID", "REF", "ALT", "QUAL", "FILTER", "INFO",
                              "FORMAT", *names])]
    for v in range(n_variants):
        dosage = rng.random((n_samples, 2)) < rng.uniform(0.2, 0.8)
        dosage[0], dosage[1] = [0, 0], [1, 1]  # never monomorphic
        calls = ["/".join(str(int(a)) for a in row) for row in dosage]
        lines.append("\t".join([contig, str(1000 * (v + 1)), ".", "A", "G", ".", "PASS", ".",
                                "GT", *calls]))
    path.write_text("\n".join(lines) + "\n")
    return path


def _plink2(*args: str) -> None:
    run = subprocess.run(["plink2", *args], capture_output=True, text=True, timeout=120,
                         check=False)
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.skipif(shutil.which("plink2") is None, reason="plink2 binary not found")
@pytest.mark.parametrize("contig", ["chr22", "22"])
def test_plink2_scores_every_variant_of_our_plink_out(contig, tmp_path, capsys):
    """A VCF with ``chr22`` (or ``22``) contigs: plink2's fileset of it has ids ``22:POS:REF:ALT``
    (``--set-all-var-ids @:#:$r:$a``), and ``--score`` with our ``--plink-out`` of its VCF Zarr
    store uses every variant and gives ``PCA.transform``; a fit on plink2's ``.bed``
    transforms the store."""
    pytest.importorskip("cyvcf2", reason="bio2zarr.vcf needs cyvcf2")
    import bio2zarr.vcf

    n_variants, k = 120, 3
    vcf = _vcf(tmp_path / "g.vcf", contig, n_variants, 30)
    store = tmp_path / "g.vcz"
    bio2zarr.vcf.convert([str(vcf)], str(store), worker_processes=0, show_progress=False)
    _plink2("--vcf", str(vcf), "--set-all-var-ids", "@:#:$r:$a", "--make-bed", "--out",
            str(tmp_path / "p"))
    assert (tmp_path / "p.bim").read_text().startswith("22\t22:1000:A:G\t")
    prefix = tmp_path / "ours"
    assert main(["pca", str(store), "-k", str(k), "--method", "gram", "--runtime", "local",
                 "--plink-out", str(prefix)]) == 0
    capsys.readouterr()
    _plink2("--bfile", str(tmp_path / "p"), "--read-freq", f"{prefix}.afreq", "--score",
            f"{prefix}.eigenvec.allele", "2", "5", "header-read", "no-mean-imputation",
            "variance-standardize", "cols=+scoresums", "--score-col-nums", f"6-{5 + k}",
            "--out", str(tmp_path / "score"))
    log = (tmp_path / "score.log").read_text()
    assert f"--read-freq: Frequencies for {n_variants} variants loaded." in log
    assert f"--score: {n_variants} variants processed." in log
    rows = [line.split() for line in (tmp_path / "score.sscore").read_text().splitlines()]
    sums = np.array([[float(r[rows[0].index(f"PC{i + 1}_SUM")]) for i in range(k)]
                     for r in rows[1:]])
    expected = ds.PCA(k, **FIT).fit(str(store)).transform(str(store))
    np.testing.assert_allclose(sums, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())
    on_bed = ds.PCA(k, **FIT).fit(str(tmp_path / "p.bed"))
    np.testing.assert_allclose(on_bed.transform(str(store)), expected, rtol=0, atol=1e-9)


@pytest.mark.parametrize(("region", "chr_name", "number_name"),
                         [("22", "chr22", "22"), ("chrX", "chrX", "23"), ("MT", "chrM", "26")])
def test_a_region_names_a_contig_in_either_spelling(spellings, region, chr_name, number_name):
    """``--region 22`` on a chr22 store (and ``chrX`` on one that says 23), as plink2's
    ``--chr`` reads chromosome codes; a name the data has is matched as written first."""
    chr_store, number_store = spellings
    kept = []
    for store, name in ((chr_store, chr_name), (number_store, number_name)):
        for text in (region, name):
            matrix = ds.open_matrix(store, qc={"region": text})
            kept.append(np.asarray(matrix.variants.get("variant_position")).tolist())
    assert kept[0] and all(k == kept[0] for k in kept)
    with pytest.raises(InvalidParameterError, match="names contig 'chr21'"):
        ds.open_matrix(chr_store, qc={"region": "chr21"})
