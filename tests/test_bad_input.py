"""Bad input: one clear line, exit code 2, no traceback, nothing written, no cluster started.

Every case runs through the Python API (``pytest.raises`` with the specific error class and
the key words of the message) and through the CLI in process (``main`` returns the exit
code). A few representative cases also run the real command in a subprocess. Parameter and
data errors must be raised *before* any cluster work: those tests replace
``distributed.LocalCluster.__init__`` and ``distributed.Client.__init__`` with functions that
raise ``AssertionError``, which ``main`` does not catch. NaN/inf are the exception: the
workers detect them as they load their partitions, so those cases run on real clusters.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import dask.array as da
import numpy as np
import pytest
import xarray as xr
import zarr

import daskstraggle
from daskstraggle.api import WORKERS_BOUND
from daskstraggle.cli import main
from daskstraggle.errors import (
    ClusterConnectionError,
    DataNotFoundError,
    InputError,
    InvalidDataError,
    InvalidParameterError,
    NonFiniteDataError,
    OutputExistsError,
)
from daskstraggle.testing import BackgroundCommand, one_error_line

CLI = [sys.executable, "-m", "daskstraggle.cli"]

#: Row of the NaN and of the inf: partition 2 (rows 100-150) and partition 0 (rows 0-50)
#: of a 200 x 5 store chunked by 50 rows (partitions follow the chunks with 2 or 3 workers).
NAN_ROW, INF_ROW = 123, 37


# ------------------------------------------------------------------------------ stores
@pytest.fixture(scope="module")
def s(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """Small Zarr stores, good and bad, shared by the module (read-only)."""
    root = tmp_path_factory.mktemp("stores")
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 5))

    def array(name: str, values: np.ndarray) -> Path:
        z = zarr.create_array(root / name, shape=values.shape, chunks=(50, 5), dtype=values.dtype)
        z[:] = values
        return root / name

    bad_nan, bad_inf = X.copy(), X.copy()
    bad_nan[NAN_ROW, 2] = np.nan
    bad_inf[INF_ROW, 4] = -np.inf

    group = zarr.open_group(root / "g.zarr", mode="w")
    group.create_array("X", shape=X.shape, chunks=(50, 5), dtype="f8")[:] = X
    labels = {
        "y": (X[:, 0] > 0).astype(float),
        "y3": np.arange(200) % 3.0,
        "y_one_class": np.ones(200),
        "y_nan": np.where(np.arange(200) == 17, np.nan, 1.0),
        "y_short": np.ones(100),
    }
    for name, values in labels.items():
        group.create_array(name, shape=values.shape, chunks=(50,), dtype="f8")[:] = values
    group.create_array("t3", shape=(4, 4, 4), chunks=(2, 4, 4), dtype="f8")
    group.create_array("v1", shape=(200,), chunks=(50,), dtype="f8")
    group.create_array("empty_rows", shape=(0, 5), chunks=(1, 5), dtype="f8")
    group.create_array("empty_cols", shape=(5, 0), chunks=(5, 1), dtype="f8")

    no_matrix = zarr.open_group(root / "no_matrix.zarr", mode="w")
    no_matrix.create_array("a", shape=(10,), dtype="f8")
    no_matrix.create_array("b", shape=(10,), dtype="f8")

    float_geno = zarr.open_group(root / "float_geno.vcz", mode="w")
    float_geno.create_array("call_genotype", shape=(20, 6, 2), chunks=(10, 6, 2), dtype="f4")
    flat_geno = zarr.open_group(root / "flat_geno.vcz", mode="w")
    flat_geno.create_array("call_genotype", shape=(20, 6), chunks=(10, 6), dtype="i1")

    (root / "not_zarr").mkdir()
    (root / "not_zarr" / "readme.txt").write_text("not a store")
    (root / "plain.txt").write_text("not a store")
    return SimpleNamespace(
        root=root,
        X=X,
        a=array("a.zarr", X),
        nan=array("nan.zarr", bad_nan),
        inf=array("inf.zarr", bad_inf),
        X_nan=bad_nan,
        X_inf=bad_inf,
        g=root / "g.zarr",
        no_matrix=root / "no_matrix.zarr",
        float_geno=root / "float_geno.vcz",
        flat_geno=root / "flat_geno.vcz",
        missing=root / "missing.zarr",
        not_zarr=root / "not_zarr",
        plain=root / "plain.txt",
    )


def snapshot(path: Path) -> dict[str, bytes]:
    """Relative path -> bytes of every file below ``path``."""
    files = sorted(p for p in path.rglob("*") if p.is_file())
    return {str(p.relative_to(path)): p.read_bytes() for p in files}


def existing_result(path: Path) -> dict[str, bytes]:
    """Save a small result at ``path`` and return its snapshot."""
    X = np.random.default_rng(1).normal(size=(40, 3))
    daskstraggle.fit_pca(X, 1, runtime="local", n_workers=2, rng=0, max_iter=3,
                         tol=None).save(path)
    return snapshot(path)




def assert_names(line: str, words: tuple[str, ...]) -> None:
    for word in words:
        assert word.lower() in line.lower(), f"{word!r} not in {line!r}"


# ------------------------------------------------------ slow commands, in the background


@pytest.fixture(scope="module")
def background(s, tmp_path_factory: pytest.TempPathFactory):
    """Start the slow commands: unreachable and malformed scheduler, inf in the data."""
    cwd = tmp_path_factory.mktemp("background")
    runs = {
        "unreachable": BackgroundCommand([*CLI, "pca", str(s.a), "--scheduler", "tcp://127.0.0.1:1",
                                   "--out", str(cwd / "out1.zarr")], cwd),
        "malformed": BackgroundCommand([*CLI, "pca", str(s.a), "--scheduler", "not-an-address",
                                 "--out", str(cwd / "out2.zarr")], cwd),
        "inf": BackgroundCommand([*CLI, "pca", str(s.inf), "--workers", "2",
                           "--out", str(cwd / "out3.zarr")], cwd),
    }
    yield SimpleNamespace(cwd=cwd, **runs)
    for run in runs.values():
        if run.proc.poll() is None:
            run.proc.kill()
        run.result()


def test_unreachable_scheduler_fails_fast_naming_it(s, tmp_path, capsys, background):
    """API, CLI in process and the real command, side by side (each waits for the timeout)."""
    address = "tcp://127.0.0.1:1"  # nothing listens on port 1
    out = tmp_path / "out.zarr"

    def api() -> None:
        with pytest.raises(ClusterConnectionError,
                           match=r"Could not reach the Dask scheduler at 'tcp://127\.0\.0\.1:1' "
                                 r"within \d+ s"):
            daskstraggle.fit_logistic(s.g, "y", scheduler=address, out=out)

    with ThreadPoolExecutor(1) as pool:
        api_done = pool.submit(api)
        code = main(["pca", str(s.a), "--scheduler", address, "--out", str(out)])
        api_done.result()
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    line = one_error_line(captured.err)
    assert_names(line, ("scheduler", address))
    # the bounded wait ended it, and says so (no wall-time bound: a busy machine is slow)
    assert re.search(r"within \d+ s", line), line
    assert not out.exists()

    run = background.unreachable.result()
    assert run.proc.returncode == 2, run.err
    assert run.out == ""
    line = one_error_line(run.err)
    assert_names(line, ("scheduler", address))
    assert re.search(r"within \d+ s", line), line
    assert not (background.cwd / "out1.zarr").exists()


# ------------------------------------------------------------------------------- cases
@dataclass(frozen=True)
class Case:
    """One bad input: the API call, its error, and the CLI arguments with the same mistake.

    ``api(s, out)`` makes the call (``out`` is a fresh path the call must not create);
    ``cli(s)`` returns the CLI arguments (None: API only); ``words`` must all appear in
    the CLI's error line (case-insensitive).
    """

    id: str
    error: type[Exception]
    match: str
    api: Callable[[SimpleNamespace, Path], Any]
    cli: Callable[[SimpleNamespace], list[str]] | None
    words: tuple[str, ...] = field(default=())


def _fit(fn: Callable[..., Any], X: Any, *args: Any, **kwargs: Any) -> Callable[..., Any]:
    """An API call on the data ``X`` (a store attribute name or an object)."""
    def call(s: SimpleNamespace, out: Path) -> Any:
        data = getattr(s, X) if isinstance(X, str) else X
        return fn(data, *args, n_workers=2, out=out, **kwargs)
    return call


def _open(X: Any, **kwargs: Any) -> Callable[..., Any]:
    def call(s: SimpleNamespace, out: Path) -> Any:
        return daskstraggle.open_matrix(getattr(s, X) if isinstance(X, str) else X, **kwargs)
    return call


pca, logit, lstsq = daskstraggle.fit_pca, daskstraggle.fit_logistic, daskstraggle.fit_least_squares


def _fit_runtime(n_workers: int, runtime: str) -> Callable[..., Any]:
    """fit_pca of the store ``a`` with ``n_workers`` workers of ``runtime``."""
    return lambda s, out: pca(s.a, n_workers=n_workers, runtime=runtime, out=out)


def _cli_runtime(n_workers: int, runtime: str) -> Callable[..., list[str]]:
    return lambda s: ["pca", str(s.a), "--workers", str(n_workers), "--runtime", runtime]

#: Boolean indexing of a dask array leaves its chunk sizes unknown (NaN) until computed.
_DASK = da.from_array(np.arange(40.0).reshape(10, 4) - 20.0, chunks=(5, 4))
_UNKNOWN_ROWS = _DASK[_DASK[:, 0] > 0]
_UNKNOWN_COLUMNS = _DASK[:, _DASK[0] > -19]

CASES = [
    # ---- the store
    Case("missing-store", DataNotFoundError, "No Zarr store at .*missing.zarr.*does not exist",
         _fit(pca, "missing"), lambda s: ["pca", str(s.missing)],
         ("missing.zarr", "does not exist")),
    Case("missing-store-logreg", DataNotFoundError, "No Zarr store",
         _fit(logit, "missing", "y"), lambda s: ["logreg", str(s.missing)], ("missing.zarr",)),
    Case("unreadable-store-folder", DataNotFoundError, "not_zarr.* is not a readable Zarr",
         _fit(lstsq, "not_zarr", "y"), lambda s: ["linreg", str(s.not_zarr), "--labels", "y"],
         ("not_zarr", "not a readable zarr")),
    Case("unreadable-store-file", DataNotFoundError, "plain.txt.* is not a readable Zarr",
         _open("plain"), lambda s: ["pca", str(s.plain)], ("plain.txt", "not a readable zarr")),
    # ---- the array
    Case("array-not-found", DataNotFoundError, "Array 'nope' not found.*--array",
         _fit(pca, "g", array="nope"), lambda s: ["pca", str(s.g), "--array", "nope"],
         ("'nope'", "--array")),
    Case("array-of-an-array", DataNotFoundError, "is a Zarr array, not a group.*'X'",
         _open("a", array="X"), lambda s: ["pca", str(s.a), "--array", "X"],
         ("not a group", "'array'")),
    Case("group-without-matrix", InvalidDataError, "name the matrix with the 'array' parameter",
         _fit(pca, "no_matrix"), lambda s: ["pca", str(s.no_matrix)], ("--array",)),
    Case("not-2d-3d", InvalidDataError, r"must be 2-D.*\(4, 4, 4\)",
         _fit(pca, "g", array="t3"), lambda s: ["pca", str(s.g), "--array", "t3"], ("2-D", "t3")),
    Case("not-2d-1d", InvalidDataError, r"must be 2-D.*\(200,\)",
         _fit(lstsq, "g", "y", array="v1"), lambda s: ["linreg", str(s.g), "--array", "v1"],
         ("2-D", "v1")),
    Case("not-2d-numpy", InvalidDataError, r"must be 2-D.*\(2, 2, 2\)",
         _open(np.ones((2, 2, 2))), None),
    Case("not-2d-xarray", InvalidDataError, r"must be 2-D.*\(6,\)",
         _open(xr.DataArray(np.ones(6), dims=("x",))), None),
    Case("not-numbers", InvalidDataError, "must hold numbers", _open(np.array([["a", "b"]])), None),
    Case("not-genotypes-float", InvalidDataError, "call_genotype must be an integer array",
         _fit(pca, "float_geno"), lambda s: ["pca", str(s.float_geno)],
         ("call_genotype", "integer", "ploidy")),
    Case("not-genotypes-2d", InvalidDataError, r"call_genotype must be an integer array.*\(20, 6\)",
         _open("flat_geno"), lambda s: ["pca", str(s.flat_geno)], ("call_genotype", "ploidy")),
    # ---- empty
    Case("empty-rows", InvalidDataError, r"matrix is empty.*\(0, 5\)",
         _fit(pca, "g", array="empty_rows"), lambda s: ["pca", str(s.g), "--array", "empty_rows"],
         ("empty", "(0, 5)")),
    Case("empty-columns", InvalidDataError, r"matrix is empty.*\(5, 0\)",
         _fit(lstsq, "g", np.ones(5), array="empty_cols"),
         lambda s: ["pca", str(s.g), "--array", "empty_cols"], ("empty", "(5, 0)")),
    Case("empty-numpy", InvalidDataError, r"matrix is empty.*\(0, 3\)",
         _fit(pca, np.ones((0, 3)), 1), None),
    Case("empty-dask", InvalidDataError, r"matrix is empty.*\(0, 3\)",
         _open(da.ones((0, 3), chunks=(1, 3))), None),
    # ---- dask arrays with unknown chunk sizes (issue 25): not computed, the fix named
    Case("dask-unknown-row-chunks", InvalidDataError,
         r"^The dask array has unknown chunk sizes along its rows \(shape \(nan, 4\)\), .*"
         r"call x = x\.compute_chunk_sizes\(\) first",
         _fit(pca, _UNKNOWN_ROWS, 1), None),
    Case("dask-unknown-column-chunks", InvalidDataError,
         r"unknown chunk sizes along its columns \(shape \(10, nan\)\).*compute_chunk_sizes",
         _open(_UNKNOWN_COLUMNS), None),
    Case("xarray-dask-unknown-chunks", InvalidDataError,
         r"unknown chunk sizes along its rows .*compute_chunk_sizes",
         _fit(lstsq, xr.DataArray(_UNKNOWN_ROWS, dims=("sample", "feature")), np.ones(3)), None),
    # ---- labels
    Case("labels-too-short", InvalidDataError,
         r"labels must be 1-D with one value per row \(200\).*\(100,\)",
         _fit(logit, "g", "y_short"), lambda s: ["logreg", str(s.g), "--labels", "y_short"],
         ("labels", "one value per row (200)", "(100,)")),
    Case("labels-too-long-array", InvalidDataError,
         r"labels must be 1-D with one value per row \(200\).*\(201,\)",
         _fit(lstsq, "X", np.ones(201)), None),
    Case("labels-2d-array", InvalidDataError, r"labels must be 1-D.*\(200, 2\)",
         _fit(lstsq, "X", np.ones((200, 2))), None),
    Case("labels-three-classes", InvalidDataError, r"labels .* exactly two values.*3 distinct",
         _fit(logit, "g", "y3"), lambda s: ["logreg", str(s.g), "--labels", "y3"],
         ("labels", "two values", "{0, 1}")),
    Case("labels-one-class", InvalidDataError, r"labels .* exactly two values.*1 distinct",
         _fit(logit, "g", "y_one_class"),
         lambda s: ["logreg", str(s.g), "--labels", "y_one_class"], ("labels", "two values")),
    Case("labels-zero-two", InvalidDataError, r"labels .* exactly two values",
         _fit(logit, "X", np.arange(200) % 2 * 2.0), None),
    Case("labels-nan", InvalidDataError, r"labels contain NaN.*row 17",
         _fit(lstsq, "g", "y_nan"), lambda s: ["linreg", str(s.g), "--labels", "y_nan"],
         ("labels", "nan", "row 17")),
    Case("labels-inf-array", InvalidDataError, r"labels contain NaN or infinite",
         _fit(lstsq, "X", np.where(np.arange(200) == 3, np.inf, 0.0)), None),
    Case("labels-strings", InvalidDataError, "labels must be numbers",
         _fit(logit, "X", np.array(["a", "b"] * 100)), None),
    Case("labels-not-found", DataNotFoundError, "Labels array 'nope' not found",
         _fit(logit, "g", "nope"), lambda s: ["logreg", str(s.g), "--labels", "nope"],
         ("labels", "'nope'")),
    Case("labels-name-without-group", InvalidDataError, "labels='y' names an array of a Zarr group",
         _fit(lstsq, "X", "y"), lambda s: ["linreg", str(s.a), "--labels", "y"],
         ("labels", "array")),
    Case("labels-none", InvalidParameterError, "fit_logistic needs labels.*--labels",
         _fit(logit, "a", None), lambda s: ["logreg", str(s.a)], ("labels", "--labels")),
    # ---- k
    Case("k-zero", InvalidParameterError,
         r"'n_components' parameter of PCA must be an int >= 1\. Got 0",
         _fit(pca, "a", 0), lambda s: ["pca", str(s.a), "-k", "0"], ("n_components", "got 0")),
    Case("k-negative", InvalidParameterError, r"'n_components' .* Got -1",
         _fit(pca, "a", -1), lambda s: ["pca", str(s.a), "--components", "-1"],
         ("n_components", "-1")),
    Case("k-above-columns", InvalidParameterError,
         r"'n_components' parameter of PCA must be an int in \[1, 5\] "
         r"\(the matrix has 5 columns\)\. Got 6",
         _fit(pca, "a", 6), lambda s: ["pca", str(s.a), "-k", "6"],
         ("n_components", "[1, 5]", "got 6")),
    Case("k-above-columns-numpy", InvalidParameterError, r"'n_components' .* \[1, 6\]",
         _fit(pca, np.ones((20, 6)), 7), None),
    Case("k-not-int", InvalidParameterError, r"'n_components' .* Got 2\.5",
         _fit(pca, "a", 2.5), None),
    # ---- method
    Case("method-unknown", InvalidParameterError,
         r"'method' parameter must be one of \['async', 'block', 'coded', 'dsag', 'gd', 'gram', "
         r"'ignore-stragglers', 'nag', 'partial', 'sag', 'sgd'\]\. Got 'bogus'",
         _fit(lstsq, "g", "y", method="bogus"), lambda s: ["linreg", str(s.g), "--method", "bogus"],
         ("'method'", "'async', 'block', 'coded'", "'bogus'")),
    Case("method-unknown-pca", InvalidParameterError, r"'method' parameter must be one of",
         _fit(pca, "a", method="power"), lambda s: ["pca", str(s.a), "--method", "power"],
         ("'method'",)),
    Case("method-nag-for-pca", InvalidParameterError,
         r"'method' parameter .* must be one of \['async', .*\] for pca: its iterates are "
         r"subspaces", _fit(pca, "a", method="nag"), lambda s: ["pca", str(s.a), "--method", "nag"],
         ("'method'", "'gd'", "subspaces")),
    # ---- stop rule
    Case("tol-zero", InvalidParameterError,
         r"'tol' parameter .* must be a finite number > 0 or None\. Got 0\.0",
         _fit(pca, "a", tol=0.0), lambda s: ["pca", str(s.a), "--tol", "0"], ("'tol'", "> 0")),
    Case("tol-negative", InvalidParameterError, r"'tol' parameter .* Got -0\.001",
         _fit(logit, "g", "y", tol=-1e-3), lambda s: ["logreg", str(s.g), "--tol", "-1e-3"],
         ("'tol'", "> 0", "-0.001")),
    Case("tol-nan", InvalidParameterError, r"'tol' parameter .* Got nan",
         _fit(lstsq, "g", "y", tol=float("nan")), lambda s: ["linreg", str(s.g), "--tol", "nan"],
         ("'tol'", "finite")),
    Case("max-iter-zero", InvalidParameterError,
         r"'max_iter' parameter .* must be an int >= 1\. Got 0",
         _fit(pca, "a", max_iter=0), lambda s: ["pca", str(s.a), "--max-iter", "0"],
         ("'max_iter'", ">= 1")),
    Case("max-iter-negative", InvalidParameterError, r"'max_iter' parameter .* Got -3",
         _fit(lstsq, "g", "y", max_iter=-3), lambda s: ["linreg", str(s.g), "--max-iter", "-3"],
         ("'max_iter'", "-3")),
    Case("max-iter-float", InvalidParameterError, r"'max_iter' parameter .* Got 2\.0",
         _fit(pca, "a", max_iter=2.0), None),
    Case("time-budget-zero", InvalidParameterError, r"'time_budget' parameter",
         _fit(pca, "a", time_budget=0), lambda s: ["pca", str(s.a), "--time-budget", "0"],
         ("'time_budget'",)),
    Case("step-size-negative", InvalidParameterError, r"'step_size' parameter of fit_least_squares",
         _fit(lstsq, "g", "y", step_size=-1.0), lambda s: ["linreg", str(s.g), "--step-size", "-1"],
         ("'step_size'",)),
    Case("gap-tol-without-reference", InvalidParameterError, r"'gap_tol' .* needs reference=True",
         _fit(pca, "a", gap_tol=1e-3), None),
    # ---- partitions, workers, scheduler
    Case("partitions-zero", InvalidParameterError, r"'n_partitions' parameter of open_matrix",
         _fit(pca, "a", n_partitions=0), lambda s: ["pca", str(s.a), "--partitions", "0"],
         ("'n_partitions'",)),
    Case("partitions-above-rows", InvalidParameterError, r"'n_partitions' .* \[1, 200\]",
         _fit(pca, "a", n_partitions=201), lambda s: ["pca", str(s.a), "--partitions", "201"],
         ("'n_partitions'", "[1, 200]")),
    Case("workers-zero", InvalidParameterError, r"'n_workers' parameter of fit_pca",
         lambda s, out: pca(s.a, n_workers=0, out=out),
         lambda s: ["pca", str(s.a), "--workers", "0"], ("'n_workers'",)),
    # the worker-count bound: one text whatever the runtime (issue 25), naming which applied
    *[Case(f"workers-{value}-{runtime}", InvalidParameterError,
           re.escape(f"(CLI: --workers) must be {WORKERS_BOUND}. Got {value} with {which} "
                     "instead."),
           _fit_runtime(value, runtime),
           _cli_runtime(value, runtime), ("--workers", WORKERS_BOUND, f"Got {value} with"))
      for runtime, which, values in (
          ("dask", "the Dask runtime", (0, -1, 257, 100000)),
          ("sim", "runtime='sim'", (0, -1, 100001)),
          ("local", "runtime='local'", (0, -1, 100001)))
      for value in values],
    Case("scheduler-and-workers", InvalidParameterError,
         r"Pass only one of .*--scheduler.*--workers",
         _fit(pca, "a", scheduler="tcp://127.0.0.1:1"),
         lambda s: ["pca", str(s.a), "--workers", "2", "--scheduler", "tcp://127.0.0.1:1"],
         ("--scheduler", "--workers")),
    Case("scheduler-empty", InvalidParameterError,
         r"scheduler address \(CLI: --scheduler\) must look like 'tcp://",
         lambda s, out: pca(s.a, scheduler=" ", out=out),
         lambda s: ["pca", str(s.a), "--scheduler", ""], ("scheduler", "tcp://")),
    Case("runtime-unknown", InvalidParameterError, r"'runtime' parameter must be",
         _fit(pca, "a", runtime="threads"), None),
    # ---- stragglers and waiting for w of N
    Case("stragglers-unknown-model", InvalidParameterError,
         r"Unknown latency model 'lognormal'; choose one of \[",
         _fit(pca, "a", stragglers="lognormal(mean=1)"),
         lambda s: ["pca", str(s.a), "--stragglers", "lognormal(mean=1)"],
         ("'lognormal'", "gamma", "slowdown")),
    Case("stragglers-negative-rate", InvalidParameterError,
         r"The 'rate' parameter of ShiftedExponential must be",
         _fit(pca, "a", stragglers="shifted_exponential(shift=0.1, rate=-2)"),
         lambda s: ["pca", str(s.a), "--stragglers", "shifted_exponential(shift=0.1, rate=-2)"],
         ("'rate'", "-2")),
    Case("stragglers-worker-out-of-range", InvalidParameterError,
         r"worker 7 is out of range for 2 workers",
         _fit(pca, "a", stragglers="slowdown(workers=7, factor=2)"),
         lambda s: ["pca", str(s.a), "--workers", "2", "--stragglers",
                    "slowdown(workers=7, factor=2)"], ("worker 7", "2 workers")),
    Case("stragglers-out-of-range-default-cluster", InvalidParameterError,
         r"throttle: worker 4 is out of range for 4 workers",
         lambda s, out: pca(s.a, stragglers="throttle(workers=4, factor=2)", out=out),
         lambda s: ["pca", str(s.a), "--stragglers", "throttle(workers=4, factor=2)"],
         ("worker 4", "4 workers")),
    Case("stragglers-syntax", InvalidParameterError, r"Could not parse the stragglers spec",
         _fit(pca, "a", stragglers="gamma(mean=0.1"),
         lambda s: ["pca", str(s.a), "--stragglers", "gamma(mean=0.1"], ("stragglers", "gamma")),
    Case("stragglers-per-worker-length", InvalidParameterError,
         r"3 values but there are 2 workers",
         _fit(pca, "a", stragglers="gamma(mean=[0.1, 0.2, 0.3], var=0.01)"),
         lambda s: ["pca", str(s.a), "--workers", "2", "--stragglers",
                    "gamma(mean=[0.1, 0.2, 0.3], var=0.01)"], ("'mean'", "2 workers")),
    Case("throttle-in-simulation", InvalidParameterError, r"throttle .* needs the Dask runtime",
         _fit(pca, "a", runtime="sim", stragglers="throttle(workers=1, factor=4)"),
         lambda s: ["pca", str(s.a), "--runtime", "sim", "--stragglers",
                    "throttle(workers=1, factor=4)"], ("throttle", "Dask runtime")),
    Case("stragglers-in-local-runtime", InvalidParameterError,
         r"runtime='local' has no latency",
         _fit(pca, "a", runtime="local", stragglers="bursts()"),
         lambda s: ["pca", str(s.a), "--runtime", "local", "--stragglers", "bursts()"],
         ("runtime='local'", "sim")),
    Case("wait-above-workers", InvalidParameterError,
         r"'n_wait' parameter of SGD must be an int in \[1, 2\]",
         _fit(pca, "a", method="sgd", method_params={"n_wait": 3}),
         lambda s: ["pca", str(s.a), "--workers", "2", "--method", "sgd", "--wait", "3"],
         ("'n_wait'", "[1, 2]", "3")),
    Case("wait-above-default-workers", InvalidParameterError,
         r"'n_wait' parameter of SGD must be an int in \[1, 4\]",
         lambda s, out: pca(s.a, method="sgd", method_params={"n_wait": 5}, out=out),
         lambda s: ["pca", str(s.a), "--method", "sgd", "--wait", "5"], ("'n_wait'", "[1, 4]")),
    # ---- coding schemes
    Case("scheme-unknown", InvalidParameterError, r"'scheme' parameter must be one of \[",
         _fit(pca, "a", method="coded", method_params={"scheme": "lt-code"}),
         lambda s: ["pca", str(s.a), "--method", "coded", "--scheme", "lt-code"],
         ("'scheme'", "'lt-code'", "cyclic-repetition")),
    Case("tolerated-not-below-workers", InvalidParameterError, r"'n_stragglers' parameter",
         _fit(pca, "a", method="coded",
              method_params={"scheme": "cyclic-repetition", "n_stragglers": 2}),
         lambda s: ["pca", str(s.a), "--workers", "2", "--method", "coded",
                    "--stragglers-tolerated", "2"], ("'n_stragglers'", "2")),
    Case("fractional-not-dividing", InvalidParameterError, r"n_stragglers \+ 1 divides",
         lambda s, out: pca(s.a, n_workers=4, out=out, method="coded",
                            method_params={"scheme": "fractional-repetition", "n_stragglers": 2}),
         lambda s: ["pca", str(s.a), "--workers", "4", "--method", "coded", "--scheme",
                    "fractional-repetition", "--stragglers-tolerated", "2"],
         ("'n_stragglers'", "divides", "cyclic-repetition")),
    Case("batch-size-zero", InvalidParameterError, r"'batch_size' parameter of BCC",
         _fit(pca, "a", method="coded", method_params={"scheme": "bcc", "batch_size": 0}),
         lambda s: ["pca", str(s.a), "--method", "coded", "--scheme", "bcc", "--batch-size",
                    "0"], ("'batch_size'", ">= 1")),
    Case("alpha-not-above-one", InvalidParameterError, r"'alpha' parameter of PartialStraggler",
         _fit(pca, "a", method="coded",
              method_params={"scheme": "partial-straggler", "alpha": 1.0}),
         lambda s: ["pca", str(s.a), "--method", "coded", "--scheme", "partial-straggler",
                    "--straggler-alpha", "1"], ("'alpha'", "> 1")),
    Case("nesterov-on-pca", InvalidParameterError, r"'nesterov' parameter of CodedGD",
         _fit(pca, "a", method="coded",
              method_params={"scheme": "cyclic-repetition", "nesterov": True}),
         lambda s: ["pca", str(s.a), "--method", "coded", "--nesterov"],
         ("'nesterov'", "False")),
    Case("ignore-all-stragglers", InvalidParameterError,
         r"'n_stragglers' parameter of IgnoreStragglers",
         _fit(pca, "a", method="ignore-stragglers", method_params={"n_stragglers": 2}),
         lambda s: ["pca", str(s.a), "--workers", "2", "--method", "ignore-stragglers",
                    "--stragglers-tolerated", "2"], ("'n_stragglers'", "[0, 1]")),
    Case("subpartitions-zero", InvalidParameterError,
         r"'subpartitions' parameter of DSAG must be an int >= 1",
         _fit(pca, "a", method="dsag", method_params={"subpartitions": 0}),
         lambda s: ["pca", str(s.a), "--method", "dsag", "--subpartitions", "0"],
         ("'subpartitions'", ">= 1")),
    Case("sag-wait-above-workers", InvalidParameterError, r"'n_wait' parameter of SAG",
         _fit(pca, "a", method="sag", method_params={"n_wait": 5}),
         lambda s: ["pca", str(s.a), "--method", "sag", "--wait", "5"], ("'n_wait'", "[1, 4]")),
    Case("tolerance-one", InvalidParameterError,
         r"'tolerance' parameter of PartialRecovery must be a number in \[0, 1\)",
         _fit(lstsq, "g", "y", method="partial", method_params={"tolerance": 1.0}),
         lambda s: ["linreg", str(s.g), "--method", "partial", "--tolerance", "1"],
         ("'tolerance'", "[0, 1)")),
    Case("degrees-above-workers", InvalidParameterError,
         r"'degrees' parameter of PartialRecovery \(CLI: --degrees\) sums to 6, .* only \d "
         r"workers", _fit(lstsq, "g", "y", method="partial", method_params={"degrees": (1, 2, 3)}),
         lambda s: ["linreg", str(s.g), "--method", "partial", "--degrees", "1,2,3"],
         ("'degrees'", "at most", "--degrees 1,2")),
    Case("degrees-zero", InvalidParameterError, r"'degrees' parameter of RCS must be",
         _fit(lstsq, "g", "y", method="partial", method_params={"degrees": (1, 0)}),
         lambda s: ["linreg", str(s.g), "--method", "partial", "--degrees", "1,0"],
         ("'degrees'", "ints >= 1")),
    Case("age-threshold-negative", InvalidParameterError,
         r"'age_threshold' parameter of PartialRecovery must be an int >= 0",
         _fit(lstsq, "g", "y", method="partial",
              method_params={"degrees": (1, 1), "age_threshold": -1}),
         lambda s: ["linreg", str(s.g), "--method", "partial", "--degrees", "1,1",
                    "--age-threshold", "-1"], ("'age_threshold'", ">= 0")),
    Case("max-delay-negative", InvalidParameterError,
         r"'max_delay' parameter of BoundedAsync must be an int >= 0",
         _fit(lstsq, "g", "y", method="async", method_params={"max_delay": -1}),
         lambda s: ["linreg", str(s.g), "--method", "async", "--max-delay", "-1"],
         ("'max_delay'", ">= 0")),
    Case("wait-zero", InvalidParameterError, r"'n_wait' parameter of SGD must be an int >= 1",
         _fit(pca, "a", method="sgd", method_params={"n_wait": 0}),
         lambda s: ["pca", str(s.a), "--method", "sgd", "--wait", "0"], ("'n_wait'", ">= 1")),
    # ---- issue 42's tour (round four): refused before any cluster starts, not after
    *[Case(f"qc-{flag}-of-floats", InvalidParameterError,
           r"The 'qc' parameter \(CLI: .*\) applies to genotypes .* the matrix is zarr",
           _fit(pca, "a", qc={name: value}),
           lambda s, flag=flag, value=value: ["pca", str(s.a), f"--{flag}", str(value)],
           ("'qc'", f"--{flag}", "genotypes", "drop it"))
      # the steps counted on the workers: checked only once a cluster was up
      for flag, name, value in (("min-maf", "min_maf", 0.1), ("hwe", "hwe", 1e-6),
                                ("mind", "max_sample_missing", 0.1),
                                ("king-cutoff", "king_cutoff", 0.1),
                                ("ld-prune", "ld_prune", "50,5,0.2"))],
    Case("qc-of-regression-floats", InvalidParameterError, r"'qc' parameter .* genotypes",
         _fit(lstsq, "g", "y", array="X", qc={"max_missing": 0.1}), None),
    Case("stragglers-parameter-twice", InvalidParameterError,
         r"The parameter 'mean' of 'gamma' is given twice in the stragglers spec; give each",
         _fit(pca, "a", runtime="sim", stragglers="gamma(mean=0.05, mean=1, var=1e-4)"),
         lambda s: ["pca", str(s.a), "--runtime", "sim", "--stragglers",
                    "gamma(mean=0.05, var=1e-4) + slowdown(workers=1, factor=2, factor=3)"],
         ("'factor'", "twice")),
    Case("overwrite-not-bool", InvalidParameterError,
         r"'overwrite' parameter of fit_pca must be True or False\. Got 'no'",
         _fit(pca, "a", overwrite="no"), None),  # a truthy "no" replaced an existing out
    Case("progress-not-bool", InvalidParameterError,
         r"'progress' parameter of fit_logistic must be True or False\. Got 0",
         _fit(logit, "g", "y", progress=0), None),
    Case("out-not-a-path", InvalidParameterError,
         r"'out' parameter of fit_pca \(CLI: --out\) must be a path that ends in the name to "
         r"write, e.g\. 'run\.zarr'\. Got 5", lambda s, out: pca(s.a, n_workers=2, out=5), None),
    Case("checkpoint-not-a-path", InvalidParameterError,
         r"'checkpoint' parameter of fit_least_squares \(CLI: --checkpoint\) must be a path",
         _fit(lstsq, "g", "y", checkpoint=b"run.ckpt"), None),  # TypeError tracebacks, both
    Case("packed-plain-matrix", InvalidParameterError,
         r"'genotype_storage' parameter of open_matrix applies to genotypes",
         lambda s, out: daskstraggle.open_matrix(s.a, genotype_storage="packed"),
         lambda s: ["pca", str(s.a), "--packed-genotypes", "--runtime", "local"],
         ("genotype_storage", "--packed-genotypes")),  # was silently ignored
    Case("labels-of-pca", InvalidParameterError,
         r"'labels' parameter of solve applies to a problem fitted to labels .* pca takes none",
         lambda s, out: daskstraggle.solve("pca", s.X, labels=s.X[:, 0], out=out), None),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_api_raises_before_cluster_work(case: Case, s, tmp_path, no_cluster):
    out = tmp_path / "out.zarr"
    with pytest.raises(case.error, match=case.match) as info:
        case.api(s, out)
    assert isinstance(info.value, InputError)
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("case", [c for c in CASES if c.cli is not None], ids=lambda c: c.id)
def test_cli_exits_2_with_one_line_before_cluster_work(case: Case, s, tmp_path, capsys, no_cluster):
    out = tmp_path / "out.zarr"
    assert case.cli is not None
    code = main([*case.cli(s), "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 2, captured
    assert captured.out == ""
    assert_names(one_error_line(captured.err), case.words)
    assert list(tmp_path.iterdir()) == []  # neither out nor a hidden temporary sibling


def test_unknown_dask_chunk_sizes_are_refused_without_computing(no_cluster):
    def boom(block):
        raise AssertionError("the dask array was computed")

    x = da.from_array(np.ones((10, 4)), chunks=(5, 4)).map_blocks(boom, dtype=float)
    with pytest.raises(InvalidDataError, match="compute_chunk_sizes") as info:
        daskstraggle.open_matrix(x[x[:, 0] > 0])
    assert "\n" not in str(info.value)
    # once computed (the message's fix), the same selection opens
    matrix = daskstraggle.open_matrix(_DASK[_DASK[:, 0] > 0].compute_chunk_sizes())
    assert matrix.shape == (4, 4)


def test_the_worker_bound_is_one_text_in_the_api_the_solves_and_the_demo(s, capsys,
                                                                          monkeypatch, no_cluster):
    lines = []
    for argv in (["pca", str(s.a), "--workers", "0"], ["linreg", str(s.g), "--workers", "-1"],
                 ["logreg", str(s.g), "--runtime", "sim", "--workers", "100001"],
                 ["demo", "--workers", "300"]):
        assert main(argv) == 2
        lines.append(one_error_line(capsys.readouterr().err))
    monkeypatch.setenv("DASK_DASKSTRAGGLE__WORKERS", "300")  # the default of --workers
    import dask

    dask.config.refresh()
    try:
        assert main(["pca", str(s.a)]) == 2
        lines.append(one_error_line(capsys.readouterr().err))
        with pytest.raises(InvalidParameterError, match=r"The daskstraggle\.workers setting"):
            daskstraggle.fit_pca(s.a)
    finally:
        monkeypatch.undo()  # before the refresh, which reads the environment again
        dask.config.refresh()
    for line in lines:
        assert f" must be {WORKERS_BOUND}. Got " in line, line
    assert "256" in WORKERS_BOUND and "100000" in WORKERS_BOUND
    from daskstraggle.runtime.dask import MAX_LOCAL_WORKERS

    assert f"[1, {MAX_LOCAL_WORKERS}] with the Dask runtime" in WORKERS_BOUND  # one declaration


def test_the_no_cluster_guard_catches_a_cluster_start(s, tmp_path, no_cluster):
    """The guard of the tests above works: a valid run reaches it (so they can fail)."""
    with pytest.raises(AssertionError, match="LocalCluster created before"):
        main(["pca", str(s.a), "--workers", "2", "--out", str(tmp_path / "out.zarr")])
    with pytest.raises(AssertionError, match="LocalCluster created before"):
        daskstraggle.fit_pca(s.X, 2, n_workers=2)


# --------------------------------------------------------------------- existing --out
@pytest.mark.parametrize("command", ["pca", "linreg"])
def test_cli_refuses_existing_out_and_leaves_it_unchanged(command, s, tmp_path, capsys, no_cluster):
    out = tmp_path / "existing.zarr"
    before = existing_result(out)
    source = s.a if command == "pca" else s.g
    code = main([command, str(source), "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    line = one_error_line(captured.err)
    assert_names(line, ("existing.zarr", "exists", "--overwrite"))
    assert snapshot(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["existing.zarr"]


@pytest.mark.parametrize("fit", [pca, lstsq], ids=["fit_pca", "fit_least_squares"])
def test_api_refuses_existing_out_and_leaves_it_unchanged(fit, s, tmp_path, no_cluster):
    out = tmp_path / "existing.zarr"
    before = existing_result(out)
    args = (s.X,) if fit is pca else (s.X, s.X[:, 0])
    match = r"existing\.zarr' exists already; pass overwrite=True"
    with pytest.raises(OutputExistsError, match=match):
        fit(*args, n_workers=2, out=out)
    with pytest.raises(OutputExistsError, match="exists already"):
        fit(*args, runtime="local", out=str(out))
    assert snapshot(out) == before


def test_existing_out_is_refused_even_when_empty_folder(s, tmp_path, capsys, no_cluster):
    out = tmp_path / "empty.zarr"
    out.mkdir()
    assert main(["pca", str(s.a), "--out", str(out)]) == 2
    assert_names(one_error_line(capsys.readouterr().err), ("empty.zarr", "--overwrite"))
    assert list(out.iterdir()) == []


# ------------------------------------------------------------------------ click errors
@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["pca", "{a}", "-k", "abc"], ("'-k' / '--components'", "'abc' is not a valid integer")),
        (["pca", "{a}", "--max-iter", "1.5"], ("'--max-iter'", "'1.5'")),
        (["pca", "{a}", "--tol", "small"], ("'--tol'", "'small'")),
        (["pca", "{a}", "--no-such-option"], ("--no-such-option",)),
        (["pca"], ("SOURCE",)),
        (["datasets", "make", "nosuch", "--out", "{out}"], ("NAME", "'nosuch'", "genotypes")),
        (["datasets", "make", "logistic", "--out", "{out}", "--populations", "3"],
         ("--populations",)),
    ],
    ids=["k-not-int", "max-iter-not-int", "tol-not-float", "unknown-option", "no-source",
         "unknown-dataset", "option-only-for-genotypes"],
)
def test_cli_usage_errors_exit_2_without_traceback(args, words, s, tmp_path, capsys, no_cluster):
    out = tmp_path / "out.zarr"
    argv = [a.format(a=s.a, out=out) for a in args]
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 2, captured
    assert captured.out == ""
    assert "Traceback" not in captured.err
    last = captured.err.strip().splitlines()[-1]
    assert last.startswith("Error: "), captured.err  # click's usage-error format
    assert_names(last, words)
    assert captured.err.startswith("Usage: ")
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------ real command line
@pytest.mark.parametrize(
    ("args", "words", "click_error"),
    [
        (["pca", "{missing}", "--out", "{out}"], ("missing.zarr", "does not exist"), False),
        (["logreg", "{g}", "--labels", "y3", "--out", "{out}"], ("labels", "two values"), False),
        (["pca", "{a}", "-k", "0", "--out", "{out}"], ("n_components",), False),
        (["pca", "{a}", "-k", "abc", "--out", "{out}"], ("--components",), True),
    ],
    ids=["missing-store", "labels-three-classes", "k-zero", "k-not-int"],
)
def test_console_command_exits_2_with_one_line(args, words, click_error, s, tmp_path):
    out = tmp_path / "out.zarr"
    argv = [a.format(missing=s.missing, g=s.g, a=s.a, out=out) for a in args]
    proc = subprocess.run([*CLI, *argv], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    if click_error:
        assert "Traceback" not in proc.stderr
        assert proc.stderr.strip().splitlines()[-1].startswith("Error: ")
        assert_names(proc.stderr, words)
    else:
        assert_names(one_error_line(proc.stderr), words)
    assert list(tmp_path.iterdir()) == []


# -------------------------------------------------------------- NaN / inf on workers
@pytest.mark.parametrize(
    ("which", "partition", "rows", "row"),
    [("nan", 2, "100-150", NAN_ROW), ("inf", 0, "0-50", INF_ROW)],
)
@pytest.mark.parametrize("as_array", [False, True], ids=["zarr", "numpy"])
def test_api_non_finite_data_is_reported_with_partition(which, partition, rows, row, as_array,
                                                        s, tmp_path, dask_client):
    source = getattr(s, f"X_{which}") if as_array else getattr(s, which)
    if as_array:
        source = daskstraggle.open_matrix(source, chunk_rows=50)
    out = tmp_path / "out.zarr"
    with pytest.raises(NonFiniteDataError,
                       match=rf"Partition {partition} \(rows {rows}\) contains NaN or infinite "
                             rf"values \(first at row {row}\)\. Remove or impute them"):
        daskstraggle.fit_pca(source, 2, client=dask_client, out=out)
    assert list(tmp_path.iterdir()) == []


def test_api_non_finite_data_leaves_existing_out_unchanged(s, tmp_path, dask_client):
    out = tmp_path / "existing.zarr"
    before = existing_result(out)
    with pytest.raises(NonFiniteDataError, match=r"Partition 2 \(rows 100-150\)"):
        daskstraggle.fit_least_squares(s.nan, np.ones(200), client=dask_client, out=out,
                                       overwrite=True)
    assert snapshot(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["existing.zarr"]


def test_local_runtime_reports_non_finite_data_too(s):
    with pytest.raises(NonFiniteDataError, match=rf"Partition 0 \(rows 0-50\).*row {INF_ROW}"):
        daskstraggle.fit_pca(s.inf, 2, runtime="local", n_workers=2)


def test_cli_non_finite_data_exits_2_naming_the_partition(s, tmp_path, capsys):
    """On a LocalCluster the CLI starts (--workers 2); --overwrite must not replace old results."""
    out = tmp_path / "existing.zarr"
    before = existing_result(out)
    code = main(["pca", str(s.nan), "--workers", "2", "--out", str(out), "--overwrite"])
    captured = capsys.readouterr()
    assert code == 2, captured
    assert captured.out == ""
    line = one_error_line(captured.err)
    assert_names(line, ("partition 2", "rows 100-150", f"row {NAN_ROW}", "NaN or infinite"))
    assert snapshot(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["existing.zarr"]


# ------------------------------------------------ background commands
def test_console_command_non_finite_data_prints_one_line(background):
    run = background.inf.result()
    assert run.proc.returncode == 2, run.err
    assert run.out == ""
    assert "Partition 0 (rows 0-50)" in run.err
    assert not (background.cwd / "out3.zarr").exists()
    assert_names(one_error_line(run.err), ("partition 0", f"row {INF_ROW}"))


def test_malformed_scheduler_address_fails_fast_with_one_line(background):
    run = background.malformed.result()
    assert run.proc.returncode == 2, run.err
    assert run.out == ""
    assert_names(run.err.splitlines()[0], ("error: the scheduler address", "--scheduler",
                                           "not-an-address"))
    assert not (background.cwd / "out2.zarr").exists()
    # refused as malformed, not after a wait for a connection (no wall-time bound)
    assert "within" not in one_error_line(run.err), run.err
