"""Tests of daskstraggle.latency.simulator (DSAG coordinator semantics, two engines)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import pytest

from daskstraggle.errors import InvalidParameterError
from daskstraggle.latency.base import Constant, LatencyModel, LatencySampler
from daskstraggle.latency.simulator import SimulationResult, simulate

# --- test-only models (not registered) ---------------------------------------------------


class _SequenceSampler(LatencySampler):
    """Worker i's k-th task takes durations[i][k] * load (compute only)."""

    def __init__(self, model, n_workers, streams):
        super().__init__(n_workers, streams)
        self.model = model
        self.used = [0] * n_workers

    def sample(self, worker_index, *, time=0.0, iteration=0, load=1.0, measured=None,
               size=None):
        self.model.log.append((worker_index, time, iteration, load, size))
        k = self.used[worker_index]
        n = 1 if size is None else size
        seq = self.model.durations[worker_index]
        values = np.array([seq[j % len(seq)] for j in range(k, k + n)]) * load
        self.used[worker_index] = k + n
        if size is None:
            return float(values[0]), 0.0
        return values, np.zeros(size)


class _StatelessSequenceSampler(_SequenceSampler):
    stateless = True


@dataclass(frozen=True, kw_only=True)
class Sequences(LatencyModel):
    """Deterministic per-worker sequences of task durations (cycled); logs every call."""

    name: ClassVar[str] = "test-sequences"
    durations: tuple[tuple[float, ...], ...] = ()
    stateless: bool = True
    log: list = field(default_factory=list, compare=False, repr=False)

    def _make_sampler(self, n_workers, streams):
        cls = _StatelessSequenceSampler if self.stateless else _SequenceSampler
        return cls(self, n_workers, streams)


class _RandomSampler(LatencySampler):
    stateless = True

    def __init__(self, model, n_workers, streams):
        super().__init__(n_workers, streams)
        self.kind = model.kind
        self.rate = np.broadcast_to(np.asarray(model.rate, dtype=float), (n_workers,))

    def sample(self, worker_index, *, time=0.0, iteration=0, load=1.0, measured=None,
               size=None):
        g = self.streams[worker_index]
        if self.kind == "integer":  # small integers: many exact ties
            compute = g.integers(1, 4, size=size) * load
            return compute, (0.0 if size is None else np.zeros(size))
        compute = g.exponential(load / self.rate[worker_index], size)
        return compute, g.exponential(0.01, size)


@dataclass(frozen=True, kw_only=True, slots=True)
class Random(LatencyModel):
    """Exponential compute (rate per worker) plus exponential communication, or integers."""

    name: ClassVar[str] = "test-random"
    rate: float | tuple[float, ...] = 1.0
    kind: str = "exponential"

    def _make_sampler(self, n_workers, streams):
        return _RandomSampler(self, n_workers, streams)


class _SlowAfterSampler(LatencySampler):
    """Stateful: worker i takes base_i, or base_i * factor once time >= switch_time."""

    def __init__(self, model, n_workers, streams):
        super().__init__(n_workers, streams)
        self.model = model

    def sample(self, worker_index, *, time=0.0, iteration=0, load=1.0, measured=None,
               size=None):
        m = self.model
        value = m.base[worker_index] * load * (m.factor if time >= m.switch_time else 1.0)
        if size is None:
            return value, 0.0
        return np.full(size, value), np.zeros(size)


@dataclass(frozen=True, kw_only=True, slots=True)
class SlowAfter(LatencyModel):
    name: ClassVar[str] = "test-slow-after"
    base: tuple[float, ...] = (1.0,)
    factor: float = 3.0
    switch_time: float = 2.0

    def _make_sampler(self, n_workers, streams):
        return _SlowAfterSampler(self, n_workers, streams)


@dataclass(frozen=True, kw_only=True, slots=True)
class Scaling(LatencyModel):
    name: ClassVar[str] = "test-scaling"
    factor: float = 2.0

    @property
    def has_distribution(self) -> bool:
        return False

    def _make_sampler(self, n_workers, streams):  # pragma: no cover - never sampled
        raise AssertionError


def _both(model_factory, *args, **kwargs):
    """Run both engines on fresh copies of a model; check they agree; return the result."""
    a = simulate(model_factory(), *args, method="event", **kwargs)
    b = simulate(model_factory(), *args, method="vectorised", **kwargs)
    _assert_same(a, b)
    return a


def _assert_same(a: SimulationResult, b: SimulationResult) -> None:
    np.testing.assert_array_equal(a.iteration_time, b.iteration_time)
    np.testing.assert_array_equal(a.fresh, b.fresh)
    np.testing.assert_array_equal(a.stale, b.stale)
    np.testing.assert_array_equal(a.n_fresh, b.n_fresh)
    np.testing.assert_array_equal(a.n_stale, b.n_stale)


