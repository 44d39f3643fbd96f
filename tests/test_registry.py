"""One registry per pluggable concept; installed packages add classes by entry point."""

from __future__ import annotations

import logging
import sys
from importlib.metadata import EntryPoint
from typing import ClassVar

import numpy as np
import pytest

from daskstraggle import _registry
from daskstraggle._registry import Registry
from daskstraggle.api import run_on
from daskstraggle.errors import ConvergenceWarning, InvalidParameterError
from daskstraggle.methods import GD, get_method_class, list_methods, make_method
from daskstraggle.problems import list_problems
from daskstraggle.runtime import (
    LocalRuntime,
    Runtime,
    StopRule,
    get_runtime_class,
    list_runtimes,
)


class PluginGD(GD):
    """A method another package would ship: GD under another name."""

    name = "plugin-gd"


class Nameless(GD):
    name = "not-what-the-entry-point-says"


def _entry_points(points: dict[str, list[EntryPoint]]):
    def entry_points(*, group: str) -> list[EntryPoint]:
        return points.get(group, [])

    return entry_points


def _point(name: str, target: str, group: str) -> EntryPoint:
    return EntryPoint(name=name, value=f"{__name__}:{target}", group=group)


def test_a_method_advertised_by_entry_point_is_found_listed_and_runs(monkeypatch):
    group = "daskstraggle.methods"
    monkeypatch.setattr(_registry, "entry_points", _entry_points(
        {group: [_point("plugin-gd", "PluginGD", group)]}))
    registry = Registry("method", group=group, unknown=lambda n, names: f"no {n}: {names}")
    registry.register(GD)
    assert registry.get("plugin_gd") is PluginGD  # read when first not found
    assert registry.names() == ["gd", "plugin-gd"]
    # and through the package's own registry, by name, end to end
    from daskstraggle import methods

    monkeypatch.setattr(methods, "_REGISTRY", registry)
    assert "plugin-gd" in list_methods() and get_method_class("plugin-gd") is PluginGD
    X = np.random.default_rng(0).normal(size=(40, 3))
    from daskstraggle.data import open_matrix
    from daskstraggle.problems import LeastSquares

    with LocalRuntime(2) as rt:
        res = run_on(rt, make_method("plugin-gd"), LeastSquares(), open_matrix(X, labels=X[:, 0]),
                     stop=StopRule(max_iter=3, tol=None), rng=0)
    assert res.n_iter == 3


def test_a_broken_or_misnamed_plugin_is_skipped_with_a_warning(monkeypatch, caplog):
    group = "daskstraggle.methods"
    monkeypatch.setattr(_registry, "entry_points", _entry_points({group: [
        _point("missing", "NoSuchClass", group),
        _point("plugin-x", "Nameless", group),
        _point("plugin-gd", "PluginGD", group),
    ]}))
    registry = Registry("method", group=group, unknown=lambda n, names: f"no {n!r} in {names}")
    with caplog.at_level(logging.WARNING, logger="daskstraggle._registry"):
        assert registry.names() == ["plugin-gd"]
    assert "'missing'" in caplog.text and "'plugin-x'" in caplog.text
    with pytest.raises(InvalidParameterError, match=r"no 'missing' in \['plugin-gd'\]"):
        registry.get("missing")


def test_entry_points_are_read_once_and_only_when_needed(monkeypatch):
    calls = []

    def entry_points(*, group: str) -> list[EntryPoint]:
        calls.append(group)
        return []

    monkeypatch.setattr(_registry, "entry_points", entry_points)
    registry = Registry("problem", group="daskstraggle.problems", unknown=lambda n, _: n)
    registry.register(GD)
    assert registry.get("gd") is GD and calls == []  # a known name reads nothing
    registry.names()
    registry.names()
    assert "nothing" not in registry and calls == ["daskstraggle.problems"]


