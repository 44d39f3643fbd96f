"""The --stragglers spec grammar: what parses, what it builds, and one clear error otherwise."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

import pytest

from daskstraggle.errors import DataNotFoundError, InvalidParameterError
from daskstraggle.latency import (
    Artificial,
    Bursts,
    Constant,
    Gamma,
    LatencyModel,
    Slowdown,
    Stragglers,
    ThrottleSpec,
    TwoStateMarkov,
    parse_latency,
    parse_stragglers,
)
from daskstraggle.latency import base as latency_base


def test_issue_examples_parse_to_the_models():
    s = parse_stragglers("slowdown(workers=1, factor=4)")
    assert s.model == Slowdown(workers=1, factor=4.0) and s.throttle is None
    assert not s.model.has_distribution
    m = parse_stragglers("markov(p_slow=0.05, p_fast=0.2, slow_factor=4)").model
    assert isinstance(m, TwoStateMarkov) and m.slow_factor == 4
    assert isinstance(parse_stragglers("bursts()").model, Bursts)
    assert isinstance(parse_stragglers("artificial").model, Artificial)
    g = parse_stragglers("gamma(mean=[0.02, 0.04, 0.06, 0.08], var=1e-4)").model
    assert g == Gamma(mean=(0.02, 0.04, 0.06, 0.08), var=1e-4)


def test_modifiers_chain_on_a_distribution_and_throttle_stands_beside():
    s = parse_stragglers("gamma(mean=0.05, var=1e-4) + slowdown(workers=[0, 2], factor=3)"
                         " + throttle(workers=1, factor=4)")
    assert isinstance(s.model, Slowdown) and s.model.base == Gamma(mean=0.05, var=1e-4)
    assert s.model.has_distribution
    assert s.throttle == ThrottleSpec(workers=(1,), factor=4.0)
    assert parse_stragglers(s.to_spec()) == s


def test_nested_model_argument():
    m = parse_latency("multi_message(alpha=0.01, rate=10) + "
                      "markov(p_slow=0.1, slow=multi_message(alpha=0.01, rate=2))")
    assert isinstance(m, TwoStateMarkov) and m.slow is not None
    assert parse_latency(m.to_spec()) == m


def test_registered_hyphenated_names_are_accepted():
    a = parse_latency("shifted-exponential(shift=1e-3, rate=50) + slowdown(workers=0, factor=2)")
    b = parse_latency("shifted_exponential(shift=1e-3, rate=50) + slowdown(workers=0, factor=2)")
    assert a == b and a.base.shift == 1e-3  # "1e-3" is still a number
    assert parse_latency("multi-message(alpha=0.01, rate=10)") == parse_latency(
        "multi_message(alpha=0.01, rate=10)")
    # hyphens inside string literals (file names) are left alone
    with pytest.raises(DataNotFoundError, match=r"my-trace\.csv"):
        parse_latency("replay(path='/nonexistent/my-trace.csv')")


@pytest.mark.parametrize("spec", ["none", "", "  NONE ", None])
def test_none(spec):
    assert parse_stragglers(spec) == Stragglers()
    assert not parse_stragglers(spec)


def test_models_and_specs_pass_through():
    g = Gamma(mean=0.1, var=0.01)
    assert parse_stragglers(g).model is g
    assert parse_latency(g) is g
    assert parse_stragglers(Stragglers(model=g)).model is g


@pytest.mark.parametrize(
    "spec, message",
    [
        ("lognormal(mean=1)", "Unknown latency model 'lognormal'; choose one of ["),
        ("gamma(mean=-1, var=1)", "The 'mean' parameter of Gamma must be"),
        ("shifted_exponential(shift=0.1, rate=-2)", "'rate' parameter"),
        ("gamma(mean=0.1, var=0.01, speed=3)", "does not take ['speed']"),
        ("gamma(0.1, 0.01)", "Write the parameters of 'gamma' as key=value"),
        ("gamma(mean=0.1", "Could not parse the stragglers spec"),
        ("gamma(mean=x)", "values must be numbers, strings, lists or model terms"),
        ("slowdown(workers=1, factor=2) + gamma(mean=1, var=1)", "is not a modifier"),
        ("throttle(workers=1, factor=0.5)", "'factor' parameter of throttle must be a number >= 1"),
        ("throttle(workers=-1, factor=2)", "'workers' parameter of throttle"),
        ("throttle(workers=1, factor=2) + throttle(workers=2, factor=2)", "at most one throttle"),
        ("gamma", "The latency model 'gamma' needs ['mean', 'var'], e.g. gamma(mean=..., var=...)"),
        ("gamma(mean=0.05)", "needs ['var']"),
        ("slowdown(workers=1)", "The latency model 'slowdown' needs ['factor']"),
    ],
)
def test_bad_specs_give_one_clear_error(spec, message):
    with pytest.raises(InvalidParameterError, match=re.escape(message)):
        parse_stragglers(spec)


def test_workers_out_of_range_are_checked_against_the_cluster():
    s = parse_stragglers("slowdown(workers=5, factor=2) + throttle(workers=4, factor=2)")
    with pytest.raises(InvalidParameterError, match="out of range for 4 workers"):
        s.check_n_workers(4)
    s.check_n_workers(6)
    with pytest.raises(InvalidParameterError, match="throttle: worker 4 is out of range"):
        parse_stragglers("throttle(workers=4, factor=2)").check_n_workers(4)


def test_parse_latency_refuses_throttle_only():
    with pytest.raises(InvalidParameterError, match="Expected a latency model"):
        parse_latency("throttle(workers=1, factor=2)")


def test_wrong_type():
    with pytest.raises(InvalidParameterError, match="must be a spec string, a LatencyModel"):
        parse_stragglers(3)
    assert issubclass(type(parse_latency("bursts()")), LatencyModel)



def test_the_grammar_asks_the_term_class_how_its_term_reads(monkeypatch):
    # issue 44: a new kind of term is one class with from_term, not a branch in spec.py

    @dataclass(frozen=True, kw_only=True, slots=True)
    class Halves(Constant):
        """A test model whose term gives the compute time in half-seconds."""

        name: ClassVar[str] = "halves"

        @classmethod
        def from_term(cls, name, params, *, base, spec):
            return cls(compute=params.pop("n", 0) / 2, **params)

    monkeypatch.setitem(latency_base._REGISTRY._classes, "halves", Halves)
    assert parse_latency("halves(n=3, communication=1)") == Halves(compute=1.5, communication=1)
    assert parse_stragglers("halves + loss(workers=0, at=1)").model == Halves(compute=0.0)
