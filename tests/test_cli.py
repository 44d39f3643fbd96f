"""The ``daskstraggle`` command on small data: solves, outputs, datasets, help and the demo.

Solves run in process through ``daskstraggle.cli.main``. Each ``--workers N`` run starts
its own LocalCluster (seconds), so only one does; the others connect to the session
cluster with ``--scheduler``, the README's way of using an existing cluster.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import zarr

from daskstraggle import Result
from daskstraggle.cli import main

CLI = [sys.executable, "-m", "daskstraggle.cli"]


def run(capsys: pytest.CaptureFixture[str], *argv: object) -> str:
    """Run the CLI in process; assert exit code 0 and return stdout."""
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "error" not in captured.err.lower(), captured.err
    return captured.out


@pytest.fixture(scope="module")
def gapped(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    """A 400 x 8 Zarr array, rank 3 plus small noise: a clear gap after each of 3 components."""
    rng = np.random.default_rng(11)
    left = rng.normal(size=(400, 3)) * np.array([20.0, 10.0, 5.0])
    X = left @ rng.normal(size=(3, 8)) + 0.5 * rng.normal(size=(400, 8)) + 3.0
    path = tmp_path_factory.mktemp("cli") / "gapped.zarr"
    z = zarr.create_array(path, shape=X.shape, chunks=(100, 8), dtype="f8")
    z[:] = X
    return path, X


@pytest.fixture(scope="module")
def regression_data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Groups with arrays X and y written by ``datasets make logistic/linear``."""
    root = tmp_path_factory.mktemp("datasets")
    paths = {}
    for name in ("logistic", "linear"):
        paths[name] = root / f"{name}.zarr"
        code = main(["datasets", "make", name, "--out", str(paths[name]), "--size", "1000",
                     "--features", "5", "--chunk-rows", "250"])
        assert code == 0
    return paths


def scheduler(client) -> str:
    return client.scheduler.address


# ------------------------------------------------------------------------------- pca
def test_pca_json_matches_svd_and_writes_a_loadable_store(gapped, tmp_path, capsys):
    path, X = gapped
    out = tmp_path / "pca.zarr"
    stdout = run(capsys, "pca", path, "-k", "2", "--workers", "2", "--json", "--reference",
                 "--tol", "1e-12", "--max-iter", "500", "--out", out)
    summary = json.loads(stdout)  # exactly one JSON object, nothing else on stdout
    expected = {"method", "n_iter", "wall_time_s", "objective", "explained_variance",
                "explained_variance_ratio", "reference_objective", "gap", "distance", "out"}
    assert expected <= set(summary)
    # the default method ('auto') solves an 8-column PCA exactly in one Gram round
    assert summary["method"] == "gram" and summary["problem"] == "pca"
    assert summary["n_iter"] == 1 and summary["converged"] is True
    assert summary["wall_time_s"] > 0
    assert summary["out"] == str(out)

    s = np.linalg.svd(X - X.mean(axis=0), compute_uv=False)
    ratio = s**2 / np.sum(s**2)
    np.testing.assert_allclose(summary["explained_variance_ratio"], ratio[:2], rtol=0, atol=1e-6)
    np.testing.assert_allclose(summary["explained_variance"], s[:2] ** 2 / (len(X) - 1),
                               rtol=1e-6)
    np.testing.assert_allclose(summary["objective"], 1 - ratio[:2].sum(), atol=1e-6)
    np.testing.assert_allclose(summary["reference_objective"], 1 - ratio[:2].sum(), atol=1e-9)
    assert abs(summary["gap"]) < 1e-9
    np.testing.assert_allclose(summary["gap"],
                               summary["objective"] - summary["reference_objective"])

    loaded = Result.load(out)
    assert loaded.problem == "pca" and loaded.n_iter == summary["n_iter"]
    np.testing.assert_allclose(loaded.fitted["explained_variance_ratio"],
                               summary["explained_variance_ratio"], rtol=1e-15)
    assert loaded.fitted["components"].shape == (2, 8)
    assert len(loaded.attrs["workers"]) == 2  # the LocalCluster of --workers 2


