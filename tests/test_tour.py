"""The new-user tour's defects (issue 13): defaults that fit, messages naming the fix.

Each case runs before any cluster work: the tests replace ``LocalCluster.__init__`` and
``Client.__init__`` with functions that fail the test (as tests/test_bad_input.py does).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr

import daskstraggle
from daskstraggle.cli import main
from daskstraggle.coding.rcs import default_degrees
from daskstraggle.errors import InputError, InvalidDataError, InvalidParameterError
from daskstraggle.methods import GD, PartialRecovery
from daskstraggle.testing import one_error_line
from daskstraggle.trace import Result


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 120 x 4 regression group (X, y) chunked by 10 rows."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 4))
    path = tmp_path_factory.mktemp("tour") / "lin.zarr"
    group = zarr.open_group(path, mode="w")
    group.create_array("X", shape=X.shape, chunks=(10, 4), dtype="f8")[:] = X
    group.create_array("y", shape=(120,), chunks=(10,), dtype="f8")[:] = X @ [1.0, -2, 0.5, 3]
    return path


def cli_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run the CLI, assert exit code 2 and one line ``error: ...``, return that line."""
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 2, captured
    assert captured.out == ""
    lines = captured.err.strip("\n").splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    return lines[0]


# ---------------------------------------------------------------- partial: default degrees
@pytest.mark.parametrize("n_workers", range(1, 13))
def test_default_degrees_fit_every_worker_count(n_workers):
    degrees = default_degrees(n_workers)
    assert sum(degrees) <= n_workers
    assert degrees == (1, 2, 3)[:len(degrees)]  # a prefix of the paper's degrees
    assert degrees == (1, 2, 3) or sum(degrees) + (1, 2, 3)[len(degrees)] > n_workers
    PartialRecovery().check_n_workers(n_workers)  # the method's default fits too


@pytest.mark.parametrize("n_workers", [1, 2, 3, 4, 5])
def test_partial_with_default_degrees_runs_and_equals_gd(store, n_workers):
    """q = 0: every round decodes the exact gradient, so the iterates are GD's."""
    kw = {"runtime": "local", "n_workers": n_workers, "rng": 0, "max_iter": 4, "tol": None}
    partial = daskstraggle.fit_least_squares(store, "y", method="partial", **kw)
    gd = daskstraggle.fit_least_squares(store, "y", method="gd", **kw)
    np.testing.assert_allclose(partial.iterate, gd.iterate, rtol=1e-9, atol=1e-12)
    assert partial.n_iter == 4


