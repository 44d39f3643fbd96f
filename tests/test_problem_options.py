"""The solve commands' problem options come from the problems' declarations
(``Problem.cli_options``): each declared option is the command's, with its default and help,
and its value reaches the fit function under the declared keyword."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from daskstraggle.cli import cli, main
from daskstraggle.problems import get_problem_class

COMMANDS = {"pca": "pca", "logreg": "logistic", "linreg": "least-squares"}


@pytest.mark.parametrize(("command", "problem"), COMMANDS.items())
def test_every_declared_option_is_the_commands(command: str, problem: str) -> None:
    params = {p.name: p for p in cli.commands[command].params}
    declared = get_problem_class(problem).cli_options
    assert declared
    for option in declared:
        param = params[option.dest]
        assert option.flag in param.opts and param.help == option.help
        assert param.default == option.default
        if option.short:
            assert option.short in param.opts
        if option.off_flag:
            assert option.off_flag in param.secondary_opts


def test_the_values_reach_the_fit_function(monkeypatch: pytest.MonkeyPatch,
                                           tmp_path: Any) -> None:
    import daskstraggle.api as api

    seen: dict[str, Any] = {}

    def fake_fit(source: Any, **kw: Any) -> Any:
        seen.update(kw)
        raise SystemExit(0)

    monkeypatch.setattr(api, "fit_pca", fake_fit)
    X = np.random.default_rng(0).normal(size=(30, 6))
    import zarr

    zarr.save_array(str(tmp_path / "x.zarr"), X)
    with pytest.raises(SystemExit):
        main(["pca", str(tmp_path / "x.zarr"), "-k", "3", "--no-center", "--oversample", "2",
              "--runtime", "local"])
    assert (seen["n_components"], seen["center"], seen["oversample"]) == (3, False, 2)
