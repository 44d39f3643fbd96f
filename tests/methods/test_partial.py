"""Partial recovery (RCS): exact at q = 0, the static order stalls, shifts bound the ages."""

from __future__ import annotations

import numpy as np
import pytest

from daskstraggle import open_matrix
from daskstraggle.api import run_on
from daskstraggle.errors import InvalidParameterError
from daskstraggle.methods import GD, PartialRecovery, make_method
from daskstraggle.problems import LeastSquares
from daskstraggle.runtime import DaskRuntime, LocalRuntime, SimRuntime, StopRule


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(1200, 10))
    y = X @ rng.normal(size=10) + rng.normal(size=1200)
    return open_matrix(X, labels=y)


def _run(rt, method, matrix, n_iter, **kw):
    with rt:
        return run_on(rt, method, LeastSquares(), matrix, stop=StopRule(max_iter=n_iter, tol=None),
                      rng=0, **kw)


@pytest.mark.parametrize("ordering", ["static", "shift", "age"])
def test_zero_tolerance_gives_gd_iterates(data, ordering):
    gd = _run(LocalRuntime(6), GD(), data, 15)
    method = PartialRecovery(degrees=(1, 2), tolerance=0.0, ordering=ordering, rng=1)
    sim = _run(SimRuntime(6, latency="multi-message(alpha=0.01, rate=10) + "
                                     "slowdown(workers=2, factor=5)", rng=3), method, data, 15)
    local = _run(LocalRuntime(6), PartialRecovery(degrees=(1, 2), ordering=ordering, rng=1),
                 data, 15)
    np.testing.assert_allclose(sim.iterate, gd.iterate, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(local.iterate, gd.iterate, rtol=1e-10, atol=1e-12)
    tr = sim.trace
    assert (tr.coverage == 1).all() and (tr.n_recovered == 6).all() and (tr.age == 0).all()
    assert np.isfinite(tr.objective).all()


# near-deterministic multi-message latency and 4 persistent stragglers among 12 workers:
# with q = 1/3 the coordinator needs 8 partitions, exactly the first (degree-1) codewords
# of the 8 live workers, so the static order recovers the same 8 partitions every time
PERSISTENT = ("multi-message(alpha=0.1, rate=100) + "
              "slowdown(workers=(0, 3, 6, 9), factor=1e6)")


def _persistent(data, ordering, n_iter=120):
    method = PartialRecovery(degrees=(1, 2, 3), tolerance=0.34, ordering=ordering,
                             age_threshold=1, rng=2)
    return _run(SimRuntime(12, latency=PERSISTENT, rng=1), method, data, n_iter,
                reference=True, record_iterates=True)


def test_static_order_never_recovers_some_partitions_and_stalls(data):
    res = _persistent(data, "static")
    age = res.trace.age.values
    never = age[-1] == len(age)  # aged every iteration since the start
    assert never.sum() >= 1
    assert (res.trace.n_recovered == 8).all()
    gap = res.trace.exact_gap.values
    # stuck at the optimum of the recovered partitions only
    assert gap[-1] > 1e-3
    np.testing.assert_allclose(gap[-20:], gap[-1], rtol=1e-9)
    shifted = _persistent(data, "shift")
    assert float(np.median(shifted.trace.exact_gap[-50:])) < gap[-1]


@pytest.mark.parametrize("ordering", ["shift", "age"])
def test_shifted_orders_keep_every_age_bounded(data, ordering):
    res = _persistent(data, ordering)
    L = 6
    age = res.trace.age.values
    assert age[L:].max() <= L, age.max(axis=0)
    shift = res.trace["shift"].values
    # never the shift-0 freeze: the lists move every iteration
    assert (np.diff(shift) % L != 0).all()
    assert (res.trace.coverage < 1).all()


def test_age_ordering_promotes_aged_partitions():
    method = PartialRecovery(degrees=(1, 1, 1), ordering="age", age_threshold=0, rng=0)
    method.placement(5, 5)
    matrix_rows = [10] * 5
    from daskstraggle.problems import Block, block_stats

    blocks = [Block(np.ones((10, 2)) * (k + 1), start=10 * k, y=np.ones(10)) for k in range(5)]
    stats = block_stats(blocks[0])
    for b in blocks[1:]:
        stats = stats + block_stats(b)
    problem = LeastSquares().bind(stats)
    method.start(problem, np.zeros(2), [tuple(p) for p in method.assignment.placement],
                 step_size=0.01, partition_rows=matrix_rows)
    method._ages = np.array([0, 5, 0, 0, 7])
    method._responders = {0, 1}
    s = method._next_shift()
    first = {method.order(i, method.offset + s)[0] for i in (0, 1)}
    best = max(len({method.order(i, method.offset + t)[0] for i in (0, 1)} & {1, 4})
               for t in range(1, 3))
    assert len(first & {1, 4}) == best >= 1


def test_bad_settings(data):
    with pytest.raises(InvalidParameterError, match="'ordering' parameter of PartialRecovery"):
        PartialRecovery(ordering="random")
    with pytest.raises(InvalidParameterError, match=r"'tolerance' .* \[0, 1\)"):
        PartialRecovery(tolerance=-0.1)
    with pytest.raises(InvalidParameterError, match="sums to 6"):
        _run(LocalRuntime(4), PartialRecovery(degrees=(1, 2, 3)), data, 2)
    assert isinstance(make_method("partial", degrees=(1, 1)), PartialRecovery)


class _Recording(PartialRecovery):
    """Logs, in order, each codeword that reaches the coordinator (worker, iteration,
    message, whether the round took it) and each step."""

    def start(self, *args, **kwargs):
        super().start(*args, **kwargs)
        self.events: list[tuple] = []
        self.task_durations: dict[int, list[float]] = {}

    def receive(self, result):
        unit = result.unit
        taken = unit.version == self.version and not self.ready()
        self.events.append(("codeword", unit.worker_index, unit.version, result.message, taken))
        # worker-side seconds of the task (kernel plus the injected sleep): a lower bound
        # that load cannot break
        self.task_durations.setdefault(unit.worker_index, []).append(result.compute_duration)
        super().receive(result)

    def step(self):
        self.events.append(("step", self.version))
        super().step()


@pytest.mark.cluster
def test_on_process_workers_codewords_stream_and_stragglers_are_abandoned(data):
    gd = _run(LocalRuntime(4), GD(), data, 4)
    # every codeword is its own task with an injected delay (0.15 s; 3 s on worker 3):
    # the first codewords of workers 0-2 isolate at most three partitions, so the fourth
    # comes from their later codewords, which reach the coordinator one by one, while
    # worker 3 is never waited for (its units are abandoned at each step)
    method = _Recording(degrees=(1, 1, 1), tolerance=0.0, rng=0)
    slow = "constant(compute=(0.15, 0.15, 0.15, 3.0))"
    # GD's step (estimated in process): not estimated again by 20 passes on the cluster
    step = gd.attrs["step_size"]
    with DaskRuntime(n_workers=4, stragglers=slow, rng=0) as rt:
        # a first run makes every worker compile the kernels: the exact passes of the run
        # below use workers 0 and 1 only, and workers 2 and 3 would spend all its rounds
        # compiling (seconds), so worker 3 would be absent whatever its delay
        run_on(rt, GD(), LeastSquares(), data, stop=StopRule(max_iter=1, tol=None), rng=0,
               step_size=step)
        res = run_on(rt, method, LeastSquares(), data, stop=StopRule(max_iter=4, tol=None), rng=0,
                     step_size=step)
    np.testing.assert_allclose(res.iterate, gd.iterate, rtol=1e-10, atol=1e-12)
    events = method.events
    steps = [e for e in events if e[0] == "step"]
    assert [e[1] for e in steps] == [0, 1, 2]  # the 4th round is the last: no step after it
    codewords = [e for e in events if e[0] == "codeword"]
    # stragglers abandoned: no round took (or waited for) a codeword of worker 3; each
    # round was recovered from workers 0-2 alone, every partition of it (exact GD above)
    assert not [e for e in codewords if e[1] == 3 and e[4]], events
    assert (res.trace.n_recovered == 4).all() and (res.trace.coverage == 1).all()
    assert (res.trace.n_workers_used <= 3).all()
    # streamed: a unit's codewords arrive one by one, in order, each from its own task
    # (each carries its own injected 0.15 s on the worker) ...
    by_unit: dict[tuple[int, int], list[int]] = {}
    for _, worker, version, message, _ in codewords:
        by_unit.setdefault((worker, version), []).append(message)
    for unit, messages in by_unit.items():
        assert messages == list(range(len(messages))), (unit, messages)
    assert all(d >= 0.15 for w in (0, 1, 2) for d in method.task_durations.get(w, ())), \
        method.task_durations
    # ... and a round steps on the codewords it has: in some round a worker's later
    # codewords had not arrived when the step came (they were abandoned), which a unit
    # sent back whole could never show
    partial = [(w, v) for (w, v), messages in by_unit.items()
               if w != 3 and len(messages) < 3 and any(e == ("step", v) for e in steps)]
    assert partial, events
