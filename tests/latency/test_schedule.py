"""The ``schedule`` latency modifier: compute factors that change at given iterations."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from daskstraggle.errors import InvalidParameterError
from daskstraggle.latency import simulate
from daskstraggle.latency.base import LatencyModel, get_model_class, list_models
from daskstraggle.latency.models import Gamma
from daskstraggle.latency.modifiers import Schedule
from daskstraggle.latency.spec import parse_latency, parse_stragglers

GAMMA = Gamma(mean=(0.1, 0.2, 0.3), var=(1e-3, 4e-3, 9e-3), communication_mean=0.01,
              communication_var=1e-5)
FIG7 = [[40, [1, 4, 6], 2.0], [90, [0, 2, 5], 0.5]]


def _factors(model: Schedule, worker: int, iterations) -> list[float]:
    sampler = model.sampler(8)
    return [sampler.sample(worker, iteration=k, measured=1.0)[0] for k in iterations]


def test_registered():
    assert "schedule" in list_models()
    assert get_model_class("schedule") is Schedule


def test_factor_changes_at_the_given_iterations():
    model = Schedule(changes=FIG7)
    its = [0, 39, 40, 89, 90, 500]
    assert _factors(model, 1, its) == [1.0, 1.0, 2.0, 2.0, 2.0, 2.0]
    assert _factors(model, 2, its) == [1.0, 1.0, 1.0, 1.0, 0.5, 0.5]
    assert _factors(model, 3, its) == [1.0] * 6  # never listed
    # no base: the measured compute is scaled and communication is 0
    assert model.sampler(8).sample(4, iteration=41, measured=0.25) == (0.5, 0.0)
    assert not model.has_distribution


def test_later_changes_override_earlier_ones():
    # given out of order: sorted by iteration; at the same iteration the last listed wins
    model = Schedule(changes=[[10, [0, 1], 0.5], [5, 0, 3.0], [10, 1, 4.0]])
    assert model.changes == ((5, (0,), 3.0), (10, (0, 1), 0.5), (10, (1,), 4.0))
    its = [4, 5, 9, 10, 11]
    assert _factors(model, 0, its) == [1.0, 3.0, 3.0, 0.5, 0.5]
    assert _factors(model, 1, its) == [1.0, 1.0, 1.0, 4.0, 4.0]


def test_base_draws_are_scaled_and_use_the_same_streams():
    model = Schedule(base=GAMMA, changes=[[3, [2], 2.5]])
    assert model.has_distribution
    sampler, base = model.sampler(3, rng=4), GAMMA.sampler(3, rng=4)
    for k in range(6):
        compute, communication = sampler.sample(2, iteration=k, time=0.1 * k, load=2.0)
        ref_compute, ref_communication = base.sample(2, load=2.0)
        assert compute == pytest.approx(ref_compute * (2.5 if k >= 3 else 1.0))
        assert communication == ref_communication
    compute, communication = model.sampler(3, rng=0).sample(2, iteration=7, size=5)
    assert compute.shape == (5,) and communication.shape == (5,)
    np.testing.assert_allclose(compute, 2.5 * GAMMA.sampler(3, rng=0).sample(2, size=5)[0])


def test_not_stateless_and_simulator_picks_event():
    model = Schedule(base=GAMMA, changes=[[5, [0, 1, 2], 4.0]])
    assert model.sampler(3, rng=0).stateless is False
    with pytest.raises(InvalidParameterError, match="stateless"):
        simulate(model, 3, 3, 10, method="vectorised", rng=0)
    result = simulate(model, 3, 3, 10, rng=0)  # "auto": event-driven
    before, after = result.iteration_duration[:5].mean(), result.iteration_duration[5:].mean()
    assert after > 2.5 * before  # every worker four times slower from iteration 5


def test_per_worker_streams():
    model = Schedule(base=GAMMA, changes=[[2, [0, 1], 2.0], [4, 2, 0.5]])

    def draws(sampler, others=()):
        out = []
        for k in range(8):
            for other in others:
                sampler.sample(other, time=0.3 * k, iteration=k)
            out.append(sampler.sample(1, time=0.3 * k, iteration=k))
        return out

    assert draws(model.sampler(3, rng=5)) == draws(model.sampler(3, rng=5), others=(0, 2))
    assert draws(model.sampler(3, rng=6)) != draws(model.sampler(3, rng=5))


def test_parse_spec():
    model = parse_latency(
        "gamma(mean=0.1, var=1e-4) + schedule(changes=[[40, [1, 4, 6], 2.0], "
        "[90, [0, 2, 5], 0.5]])"
    )
    assert isinstance(model, Schedule)
    assert model.base == Gamma(mean=0.1, var=1e-4)
    assert model.changes == ((40, (1, 4, 6), 2.0), (90, (0, 2, 5), 0.5))
    assert parse_stragglers("schedule(changes=[[3, 0, 4]])").model == Schedule(
        changes=[[3, [0], 4.0]])


@pytest.mark.parametrize("model", [
    Schedule(changes=FIG7),
    Schedule(base=GAMMA, changes=[[2, [0, 1], 2.0], [4, 2, 0.5]]),
])
def test_round_trips(model):
    assert parse_latency(model.to_spec()) == model
    assert LatencyModel.from_dict(model.to_dict()) == model
    assert LatencyModel.from_dict(json.loads(json.dumps(model.to_dict()))) == model


@pytest.mark.parametrize("changes, fragment", [
    ([], "non-empty list"),
    ("40, [1], 2.0", "non-empty list"),
    ([[40, [1], 2.0, 3]], "each entry must be [iteration, workers, factor]"),
    ([[40, [1]]], "each entry must be [iteration, workers, factor]"),
    ([[-1, [1], 2.0]], "iteration must be an int >= 0"),
    ([[1.5, [1], 2.0]], "iteration must be an int >= 0"),
    ([[40, [1, 1], 2.0]], "workers must be a worker index or a list of distinct ones"),
    ([[40, [], 2.0]], "workers must be a worker index or a list of distinct ones"),
    ([[40, [-2], 2.0]], "workers must be a worker index or a list of distinct ones"),
    ([[40, [1], 0.0]], "factor must be a finite number > 0"),
    ([[40, [1], float("inf")]], "factor must be a finite number > 0"),
    ([[40, [1], "2"]], "factor must be a finite number > 0"),
])
def test_bad_changes(changes, fragment):
    with pytest.raises(InvalidParameterError, match=re.escape(fragment)) as info:
        Schedule(changes=changes)
    message = str(info.value)
    assert "'changes' parameter of Schedule" in message and "\n" not in message


def test_bad_input_through_the_spec_and_the_sampler():
    with pytest.raises(InvalidParameterError, match=re.escape("factor must be a finite number")):
        parse_latency("gamma(mean=0.1, var=1e-4) + schedule(changes=[[40, [1], -2.0]])")
    with pytest.raises(InvalidParameterError, match="'base' parameter of Schedule"):
        Schedule(base="gamma", changes=FIG7)
    with pytest.raises(InvalidParameterError,
                       match=re.escape("worker 4 (change at iteration 40) is out of range "
                                       "for 4 workers")):
        Schedule(changes=FIG7).sampler(4)
    with pytest.raises(ValueError, match="measured"):
        Schedule(changes=FIG7).sampler(8).sample(0, iteration=50)