def test_every_concept_has_its_group():
    from daskstraggle.coding.base import _REGISTRY as schemes
    from daskstraggle.data.backends import _REGISTRY as sources
    from daskstraggle.latency.base import _REGISTRY as models
    from daskstraggle.methods import _REGISTRY as methods
    from daskstraggle.problems import _REGISTRY as problems
    from daskstraggle.runtime.base import _REGISTRY as runtimes

    assert [r.group for r in (methods, problems, schemes, models, runtimes, sources)] == [
        "daskstraggle.methods", "daskstraggle.problems", "daskstraggle.schemes",
        "daskstraggle.latency", "daskstraggle.runtimes", "daskstraggle.sources"]
    assert list_problems() == ["least-squares", "logistic", "pca"]
    assert list_runtimes() == ["dask", "local", "sim"]
    from daskstraggle.latency.faults import FAULTS as faults

    assert faults.group == "daskstraggle.faults"
    assert {"freeze", "join", "loss", "retire"} <= set(faults.names())


def test_a_registry_reads_as_the_mapping_fault_kinds_were():
    """``FAULTS`` was a dict of name -> class: indexing, iterating and ``in`` still work."""
    from daskstraggle.latency.faults import FAULTS, Loss

    assert FAULTS["loss"] is Loss and "loss" in FAULTS
    assert list(FAULTS) == FAULTS.names() and {"freeze", "join", "loss", "retire"} <= set(FAULTS)
    with pytest.raises(KeyError):
        FAULTS["lost"]


class CountingRuntime(LocalRuntime):
    """A runtime another package would ship: in process, counts the runs it builds."""

    name = "counting"
    built: ClassVar[list[int | None]] = []

    @classmethod
    def from_options(cls, options):
        cls.built.append(options.n_workers)
        return cls(options.n_workers)


def test_a_runtime_advertised_by_entry_point_runs_fits_by_name_with_its_declarations(
        monkeypatch):
    import daskstraggle
    from daskstraggle.runtime import base

    group = "daskstraggle.runtimes"
    monkeypatch.setattr(_registry, "entry_points", _entry_points(
        {group: [_point("counting", "CountingRuntime", group)]}))
    registry = Registry("runtime", group=group, unknown=base._unknown_runtime)
    for cls in (get_runtime_class(name) for name in ("dask", "local", "sim")):
        registry.register(cls)
    monkeypatch.setattr(base, "_REGISTRY", registry)
    X = np.random.default_rng(0).normal(size=(60, 4))
    with pytest.warns(ConvergenceWarning, match="did not converge in 4"):
        res = daskstraggle.fit_least_squares(X, X[:, 0], runtime="counting", n_workers=3,
                                             max_iter=4)
    assert res.n_iter == 4 and CountingRuntime.built == [3]
    with pytest.raises(InvalidParameterError, match=r"'counting', 'dask', 'local', 'sim' or "
                                                    "None. Got 'nope'"):
        daskstraggle.fit_pca(X, 1, runtime="nope")
    # its declarations (in process, no latency: LocalRuntime's) are what the fit checks
    with pytest.raises(InvalidParameterError, match="runtime='counting' runs in this process"):
        daskstraggle.fit_pca(X, 1, runtime="counting", scheduler="tcp://127.0.0.1:1")
    with pytest.raises(InvalidParameterError, match="runtime='counting' has no latency"):
        daskstraggle.fit_pca(X, 1, runtime="counting", stragglers="slowdown(workers=0, factor=2)")
    with pytest.raises(InvalidParameterError, match=r"backup_after.*no workers to back up"):
        daskstraggle.fit_pca(X, 1, runtime="counting", backup_after=1.0)


@pytest.mark.parametrize(("name", "in_process", "kind", "backups"), [
    ("dask", False, "injected", True), ("local", True, "none", False),
    ("sim", True, "simulated", True)])
def test_the_runtimes_declare_what_they_do(name, in_process, kind, backups):
    cls = get_runtime_class(name)
    assert (cls.name, cls.in_process, cls.latency_kind, cls.backups) == (
        name, in_process, kind, backups)
    assert cls.from_options.__func__ is not Runtime.from_options.__func__


_NEW_METHOD_MODULE = '''
"""A method added the way the package's own are: this module and nothing else."""

from daskstraggle.methods.gd import GD


class DampedGD(GD):
    """Gradient descent at half the default step."""

    name = "damped-gd"
    description = "GD at half the default step"

    def step_factor(self, problem, n_workers):
        return 0.5
'''


