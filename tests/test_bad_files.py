"""Bad input files and output paths on the command line: one line, nothing written.

Each case runs the real command in a subprocess in a folder of its own, holding copies of
the inputs it needs (damaged where the case says), and asserts exit code 2, exactly one
``error:`` line naming the problem and the fix, no traceback, every input file unchanged
(hashed before and after) and no file written or removed. Then the messages that misled
(what a BGEN, a folder or an empty file is; which samples a warning names), the files a
run leaves when writing fails midway, and the plink files' refusals through the API.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import daskstraggle as ds
from daskstraggle.cli import main
from daskstraggle.data.datasets import make_genotypes
from daskstraggle.errors import InvalidParameterError, OutputNotWritableError, StraggleWarning
from daskstraggle.testing import one_error_line

CLI = [sys.executable, "-m", "daskstraggle.cli"]
RUN = ["-k", "2", "--runtime", "local", "--quiet"]
PGEN = Path(__file__).resolve().parent / "fixtures" / "plink2_qc" / "ld"


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """g.bed/.bim/.fam and g.vcz (the same 400 x 40 calls) and ld.pgen/.pvar/.psam."""
    folder = tmp_path_factory.mktemp("inputs")
    genotypes = {"n_variants": 400, "n_samples": 40, "chunk_rows": 100, "seed": 4}
    make_genotypes(folder / "g.bed", **genotypes)
    make_genotypes(folder / "g.vcz", **genotypes)
    for suffix in (".pgen", ".pvar", ".psam"):
        shutil.copy(PGEN.with_suffix(suffix), folder / f"ld{suffix}")
    return folder


def _files(folder: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file below ``folder`` (folders as '<dir>')."""
    out = {}
    for path in sorted(folder.rglob("*")):
        rel = str(path.relative_to(folder))
        out[rel] = ("<dir>" if path.is_dir()
                    else hashlib.sha256(path.read_bytes()).hexdigest())
    return out


def _copy(data: Path, folder: Path, *names: str) -> None:
    for name in names:
        source = data / name
        if source.is_dir():
            shutil.copytree(source, folder / name)
        else:
            shutil.copy(source, folder / name)


def _bed(data: Path, folder: Path) -> None:
    _copy(data, folder, "g.bed", "g.bim", "g.fam")


def _pgen(data: Path, folder: Path) -> None:
    _copy(data, folder, "ld.pgen", "ld.pvar", "ld.psam")


def _five_columns(data: Path, folder: Path) -> None:
    _bed(data, folder)
    bim = folder / "g.bim"
    bim.write_text("".join("\t".join(line.split()[:5]) + "\n"
                           for line in bim.read_text().splitlines()))


def _short_pvar(data: Path, folder: Path) -> None:
    _pgen(data, folder)
    pvar = folder / "ld.pvar"
    pvar.write_text("".join(pvar.read_text().splitlines(keepends=True)[:201]))