def test_cli_partial_with_default_degrees_at_three_workers(store, capsys):
    code = main(["linreg", str(store), "--method", "partial", "--runtime", "local",
                 "--workers", "3", "--max-iter", "3", "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert '"method": "partial"' in captured.out


def test_degrees_too_large_name_python_and_cli(store, capsys, no_cluster):
    with pytest.raises(InvalidParameterError,
                       match=r"degrees=\(1, 2\) \(CLI: --degrees 1,2\).*leave it unset"):
        daskstraggle.fit_least_squares(store, "y", method="partial", n_workers=4,
                                       method_params={"degrees": (1, 2, 3)})
    line = cli_error(["linreg", str(store), "--method", "partial", "--degrees", "1,2,3",
                      "--workers", "4"], capsys)
    assert "--degrees 1,2" in line and "(1, 1, 1)" not in line


# ------------------------------------------------------------------- messages: CLI flags
def test_bcc_without_batch_size_names_the_flag(store, capsys, no_cluster):
    line = cli_error(["pca", str(store), "--array", "X", "--method", "coded", "--scheme", "bcc"],
                     capsys)
    assert "--batch-size" in line
    assert "bcc(batch_size" not in line  # not the Python-only spelling
    with pytest.raises(InvalidParameterError, match=r"needs \['batch_size'\].*batch_size=\.\.\."):
        daskstraggle.fit_pca(store, 1, array="X", method="coded", n_workers=2,
                             method_params={"scheme": "bcc"})


def test_bcc_batch_size_above_workers_names_the_flag(store, capsys, no_cluster):
    line = cli_error(["pca", str(store), "--array", "X", "--method", "coded", "--scheme", "bcc",
                      "--batch-size", "9", "--workers", "4"], capsys)
    assert "'batch_size'" in line and "[1, 4]" in line and "--batch-size" in line


def test_nag_on_pca_explains_subspaces_and_lists_methods(store, capsys, no_cluster):
    line = cli_error(["pca", str(store), "--array", "X", "--method", "nag"], capsys)
    assert "must be 'gd'" not in line
    for word in ("subspaces", "momentum", "'gd'", "'sgd'", "'dsag'", "'partial'", "Got 'nag'"):
        assert word in line, line
    with pytest.raises(InvalidParameterError, match="subspaces"):
        daskstraggle.fit_pca(store, 1, array="X", method="nag", n_workers=2)


# ---------------------------------------------------------- raw exceptions: now ours
@pytest.mark.parametrize(("kwargs", "match"), [
    ({"method": "gd", "method_params": {"bogus": 1}},
     r"'method_params' .*\['bogus'\].* 'gd' does not take"),
    ({"method_params": {"n_wait": 1}}, r"'method_params' parameter of fit_pca needs an explicit "
                                       r"method \(CLI: --method\)"),
    ({"method": "sgd", "method_params": {"bogus": 1, "n_wait": 1}},
     r"\['bogus'\].*'sgd'.*'n_wait'"),
    ({"method": "coded", "method_params": {"bogus": 1}}, r"does not take \['bogus'\]"),
    ({"method_params": [("n_wait", 1)]}, r"'method_params' parameter of fit_pca must be a dict"),
    ({"method": GD(), "method_params": {"n_wait": 1}}, r"pass them to the GD you built"),
    ({"rng": "abc"}, r"'rng' parameter of fit_pca must be None, an int >= 0 \(CLI: --seed\)"),
    ({"rng": -1}, r"'rng' parameter .* Got -1"),
    ({"rng": 1.5}, r"'rng' parameter .* Got 1\.5"),
])
def test_bad_method_params_and_rng_raise_ours(store, kwargs, match, no_cluster):
    with pytest.raises(InvalidParameterError, match=match):
        daskstraggle.fit_pca(store, 1, array="X", n_workers=2, **kwargs)


def test_rng_accepts_what_numpy_seeds_from(store):
    for rng in (None, 3, np.int64(3), np.random.default_rng(3), np.random.SeedSequence(3)):
        daskstraggle.fit_pca(store, 1, array="X", runtime="local", n_workers=2, rng=rng,
                             max_iter=2, tol=None)


@pytest.fixture(scope="module")
def not_results(tmp_path_factory: pytest.TempPathFactory, store: Path) -> dict[str, Path]:
    """Paths that exist but are not results."""
    root = tmp_path_factory.mktemp("not_results")
    zarr.create_array(root / "array.zarr", shape=(3, 3), dtype="f8")
    group = zarr.open_group(root / "attrs.zarr", mode="w")  # xarray-readable, no result attrs
    group.create_array("iterate", shape=(3,), dtype="f8", dimension_names=["i"])
    (root / "plain.txt").write_text("not a store")
    (root / "folder").mkdir()
    return {"group": store, "array": root / "array.zarr", "attrs": root / "attrs.zarr",
            "file": root / "plain.txt", "folder": root / "folder"}


@pytest.mark.parametrize("kind", ["group", "array", "attrs", "file", "folder"])
def test_loading_a_store_that_is_not_a_result(kind, not_results, capsys, no_cluster):
    path = not_results[kind]
    with pytest.raises(InvalidDataError, match="is not a daskstraggle result") as info:
        Result.load(path)
    assert isinstance(info.value, InputError) and "\n" not in str(info.value)
    line = cli_error(["simulate", "--from-trace", str(path), "--iterations", "3"], capsys)
    assert str(path) in line and "not a daskstraggle result" in line


# ------------------------------------------------------------------------------ reprs
def test_matrix_repr_is_short_and_says_what_it_is(store, tmp_path):
    from daskstraggle.data.datasets import make_genotypes

    vcz = make_genotypes(tmp_path / "g.vcz", n_variants=400, n_samples=30, chunk_rows=100)
    names = np.array([f"sample_{i}" for i in range(5000)])
    labelled = daskstraggle.open_matrix(store, labels="y")
    genotypes = daskstraggle.open_matrix(vcz)
    wide = daskstraggle.open_matrix(
        xr.DataArray(np.zeros((50, 5000)), dims=("row", "name"), coords={"name": names}),
        n_partitions=3)
    for m in (labelled, genotypes, wide):
        text = repr(m)
        assert len(text) < 500 and len(text.splitlines()) <= 7, text
        assert text.startswith("<daskstraggle.Matrix (")
        assert f"partitions:  {m.n_partitions} of" in text
    assert "(sample: 120, feature: 4)> float64, zarr" in repr(labelled)
    assert "lin.zarr, array 'X'" in repr(labelled)
    assert "labels:      float64 (120,)" in repr(labelled)
    assert "(variants: 400, samples: 30)> int8, vcf-zarr" in repr(genotypes)
    assert "'call_genotype'" in repr(genotypes) and "scaling='patterson'" in repr(genotypes)
    assert "groups:" in repr(genotypes)
    assert "'sample_0', 'sample_1', 'sample_2', ... (5000)" in repr(wide)
    assert "partitions:  3 of 16-17 rows" in repr(wide)


def test_result_repr_is_short_and_says_how_it_ended(store, tmp_path):
    res = daskstraggle.fit_pca(store, 2, array="X", runtime="local", n_workers=3, rng=0,
                               reference=True)
    res.save(tmp_path / "r.zarr")
    balanced = daskstraggle.fit_least_squares(
        store, "y", runtime="local", method="dsag", rng=0, max_iter=5, tol=None,
        method_params={"n_wait": 2, "subpartitions": 4, "balance": True})
    for r in (res, Result.load(tmp_path / "r.zarr"), balanced):
        text = repr(r)
        assert len(text) < 800 and len(text.splitlines()) <= 8, text
        assert f"iterations, stopped by {r.stop_reason}, converged: {r.converged}" in text
        assert f"objective:  {r.objective:.10g}" in text
        assert "(iteration: " in text and "worker: " in text
    text = repr(res)
    assert text.startswith(f"<daskstraggle.Result> pca by gram: {res.n_iter} iterations")
    assert f"gap {res.gap:.3g}, distance {res.distance:.3g}" in text
    assert "components (2, 4), explained_variance (2,)" in text
    assert "matrix:     120 x 4 (zarr)" in text and "local runtime with 3 workers" in text
    assert "coef (4,), intercept ()" in repr(balanced) and "balance_event" in repr(balanced)
    assert "converged" not in text or hasattr(res, "converged")
    res.converged = False  # the verdict another change adds: shown when present
    assert "converged: False" in repr(res).splitlines()[0]


# ------------------------------------------- issue 42, round four: datasets make's outputs
#: ``datasets make`` ARGS -> words of the one error line. Each runs as a real command in a
#: folder holding a file and a Zarr store of its own, which must stay as they were.
DATASET_CASES = {
    # click reads '' as Path('.'): with --overwrite it replaced the current folder
    "out-empty": (["linear", "--out", "", "--overwrite"], ("--out", "ends in the name to write")),
    "out-dot-dot": (["logistic", "--out", "..", "--overwrite"], ("--out", "Got '..'")),
    "out-inside-a-store": (["linear", "--out", "kept.zarr/new"],
                           ("--out", "lies inside the Zarr store")),
    "bed-of-linear": (["linear", "--out", "x.bed"], ("--out", "only genotypes")),
    "size-beyond-the-disk": (["linear", "--out", "x.zarr", "--size", str(10**15)],
                             ("--size", "free in")),  # wrote chunks for ever
    "features-beyond-memory-or-disk": (["linear", "--out", "x.zarr", "--size", "10",
                                        "--features", str(10**11)], ("--features",)),
    "variants-beyond-the-disk": (["genotypes", "--out", "g.vcz", "--size", str(10**12),
                                  "--features", "10"], ("--size", "free in")),
    "size-zero-names-the-flag": (["linear", "--out", "x.zarr", "--size", "0"],
                                 ("'n_samples'", "(CLI: --size)")),
    "samples-name-the-flag": (["genotypes", "--out", "g.vcz", "--features", "0"],
                              ("'n_samples'", "(CLI: --features)")),
}


def _tree(folder: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(folder)): (None if p.is_dir() else p.read_bytes())
            for p in sorted(folder.rglob("*"))}


@pytest.mark.parametrize("case", list(DATASET_CASES))
def test_datasets_make_refuses_outputs_and_sizes_before_writing(case, tmp_path):
    import subprocess
    import sys

    args, words = DATASET_CASES[case]
    here = tmp_path / "here"
    here.mkdir()
    (here / "notes.txt").write_text("mine")
    zarr.create_array(here / "kept.zarr", shape=(4, 2), dtype="f8")[:] = 1.0
    before = _tree(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "daskstraggle.cli", "datasets", "make", *args],
                          capture_output=True, text=True, timeout=300, cwd=here)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    line = one_error_line(proc.stderr)
    for word in words:
        assert word in line, line
    assert _tree(tmp_path) == before


