"""PLINK 1 binary filesets: open_matrix("x.bed") and ``daskstraggle pca x.bed``.

The oracle is the format itself: the .bed files here are written byte by byte by a
plain-Python encoder of the PLINK 1.9 spec (https://www.cog-genomics.org/plink/1.9/formats#bed)
and checked against known dosages, and the VCF Zarr fixtures encoded this way must give the
same rows and the same PCA as the VCF Zarr stores themselves.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import zarr

from daskstraggle import fit_pca, open_matrix
from daskstraggle.errors import DataNotFoundError, InvalidDataError, InvalidParameterError
from daskstraggle.problems._packing import unpack_dosages

#: A1 count (dosage; -1 missing) -> 2-bit .bed code, from the spec.
_CODE = {2: 0b00, -1: 0b01, 1: 0b10, 0: 0b11}

#: 4 variants x 7 samples (not a multiple of 4): ordinary, missing calls, all het, monomorphic.
DOSAGES = [[2, 1, 0, 0, 1, 2, 0],
           [0, -1, 1, 2, -1, 0, 1],
           [1, 1, 1, 1, 1, 1, 1],
           [2, 2, 2, 2, 2, 2, 2]]


def write_bed(prefix, dosages, *, samples=None, variants=None, padding=0b00, mode=0x01):
    """Write ``prefix``.bed/.bim/.fam: one byte at a time, first sample in the low bits."""
    n_samples = len(dosages[0])
    out = bytearray([0x6C, 0x1B, mode])
    for row in dosages:
        for start in range(0, n_samples, 4):
            byte = 0
            for j in range(4):
                code = _CODE[row[start + j]] if start + j < n_samples else padding
                byte |= code << (2 * j)
            out.append(byte)
    prefix.with_suffix(".bed").write_bytes(bytes(out))
    samples = samples or [f"s{i}" for i in range(n_samples)]
    variants = variants or [("1", f"rs{i}", 100 * (i + 1), "A", "G")
                            for i in range(len(dosages))]
    prefix.with_suffix(".fam").write_text(
        "".join(f"fam{i} {s} 0 0 0 -9\n" for i, s in enumerate(samples)))
    prefix.with_suffix(".bim").write_text(
        "".join(f"{c}\t{v}\t0\t{p}\t{a1}\t{a2}\n" for c, v, p, a1, a2 in variants))
    return prefix.with_suffix(".bed")


def _rows(matrix):
    """All rows of a matrix as its loaders return them (values unpacked), concatenated."""
    parts = [matrix.source.loader(a, b)() for a, b in zip(matrix.bounds[:-1],
                                                          matrix.bounds[1:], strict=True)]
    values = [unpack_dosages(r.values, r.packed_columns) if r.packed_columns else r.values
              for r in parts]

    def stacked(name):
        return np.concatenate([np.full(len(v), np.nan) if getattr(r, name) is None
                               else getattr(r, name) for r, v in zip(parts, values, strict=True)])

    return np.vstack(values), stacked("fill"), stacked("center"), stacked("scale")


# ---------------------------------------------------------------------------- the format
def test_encoder_writes_the_spec_bytes(tmp_path):
    path = write_bed(tmp_path / "t", DOSAGES)
    data = path.read_bytes()
    assert data[:3] == b"\x6c\x1b\x01" and len(data) == 3 + 4 * 2
    # samples 0-3 (2, 1, 0, 0): codes 00, 10, 11, 11 from the lowest bits up
    assert data[3] == 0b11_11_10_00
    # samples 4-6 (1, 2, 0) and one padding code 00
    assert data[4] == 0b00_11_00_10


@pytest.mark.parametrize("storage", ["int8", "packed"])
@pytest.mark.parametrize("padding", [0b00, 0b01, 0b11])
def test_dosages_fill_centre_and_scale(tmp_path, storage, padding):
    """Padding codes (00 = hom A1 as plink writes them, or any other) are not calls."""
    path = write_bed(tmp_path / "t", DOSAGES, padding=padding)
    matrix = open_matrix(path, genotype_storage=storage)
    values, fill, center, scale = _rows(matrix)
    D = np.array(DOSAGES)
    np.testing.assert_array_equal(values, D)
    called = D >= 0
    mean = np.array([row[ok].mean() for row, ok in zip(D, called, strict=True)])
    assert mean.tolist() == [6 / 7, 4 / 5, 1.0, 2.0]
    np.testing.assert_allclose(center, mean, rtol=1e-15)
    np.testing.assert_allclose(fill, mean, rtol=1e-15)  # used at the missing calls only
    p = mean / 2
    expected = [1 / np.sqrt(q * (1 - q)) if 0 < q < 1 else 0.0 for q in p]
    np.testing.assert_allclose(scale, expected, rtol=1e-15)
    assert scale[3] == 0.0  # monomorphic: contributes nothing


def test_zero_fill_and_no_scaling(tmp_path):
    path = write_bed(tmp_path / "t", DOSAGES)
    matrix = open_matrix(path, missing="zero", genotype_scaling="none")
    rows = matrix.source.loader(0, 4)()
    np.testing.assert_array_equal(rows.fill, np.zeros(4))
    assert rows.center is None and rows.scale is None


def test_matrix_metadata(tmp_path):
    variants = [("1", "rsA", 10, "T", "C"), ("1", "rsB", 20, "G", "A"),
                ("X", "rsC", 5, "C", "G"), ("2", "rsD", 7, "A", "T")]
    path = write_bed(tmp_path / "t", DOSAGES, samples=[f"id{i}" for i in range(7)],
                     variants=variants)
    matrix = open_matrix(path)
    assert matrix.shape == (4, 7) and matrix.kind == "plink-bed" and matrix.genotypes
    assert matrix.dims == ("variants", "samples") and matrix.rows_standardized
    assert matrix.columns.tolist() == [f"id{i}" for i in range(7)]
    assert matrix.describe()["path"] == str(path)
    table = matrix.variants
    assert table.get("variant_id").tolist() == ["rsA", "rsB", "rsC", "rsD"]
    assert table.get("variant_position").tolist() == [10, 20, 5, 7]
    assert table.whole("contig_id").tolist() == ["1", "X", "2"]  # in file order
    assert table.keys().tolist() == ["1:10:C,T", "1:20:A,G", "X:5:G,C", "2:7:T,A"]
    assert table.get("variant_filter") is None
    kept = open_matrix(path, qc={"region": "1:15-30"})
    assert kept.shape == (1, 7) and kept.variants.get("variant_id").tolist() == ["rsB"]
    np.testing.assert_array_equal(_rows(kept)[0], [DOSAGES[1]])


def test_a_selection_reads_the_selected_variants(tmp_path):
    path = write_bed(tmp_path / "t", DOSAGES * 5)
    matrix = open_matrix(path, genotype_scaling="none")
    picked = matrix.select_rows(np.array([1, 6, 18, 19]))
    np.testing.assert_array_equal(_rows(picked)[0], np.array(DOSAGES * 5)[[1, 6, 18, 19]])


# ---------------------------------------------------------------------------- vs VCF Zarr
def _bed_from_vcz(vcz, prefix):
    """Encode a VCF Zarr store's calls as .bed (A1 = ALT, so dosage = non-reference count)."""
    group = zarr.open_group(str(vcz), mode="r")
    calls = group["call_genotype"][:]
    dosages = []
    for variant in calls.tolist():
        row = []
        for call in variant:
            real = [a for a in call if a != -2]  # -2 pads a call of lower ploidy
            if not real or any(a < 0 for a in real):
                row.append(-1)
            else:
                row.append(sum(a > 0 for a in real) * len(call) // len(real))
        dosages.append(row)
    contigs = [str(c) for c in group["contig_id"][:]]
    alleles = group["variant_allele"][:]
    variants = [(contigs[int(c)], f"v{i}", int(p), str(a[1]), str(a[0])) for i, (c, p, a) in
                enumerate(zip(group["variant_contig"][:], group["variant_position"][:],
                              alleles, strict=True))]
    samples = [str(s) for s in group["sample_id"][:]]
    return write_bed(prefix, dosages, samples=samples, variants=variants)


@pytest.fixture(scope="module", params=["vcz_path", "vcz_missing_path"])
def pair(request, tmp_path_factory):
    vcz = request.getfixturevalue(request.param)
    bed = _bed_from_vcz(vcz, tmp_path_factory.mktemp("bed") / "calls")
    return vcz, bed


@pytest.mark.parametrize("storage", ["int8", "packed"])
def test_same_rows_and_metadata_as_vcf_zarr(pair, storage):
    vcz, bed = pair
    a = open_matrix(vcz, genotype_storage=storage, n_partitions=3)
    b = open_matrix(bed, genotype_storage=storage, n_partitions=3)
    assert a.shape == b.shape
    for x, y in zip(_rows(a), _rows(b), strict=True):
        np.testing.assert_allclose(y, x, rtol=1e-13, atol=0)
    assert b.columns.tolist() == a.columns.tolist()
    assert b.variants.keys().tolist() == a.variants.keys().tolist()


def test_quality_control_keeps_the_same_variants(pair):
    vcz, bed = pair
    qc = {"min_maf": 0.1, "max_missing": 0.04, "region": "1:1-300000"}
    a, b = open_matrix(vcz, qc=qc), open_matrix(bed, qc=qc)
    np.testing.assert_array_equal(b.attrs["qc"].kept, a.attrs["qc"].kept)
    assert b.attrs["qc"].removed == a.attrs["qc"].removed and 0 < b.n_rows < b.source.n_variants
    with pytest.raises(InvalidParameterError, match="'pass_only' parameter"):
        open_matrix(bed, qc={"pass_only": True})


def test_missing_calls_are_read_as_missing(pair):
    vcz, bed = pair
    values = _rows(open_matrix(bed))[0]
    calls = zarr.open_group(str(vcz), mode="r")["call_genotype"][:]
    np.testing.assert_array_equal(values < 0, (calls == -1).any(axis=2))


def _aligned(components, reference):
    signs = np.sign(np.sum(components * reference, axis=1))
    return components * signs[:, None]


@pytest.mark.parametrize("storage", ["int8", "packed"])
def test_same_pca_as_vcf_zarr_on_a_local_runtime(pair, storage):
    vcz, bed = pair
    kw = {"method": "gram", "runtime": "local", "n_workers": 2, "rng": 0}
    ref = fit_pca(open_matrix(vcz), 3, **kw).fitted
    got = fit_pca(open_matrix(bed, genotype_storage=storage), 3, **kw).fitted
    np.testing.assert_allclose(_aligned(got["components"], ref["components"]),
                               ref["components"], atol=1e-10)
    np.testing.assert_allclose(got["explained_variance"], ref["explained_variance"],
                               rtol=1e-10)


def test_same_pca_on_process_workers(vcz_missing_path, tmp_path, dask_client):
    bed = _bed_from_vcz(vcz_missing_path, tmp_path / "calls")
    ref = fit_pca(open_matrix(vcz_missing_path), 3, method="gram", runtime="local",
                  n_workers=2, rng=0)
    got = fit_pca(open_matrix(bed, genotype_storage="packed"), 3, method="gram",
                  client=dask_client, rng=0)
    np.testing.assert_allclose(_aligned(got.fitted["components"], ref.fitted["components"]),
                               ref.fitted["components"], atol=1e-10)
    samples = got.to_dataset()["samples"].values.tolist()
    assert samples == [str(s) for s in zarr.open_group(str(vcz_missing_path),
                                                       mode="r")["sample_id"][:]]


def test_a_fit_on_a_bed_projects_vcf_zarr_samples(pair):
    """The .bim's keys (contig:position:A2,A1) are the VCF Zarr keys (REF,ALT)."""
    pytest.importorskip("sklearn")
    from daskstraggle import PCA

    vcz, bed = pair
    kw = {"runtime": "local", "method": "gram", "n_workers": 2}
    ref = PCA(3, **kw).fit(str(vcz)).transform(str(vcz))
    got = PCA(3, **kw).fit(str(bed)).transform(str(vcz))
    np.testing.assert_allclose(_aligned(got.T, ref.T), ref.T, atol=1e-9)


def test_genotype_pca_of_a_bed_needs_merge_false(pair):
    from daskstraggle import genotype_pca

    vcz, bed = pair
    with pytest.raises(InvalidParameterError, match=r"'merge' parameter.*PLINK \.bed"):
        genotype_pca(str(bed), 3, runtime="local", method="gram")
    # refused before anything is opened or counted (a QC pass would run on the workers)
    with pytest.raises(InvalidParameterError, match=r"'merge' parameter.*PLINK \.bed"):
        genotype_pca(bed.parent / "nowhere.bed", 3, qc={"min_maf": 0.1}, runtime="local")
    kw = {"merge": False, "runtime": "local", "method": "gram", "n_workers": 2}
    got, ref = genotype_pca(str(bed), 3, **kw), genotype_pca(str(vcz), 3, **kw)
    np.testing.assert_allclose(np.abs(got.sample_pca_projection.values),
                               np.abs(ref.sample_pca_projection.values), atol=1e-9)
    assert got.sample_id.values.tolist() == ref.sample_id.values.tolist()


def test_cli_pca_of_a_bed(pair, capsys):
    import json

    from daskstraggle.cli import main

    vcz, bed = pair
    base = ["-k", "2", "--method", "gram", "--runtime", "local", "--workers", "2", "--json",
            "--quiet"]
    outputs = []
    for argv in (["pca", str(vcz), *base], ["pca", str(bed), *base],
                 ["pca", str(bed), *base, "--packed-genotypes"]):
        assert main(argv) == 0
        outputs.append(json.loads(capsys.readouterr().out))
    for out in outputs[1:]:
        np.testing.assert_allclose(out["explained_variance"], outputs[0]["explained_variance"],
                                   rtol=1e-10)


# ---------------------------------------------------------------------------- bad input
def _damage(tmp_path, how):
    path = write_bed(tmp_path / "t", DOSAGES)
    if how == "no bim":
        path.with_suffix(".bim").unlink()
    elif how == "no fam":
        path.with_suffix(".fam").unlink()
    elif how == "magic":
        path.write_bytes(b"\x00\x00" + path.read_bytes()[2:])
    elif how == "sample-major":
        path.write_bytes(b"\x6c\x1b\x00" + path.read_bytes()[3:])
    elif how == "truncated":
        path.write_bytes(path.read_bytes()[:-1])
    elif how == "extra variant":
        with path.with_suffix(".bim").open("a") as f:
            f.write("1\trs9\t0\t900\tA\tG\n")
    elif how == "empty fam":
        path.with_suffix(".fam").write_text("")
    elif how == "empty bim":
        path.with_suffix(".bim").write_text("")
    elif how == "no bed":
        path.unlink()
    elif how == "empty bed":
        path.write_bytes(b"")
    elif how == "bed is a folder":
        path.unlink()
        path.mkdir()
    elif how == "duplicate sample":  # plink2 refuses a repeated FID + IID
        fam = path.with_suffix(".fam")
        lines = fam.read_text().splitlines(keepends=True)
        fam.write_text("".join([*lines[:2], lines[0], *lines[3:]]))
    return path


BAD = [
    ("no bim", DataNotFoundError, "has no .bim file"),
    ("no fam", DataNotFoundError, "has no .fam file"),
    ("no bed", DataNotFoundError, "No PLINK .bed file at"),
    ("magic", InvalidDataError, "is not a PLINK 1 .bed file: it starts with bytes 00 00"),
    ("sample-major", InvalidDataError, "is sample-major (mode byte 00"),
    ("truncated", InvalidDataError, "has 10 bytes, but 4 variants"),
    ("extra variant", InvalidDataError, "5 variants (lines of the .bim) x 7 samples (lines of "
                                        "the .fam) need 3 + 5 x ceil(7 / 4) = 13"),
    ("empty fam", InvalidDataError, "is empty: the fileset"),
    ("empty bim", InvalidDataError, "is empty: the fileset"),
    ("empty bed", InvalidDataError, "is empty (0 bytes), not a PLINK 1 .bed file"),
    ("bed is a folder", DataNotFoundError, "the path is a folder, not a file"),
    ("duplicate sample", InvalidDataError, "lists the sample 'fam0 s0' twice (samples 1 and 3)"),
]


@pytest.mark.parametrize(("how", "error", "words"), BAD)
def test_bad_fileset_is_refused_in_one_line(tmp_path, how, error, words):
    path = _damage(tmp_path, how)
    with pytest.raises(error, match=re.escape(words)) as info:
        open_matrix(path)
    assert "\n" not in str(info.value) and str(path) in str(info.value)


@pytest.mark.parametrize(("how", "error", "words"), BAD)
def test_cli_exits_2_with_one_line(tmp_path, how, error, words, capsys):
    from daskstraggle.cli import main

    path = _damage(tmp_path, how)
    assert main(["pca", str(path), "-k", "1", "--runtime", "local"]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"array": "X"}, "'array' parameter of open_matrix names a member of a Zarr group"),
    ({"genotype_dims": ("variants", "samples")}, "'genotype_dims' parameter"),
])
def test_zarr_only_parameters_are_refused(tmp_path, kwargs, words):
    path = write_bed(tmp_path / "t", DOSAGES)
    with pytest.raises(InvalidParameterError, match=words):
        open_matrix(path, **kwargs)