def _fresh(rows, n):
    out = np.zeros((len(rows), n), dtype=bool)
    for t, row in enumerate(rows):
        out[t, list(row)] = True
    return out


# --- hand-worked cases -------------------------------------------------------------------


@pytest.mark.parametrize("method", ["event", "vectorised"])
def test_stale_result_then_fresh_in_the_same_iteration(method):
    # N=3, wait for 2, no collect window, no update time.
    # t=0 s=0: all start; finish w0=1, w1=2, w2=5. 2nd fresh at 2 -> E=2. w2 busy.
    # t=1 s=2: w0 -> 3, w1 -> 4; w2 still busy (5). E=4. fresh {0,1}.
    # t=2 s=4: w0 -> 5, w1 -> 6; w2 stale at 5, restarts (v2) -> 6. E=6, fresh {0,1,2},
    #          stale {2}.
    # t=3 s=6: all idle: w0 -> 7, w1 -> 8, w2 -> 7. E=7, fresh {0,2}; w1 busy until 8.
    model = Sequences(durations=((1.0,), (2.0,), (5.0, 1.0, 1.0)))
    res = simulate(model, 3, 2, 4, collect_window=0.0, method=method)
    np.testing.assert_array_equal(res.iteration_time, [2.0, 4.0, 6.0, 7.0])
    np.testing.assert_array_equal(res.iteration_duration, [2.0, 2.0, 2.0, 1.0])
    np.testing.assert_array_equal(res.n_fresh, [2, 2, 3, 2])
    np.testing.assert_array_equal(res.n_stale, [0, 0, 1, 0])
    np.testing.assert_array_equal(res.fresh, _fresh([{0, 1}, {0, 1}, {0, 1, 2}, {0, 2}], 3))
    np.testing.assert_array_equal(res.stale, _fresh([set(), set(), {2}, set()], 3))
    np.testing.assert_array_equal(res.participation, [1.0, 0.75, 0.5])
    assert res.total_time == 7.0


def test_event_engine_draws_at_task_start_with_version_and_load():
    # Same case, stateful sampler: one call per task, at its start time and version.
    model = Sequences(durations=((1.0,), (2.0,), (5.0, 1.0, 1.0)), stateless=False)
    simulate(model, 3, 2, 4, collect_window=0.0, load=[1.0, 1.0, 1.0])
    calls = [(i, t, v) for i, t, v, _, _ in model.log if i == 2]
    assert calls == [(2, 0.0, 0), (2, 5.0, 2), (2, 6.0, 3)]
    calls = [(i, t, v) for i, t, v, _, _ in model.log if i == 1]
    assert calls == [(1, 0.0, 0), (1, 2.0, 1), (1, 4.0, 2), (1, 6.0, 3)]
    assert all(size is None for *_, size in model.log)


def test_vectorised_engine_draws_one_block_per_worker():
    model = Sequences(durations=((1.0,), (2.0,), (5.0, 1.0, 1.0)))
    simulate(model, 3, 2, 4, collect_window=0.0, load=[1.0, 0.5, 2.0])
    assert [(i, load, size) for i, _, _, load, size in model.log] == [
        (0, 1.0, 4), (1, 0.5, 4), (2, 2.0, 4)
    ]


@pytest.mark.parametrize("method", ["event", "vectorised"])
def test_collect_window_and_update_duration(method):
    # N=3, wait for 1, collect 50 % of the elapsed time, 1 s update.
    # t=0 s=0: finish w0=2, w1=2.5, w2=4. T_w=2, E=2+0.5*2=3: fresh {0,1}. s1=3+1=4.
    # w2 completes at 4 in (3, 4]: processed at s1=4, stale in iteration 1, restarts at 4.
    # t=1 s=4: w0 -> 6, w1 -> 6.5, w2 -> 5. T_w=5, E=5.5: fresh {2}, stale {2}. s2=6.5.
    # w0 (6) and w1 (6.5) complete during the update: stale in iteration 2.
    # t=2 s=6.5: w0 -> 8.5, w1 -> 9, w2 -> 10.5. T_w=8.5, E=9.5: fresh {0,1}, stale {0,1}.
    model = Sequences(durations=((2.0,), (2.5,), (4.0, 1.0, 4.0)))
    res = simulate(model, 3, 1, 3, collect_window=0.5, update_duration=1.0, method=method)
    np.testing.assert_array_equal(res.iteration_time, [3.0, 5.5, 9.5])
    np.testing.assert_array_equal(res.iteration_duration, [3.0, 2.5, 4.0])
    np.testing.assert_array_equal(res.fresh, _fresh([{0, 1}, {2}, {0, 1}], 3))
    np.testing.assert_array_equal(res.stale, _fresh([set(), {2}, {0, 1}], 3))
    np.testing.assert_array_equal(res.n_fresh, [2, 1, 2])
    np.testing.assert_array_equal(res.n_stale, [0, 1, 2])