@pytest.mark.skipif(not Path("/sys/kernel").is_dir(), reason="needs Linux's /sys")
def test_datasets_make_into_an_unwritable_folder_is_one_line(capsys, no_cluster):
    assert main(["datasets", "make", "linear", "--out", "/sys/kernel/x.zarr"]) == 2
    line = one_error_line(capsys.readouterr().err)  # was a PermissionError traceback
    assert "'/sys/kernel/x.zarr' cannot be written" in line and "--out" in line


def test_an_out_without_a_name_is_refused_before_the_fit(tmp_path):
    """``--out '' --overwrite`` ran the fit, then failed renaming '.' (a traceback); the
    same rule as datasets make: a path must end in the name of what is written."""
    import subprocess
    import sys

    here = tmp_path / "here"
    here.mkdir()
    (here / "notes.txt").write_text("mine")
    source = tmp_path / "x.zarr"  # not inside the folder '' names ('contains the input')
    zarr.create_array(source, shape=(40, 3), chunks=(10, 3), dtype="f8")[:] = (
        np.random.default_rng(0).normal(size=(40, 3)))
    before = _tree(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "daskstraggle.cli", "pca", str(source), "-k", "1",
                           "--runtime", "local", "--out", "", "--overwrite"],
                          capture_output=True, text=True, timeout=300, cwd=here)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    line = one_error_line(proc.stderr)
    assert "'out' parameter of fit_pca (CLI: --out) must be a path that ends in the name" in line
    assert _tree(tmp_path) == before