def test_url_is_refused(tmp_path):
    with pytest.raises(InvalidParameterError, match="read from local"):
        open_matrix("s3://bucket/data.bed")
    path = write_bed(tmp_path / "t", DOSAGES)  # a file:// URL is a local path
    assert open_matrix(f"file://{path}").shape == (4, 7)


def test_changed_file_is_refused_where_it_is_read(tmp_path):
    from daskstraggle.errors import CorruptDataError

    path = write_bed(tmp_path / "t", DOSAGES)
    matrix = open_matrix(path)
    path.write_bytes(path.read_bytes()[:-2])
    with pytest.raises(CorruptDataError, match="the file changed"):
        matrix.loader(0)()


# ---------------------------------------------------------------------------- writing
def test_writer_gives_the_spec_encoders_bytes(pair, tmp_path):
    from daskstraggle.data._bed_writer import write_bed as write_fileset

    vcz, bed = pair
    write_fileset(vcz, tmp_path / "ours", chunk_rows=37)  # chunks that do not divide
    assert (tmp_path / "ours.bed").read_bytes() == bed.read_bytes()
    ours = [line.split() for line in (tmp_path / "ours.bim").read_text().splitlines()]
    spec = [line.split() for line in bed.with_suffix(".bim").read_text().splitlines()]
    # contig, position, A1 (ALT), A2 (REF)
    assert [[r[0], r[3], r[4], r[5]] for r in ours] == [[r[0], r[3], r[4], r[5]] for r in spec]
    # unique variant ids (plink2 refuses to LD-prune "."): CHROM:POS:REF:ALT without variant_id
    ids = [r[1] for r in ours]
    assert len(set(ids)) == len(ids) and "." not in ids
    assert ids[0] == f"{ours[0][0]}:{ours[0][3]}:{ours[0][5]}:{ours[0][4]}"
    fam = [line.split() for line in (tmp_path / "ours.fam").read_text().splitlines()]
    assert [r[1] for r in fam] == [r[1] for r in (line.split() for line in bed.with_suffix(
        ".fam").read_text().splitlines())]
    assert all(r[2:] == ["0", "0", "0", "-9"] for r in fam)