def _truncated_pgen(data: Path, folder: Path) -> None:
    _pgen(data, folder)
    pgen = folder / "ld.pgen"
    pgen.write_bytes(pgen.read_bytes()[: pgen.stat().st_size // 2])


def _twice(data: Path, folder: Path, name: str) -> None:
    path = folder / name
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join([*lines, lines[-1]]))


def _duplicate_fam(data: Path, folder: Path) -> None:
    _bed(data, folder)
    fam = folder / "g.fam"
    lines = fam.read_text().splitlines(keepends=True)
    fam.write_text("".join([*lines[:2], lines[0], *lines[3:]]))


def _duplicate_psam(data: Path, folder: Path) -> None:
    _pgen(data, folder)
    psam = folder / "ld.psam"
    lines = psam.read_text().splitlines(keepends=True)
    psam.write_text("".join([*lines[:3], lines[1], *lines[4:]]))  # line 1 is the header


def _bgen(data: Path, folder: Path) -> None:
    # the first bytes of a BGEN 1.2 file: offset, header length, M, N, magic
    (folder / "x.bgen").write_bytes(struct.pack("<IIII", 20, 20, 400, 40) + b"bgen" + bytes(8))


def _bed_folder(data: Path, folder: Path) -> None:
    (folder / "x.bed").mkdir()
    for suffix in (".bim", ".fam"):
        shutil.copy(data / f"g{suffix}", folder / f"x{suffix}")


def _empty_bed(data: Path, folder: Path) -> None:
    _bed(data, folder)
    (folder / "g.bed").write_bytes(b"")


def _store_and_bed(data: Path, folder: Path) -> None:
    _bed(data, folder)
    _copy(data, folder, "g.vcz")


def _vcz(data: Path, folder: Path) -> None:
    _copy(data, folder, "g.vcz")


def _empty_folder(data: Path, folder: Path) -> None:
    _bed(data, folder)
    (folder / "d").mkdir()


#: id -> (what to put in the folder, the arguments after the command, words of the line).
CASES: dict[str, tuple[Callable[[Path, Path], None], list[str], tuple[str, ...]]] = {
    # outputs are validated whole before anything is written, and never inside an input
    "plink-out-inside-the-input": (
        _vcz, ["pca", "g.vcz", "--plink-out", "g.vcz/x"],
        ("--plink-out", "'g.vcz/x.eigenvec' lies inside the input store")),
    "plink-out-inside-another-store": (
        _store_and_bed, ["pca", "g.bed", "--plink-out", "g.vcz/x"],
        ("--plink-out", "lies inside the Zarr store")),
    "out-replacing-the-fam": (
        _bed, ["pca", "g.bed", "--out", "g.fam", "--overwrite"],
        ("--out", "'g.fam' is the input store")),
    "five-column-bim": (
        _five_columns, ["pca", "g.bed", "--out", "r.zarr", "--plink-out", "o"],
        ("g.bim", "has 5 columns", "plink --make-bed")),
    "out-is-a-plink-file": (
        _bed, ["pca", "g.bed", "--out", "both.eigenvec", "--plink-out", "both"],
        ("--plink-out", "'both.eigenvec' is the --out store")),
    "checkpoint-is-a-plink-file": (
        _bed, ["pca", "g.bed", "--checkpoint", "c.eigenvec", "--plink-out", "c"],
        ("--plink-out", "is the --checkpoint file")),
    "out-name-too-long": (  # the temporary store's name failed after the fit
        _bed, ["pca", "g.bed", "--out", "x" * 240], ("--out", "its name has 240 bytes")),
    "plink-out-name-too-long": (
        _bed, ["pca", "g.bed", "--plink-out", "x" * 240], ("--plink-out", "a shorter name")),
    "empty-prefix": (
        _bed, ["pca", "g.bed", "--plink-out", ""], ("--plink-out", "has no file name")),
    "folder-prefix": (
        _empty_folder, ["pca", "g.bed", "--plink-out", "d/"],
        ("--plink-out", "'d/' has no file name", "'d/pca'")),
    # tracebacks that are one line now
    "truncated-pgen": (
        _truncated_pgen, ["pca", "ld.pgen"], ("ld.pgen", "truncated or damaged", "--make-pgen")),
    "short-pvar": (
        _short_pvar, ["pca", "ld.pgen"], ("holds 400 variants but its .pvar lists 200",)),
    "short-pvar-plink-out": (
        _short_pvar, ["pca", "ld.pgen", "--out", "r.zarr", "--plink-out", "o"],
        ("holds 400 variants but its .pvar lists 200",)),
    # inputs plink2 refuses
    "duplicate-fam": (
        _duplicate_fam, ["pca", "g.bed"], ("g.fam", "twice (samples 1 and 3)", "plink2")),
    "duplicate-psam": (
        _duplicate_psam, ["pca", "ld.pgen", "--plink-out", "o"],
        ("ld.psam", "'s0 s0' twice (samples 1 and 3)")),
    "ld-prune-empty-field": (
        _bed, ["pca", "g.bed", "--ld-prune", "50,,0.2"], ("--ld-prune", "a field is empty")),
    # messages that misled
    "bgen": (_bgen, ["pca", "x.bgen"], ("x.bgen", "unsupported BGEN layout 0 / compression 0",
                                        "plink2 --bgen")),
    "bed-folder": (_bed_folder, ["pca", "x.bed"], ("x.bed", "is a folder, not a file")),
    "empty-bed": (_empty_bed, ["pca", "g.bed"], ("g.bed", "is empty (0 bytes)")),
    "checkpoint-on-a-store": (
        _store_and_bed, ["pca", "g.bed", "--checkpoint", "g.vcz"],
        ("--checkpoint", "is a folder, not a daskstraggle checkpoint")),
    "checkpoint-in-a-store": (
        _store_and_bed, ["pca", "g.bed", "--checkpoint", "g.vcz/zarr.json"],
        ("--checkpoint", "lies inside the Zarr store")),
    "checkpoint-the-input": (
        _vcz, ["pca", "g.vcz", "--checkpoint", "g.vcz"], ("--checkpoint", "is the input store")),
    "region-not-a-range": (
        _vcz, ["pca", "g.vcz", "--region", "1:abc"],
        ("--region", "'CONTIG:START-END'", "'1:abc' is neither")),
}


@pytest.mark.parametrize("case", list(CASES))
def test_one_line_nothing_written_inputs_unchanged(case: str, data: Path,
                                                   tmp_path: Path) -> None:
    setup, args, words = CASES[case]
    setup(data, tmp_path)
    before = _files(tmp_path)
    proc = subprocess.run([*CLI, *args, *RUN], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    line = one_error_line(proc.stderr)
    for word in words:
        assert word in line, line
    if case.startswith("checkpoint"):
        assert "--resume" not in line  # never suggested for what is not a checkpoint
    assert _files(tmp_path) == before


@pytest.mark.skipif(not Path("/sys/kernel").is_dir(), reason="needs Linux's /sys")
def test_an_unwritable_folder_is_one_line(data: Path, tmp_path: Path) -> None:
    _bed(data, tmp_path)
    proc = subprocess.run([*CLI, "pca", "g.bed", *RUN, "--plink-out", "/sys/kernel/x"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    line = one_error_line(proc.stderr)
    assert "--plink-out" in line and "'/sys/kernel/x.eigenvec' cannot be written" in line
    assert not os.path.lexists("/sys/kernel/x.eigenvec")


def test_a_window_longer_than_the_data_runs(data: Path, tmp_path: Path) -> None:
    """--ld-prune 1000000000,5,0.2 asked for 1.8 TiB; the window spans the contig now."""
    _bed(data, tmp_path)
    proc = subprocess.run([*CLI, "pca", "g.bed", *RUN, "--ld-prune", "1000000000,5,0.2"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "kept by quality control (ld removed" in proc.stdout


# ------------------------------------------------------- an error after writing started
def test_an_error_while_writing_removes_what_the_run_wrote(
        data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    _bed(data, tmp_path)
    before = _files(tmp_path)
    write_text = Path.write_text

    def full_disk(self: Path, *args: object, **kwargs: object) -> int:
        if self.name.endswith(".afreq"):  # the last plink file
            raise OSError(28, "No space left on device")
        return write_text(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "write_text", full_disk)
    code = main(["pca", str(tmp_path / "g.bed"), *RUN, "--out", str(tmp_path / "r.zarr"),
                 "--plink-out", str(tmp_path / "o")])
    line = one_error_line(capsys.readouterr().err)
    assert code == 2 and "o.afreq' cannot be written (No space left on device)" in line
    assert _files(tmp_path) == before  # neither the --out store nor o.eigenvec, ... remain


def test_existing_plink_files_are_kept_when_writing_fails(
        data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _bed(data, tmp_path)
    matrix = ds.open_matrix(tmp_path / "g.bed")
    result = ds.fit_pca(matrix, 2, runtime="local", rng=0)
    (tmp_path / "o.eigenvec").write_text("mine\n")
    write_text = Path.write_text

    def full_disk(self: Path, *args: object, **kwargs: object) -> int:
        if self.name.endswith(".eigenvec.allele"):
            raise OSError(28, "No space left on device")
        return write_text(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "write_text", full_disk)
    with pytest.raises(OutputNotWritableError, match="cannot be written"):
        result.to_plink(tmp_path / "o", matrix, overwrite=True)
    # the new ones are removed; the one that was there (replaced) stays
    assert sorted(p.name for p in tmp_path.glob("o.*")) == ["o.eigenvec"]


# ------------------------------------------------------------------ the API's plink files
def test_to_plink_refuses_files_inside_the_input(data: Path, tmp_path: Path) -> None:
    _vcz(data, tmp_path)
    store = tmp_path / "g.vcz"
    before = _files(store)
    matrix = ds.open_matrix(store)
    result = ds.fit_pca(matrix, 2, runtime="local", rng=0)
    for matrix_arg in (matrix, None):  # the result's own record of its input is enough
        with pytest.raises(InvalidParameterError, match="lies inside the input store"):
            result.to_plink(store / "x", matrix_arg)
    assert _files(store) == before


@pytest.mark.parametrize("prefix", ["", "d/", ".", "d/.."])
def test_a_prefix_without_a_file_name_is_refused(data: Path, tmp_path: Path, prefix: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    _vcz(data, tmp_path)
    (tmp_path / "d").mkdir()
    monkeypatch.chdir(tmp_path)
    result = ds.fit_pca(str(tmp_path / "g.vcz"), 2, runtime="local", rng=0)
    with pytest.raises(InvalidParameterError, match="has no file name"):
        result.to_plink(prefix)
    assert not list(tmp_path.rglob("*eigenv*"))


# ------------------------------------------------------------------ messages that misled
def _calls() -> object:
    import xarray as xr

    G = np.random.default_rng(0).integers(0, 3, size=(200, 12)).astype(np.int8)
    G[:, 3] = -1  # sample s3: no call at all
    G[:100, 7] = -1  # s7: half its calls missing
    return xr.DataArray(G, dims=("variants", "samples"),
                        coords={"samples": [f"s{i}" for i in range(12)]})


def test_the_no_call_warning_names_only_samples_mind_keeps() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        matrix = ds.open_matrix(_calls(), genotype_dims=("variants", "samples"),
                                qc={"max_sample_missing": 0.3})
    assert not [w for w in caught if issubclass(w.category, StraggleWarning)]
    assert matrix.columns.tolist() == [f"s{i}" for i in range(12) if i not in (3, 7)]
    with pytest.warns(StraggleWarning, match=r"1 sample\(s\) have no called genotype .*'s3'"):
        ds.open_matrix(_calls(), genotype_dims=("variants", "samples"),
                       qc={"max_sample_missing": 1.0})


def test_no_empty_parentheses_when_no_variant_was_removed(
        data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pca", str(data / "g.vcz"), *RUN, "--mind", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "variants    400 of 400 kept by quality control\n" in out and "()" not in out
    assert "samples     40 of 40 kept by quality control (mind removed 0)" in out


@pytest.mark.parametrize(("content", "words"), [
    (b"\0" * 16 + b"bgen" + bytes(8), ("is a BGEN file", "backend='bgen'")),  # by its magic
    (b"##fileformat=VCFv4.2\n", ("is a VCF or BCF file", "vcf2zarr convert")),
    (b"some text\n", ("is not a readable Zarr array or group: it is a file",)),
])
def test_a_file_that_is_not_a_store_says_what_it_is(tmp_path: Path, content: bytes,
                                                    words: tuple[str, ...]) -> None:
    from daskstraggle.errors import DataNotFoundError

    name = "x.txt"
    (tmp_path / name).write_bytes(content)
    with pytest.raises(DataNotFoundError) as info:
        ds.open_matrix(tmp_path / name)
    for word in words:
        assert word in str(info.value)