def test_pca_table_on_an_existing_cluster(gapped, capsys, dask_client):
    path, X = gapped
    stdout = run(capsys, "pca", path, "-k", "3", "--scheduler", scheduler(dask_client),
                 "--method", "gd", "--tol", "1e-10", "--reference")
    assert stdout.startswith(
        "pca of a 400 x 8 matrix (zarr), method gd, dask runtime with 3 workers"
    )
    assert "explained variance" in stdout
    rows = {m.group(1): float(m.group(2))
            for m in re.finditer(r"^\s+(PC\d)\s+(\S+)\s", stdout, flags=re.MULTILINE)}
    s = np.linalg.svd(X - X.mean(axis=0), compute_uv=False)
    assert sorted(rows) == ["PC1", "PC2", "PC3"]
    np.testing.assert_allclose([rows["PC1"], rows["PC2"], rows["PC3"]], s[:3] ** 2 / 399,
                               rtol=1e-5)  # printed with 6 significant digits
    assert re.search(r"^objective\s+\d\.\d+", stdout, flags=re.MULTILINE)
    assert re.search(r"^iterations\s+\d+ \(stopped by (tol|max_iter)\)", stdout, flags=re.MULTILINE)
    assert re.search(r"^exact\s+\S+\s+gap\s+\S+", stdout, flags=re.MULTILINE)


def test_pca_of_generated_genotypes(tmp_path, capsys, dask_client):
    store = tmp_path / "geno.vcz"
    assert "wrote genotypes" in run(capsys, "datasets", "make", "genotypes", "--out", store,
                                    "--size", "500", "--features", "30")
    summary = json.loads(run(capsys, "pca", store, "--scheduler", scheduler(dask_client),
                             "--json", "--max-iter", "20"))
    assert summary["problem"] == "pca" and len(summary["explained_variance_ratio"]) == 2
    assert 0 < sum(summary["explained_variance_ratio"]) < 1


# ------------------------------------------------------------------------ regression
def test_logreg_json_with_default_labels(regression_data, capsys, dask_client):
    summary = json.loads(run(capsys, "logreg", regression_data["logistic"], "--method", "nag",
                             "--scheduler", scheduler(dask_client), "--json", "--reference",
                             "--max-iter", "300", "--tol", "1e-12"))
    assert summary["problem"] == "logistic" and summary["method"] == "nag"
    assert {"n_iter", "wall_time_s", "objective", "coef", "intercept", "reference_objective",
            "gap"} <= set(summary)
    assert len(summary["coef"]) == 5
    ref = summary["reference_objective"]
    assert -1e-12 * ref <= summary["gap"] <= 1e-6 * ref
    true_coef = zarr.open_group(regression_data["logistic"], mode="r")["coef"][:]
    assert np.corrcoef(summary["coef"], true_coef)[0, 1] > 0.9


