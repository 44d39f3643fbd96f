"""``solve`` takes grouped options (at most 15 parameters); the ``fit_*`` functions show every
option as a keyword, declared once; the flat keywords ``solve`` took keep working, deprecated."""

from __future__ import annotations

import dataclasses
import inspect
import os
import re

import numpy as np
import pytest

import daskstraggle
from daskstraggle import DSAG, StopRule, fit_least_squares, fit_pca, solve
from daskstraggle.api import _FIT_OPTIONS, _GROUPED, _grouped, _run
from daskstraggle.errors import InvalidParameterError
from daskstraggle.options import Checkpoint, DataOptions, Report, RuntimeSpec
from daskstraggle.problems import LeastSquares

FACES = (daskstraggle.fit_pca, daskstraggle.fit_logistic, daskstraggle.fit_least_squares,
         daskstraggle.genotype_pca)


def _data(n: int = 240) -> tuple[np.ndarray, np.ndarray]:
    X = np.random.default_rng(0).normal(size=(n, 4))
    return X, X @ [1.0, -2.0, 3.0, 0.5]


def test_solve_has_at_most_15_parameters():
    assert len(inspect.signature(solve).parameters) <= 15


@pytest.mark.parametrize("face", FACES, ids=lambda f: f.__name__)
def test_every_fit_function_shows_every_option_with_one_default_and_its_doc(face):
    params = inspect.signature(face).parameters
    assert not any(p.kind is p.VAR_KEYWORD for p in params.values()), "no **kwargs"
    shown = [name for name in params if name in _FIT_OPTIONS]
    assert shown == list(_FIT_OPTIONS)
    defaults = inspect.signature(_run).parameters
    for name, where in _GROUPED.items():  # the default of the field or keyword declaring it
        default = defaults[name].default if where is None else where[2].default
        assert params[name].default == default, name
        assert params[name].kind is params[name].KEYWORD_ONLY, name
        assert re.search(rf"^    {name} : ", face.__doc__, flags=re.M), name
    assert "<options>" not in face.__doc__


def test_every_field_of_every_group_is_declared_once_as_a_flat_option():
    fields = [(cls, f.name) for cls in (StopRule, RuntimeSpec, DataOptions, Checkpoint, Report)
              for f in dataclasses.fields(cls)]
    declared = [(where[1], where[2].name) for where in _GROUPED.values() if where is not None]
    assert sorted(declared, key=str) == sorted(fields, key=str)
    groups = {"stop": StopRule(max_iter=7), "runtime": RuntimeSpec("sim", n_workers=3),
              "data": DataOptions(n_partitions=5), "checkpoint": Checkpoint("c.ckpt"),
              "report": Report(record_iterates=True)}
    flat = {name: getattr(groups[where[0]], where[2].name) if where else None
            for name, where in _GROUPED.items()}
    assert _grouped(flat) == {**groups, **{n: None for n, w in _GROUPED.items() if w is None}}


@pytest.mark.parametrize("face", FACES, ids=lambda f: f.__name__)
def test_an_unknown_keyword_of_a_fit_function_is_a_type_error_naming_it(face):
    with pytest.raises(TypeError, match=rf"^{face.__name__}\(\) got an unexpected keyword "
                                        r"argument 'max_iters'$"):
        needed = {"labels": np.ones(4)} if "labels" in inspect.signature(face).parameters else {}
        face(np.zeros((4, 3)), **needed, max_iters=3)


def test_grouped_solve_gives_the_fit_functions_iterates(tmp_path):
    X, y = _data()
    flat = fit_least_squares(X, y, method="dsag", method_params={"n_wait": 2}, runtime="sim",
                             n_workers=3, stragglers="gamma(mean=0.01, var=1e-6)",
                             n_partitions=6, max_iter=40, tol=None, reference=True,
                             checkpoint=tmp_path / "a.ckpt", checkpoint_iterations=10, rng=1)
    grouped = solve(LeastSquares(), X, labels=y, method=DSAG(n_wait=2),
                    runtime=RuntimeSpec("sim", n_workers=3,
                                        stragglers="gamma(mean=0.01, var=1e-6)"),
                    data=DataOptions(n_partitions=6), stop=StopRule(max_iter=40, tol=None),
                    report=Report(reference=True),
                    checkpoint=Checkpoint(tmp_path / "b.ckpt", iterations=10), rng=1)
    np.testing.assert_array_equal(grouped.iterate, flat.iterate)
    assert grouped.n_iter == flat.n_iter == 40 and grouped.gap == flat.gap
    assert os.path.getsize(tmp_path / "b.ckpt") == os.path.getsize(tmp_path / "a.ckpt")


