"""Latency models: laws (KS tests over fixed seeds), conformance, state and schedules."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
from scipy import stats

from daskstraggle.errors import (
    DataNotFoundError,
    InvalidDataError,
    InvalidParameterError,
    NonFiniteDataError,
)
from daskstraggle.latency.base import Constant, LatencyModel, list_models
from daskstraggle.latency.models import (
    Artificial,
    Bursts,
    Gamma,
    MultiMessage,
    Replay,
    ShiftedExponential,
    Slowdown,
    TwoStateMarkov,
)
from daskstraggle.latency.modifiers import Link, Schedule
from daskstraggle.latency.spec import parse_latency

SEEDS = range(20)
N = 3
GAMMA = Gamma(mean=(0.1, 0.2, 0.3), var=(1e-3, 4e-3, 9e-3), communication_mean=0.01,
              communication_var=1e-5)
SHIFTED = ShiftedExponential(shift=(0.1, 0.2, 0.3), rate=(10.0, 5.0, 2.0))

#: One example per registered model (a new model without an example fails the tests).
EXAMPLES: dict[str, LatencyModel] = {
    "constant": Constant(compute=(0.1, 0.2, 0.3), communication=0.01),
    "shifted-exponential": SHIFTED,
    "multi-message": MultiMessage(alpha=(0.01, 0.02, 0.03), rate=10.0),
    "gamma": GAMMA,
    "slowdown": Slowdown(base=GAMMA, workers=(0, 2), factor=(2.0, 3.0)),
    "markov": TwoStateMarkov(base=GAMMA, slow=SHIFTED, p_slow=0.2, p_fast=0.5,
                             initial="stationary", workers=(1, 2)),
    "bursts": Bursts(base=GAMMA, p_enter=0.3, p_leave=0.4, period=0.5),
    "artificial": Artificial(base=GAMMA, spread=0.4, n_recover=1, recover_time=1.0),
    "schedule": Schedule(base=GAMMA, changes=[[2, [0, 2], 3.0], [5, 0, 0.5]]),
    "replay": Replay.from_array(np.arange(15.0).reshape(5, 3) / 10),
    "link": Link(base=GAMMA, bandwidth=(1e9, "100mbit", 1e6), coordinator="1gbit",
                 latency=1e-4),
}

#: Models whose law of worker i depends on the number of workers.
DEPENDS_ON_N = {"artificial", "replay"}

#: Models whose samplers depend on time, iteration or history.
STATEFUL = {"markov", "bursts", "artificial", "replay", "schedule"}

GAMMA1 = Gamma(mean=0.2, var=4e-3, communication_mean=0.01, communication_var=1e-5)
#: Examples with scalar parameters (they fit any number of workers).
SCALAR_EXAMPLES: dict[str, LatencyModel] = {
    "constant": Constant(compute=0.2, communication=0.01),
    "shifted-exponential": ShiftedExponential(shift=0.1, rate=5.0),
    "multi-message": MultiMessage(alpha=0.01, rate=10.0),
    "gamma": GAMMA1,
    "slowdown": Slowdown(base=GAMMA1, workers=(0, 1), factor=(2.0, 3.0)),
    "markov": TwoStateMarkov(base=GAMMA1, slow=ShiftedExponential(shift=0.1, rate=5.0),
                             p_slow=0.2, p_fast=0.5, initial="stationary", workers=(1, 2)),
    "bursts": Bursts(base=GAMMA1, p_enter=0.3, p_leave=0.4, period=0.5),
    "schedule": Schedule(base=GAMMA1, changes=[[2, [0, 1], 3.0], [5, 0, 0.5]]),
    "link": Link(base=GAMMA1, bandwidth="100mbit", latency=1e-4),
}

#: Per model: (parameters, name of the bad parameter).
BAD: dict[str, list[tuple[dict, str]]] = {
    "constant": [({"compute": -1.0}, "compute"), ({"communication": "x"}, "communication"),
                 ({"compute": 1e300}, "compute")],
    "shifted-exponential": [({"rate": 0.0}, "rate"), ({"shift": -1.0}, "shift"),
                            ({"rate": (1.0, float("nan"))}, "rate"),
                            ({"rate": 1e-300}, "rate"), ({"shift": 1e16}, "shift")],
    "multi-message": [({"rate": -1.0}, "rate"), ({"alpha": -0.1}, "alpha"),
                      ({"alpha": 1e300}, "alpha")],
    "gamma": [({"mean": 0.0, "var": 1.0}, "var"), ({"mean": -1.0, "var": 0.0}, "mean"),
              ({"mean": 1.0, "var": 1.0, "communication_var": -1.0}, "communication_var"),
              # moments whose float64 shape m^2/v or draws overflow (issue 25)
              ({"mean": 1e300, "var": 1e300}, "mean"), ({"mean": 1.0, "var": 1e31}, "var"),
              ({"mean": 1e-200, "var": 1.0}, "var"), ({"mean": 1.0, "var": 1e-320}, "var"),
              ({"mean": (1.0, 1e-290), "var": 1.0}, "mean"),
              ({"mean": 1.0, "var": 1.0, "communication_mean": 1e16}, "communication_mean")],
    "slowdown": [({"workers": -1, "factor": 2.0}, "workers"),
                 ({"workers": 1, "factor": 0.0}, "factor"),
                 ({"workers": (0, 1), "factor": (2.0,)}, "factor"),
                 ({"workers": (1, 1), "factor": 2.0}, "workers"),
                 ({"workers": 1, "factor": 2.0, "base": "gamma"}, "base")],
    "markov": [({"p_slow": 1.5, "slow_factor": 2.0}, "p_slow"),
               ({"p_slow": 0.1, "p_fast": -0.1, "slow_factor": 2.0}, "p_fast"),
               ({"p_slow": 0.1}, "slow_factor"),
               ({"p_slow": 0.1, "slow_factor": 2.0, "slow": GAMMA}, "slow"),
               ({"p_slow": 0.1, "slow": Slowdown(workers=0, factor=2.0)}, "slow"),
               ({"p_slow": 0.1, "slow_factor": 2.0, "step": "epoch"}, "step"),
               ({"p_slow": 0.1, "slow_factor": 2.0, "step": 0.0}, "step"),
               ({"p_slow": 0.1, "slow_factor": 2.0, "initial": "medium"}, "initial"),
               ({"p_slow": 0.0, "slow_factor": 2.0, "initial": "stationary"}, "initial"),
               ({"p_slow": 0.1, "slow_factor": 2.0, "workers": (1.5,)}, "workers")],
    "bursts": [({"factor": 0.0}, "factor"), ({"p_enter": 2.0}, "p_enter"),
               ({"p_leave": -0.5}, "p_leave"), ({"period": -1.0}, "period")],
    "artificial": [({"spread": -1.0}, "spread"), ({"n_recover": -1}, "n_recover"),
                   ({"n_recover": 1.5}, "n_recover"), ({"recover_time": math.nan}, "recover_time")],
    "schedule": [({"changes": [[-1, 0, 2.0]]}, "changes"), ({"changes": [[1, 0, 0.0]]}, "changes"),
                 ({"changes": [[1, -1, 2.0]]}, "changes"), ({"changes": "soon"}, "changes")],
    "replay": [({}, "path"), ({"table": ((1.0, -1.0),)}, "table"),
               ({"table": ((1.0,), (1.0, 2.0))}, "table"), ({"table": ()}, "table")],
    "link": [({"bandwidth": 0.0}, "bandwidth"), ({"bandwidth": "fast"}, "bandwidth"),
             ({"bandwidth": (1e9, -1.0)}, "bandwidth"), ({"coordinator": (1e9,)}, "coordinator"),
             ({"latency": -1.0}, "latency"), ({"base": "gamma"}, "base")],
}


def _call(sampler, worker, k, **kwargs):
    return sampler.sample(worker, time=0.37 * k, iteration=k, measured=0.7, **kwargs)


def _sequence(sampler, worker, others=(), n=12):
    out = []
    for k in range(n):
        for other in others:
            _call(sampler, other, k)
        out.append(_call(sampler, worker, k))
    return out


# --------------------------------------------------------------------------- conformance


@pytest.fixture(params=list_models())
def name(request):
    return request.param


def test_every_model_has_example_and_bad_cases(name):
    assert name in EXAMPLES, f"add an example of the {name!r} latency model to EXAMPLES"
    assert name in BAD, f"add bad parameters of the {name!r} latency model to BAD"
    assert EXAMPLES[name].name == name


def test_round_trip_dict(name):
    model = EXAMPLES[name]
    assert LatencyModel.from_dict(model.to_dict()) == model
    assert LatencyModel.from_dict(json.loads(json.dumps(model.to_dict()))) == model


def test_round_trip_spec(name):
    model = EXAMPLES[name]
    spec = model.to_spec()
    assert isinstance(spec, str) and spec
    assert parse_latency(spec) == model


def test_per_worker_streams(name):
    model = EXAMPLES[name]
    alone = _sequence(model.sampler(N, rng=5), 1)
    interleaved = _sequence(model.sampler(N, rng=5), 1, others=(0, 2))
    assert alone == interleaved
    if name not in DEPENDS_ON_N:
        model = SCALAR_EXAMPLES[name]
        narrow = _sequence(model.sampler(N, rng=5), 1)
        assert _sequence(model.sampler(N + 2, rng=5), 1, others=(4, 0)) == narrow
    assert _sequence(model.sampler(N, rng=6), 1) != alone or name in ("constant", "replay")


def test_size(name):
    sampler = EXAMPLES[name].sampler(N, rng=0)
    compute, communication = _call(sampler, 2, 0)
    assert type(compute) is float and type(communication) is float
    compute, communication = _call(sampler, 2, 1, size=7)
    assert compute.shape == (7,) and communication.shape == (7,)
    assert np.all(compute >= 0) and np.all(communication >= 0)


def test_stateless_size_equals_single_draws(name):
    model = EXAMPLES[name]
    sampler = model.sampler(N, rng=1)
    assert sampler.stateless == (name not in STATEFUL)
    if name in STATEFUL:
        return
    batch = sampler.sample(1, load=2.0, size=5)
    sampler = model.sampler(N, rng=1)
    singles = [sampler.sample(1, load=2.0) for _ in range(5)]
    np.testing.assert_array_equal(np.array(batch).T, np.array(singles))


def test_bad_parameters(name):
    cls = type(EXAMPLES[name])
    for params, bad in BAD[name]:
        with pytest.raises(InvalidParameterError, match=re.escape(repr(bad))):
            cls(**params)


def test_overflowing_gamma_is_refused_in_one_line_naming_the_fix():
    with pytest.raises(InvalidParameterError) as err:
        Gamma(mean=1e300, var=1e300)
    assert "1e+15" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(InvalidParameterError) as err:
        Gamma(mean=(0.1, 1e-200), var=1.0)
    message = str(err.value)
    assert "shape m^2/v is 0.0" in message and "worker 1" in message and "\n" not in message
    with pytest.raises(InvalidParameterError, match="'mean' parameter of Gamma"):
        parse_latency("gamma(mean=1e300, var=1e300)")


def test_sampler_checks_n_workers(name):
    model = EXAMPLES[name]
    with pytest.raises(InvalidParameterError, match="workers"):
        model.sampler(2)
    with pytest.raises(InvalidParameterError, match="n_workers"):
        model.sampler(0)


# --------------------------------------------------------------------------- laws


def assert_law(draw, cdf, *, wrong=(), n=1000):
    """KS-test ``draw(seed, n)`` against ``cdf`` for every seed; pooled, reject ``wrong``."""
    pooled = []
    for seed in SEEDS:
        x = np.asarray(draw(seed, n), dtype=float)
        assert x.shape == (n,)
        pvalue = stats.kstest(x, cdf).pvalue
        assert pvalue > 1e-3, f"seed {seed}: p-value {pvalue:.2g}"
        pooled.append(x)
    x = np.concatenate(pooled)
    assert stats.kstest(x, cdf).pvalue > 1e-3
    for bad in (lambda t: cdf(np.asarray(t) / 1.1), *wrong):  # mean 10 % off
        assert stats.kstest(x, bad).pvalue < 1e-6


@pytest.mark.parametrize(("worker", "load"), [(0, 1.0), (1, 2.5), (2, 0.3)])
def test_shifted_exponential_law(worker, load):
    shift, rate = SHIFTED.shift[worker], SHIFTED.rate[worker]

    def draw(seed, n):
        compute, communication = SHIFTED.sampler(N, rng=seed).sample(worker, load=load, size=n)
        assert np.all(communication == 0)
        return compute

    def cdf(t):  # BCC eq. 15 with r = load
        return np.where(t >= shift * load, 1 - np.exp(-(rate / load) * (t - shift * load)), 0.0)

    assert_law(draw, cdf)


@pytest.mark.parametrize(("worker", "s"), [(0, 1), (1, 3), (2, 8)])
def test_multi_message_law(worker, s):
    model = EXAMPLES["multi-message"]
    alpha, rate = model.alpha[worker], model.rate

    def cdf(t):  # P(s computations by t)
        return np.clip(1 - np.exp(-rate * (np.asarray(t) / s - alpha)), 0.0, 1.0)

    def message(seed, n):
        sampler = model.sampler(N, rng=seed)
        return [sampler.message_times(worker, 8)[s - 1] for _ in range(n)]

    def last(seed, n):
        return model.sampler(N, rng=seed).sample(worker, load=s, size=n)[0]

    assert_law(message, cdf, n=300)
    assert_law(last, cdf)


def test_multi_message_times_share_one_draw():
    a = MultiMessage(alpha=0.01, rate=10.0).sampler(2, rng=3)
    b = MultiMessage(alpha=0.01, rate=10.0).sampler(2, rng=3)
    times = a.message_times(1, 4)
    np.testing.assert_allclose(times, np.arange(1, 5) * times[0])
    assert times[-1] == pytest.approx(b.sample(1, load=4)[0])
    with pytest.raises(InvalidParameterError, match="'n_messages'"):
        a.message_times(0, 0)


def _gamma_cdf(mean, var, scale=1.0):
    return stats.gamma(a=mean**2 / var, scale=var / mean * scale).cdf


@pytest.mark.parametrize(("worker", "load"), [(0, 1.0), (1, 2.0), (2, 0.5)])
def test_gamma_law(worker, load):
    sampler_draws = {}

    def draw(seed, n):
        sampler_draws[seed] = GAMMA.sampler(N, rng=seed).sample(worker, load=load, size=n)
        return sampler_draws[seed][0]

    assert_law(draw, _gamma_cdf(GAMMA.mean[worker], GAMMA.var[worker], load))
    # communication: independent of the load
    assert_law(lambda seed, n: sampler_draws[seed][1], _gamma_cdf(0.01, 1e-5))


def test_gamma_deterministic_parts():
    sampler = Gamma(mean=(0.5, 0.2), var=(0.0, 0.01), communication_mean=0.1).sampler(2, rng=0)
    assert sampler.sample(0, load=2.0) == (1.0, 0.1)
    compute, communication = sampler.sample(1, size=4)
    assert len(set(compute)) == 4 and np.all(communication == 0.1)
    assert Gamma(mean=0.0, var=0.0).sampler(1).sample(0) == (0.0, 0.0)


@pytest.mark.parametrize(("worker", "factor"), [(0, 2.0), (1, 1.0), (2, 3.0)])
def test_slowdown_law(worker, factor):
    model = EXAMPLES["slowdown"]

    def draw(seed, n):
        return model.sampler(N, rng=seed).sample(worker, load=1.5, size=n)[0]

    assert_law(draw, _gamma_cdf(GAMMA.mean[worker], GAMMA.var[worker], 1.5 * factor))


def _mixture(p, cdf_slow, cdf_fast):
    return lambda t: p * cdf_slow(t) + (1 - p) * cdf_fast(t)


def test_markov_stationary_mixture():
    model = TwoStateMarkov(base=Gamma(mean=1.0, var=0.01), slow=Gamma(mean=2.0, var=0.04),
                           p_slow=0.2, p_fast=0.5, initial="stationary")
    pi = 0.2 / 0.7
    fast, slow = _gamma_cdf(1.0, 0.01), _gamma_cdf(2.0, 0.04)

    def draw(seed, n):  # worker i at iteration i % 7: still stationary
        sampler = model.sampler(n, rng=seed)
        return [sampler.sample(i, iteration=i % 7)[0] for i in range(n)]

    assert_law(draw, _mixture(pi, slow, fast), n=500,
               wrong=[_mixture(0.7 * pi, slow, fast), fast])


def test_markov_one_step_from_fast_and_factor():
    # initial fast, one step: P(slow) = p_slow; slow state scales the base by slow_factor
    model = TwoStateMarkov(base=Gamma(mean=1.0, var=0.01), slow_factor=2.0, p_slow=0.3,
                           p_fast=0.9)
    fast, slow = _gamma_cdf(1.0, 0.01), _gamma_cdf(1.0, 0.01, 2.0)

    def draw(seed, n):
        sampler = model.sampler(n, rng=seed)
        return [sampler.sample(i, iteration=1)[0] for i in range(n)]

    assert_law(draw, _mixture(0.3, slow, fast), n=500, wrong=[_mixture(0.2, slow, fast)])


@pytest.mark.parametrize("seed", range(3))
def test_markov_long_run_frequencies(seed):
    p_slow, p_fast = 0.2, 0.5
    sampler = TwoStateMarkov(slow_factor=3.0, p_slow=p_slow, p_fast=p_fast).sampler(1, rng=seed)
    states = []
    for k in range(20000):
        compute, _ = sampler.sample(0, iteration=k, measured=1.0)
        states.append(sampler.state(0))
        assert compute == (3.0 if states[-1] else 1.0)
    states = np.array(states)
    assert states.mean() == pytest.approx(p_slow / (p_slow + p_fast), abs=0.02)
    before, after = states[:-1], states[1:]
    assert after[~before].mean() == pytest.approx(p_slow, abs=0.02)
    assert (~after[before]).mean() == pytest.approx(p_fast, abs=0.02)


def test_markov_lazy_multi_step_law():
    # jumping k iterations in one call has the k-step law pi (1 - (1 - p - q)^k)
    p, q, k, n = 0.1, 0.3, 3, 4000
    model = TwoStateMarkov(slow_factor=2.0, p_slow=p, p_fast=q)
    expected = p / (p + q) * (1 - (1 - p - q) ** k)
    jump = model.sampler(n, rng=0)
    stepped = model.sampler(n, rng=1)
    for i in range(n):
        jump.sample(i, iteration=k, measured=1.0)
        for it in range(k + 1):
            stepped.sample(i, iteration=it, measured=1.0)
    tol = 4 * math.sqrt(expected * (1 - expected) / n)
    for sampler in (jump, stepped):
        assert np.mean([sampler.state(i) for i in range(n)]) == pytest.approx(expected, abs=tol)


def test_markov_state_persists_and_advances_lazily_by_iteration():
    sampler = TwoStateMarkov(slow_factor=2.0, p_slow=1.0, p_fast=1.0).sampler(2, rng=0)
    assert sampler.state(0) is False
    assert sampler.sample(0, iteration=0, measured=1.0)[0] == 1.0
    assert sampler.sample(0, iteration=0, measured=1.0)[0] == 1.0  # same iteration: same state
    assert sampler.sample(0, iteration=1, measured=1.0)[0] == 2.0  # switch every iteration
    assert sampler.sample(0, iteration=3, measured=1.0)[0] == 2.0  # two steps: back to slow
    assert sampler.sample(0, iteration=2, measured=1.0)[0] == 2.0  # never goes back
    assert sampler.state(1) is False  # other workers untouched
    assert sampler.sample(1, iteration=5, measured=1.0)[0] == 2.0


def test_markov_advances_lazily_by_time_using_only_own_stream():
    model = TwoStateMarkov(slow_factor=5.0, p_slow=0.5, p_fast=0.5, step=0.5)
    sampler = model.sampler(2, rng=0)
    stream = sampler.streams[0]
    sampler.sample(0, time=0.0, measured=1.0)
    state = stream.bit_generator.state
    for time in (0.1, 0.2, 0.49):  # within the first step: no transition, no draw
        sampler.sample(0, time=time, measured=1.0)
    assert stream.bit_generator.state == state
    other = sampler.streams[1].bit_generator.state
    sampler.sample(0, time=0.5, measured=1.0)  # next step: one draw from stream 0 only
    assert stream.bit_generator.state != state
    assert sampler.streams[1].bit_generator.state == other


def test_markov_workers_and_initial():
    model = TwoStateMarkov(slow_factor=4.0, p_slow=0.0, p_fast=0.0, initial="slow", workers=1)
    sampler = model.sampler(3, rng=0)
    assert [sampler.sample(i, iteration=9, measured=1.0)[0] for i in range(3)] == [1.0, 4.0, 1.0]
    assert [sampler.state(i) for i in range(3)] == [False, True, False]
    with pytest.raises(InvalidParameterError, match="worker 5 is out of range for 3 workers"):
        TwoStateMarkov(slow_factor=4.0, p_slow=0.1, workers=(0, 5)).sampler(3)


def test_markov_age_paper_model():
    # base = fast rate mu_f, slow = slow rate mu_s; initial slow, never switching
    model = TwoStateMarkov(base=MultiMessage(alpha=0.01, rate=10.0),
                           slow=MultiMessage(alpha=0.01, rate=1.0), p_slow=0.0, initial="slow")
    assert model.p_fast == 0.0
    assert model.has_distribution

    def draw(seed, n):
        return model.sampler(1, rng=seed).sample(0, iteration=4, load=2, size=n)[0]

    assert_law(draw, lambda t: np.clip(1 - np.exp(-1.0 * (np.asarray(t) / 2 - 0.01)), 0, 1))


def test_bursts_law_and_default_chain():
    model = Bursts(base=Gamma(mean=1.0, var=0.01), factor=1.5, p_enter=0.3, p_leave=0.4)
    fast, slow = _gamma_cdf(1.0, 0.01), _gamma_cdf(1.0, 0.01, 1.5)

    def draw(seed, n):  # one period in: P(burst) = p_enter
        sampler = model.sampler(n, rng=seed)
        return [sampler.sample(i, time=10.0)[0] for i in range(n)]

    assert_law(draw, _mixture(0.3, slow, fast), n=500, wrong=[fast])
    # the reference chain: stationary burst fraction p_enter / (p_enter + p_leave)
    sampler = Bursts().sampler(1, rng=0)
    bursts = []
    for k in range(40000):
        compute, _ = sampler.sample(0, time=10.0 * k + 3.0, measured=1.0)
        assert compute in (1.0, 1.103)
        bursts.append(compute > 1.0)
    assert np.mean(bursts) == pytest.approx(0.011 / (0.011 + 0.286), abs=0.01)


def test_bursts_step_in_time():
    sampler = Bursts(p_enter=1.0, p_leave=1.0, factor=2.0, period=10.0).sampler(1, rng=0)
    times = [0.0, 9.9, 10.0, 15.0, 20.0, 45.0]
    assert [sampler.sample(0, time=t, measured=1.0)[0] for t in times] == [
        1.0, 1.0, 2.0, 2.0, 1.0, 1.0]


def test_artificial_schedule_exact():
    sampler = Artificial(spread=0.4, n_recover=2, recover_time=1.0).sampler(5)
    before = [sampler.sample(i, time=0.99, measured=2.0)[0] for i in range(5)]
    after = [sampler.sample(i, time=1.0, measured=2.0)[0] for i in range(5)]
    expected = [2.0 * (1 + 0.4 * (i + 1) / 5) for i in range(5)]
    np.testing.assert_allclose(before, expected)
    np.testing.assert_allclose(after, [*expected[:3], 2.0, 2.0])
    # more workers to recover than workers: all recover
    sampler = Artificial(n_recover=10).sampler(3)
    assert [sampler.sample(i, time=2.0, measured=1.0)[0] for i in range(3)] == [1.0] * 3


@pytest.mark.parametrize(("worker", "time"), [(0, 0.0), (2, 0.5), (2, 1.5)])
def test_artificial_law(worker, time):
    model = EXAMPLES["artificial"]
    factor = 1.0 if (worker == 2 and time >= 1.0) else 1 + 0.4 * (worker + 1) / N

    def draw(seed, n):
        return model.sampler(N, rng=seed).sample(worker, time=time, size=n)[0]

    assert_law(draw, _gamma_cdf(GAMMA.mean[worker], GAMMA.var[worker], factor))


# --------------------------------------------------------------------------- modifiers


@pytest.mark.parametrize("cls", [Slowdown, TwoStateMarkov, Bursts, Artificial, Link])
def test_modifier_without_base(cls):
    params = {"Slowdown": {"workers": 0, "factor": 2.0},
              "TwoStateMarkov": {"slow_factor": 2.0, "p_slow": 0.1}}.get(cls.__name__, {})
    model = cls(**params)
    assert model.has_distribution is False
    assert cls(base=GAMMA, **params).has_distribution is True
    assert cls(base=Slowdown(workers=0, factor=2.0), **params).has_distribution is False
    sampler = model.sampler(N, rng=0)
    compute, communication = sampler.sample(1, measured=0.25, size=3)
    assert np.all(communication == 0) and compute.shape == (3,)
    with pytest.raises(ValueError, match="measured"):
        sampler.sample(1)


def test_slowdown_exact_and_range():
    sampler = Slowdown(workers=(0, 2), factor=(2.0, 3.0)).sampler(4)
    assert [sampler.sample(i, measured=1.0, load=7.0)[0] for i in range(4)] == [2, 1, 3, 1]
    assert Slowdown(workers=1, factor=4.0).workers == (1,)
    with pytest.raises(InvalidParameterError, match="worker 5 is out of range for 4 workers"):
        Slowdown(workers=5, factor=2.0).sampler(4)


def test_modifier_stacks_communication_from_base():
    model = Slowdown(base=Constant(compute=1.0, communication=0.5), workers=0, factor=3.0)
    assert model.sampler(1).sample(0, load=2.0) == (6.0, 0.5)
    stacked = Slowdown(base=model, workers=0, factor=2.0)
    assert stacked.sampler(1).sample(0) == (6.0, 0.5)


def test_nested_models_are_checked():
    model = TwoStateMarkov(base=GAMMA, slow=ShiftedExponential(rate=(1.0, 2.0)), p_slow=0.1)
    with pytest.raises(InvalidParameterError, match="'rate'"):
        model.sampler(3)


# --------------------------------------------------------------------------- replay


def test_replay_exact_sequences_and_wrap():
    sampler = Replay.from_array([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0]]).sampler(2)
    assert [sampler.sample(0)[0] for _ in range(4)] == [1.0, 2.0, 3.0, 1.0]
    assert sampler.sample(1, load=2.0) == (20.0, 0.0)  # own counter; times the load
    compute, communication = sampler.sample(1, size=4)
    assert list(compute) == [20.0, 30.0, 10.0, 20.0] and list(communication) == [0.0] * 4
    assert sampler.sample(0)[0] == 2.0


def test_replay_csv(tmp_path):
    path = tmp_path / "latency.csv"
    path.write_text("# recorded on 3 workers\nw0,w1,w2\n0.1,0.2,0.3\n\n# pause\n0.4,0.5,0.6\n")
    model = Replay(path=path)
    assert model.path == str(path)
    assert LatencyModel.from_dict(model.to_dict()) == model
    sampler = model.sampler(3)
    assert [sampler.sample(2)[0] for _ in range(3)] == [0.3, 0.6, 0.3]
    headerless = tmp_path / "plain.csv"
    headerless.write_text("1,2\n3,4\n")
    assert Replay(path=str(headerless)).sampler(2).sample(1) == (2.0, 0.0)


def test_replay_errors(tmp_path):
    missing = tmp_path / "missing.csv"
    with pytest.raises(DataNotFoundError, match=re.escape(str(missing))):
        Replay(path=missing)
    with pytest.raises(InvalidParameterError, match="exactly one"):
        Replay(path=str(missing), table=((1.0,),))
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n3,-4\n")
    with pytest.raises(InvalidDataError, match=r"row 1 \(line 3\), column 1 \('b'\)"):
        Replay(path=bad).sampler(2)
    bad.write_text("1,2\nnan,4\n")
    with pytest.raises(NonFiniteDataError, match=r"row 1 .*column 0"):
        Replay(path=bad).sampler(2)
    bad.write_text("1,2\n3\n")
    with pytest.raises(InvalidDataError, match=r"Line 2 .* has 1 cells"):
        Replay(path=bad).sampler(2)
    bad.write_text("# nothing\n")
    with pytest.raises(InvalidDataError, match="no rows"):
        Replay(path=bad).sampler(2)
    bad.write_text("1,2,3\n")
    with pytest.raises(InvalidParameterError, match=r"3 columns .* but there are 2 workers"):
        Replay(path=bad).sampler(2)
    with pytest.raises(InvalidParameterError, match=r"row 0, column 1"):
        Replay.from_array([[1.0, np.inf]])
    with pytest.raises(InvalidParameterError, match="2-D"):
        Replay.from_array([1.0, 2.0])


# --------------------------------------------------------------------------- many workers

#: Stateless models that draw every worker at once from one stream (``shared_draws``).
SHARED = ["constant", "shifted-exponential", "multi-message", "gamma", "slowdown", "link"]
LOADS = np.array([1.0, 2.0, 0.5])


@pytest.fixture
def few_per_worker_streams(monkeypatch):
    """Make N = 3 workers count as many: above PER_WORKER_STREAMS_MAX (here 2)."""
    from daskstraggle.latency import base

    monkeypatch.setattr(base, "PER_WORKER_STREAMS_MAX", 2)


@pytest.mark.parametrize("name", SHARED)
def test_many_workers_are_drawn_at_once_with_the_same_law(name, few_per_worker_streams):
    model = EXAMPLES[name]
    assert model.sampler(N, rng=0).shared_draws
    n = 3000
    for seed in range(5):
        sampler = model.sampler(N, rng=seed)
        shared = sampler.draw(LOADS, n)
        assert shared.shape == (N, n) and np.all(np.isfinite(shared))
        assert not sampler.streams._built  # no stream per worker was built
        one_by_one = np.array([np.add(*model.sampler(N, rng=100 + seed).sample(
            i, load=LOADS[i], size=n)) for i in range(N)])
        for i in range(N):
            if name == "constant":
                np.testing.assert_array_equal(shared[i], one_by_one[i])
                continue
            assert not np.array_equal(shared[i], one_by_one[i])  # other numbers...
            assert stats.ks_2samp(shared[i], one_by_one[i]).pvalue > 1e-3  # ...same law
        if name != "constant":  # the test can tell workers apart: rows are per worker
            assert stats.ks_2samp(shared[0], one_by_one[1]).pvalue < 1e-6


def test_up_to_the_bound_block_draws_are_each_workers_single_draws():
    sampler = GAMMA.sampler(N, rng=4)
    block = sampler.draw(LOADS, 5)
    assert sorted(sampler.streams._built) == [0, 1, 2]
    again = GAMMA.sampler(N, rng=4)
    singles = [[sum(again.sample(i, load=LOADS[i])) for _ in range(5)] for i in range(N)]
    np.testing.assert_allclose(block, singles, rtol=1e-15)


def test_stateful_models_cannot_draw_blocks():
    with pytest.raises(InvalidParameterError, match="stateless"):
        EXAMPLES["markov"].sampler(N, rng=0).draw(LOADS, 2)


def test_worker_streams_are_built_only_when_used():
    from daskstraggle.latency.base import worker_streams

    streams = worker_streams(3, 10_000_000)
    assert len(streams) == 10_000_000 and not streams._built
    assert streams[9_999_999] is streams[-1] and sorted(streams._built) == [9_999_999]
    assert worker_streams(3, 10_000_000)[1].random() == worker_streams(3, 2)[1].random()
    with pytest.raises(IndexError):
        streams[10_000_000]