def test_linreg_table_and_out(regression_data, tmp_path, capsys, dask_client):
    path = regression_data["linear"]
    out = tmp_path / "linreg.zarr"
    stdout = run(capsys, "linreg", path, "--scheduler", scheduler(dask_client), "--tol", "1e-14",
                 "--max-iter", "500", "--out", out)
    assert stdout.startswith("least-squares of a 1000 x 5 matrix (zarr)")
    assert "coefficients: 5" in stdout
    assert re.search(r"^objective\s+\S+", stdout, flags=re.MULTILINE)
    assert re.search(r"^iterations\s+\d+ \(stopped by", stdout, flags=re.MULTILINE)
    assert f"results     {out}" in stdout

    group = zarr.open_group(path, mode="r")
    X, y = group["X"][:], group["y"][:]
    A = np.column_stack([X, np.ones(len(X))])
    exact = np.linalg.lstsq(A, y, rcond=None)[0]
    loaded = Result.load(out)
    assert loaded.problem == "least-squares"
    np.testing.assert_allclose(loaded.fitted["coef"], exact[:5], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(loaded.fitted["intercept"], exact[5], rtol=1e-5, atol=1e-6)


# -------------------------------------------------------------------------- datasets
@pytest.mark.parametrize("name", ["logistic", "linear"])
def test_datasets_make_writes_a_group_with_X_and_y(name, tmp_path, capsys):
    out = tmp_path / f"{name}.zarr"
    stdout = run(capsys, "datasets", "make", name, "--out", out, "--size", "1000",
                 "--features", "5")
    assert stdout.startswith(f"wrote {name} to {out}")
    group = zarr.open_group(out, mode="r")
    assert group["X"].shape == (1000, 5) and group["y"].shape == (1000,)
    y = group["y"][:]
    if name == "logistic":
        assert set(np.unique(y).tolist()) <= {0.0, 1.0, -1.0} and len(np.unique(y)) == 2
    assert np.isfinite(group["X"][:]).all() and np.isfinite(y).all()
    # a second run refuses the existing store (exit 2, one line), --overwrite replaces it
    assert main(["datasets", "make", name, "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip().startswith("error: ")
    run(capsys, "datasets", "make", name, "--out", out, "--size", "300", "--features", "2",
        "--overwrite")
    assert zarr.open_group(out, mode="r")["X"].shape == (300, 2)


def test_datasets_make_genotypes_writes_vcf_zarr(tmp_path, capsys):
    out = tmp_path / "geno.vcz"
    run(capsys, "datasets", "make", "genotypes", "--out", out, "--size", "500",
        "--features", "30")
    gt = zarr.open_group(out, mode="r")["call_genotype"]
    assert gt.shape[1:] == (30, 2) and gt.shape[0] == 500
    assert np.dtype(gt.dtype).kind == "i"


# ------------------------------------------------------------------------------ help
@pytest.mark.parametrize(
    "argv",
    [[], ["pca"], ["logreg"], ["linreg"], ["datasets"], ["datasets", "make"], ["demo"]],
    ids=lambda a: " ".join(a) or "daskstraggle",
)
def test_help_exits_0(argv, capsys):
    assert main([*argv, "--help"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("Usage: ")
    assert captured.err == ""
    if argv in (["pca"], ["logreg"], ["linreg"]):
        for option in ("--scheduler", "--workers", "--method", "--max-iter", "--tol", "--out",
                       "--overwrite", "--reference", "--json"):
            assert option in captured.out, option


def test_version(capsys):
    import daskstraggle

    assert main(["--version"]) == 0
    assert daskstraggle.__version__ in capsys.readouterr().out


# ------------------------------------------------------------------------------ demo
def test_demo_runs_end_to_end(tmp_path):
    out = tmp_path / "demo"
    # 2 process workers instead of the default 4 (through the setting docs/guide.md documents,
    # so the demo still takes its worker count from the setting): each costs seconds to start
    env = {**os.environ, "DASK_DASKSTRAGGLE__WORKERS": "2"}
    proc = subprocess.run([*CLI, "demo", "--out", str(out)], capture_output=True, text=True,
                          timeout=240, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    table = proc.stdout
    assert re.search(r"component\s+explained variance\s+ratio\s+exact ratio", table)
    assert re.search(r"^\s+PC1\s+\S+\s+\S+%", table, flags=re.MULTILINE)
    assert re.search(r"^\s+PC2\s+\S+\s+\S+%", table, flags=re.MULTILINE)
    gap = float(re.search(r"^exact\s+\S+\s+gap\s+(\S+)", table, flags=re.MULTILINE).group(1))
    assert abs(gap) < 1e-4, table
    assert "pop_0" in table and "between populations" in table
    assert (out / "genotypes.vcz" / "call_genotype").exists()
    assert "LocalCluster with 2 process workers" in proc.stderr  # the setting was read
    result = Result.load(out / "pca.zarr")
    assert result.problem == "pca"
    assert result.fitted["components"].shape[0] == 2
    assert result.reference_objective is not None and abs(result.gap) < 1e-4


# ------------------------------------------------------------------ Ctrl-C while importing
def _console_script() -> tuple[str, str]:
    """The module and function ``[project.scripts]`` names for the ``daskstraggle`` command."""
    import tomllib

    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    module, function = pyproject["project"]["scripts"]["daskstraggle"].split(":")
    return module, function


#: The console script as pip writes it, plus a finder that sends the process a real SIGINT
#: as soon as the module ``argv[1]`` starts being imported: the interrupt lands inside
#: that import whatever the machine's speed (Python raises KeyboardInterrupt at its next
#: check of pending signals, within the import).
_INTERRUPTED_SCRIPT = """
import os, signal, sys

class InterruptOn:
    def find_spec(self, name, path=None, target=None):
        if name == TARGET:
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None

TARGET = sys.argv.pop(1)
sys.meta_path.insert(0, InterruptOn())
from {module} import {function}
sys.exit({function}())
"""


@pytest.mark.parametrize("target", [
    "daskstraggle.cli",  # the command line module, imported by the entry
    "distributed",       # imported when pca starts its LocalCluster
    "numba",             # imported by the in-process runtime's kernels
    "xarray",            # imported by the API (the package itself loads it lazily)
])
def test_ctrl_c_while_importing_prints_aborted_and_exits_130(target, gapped, tmp_path,
                                                            as_from_a_shell):
    module, function = _console_script()
    runtime = ["--runtime", "local"] if target == "numba" else ["--workers", "1"]
    argv = [sys.executable, "-c", _INTERRUPTED_SCRIPT.format(module=module, function=function),
            target, "pca", str(gapped[0]), *runtime, "--max-iter", "3", "--quiet",
            "--out", str(tmp_path / "out.zarr")]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          **as_from_a_shell)
    assert proc.returncode == 130, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr and "KeyboardInterrupt" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().splitlines() == ["aborted"], proc.stderr
    assert proc.stdout == "" and list(tmp_path.iterdir()) == []


def test_ctrl_c_after_the_command_ended_keeps_its_exit_code(tmp_path):
    """A late Ctrl-C (a cluster closing at exit) does not turn an answer into a traceback."""
    module, function = _console_script()
    script = (f"import os, signal, sys\nfrom {module} import {function}\ncode = {function}()\n"
              "os.kill(os.getpid(), signal.SIGINT)\nsum(range(10**6))\nsys.exit(code)\n")
    proc = subprocess.run([sys.executable, "-c", script, "pca", str(tmp_path / "missing.zarr")],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("delay", [0.0, 0.05, 0.2, 0.5, 1.0, 2.0])
def test_ctrl_c_from_outside_at_any_moment_prints_aborted_and_exits_130(delay, gapped, tmp_path,
                                                                        as_from_a_shell):
    """A real SIGINT from another process, ``delay`` seconds into the command: during the
    imports, the cluster's start or the run, whichever it lands in on this machine (the
    test asserts no timing). The delay counts from a marker the script writes once the
    entry function is imported, as it is called: before that, Python starts and imports the
    package's light ``__init__`` and the entry module, the few milliseconds no code of
    ours can cover (an interrupt there is Python's: a traceback, exit status 130). An
    interrupt that lands in a callback that swallows it (distributed's garbage-collector
    diagnosis, a ``__del__``) used to be lost under load: tests/test_interrupts.py."""
    module, function = _console_script()
    marker = tmp_path / "started"
    script = (f"import sys\nfrom {module} import {function}\n"
              f"open({str(marker)!r}, 'w').close()\nsys.exit({function}())\n")
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", script, "pca", str(gapped[0]), "--workers",
                             "1", "--method", "gd", "--max-iter", "1000000", "--tol", "1e-300",
                             "--quiet", "--out", str(work / "out.zarr")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=work,
                            **as_from_a_shell)
    try:
        while not marker.exists() and proc.poll() is None:
            time.sleep(0.005)
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)  # what Ctrl-C in a terminal sends
        out, err = proc.communicate(timeout=60)  # a lost interrupt: fail, not hang
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, (proc.returncode, err)
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert err.strip().splitlines() == ["aborted"], err
    assert out == "" and list(work.iterdir()) == []


def test_demo_refuses_a_folder_inside_a_zarr_store_before_any_work(tmp_path, capsys):
    """``demo --out g.zarr/demo`` printed its progress line, then wrote into the store
    (the tour of issue 42): one line now, before anything is simulated."""
    store = zarr.create_array(tmp_path / "g.zarr", shape=(4, 4), dtype="f8")
    store[:] = 1.0
    before = sorted(p.name for p in (tmp_path / "g.zarr").rglob("*"))
    assert main(["demo", "--out", str(tmp_path / "g.zarr" / "demo")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "lies inside the Zarr store" in err[0], err
    assert sorted(p.name for p in (tmp_path / "g.zarr").rglob("*")) == before
