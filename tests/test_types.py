"""The package passes mypy with the project's settings (pyproject.toml [tool.mypy]).

Also the regression tests of the bugs mypy found (each named for the module it fixed).
"""

from __future__ import annotations

import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from daskstraggle.errors import InvalidParameterError
from daskstraggle.latency import make_model
from daskstraggle.latency.spec import parse_stragglers
from daskstraggle.methods import GD, SGD
from daskstraggle.methods.base import WorkResult, WorkUnit
from daskstraggle.problems.base import KernelResult

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.background(argv=[sys.executable, "-m", "mypy", "--cache-dir", "{tmp}"],
                        cwd=str(ROOT), timeout=900)
def test_mypy_finds_nothing(background_result):
    # mypy is pinned in the test extras, so a new release cannot add errors; one process
    # over the package (files = ["daskstraggle"]) with a cold cache, about 30 s on 2 cores,
    # started when collection ends and run beside the other tests (tests/_background.py)
    proc = background_result
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_latency_parameter_accepts_a_fraction():
    # latency.base.check_per_worker: np.isfinite raised TypeError on a Fraction
    model = make_model("shifted-exponential", shift=Fraction(1, 10), rate=2)
    assert model.shift == 0.1


@pytest.mark.parametrize("spec", ["constant(**{'compute': 1})", "throttle(**{'workers': 1})"])
def test_stragglers_spec_refuses_double_star(spec):
    # latency.spec._term: a '**' argument was a bare TypeError "keywords must be strings"
    with pytest.raises(InvalidParameterError, match="as key=value"):
        parse_stragglers(spec)


@pytest.mark.parametrize("method", [GD(), SGD()], ids=["gd", "sgd"])
def test_plain_methods_refuse_coded_results(method):
    # methods.gd / methods.sgd: a coded unit's tuple of messages was concatenated in summary
    part = KernelResult(np.zeros(2), np.zeros(1), 3)
    unit = WorkUnit(0, (0,), np.zeros(2), 0)
    with pytest.raises(InvalidParameterError, match="takes plain"):
        method.receive(WorkResult(unit, (part, part), 0.1))