def test_make_genotypes_writes_the_same_calls_as_a_fileset(tmp_path):
    from daskstraggle.data.datasets import make_genotypes

    kw = {"n_variants": 600, "n_samples": 31, "chunk_rows": 150, "missing_rate": 0.03,
          "seed": 5}
    bed = make_genotypes(tmp_path / "g.bed", **kw)
    vcz = make_genotypes(tmp_path / "g.vcz", **kw)
    assert bed == tmp_path / "g.bed" and bed.with_suffix(".bim").exists()
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging
    a, b = open_matrix(bed), open_matrix(vcz)
    for x, y in zip(_rows(a), _rows(b), strict=True):
        np.testing.assert_array_equal(x, y)
    assert (_rows(a)[0] < 0).any()
    assert a.columns.tolist() == b.columns.tolist()
    populations = zarr.open_group(str(vcz), mode="r")["sample_population"][:]
    fam = [line.split() for line in bed.with_suffix(".fam").read_text().splitlines()]
    assert [r[0] for r in fam] == [str(p) for p in populations]
    alleles = {tuple(line.split()[4:]) for line in bed.with_suffix(".bim").read_text().splitlines()}
    assert alleles == {("T", "A")}  # the binary model's 1 (ALT) and 0, renamed for plink


def test_make_genotypes_fileset_refusals(tmp_path):
    from daskstraggle.data.datasets import make_genotypes
    from daskstraggle.errors import OutputExistsError

    with pytest.raises(InvalidParameterError, match=r"'ploidy' parameter.*must be 2"):
        make_genotypes(tmp_path / "p.bed", n_variants=50, n_samples=6, ploidy=3)
    (tmp_path / "g.fam").write_text("keep me\n")
    with pytest.raises(OutputExistsError, match=r"g\.fam"):
        make_genotypes(tmp_path / "g.bed", n_variants=50, n_samples=6)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.fam"]
    assert (tmp_path / "g.fam").read_text() == "keep me\n"
    make_genotypes(tmp_path / "g.bed", n_variants=50, n_samples=6, overwrite=True)
    assert open_matrix(tmp_path / "g.bed").shape == (50, 6)