def test_the_old_flat_keywords_of_solve_warn_and_still_work():
    X, y = _data()
    ref = solve(LeastSquares(), X, labels=y, method="gd", runtime="local",
                stop=StopRule(max_iter=30, tol=None), rng=0)
    with pytest.warns(DeprecationWarning, match=r"'max_iter': pass stop=StopRule\(max_iter="
                                                r"\.\.\.\); 'tol': pass stop=StopRule"):
        old = solve(LeastSquares(), X, labels=y, method="gd", runtime="local", max_iter=30,
                    tol=None, rng=0)
    np.testing.assert_array_equal(old.iterate, ref.iterate)
    with pytest.warns(DeprecationWarning, match="method=DSAG"):
        solve(LeastSquares(), X, labels=y, method="dsag", method_params={"n_wait": 1},
              runtime="local", stop=StopRule(max_iter=3, tol=None), rng=0)


def test_bad_groups_and_keywords_are_one_line_before_any_work():
    X, y = _data(40)
    with pytest.raises(InvalidParameterError, match=r"The 'stop' parameter of solve must be a "
                                                    r"StopRule or None\. Got dict"):
        solve(LeastSquares(), X, labels=y, stop={"max_iter": 3})
    with pytest.raises(InvalidParameterError, match="'data' parameter of solve must be a "
                                                    "DataOptions"):
        solve(LeastSquares(), X, labels=y, data="x")
    with pytest.raises(InvalidParameterError, match="solve got max_iter= and a group that sets "
                                                    "it too"):
        solve(LeastSquares(), X, labels=y, stop=StopRule(), max_iter=3)
    with pytest.raises(InvalidParameterError, match=r"The 'runtime' parameter must be a Runtime, "
                                                    r"'dask', 'local', 'sim' or None\. Got 5"):
        solve(LeastSquares(), X, labels=y, runtime=5)
    with pytest.raises(TypeError, match="unexpected keyword argument 'max_iters'"):
        solve(LeastSquares(), X, labels=y, max_iters=3)
    with pytest.raises(InvalidParameterError, match="'max_iter' parameter of StopRule"):
        StopRule(max_iter=0)


@pytest.mark.cluster
def test_a_client_is_a_runtime(dask_client):
    X = np.random.default_rng(1).normal(size=(300, 5)) * [4, 2, 1, 1, 1]
    res = solve(daskstraggle.problems.PCA(n_components=2), X, method="gram", runtime=dask_client)
    ref = fit_pca(X, 2, method="gram", runtime="local")
    np.testing.assert_allclose(np.abs(res.fitted["components"]),
                               np.abs(ref.fitted["components"]), atol=1e-10)


def test_solve_takes_a_problem_or_its_name_and_its_errors_name_solve():
    X, y = _data()
    by_name = solve("least-squares", X, labels=y, method="gd", runtime="local",
                    stop=StopRule(max_iter=50, tol=None))
    by_object = solve(LeastSquares(), X, labels=y, method="gd", runtime="local",
                      stop=StopRule(max_iter=50, tol=None))
    np.testing.assert_allclose(by_name.iterate, by_object.iterate, atol=1e-12)
    for bad, match in (("pcaa", r"one of \['least-squares', 'logistic', 'pca'\]"),
                       (3, "must be a Problem")):
        with pytest.raises(InvalidParameterError, match=match):
            solve(bad, X)
    with pytest.raises(InvalidParameterError, match="'n_workers' parameter of solve"):
        solve("pca", X, runtime=RuntimeSpec("local", n_workers=-1))
