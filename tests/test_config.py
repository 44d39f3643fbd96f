"""Settings through dask.config (daskstraggle.config): defaults, overrides, bad values."""

from __future__ import annotations

import os
import subprocess
import sys

import dask
import numpy as np
import pytest
import yaml

from daskstraggle import config, fit_pca
from daskstraggle.errors import InvalidParameterError
from daskstraggle.runtime import LocalRuntime, SimRuntime


def test_the_shipped_defaults_are_registered():
    with open(config.DEFAULTS_FILE, encoding="utf-8") as f:
        shipped = yaml.safe_load(f)["daskstraggle"]
    assert config.workers() == shipped["workers"] == 4
    assert config.seconds("timeouts.stall") == 300.0
    assert config.seconds("timeouts.scheduler") == 30.0
    assert config.number("tol") == 1e-6 and config.count("max-iter") == 100
    assert config.progress() is True and config.output_dir() == "results"


def test_defaults_survive_a_setting_made_before_the_module_was_imported():
    """A dask.config.set block begun before daskstraggle.config is imported (the README's
    first snippet, in a fresh process) restores a config without the shipped defaults when
    it ends; a setting read afterwards is still the shipped default."""
    code = ("import dask.config\n"
            "with dask.config.set({'daskstraggle.workers': 3}):\n"
            "    from daskstraggle import config\n"
            "    assert config.workers() == 3\n"
            "print(config.workers(), config.number('tol'), config.seconds('timeouts.stall'))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["4", "1e-06", "300.0"]


def test_the_default_worker_count_follows_the_setting():
    X = np.random.default_rng(0).normal(size=(120, 5))
    with dask.config.set({"daskstraggle.workers": 3}):
        assert LocalRuntime().n_workers == 3 and SimRuntime().n_workers == 3
        res = fit_pca(X, 2, runtime="local", rng=0)
    assert len(res.attrs["workers"]) == 3
    assert LocalRuntime(n_workers=2).n_workers == 2  # an explicit count wins


@pytest.mark.parametrize(("key", "value", "reader", "expected"), [
    ("workers", 0, config.workers, "a positive integer"),
    ("workers", True, config.workers, "a positive integer"),
    ("timeouts.stall", "soon", lambda: config.seconds("timeouts.stall"), "a positive duration"),
    ("timeouts.stall", -1, lambda: config.seconds("timeouts.stall"), "a positive duration"),
    ("tol", "tiny", lambda: config.number("tol"), "a positive number"),
    ("progress", "maybe", config.progress, "true or false"),
])
def test_a_bad_value_is_one_line_naming_the_key(key, value, reader, expected):
    with dask.config.set({f"daskstraggle.{key}": value}), \
            pytest.raises(InvalidParameterError, match=f"'daskstraggle.{key}' must be {expected}"):
        reader()


def test_durations_take_units():
    with dask.config.set({"daskstraggle.timeouts.stall": "2 minutes"}):
        assert config.seconds("timeouts.stall") == 120.0


def _cli(args, env, cwd):
    return subprocess.run([sys.executable, "-m", "daskstraggle", *args], capture_output=True,
                          text=True, env={**os.environ, **env}, cwd=cwd, timeout=120)


def test_the_cli_reads_environment_settings(tmp_path):
    X = np.random.default_rng(0).normal(size=(300, 6)) * [5, 3, 1, 1, 1, 1]
    import zarr

    zarr.save_array(str(tmp_path / "x.zarr"), X)
    env = {"DASK_DASKSTRAGGLE__WORKERS": "3", "DASK_DASKSTRAGGLE__MAX_ITER": "2",
           "DASK_DASKSTRAGGLE__TOL": "1e-300"}
    done = _cli(["pca", "x.zarr", "-k", "2", "--method", "gd", "--runtime", "local",
                 "--json"], env, tmp_path)
    assert done.returncode == 0, done.stderr
    import json

    summary = json.loads(done.stdout)
    assert summary["n_iter"] == 2 and summary["converged"] is False


def test_a_bad_environment_setting_stops_the_cli_with_one_line(tmp_path, capsys,
                                                               monkeypatch):
    """``DASK_DASKSTRAGGLE__TOL=x`` as dask reads it from the environment (the same
    ``collect_env`` that runs when a process imports dask; the test above runs a process)."""
    zarr = pytest.importorskip("zarr")
    from daskstraggle.cli import main

    zarr.save_array(str(tmp_path / "x.zarr"), np.ones((20, 3)))
    monkeypatch.chdir(tmp_path)
    env = dask.config.collect_env({"DASK_DASKSTRAGGLE__TOL": "x"})
    merged = dask.config.merge(dask.config.config, env)  # as dask merges it at import
    with dask.config.set({"daskstraggle": merged["daskstraggle"]}):
        code = main(["pca", "x.zarr", "--runtime", "local"])
    assert code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: The dask config setting 'daskstraggle.tol' must be a positive number; got "
        "'x' instead (set it in ~/.config/dask/*.yaml, DASK_DASKSTRAGGLE__TOL, or "
        "dask.config.set)."]