def test_variant_ids_are_unique_and_keep_the_given_ones():
    from daskstraggle.data._bed_writer import unique_variant_ids

    contigs, positions = ["1"] * 6, [10, 10, 10, 20, 30, 40]
    ref, alt = ["A", "A", "A", "C", "G", "T"], ["G", "G", "G", "T", "A", "C"]
    given = [".", ".", "1:10:A:G:2", "rs7", "rs9", "rs9"]
    ids = unique_variant_ids(contigs, positions, ref, alt, given)
    # "." and a repeated id become CHROM:POS:REF:ALT; a repeat of that gets :2, :3, never an
    # id another variant already has
    assert ids == ["1:10:A:G", "1:10:A:G:3", "1:10:A:G:2", "rs7", "1:30:G:A", "1:40:T:C"]
    assert unique_variant_ids(["1"], [5], ["A"], ["C"]) == ["1:5:A:C"]


@pytest.mark.parametrize("storage", ["int8", "packed"])
def test_a_sample_selection_reads_the_same_rows_as_vcf_zarr(pair, storage):
    vcz, bed = pair
    columns = np.array([0, 3, 4, 7, 11, 12, 20, 29])
    a = open_matrix(vcz, genotype_storage=storage).select_columns(columns)
    b = open_matrix(bed, genotype_storage=storage).select_columns(columns)
    assert a.shape == b.shape == (a.n_rows, len(columns))
    assert b.columns.tolist() == a.columns.tolist()
    for x, y in zip(_rows(a), _rows(b), strict=True):
        np.testing.assert_allclose(y, x, rtol=1e-13, atol=0)
    # and a second selection composes with the first, after a row selection
    rows = np.arange(5, 40)
    c = open_matrix(bed, genotype_storage=storage).select_rows(rows).select_columns(
        columns).select_columns(np.array([1, 2]))
    d = open_matrix(vcz, genotype_storage=storage).select_rows(rows).select_columns(
        columns[[1, 2]])
    for x, y in zip(_rows(d), _rows(c), strict=True):
        np.testing.assert_allclose(y, x, rtol=1e-13, atol=0)