def test_a_new_method_module_in_the_package_needs_no_other_edit(tmp_path, monkeypatch,
                                                                 capsys):
    """Adding a method touches its module (and its tests) only: the package registers every
    method its modules define, and the API and the CLI take it by name."""
    import daskstraggle
    import daskstraggle.methods as methods
    from daskstraggle.cli import main

    (tmp_path / "damped_gd_demo.py").write_text(_NEW_METHOD_MODULE)
    monkeypatch.setattr(methods, "__path__", [*methods.__path__, str(tmp_path)])
    registry = Registry("method", group=None, unknown=methods._REGISTRY._unknown)
    for name in list_methods():
        registry.register(get_method_class(name))
    monkeypatch.setattr(methods, "_REGISTRY", registry)
    monkeypatch.setitem(sys.modules, "daskstraggle.methods.damped_gd_demo", None)
    del sys.modules["daskstraggle.methods.damped_gd_demo"]  # imported below, removed after
    methods._register_package_methods(methods.__path__, methods.__name__)
    assert "damped-gd" in list_methods() and "gd" in list_methods()

    X = np.random.default_rng(0).normal(size=(120, 3))
    y = X @ [1.0, 2.0, 3.0]
    damped = daskstraggle.fit_least_squares(X, y, method="damped-gd", runtime="local",
                                            n_workers=2, max_iter=3, tol=None, rng=0)
    plain = daskstraggle.fit_least_squares(X, y, method="gd", runtime="local", n_workers=2,
                                           max_iter=3, tol=None, rng=0)
    assert damped.method == "damped-gd"
    assert damped.attrs["step_size"] == pytest.approx(plain.attrs["step_size"] / 2)
    import zarr

    group = zarr.open_group(str(tmp_path / "d.zarr"), mode="w")
    group.create_array("X", data=X)
    group.create_array("y", data=y)
    code = main(["linreg", str(tmp_path / "d.zarr"), "--method", "damped-gd", "--runtime",
                 "local", "--workers", "2", "--max-iter", "3", "--json"])
    assert code == 0 and '"method": "damped-gd"' in capsys.readouterr().out


_PLUGIN_RUNTIME = """
from daskstraggle.runtime import LocalRuntime


class EchoRuntime(LocalRuntime):
    \"\"\"An installed package's runtime: in process, says that it ran.\"\"\"

    name = "echo"

    @classmethod
    def from_options(cls, options):
        print("echo runtime with", options.n_workers, "workers", flush=True)
        return cls(options.n_workers)
"""


def test_the_cli_offers_and_runs_a_runtime_an_installed_package_advertises(tmp_path):
    """``--runtime`` lists the runtimes of the daskstraggle.runtimes entry-point group
    (read from the installed metadata, without importing them) and runs them by name."""
    import os
    import subprocess

    import zarr

    site = tmp_path / "site"
    dist = site / "echo_runtime-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: echo-runtime\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[daskstraggle.runtimes]\necho = echo_runtime:EchoRuntime\n")
    (site / "echo_runtime.py").write_text(_PLUGIN_RUNTIME)
    X = np.random.default_rng(0).normal(size=(80, 3))
    group = zarr.open_group(str(tmp_path / "d.zarr"), mode="w")
    group.create_array("X", data=X)
    group.create_array("y", data=X @ [1.0, 2.0, 3.0])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(site), *filter(None, [os.environ.get("PYTHONPATH")])])}
    run = [sys.executable, "-m", "daskstraggle", "linreg", str(tmp_path / "d.zarr")]
    shown = subprocess.run([*run, "--help"], capture_output=True, text=True, env=env,
                           timeout=120)
    assert "[dask|sim|local|echo]" in shown.stdout, shown.stdout + shown.stderr
    done = subprocess.run([*run, "--runtime", "echo", "--workers", "2", "--max-iter", "3",
                           "--json"], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("echo runtime with 2 workers"), done.stdout
    assert '"n_iter": 3' in done.stdout