@pytest.mark.parametrize("method", ["event", "vectorised"])
def test_ties_at_the_wait_time_all_count(method):
    # N=2, wait for 1. t=0: w0 -> 2, w1 -> 1; E=1, fresh {1}.
    # t=1 s=1: w1 -> 4; w0 stale at 2, restarts -> 4. Tie at 4: both fresh, E=4.
    # t=2 s=4: both -> 6; E=6, both fresh.
    model = Sequences(durations=((2.0,), (1.0, 3.0, 2.0)))
    res = simulate(model, 2, 1, 3, collect_window=0.0, method=method)
    np.testing.assert_array_equal(res.iteration_time, [1.0, 4.0, 6.0])
    np.testing.assert_array_equal(res.n_fresh, [1, 2, 2])
    np.testing.assert_array_equal(res.stale, _fresh([set(), {0}, set()], 2))


@pytest.mark.parametrize("method", ["event", "vectorised"])
def test_stale_completion_at_the_end_time_restarts_with_that_iteration(method):
    # N=2, wait for 1. t=0: w0 -> 1, w1 -> 2; E=1.
    # t=1 s=1: w0 -> 2; w1 completes at 2 = E_1: stale in iteration 1, restarts with
    #          version 1 at 2 -> 7 (draw 5).
    # t=2..5: w0 alone, E = 3, 4, 5, 6.
    # t=6 s=6: w0 -> 7 fresh; w1's version-1 task completes at 7: stale again, restarts.
    model = Sequences(durations=((1.0,), (2.0, 5.0, 1.0)))
    res = simulate(model, 2, 1, 7, collect_window=0.0, method=method)
    np.testing.assert_array_equal(res.iteration_time, np.arange(1.0, 8.0))
    np.testing.assert_array_equal(res.n_stale, [0, 1, 0, 0, 0, 0, 1])
    np.testing.assert_array_equal(res.participation, [1.0, 0.0])


def test_stateful_model_uses_event_engine():
    # w0 = 1 s, w1 = 1.5 s for tasks started before time 2, three times slower after;
    # wait for 1.
    # t=0 s=0: w0 -> 1, w1 -> 1.5; E=1, fresh {0}.
    # t=1 s=1: w0 -> 2; w1 stale at 1.5, restarts (v1, fast) -> 3; E=2, fresh {0}.
    # t=2 s=2: w0 starts slow -> 5; w1's v1 task is stale at 3, restarts slow -> 7.5;
    #          E=5, fresh {0}, stale {1}.
    model = SlowAfter(base=(1.0, 1.5), factor=3.0, switch_time=2.0)
    res = simulate(model, 2, 1, 3, collect_window=0.0)
    np.testing.assert_array_equal(res.iteration_time, [1.0, 2.0, 5.0])
    np.testing.assert_array_equal(res.fresh, _fresh([{0}, {0}, {0}], 2))
    np.testing.assert_array_equal(res.stale, _fresh([set(), {1}, {1}], 2))
    with pytest.raises(InvalidParameterError, match="'vectorised' only for a stateless"):
        simulate(model, 2, 1, 3, method="vectorised")


def test_docstring_example_in_words():
    res = simulate(Constant(compute=(1.0, 1.0, 3.0)), 3, 2, 4, collect_window=0.0)
    np.testing.assert_array_equal(res.n_fresh, [2, 2, 2, 2])


# --- the two engines agree, properties -------------------------------------------------


@pytest.mark.parametrize("seed", range(8))
def test_engines_agree_on_random_models(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 12))
    n_wait = int(rng.integers(1, n + 1))
    rate = tuple(rng.uniform(0.5, 5.0, n).tolist())
    load = rng.uniform(0.5, 2.0, n) if seed % 2 else 1.0
    kind = "integer" if seed % 3 == 0 else "exponential"
    res = _both(
        lambda: Random(rate=rate, kind=kind), n, n_wait, 40,
        load=load, collect_window=float(rng.choice([0.0, 0.02, 0.3])),
        update_duration=float(rng.choice([0.0, 0.05, 0.5])), rng=seed,
    )
    assert np.all(res.n_fresh >= n_wait)
    assert np.all(np.diff(res.iteration_time) > 0)
    np.testing.assert_allclose(res.participation.sum(), res.n_fresh.mean())


def test_engines_agree_on_a_large_run():
    _both(lambda: Random(rate=tuple(np.linspace(1, 3, 50))), 50, 10, 200, rng=11)