@pytest.mark.parametrize("numba", ["1", "0"])
@pytest.mark.parametrize("storage", ["int8", "packed"])
@pytest.mark.parametrize("n_samples", [1, 3, 4, 5, 13, 67])
def test_bed_rows_decode_every_code_at_all_or_some_samples(monkeypatch, numba, storage,
                                                           n_samples):
    """One pass (compiled, or byte tables without numba) gives the dosages and per-row
    statistics an independent bit-by-bit decoding gives, at all samples or a subset."""
    from daskstraggle.data.plink import bed_rows

    monkeypatch.setenv("DASKSTRAGGLE_NUMBA", numba)
    rng = np.random.default_rng(n_samples)
    raw = rng.integers(0, 256, size=(9, -(-n_samples // 4)), dtype=np.uint8)
    raw[1] = 0b01010101  # every call missing
    raw[2] = 0  # every call 2, no missing call
    codes = (raw[:, :, None] >> np.array([0, 2, 4, 6], np.uint8)) & 3
    oracle = np.array([2, -1, 1, 0])[codes.reshape(9, -1)[:, :n_samples]]
    subsets = [None, np.sort(rng.choice(n_samples, max(1, n_samples // 2), replace=False))]
    for columns in subsets:
        rows = bed_rows(raw, n_samples, missing="mean", scaling="patterson", storage=storage,
                        columns=columns)
        want = oracle if columns is None else oracle[:, columns]
        values = (unpack_dosages(rows.values, want.shape[1]) if storage == "packed"
                  else rows.values)
        assert values.dtype == np.int8
        np.testing.assert_array_equal(values, want)
        called = want >= 0
        mean = np.where(called, want, 0).sum(axis=1) / np.maximum(called.sum(axis=1), 1)
        np.testing.assert_allclose(rows.center, mean, rtol=0, atol=1e-15)
        if (~called).any():
            np.testing.assert_allclose(rows.fill, mean, rtol=0, atol=1e-15)
        else:
            assert rows.fill is None
