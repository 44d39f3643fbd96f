"""One registry per pluggable concept; installed packages add classes by entry point."""

from __future__ import annotations

import logging
from importlib.metadata import EntryPoint

import numpy as np
import pytest

from daskstraggle import _registry
from daskstraggle._registry import Registry
from daskstraggle.errors import InvalidParameterError
from daskstraggle.methods import GD, get_method_class, list_methods, make_method
from daskstraggle.problems import list_problems
from daskstraggle.runtime import LocalRuntime, StopRule


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
        res = rt.run(make_method("plugin-gd"), LeastSquares(), open_matrix(X, labels=X[:, 0]),
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
    from daskstraggle.latency.base import _REGISTRY as models
    from daskstraggle.methods import _REGISTRY as methods
    from daskstraggle.problems import _REGISTRY as problems

    assert [r.group for r in (methods, problems, schemes, models)] == [
        "daskstraggle.methods", "daskstraggle.problems", "daskstraggle.schemes",
        "daskstraggle.latency"]
    assert list_problems() == ["least-squares", "logistic", "pca"]