def test_many_workers_are_simulated_from_one_stream(monkeypatch):
    """Above PER_WORKER_STREAMS_MAX (here 20) gamma workers are drawn all at once."""
    from daskstraggle.latency import base
    from daskstraggle.latency.models import Gamma

    monkeypatch.setattr(base, "PER_WORKER_STREAMS_MAX", 20)
    built = []
    monkeypatch.setattr(base.WorkerStreams, "__getitem__",
                        lambda self, i: built.append(i))  # a stream per worker: recorded
    model = Gamma(mean=tuple(np.linspace(0.1, 0.3, 50)), var=1e-3)
    res = _both(lambda: model, 50, 10, 100, rng=2)
    assert not built
    assert res.participation[:10].mean() > res.participation[-10:].mean()  # faster: more
    np.testing.assert_array_equal(res.iteration_time,
                                  simulate(model, 50, 10, 100, rng=2).iteration_time)


def test_waiting_for_everyone_is_the_sum_of_maxima():
    model = Random(rate=(1.0, 2.0, 3.0, 4.0))
    res = simulate(model, 4, 4, 30, collect_window=0.0, update_duration=0.1, rng=3)
    sampler = model.sampler(4, rng=3)
    draws = np.array([np.add(*sampler.sample(i, size=30)) for i in range(4)])
    expected = np.cumsum(draws.max(axis=0) + 0.1) - 0.1
    np.testing.assert_allclose(res.iteration_time, expected)
    assert res.fresh.all() and not res.stale.any()


def test_identical_constant_workers_all_fresh():
    res = simulate(Constant(compute=0.5, communication=0.25), 5, 2, 4, collect_window=0.0)
    np.testing.assert_allclose(res.iteration_time, [0.75, 1.5, 2.25, 3.0])
    assert res.fresh.all()


def test_slower_worker_participates_less():
    rate = tuple(np.linspace(1.0, 4.0, 8))  # worker 7 is fastest
    res = simulate(Random(rate=rate), 8, 4, 300, rng=0)
    assert res.participation[7] > res.participation[0]


def test_reproducible_and_json():
    a = simulate(Random(rate=2.0), 4, 2, 10, rng=7)
    b = simulate(Random(rate=2.0), 4, 2, 10, rng=7)
    _assert_same(a, b)
    d = json.loads(json.dumps(a.to_dict()))
    assert d["n_workers"] == 4 and d["n_wait"] == 2 and d["n_iterations"] == 10
    assert len(d["fresh"]) == 10 and len(d["fresh"][0]) == 4
    assert d["total_time"] == a.total_time
    assert len(d["participation"]) == 4


# --- bad input -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_wait": 4}, "The 'n_wait' parameter of simulate must be an int in [1, 3]. Got 4"),
        ({"n_wait": 0}, "The 'n_wait' parameter of simulate must be an int in [1, 3]. Got 0"),
        ({"n_workers": 0}, "The 'n_workers' parameter of simulate must be an int >= 1"),
        ({"n_iterations": 0}, "The 'n_iterations' parameter of simulate must be an int >= 1"),
        ({"collect_window": -0.1}, "The 'collect_window' parameter of simulate must be a"),
        ({"update_duration": -1.0}, "The 'update_duration' parameter of simulate must be a"),
        ({"load": 0.0}, "The 'load' parameter of simulate must be a finite number > 0"),
        ({"load": [1.0, -1.0, 1.0]}, "The 'load' parameter of simulate"),
        ({"load": [1.0, 1.0]}, "an array of 3 of them (one per worker)"),
        ({"method": "fast"}, "The 'method' parameter of simulate must be one of"),
        ({"model": Scaling()}, "base distribution such as 'gamma("),
        ({"model": Constant(compute=(1.0, 2.0))}, "has 2 values but there are 3 workers"),
        # times that overflow float64 (issue 25): refused, without a numpy warning
        ({"model": Constant(compute=1e15), "load": 1e300}, "a latency times load that is not "
         "finite in float64 (inf); use smaller times in the model or a smaller load."),
        ({"update_duration": 1.7e308, "n_iterations": 3}, "a simulated time that is not finite"),
        ({"load": 1e308, "method": "event", "n_iterations": 3},
         "a simulated time that is not finite"),
    ],
)
def test_bad_input(kwargs, match):
    args = {"model": Constant(compute=1.0), "n_workers": 3, "n_wait": 2, "n_iterations": 5}
    args.update(kwargs)
    with pytest.raises(InvalidParameterError, match=re.escape(match)):
        simulate(args.pop("model"), args.pop("n_workers"), args.pop("n_wait"),
                 args.pop("n_iterations"), **args)
