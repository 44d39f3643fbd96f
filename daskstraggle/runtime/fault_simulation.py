"""Iteration times with simulated faults: DSAG waiting for ``w`` of ``N`` in SimRuntime.

Faults change which worker computes which rows (the engine's worker pool decides), so
:func:`simulate_faults` runs DSAG itself on a small synthetic problem; without faults its
iteration times equal :func:`daskstraggle.latency.simulate`'s from the same seed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from daskstraggle._validation import check_nonnegative
from daskstraggle.data import open_matrix
from daskstraggle.engine.pool import MoveIndex, StartHelping, StopHelping
from daskstraggle.engine.stop import StopRule
from daskstraggle.errors import InvalidParameterError
from daskstraggle.latency.base import LatencyModel
from daskstraggle.latency.faults import ClusterState, Fault
from daskstraggle.latency.order import check_model
from daskstraggle.latency.simulator import SimulationResult, check_counts
from daskstraggle.methods.base import WorkResult
from daskstraggle.methods.dsag import DSAG
from daskstraggle.problems import LeastSquares
from daskstraggle.runtime.lifecycle import Outcome, run
from daskstraggle.runtime.sim import SimRuntime

__all__ = ["FaultSimulation", "estimate_duration", "make_least_squares_data",
           "simulate_faults"]

_CALLER = "simulate_faults"
#: Rows of the synthetic problem per worker index, and its columns.
ROWS_PER_WORKER = 4
N_FEATURES = 3
#: Real seconds per simulated task, plus this many per worker (DSAG's cache search),
#: measured on a 2-core machine under load; :func:`estimate_duration` uses them.
SECONDS_PER_TASK = 4e-4
SECONDS_PER_TASK_AND_WORKER = 1.5e-6


@dataclass(frozen=True, kw_only=True, slots=True)
class FaultSimulation(SimulationResult):
    """Iteration times, participation and the engine's decisions of one faulty run.

    The fields of :class:`~daskstraggle.latency.SimulationResult` (its
    ``iteration_duration`` includes the previous update and sums to ``total_time``; the
    ``fresh`` and ``stale`` masks are by worker index, whichever worker computed its rows),
    and the following.

    Parameters
    ----------
    faults : tuple of Fault
        The fault terms of the run, in the order given.
    events : tuple of dict
        What happened, in time order: each fault term played (``event`` is its kind,
        ``loss``, ``freeze``, ...: :meth:`Fault.to_event`) and each decision of
        the worker pool (``move``: a worker index and its rows moved to another worker,
        with ``kind``, ``reason`` and where the data came from; ``help`` and
        ``stop-helping``: a worker shared an index's units); each with its ``time`` and
        the ``iteration`` it fell in.
    not_reached : tuple of Fault
        Fault terms timed after the run ended (not played).
    workers : tuple of str
        The worker computing each worker index at the end (names as in the faults:
        ``"0"`` .. ``"N-1"``, then the joined ``"N"``, ...).
    outcome : Outcome
        The run itself (its trace's rows in ``outcome.rows``, its attributes in
        ``outcome.attrs``), what ``solve(..., runtime="sim")`` builds its result from.

    See Also
    --------
    simulate_faults : Run the simulation.
    """

    faults: tuple[Fault, ...]
    events: tuple[dict[str, Any], ...]
    not_reached: tuple[Fault, ...]
    workers: tuple[str, ...]
    outcome: Outcome = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        """Return the numbers and events as plain Python lists (JSON-ready): those of
        :meth:`SimulationResult.to_dict` but the per-iteration ``fresh`` and ``stale``
        masks, and the stale participation, faults, events and workers."""
        out = SimulationResult.to_dict(self)
        del out["fresh"], out["stale"]
        out.update(stale_participation=self.stale.mean(axis=0).tolist(),
                   faults=[f.to_spec() for f in self.faults],
                   not_reached=[f.to_spec() for f in self.not_reached],
                   events=[dict(e) for e in self.events], workers=list(self.workers))
        return out


class _ResultLog(DSAG):
    """DSAG that also notes the worker indices of each round's fresh and stale results."""

    def __init__(self, n_wait: int, *, collect_window: float) -> None:
        super().__init__(n_wait, collect_window=collect_window)
        self.rounds: list[tuple[int, int, bool]] = []  # (round, worker index, fresh)

    def receive(self, result: WorkResult) -> None:
        """Note the result's worker index, then receive it as DSAG does."""
        if result.final:
            self.rounds.append((self.version, result.unit.worker_index,
                                result.unit.version == self.version))
        super().receive(result)


def make_least_squares_data(n_workers: int, *, rows_per_worker: int = ROWS_PER_WORKER,
                            n_features: int = N_FEATURES, seed: int = 0
                            ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Make the small least-squares problem :func:`simulate_faults` runs, from ``seed``:
    ``X`` of shape ``(n_workers * rows_per_worker, n_features)``, standard normal, and
    ``y = X @ ones + 0.1 * noise``.

    Examples
    --------
    >>> X, y = make_least_squares_data(8)
    >>> X.shape, y.shape
    ((32, 3), (32,))
    """
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_workers * rows_per_worker, n_features))
    y = X @ np.ones(n_features) + 0.1 * rng.normal(size=X.shape[0])
    return X, y


def estimate_duration(n_workers: int, n_iterations: int) -> float:
    """Return the real seconds :func:`simulate_faults` should take on a 2-core machine under
    load, roughly: one task per worker and iteration, each ``SECONDS_PER_TASK +
    SECONDS_PER_TASK_AND_WORKER * n_workers`` seconds (DSAG searches its gradient cache
    once per result).

    Examples
    --------
    >>> round(estimate_duration(8, 50), 2)
    0.16
    """
    per_task = SECONDS_PER_TASK + SECONDS_PER_TASK_AND_WORKER * n_workers
    return float(n_workers) * float(n_iterations) * per_task


def simulate_faults(model: LatencyModel, faults: Sequence[Fault], n_workers: int, n_wait: int,
                    n_iterations: int, *, collect_window: float = 0.02,
                    update_duration: float = 0.0,
                    rng: int | np.random.Generator | None = None) -> FaultSimulation:
    """Simulate ``n_iterations`` iterations of DSAG waiting for ``n_wait`` workers, with faults.

    DSAG (``n_wait``, ``collect_window``) runs on :func:`make_least_squares_data`'s
    problem (one partition per worker index) in :class:`~daskstraggle.runtime.SimRuntime`
    with ``latency=model`` and ``faults=faults``: the same run as
    ``solve(LeastSquares(), X, labels=y, method="dsag", method_params={"n_wait": n_wait,
    "collect_window": collect_window}, runtime="sim", n_workers=n_workers,
    n_partitions=n_workers, stragglers=..., max_iter=n_iterations, tol=None, rng=rng)``.
    A frozen worker's rows move once its work is overdue by the ``daskstraggle.frozen``
    or ``daskstraggle.stale`` settings, as in any simulated run.

    Parameters
    ----------
    model : LatencyModel
        Latency of each worker index's tasks; it must have a distribution.
    faults : sequence of Fault
        Losses, freezes, joins and retirements (the spec's fault terms).
    n_workers : int
        Number of workers at the start, ``N``.
    n_wait : int
        Fresh results waited for per iteration, in ``[1, n_workers]``.
    n_iterations : int
        Number of iterations (>= 1).
    collect_window : float, default=0.02
        After the ``n_wait``-th fresh result, keep collecting for this fraction of the
        iteration's elapsed time.
    update_duration : float, default=0.0
        Simulated seconds of each update.
    rng : int, Generator or None, default=None
        Seed of the latency draws and of the run's starting point.

    Returns
    -------
    simulation : FaultSimulation

    Raises
    ------
    InvalidParameterError
        If a parameter is out of range, ``model`` has no distribution, or the model or
        a fault names a worker beyond ``n_workers``.
    WorkerLostError
        If every worker is lost and none joins within the ``timeouts.no-worker``
        setting (simulated seconds).

    See Also
    --------
    daskstraggle.latency.simulate : The same iterations without faults, vectorised.

    Examples
    --------
    >>> from daskstraggle.latency import Gamma
    >>> from daskstraggle.latency.spec import parse_stragglers
    >>> faults = parse_stragglers("loss(workers=0, at=1)").faults
    >>> sim = simulate_faults(Gamma(mean=0.05, var=1e-4), faults, 8, 6, 40, rng=0)
    >>> [(e["event"], e.get("kind")) for e in sim.events]
    [('loss', None), ('move', 'lost')]
    >>> sim.workers[0] != "0"
    True
    """
    n_workers, n_wait, n_iterations, faults = _check_args(model, faults, n_workers, n_wait,
                                                          n_iterations)
    collect_window = check_nonnegative(collect_window, name="collect_window", caller=_CALLER)
    update_duration = check_nonnegative(update_duration, name="update_duration",
                                        caller=_CALLER)
    X, y = make_least_squares_data(n_workers)
    method = _ResultLog(n_wait, collect_window=collect_window)
    with SimRuntime(n_workers, latency=model, faults=faults, rng=rng,
                    update_duration=update_duration) as rt:
        outcome = run(rt, method, LeastSquares(),
                      open_matrix(X, labels=y, n_partitions=n_workers),
                      stop=StopRule(max_iter=n_iterations, tol=None), rng=rng)
        pool = rt.worker_pool
    assert pool is not None
    rows = outcome.rows
    ends = rows.column("wall_time")
    fresh = np.zeros((2, ends.shape[0], n_workers), dtype=bool)  # [stale, fresh]
    for version, index, is_fresh in method.rounds:
        if version < ends.shape[0]:
            fresh[int(is_fresh), version, index] = True
    played, not_reached = _fault_events(faults, n_workers, float(ends[-1]))
    decisions = _decision_events(pool, outcome.attrs.get("worker_joins", []))
    events = sorted(played + decisions, key=lambda e: e["time"])  # stable: faults first
    for event in events:
        event["iteration"] = int(np.searchsorted(ends, event["time"]))
    return FaultSimulation(
        iteration_time=ends,
        iteration_duration=np.diff(ends, prepend=0.0),  # with the update, as simulate's
        n_fresh=rows.column("n_fresh").astype(np.int64),
        n_stale=rows.column("n_stale").astype(np.int64), fresh=fresh[1], stale=fresh[0],
        n_wait=n_wait, faults=faults, events=tuple(events), not_reached=tuple(not_reached),
        workers=tuple(pool.workers), outcome=outcome)


def _check_args(model: Any, faults: Any, n_workers: Any, n_wait: Any, n_iterations: Any
                ) -> tuple[int, int, int, tuple[Fault, ...]]:
    """Validate :func:`simulate_faults`'s arguments."""
    n_workers, n_wait, n_iterations = check_counts(n_workers, n_wait, n_iterations, _CALLER)
    check_model(model, n_workers, _CALLER)
    if isinstance(faults, Fault):
        faults = (faults,)
    if not isinstance(faults, Sequence) or not all(isinstance(f, Fault) for f in faults):
        raise InvalidParameterError(
            f"The 'faults' parameter of {_CALLER} must be a sequence of faults, e.g. "
            f"parse_stragglers('loss(workers=1, at=2)').faults. Got {faults!r} instead."
        )
    for fault in faults:
        fault.check_n_workers(n_workers)
    return n_workers, n_wait, n_iterations, tuple(faults)


def _fault_events(faults: tuple[Fault, ...], n_workers: int, end: float
                  ) -> tuple[list[dict[str, Any]], list[Fault]]:
    """The fault terms played by ``end`` as events (in time order, ties in the spec's
    order), and those timed after it."""
    ordered = sorted(faults, key=lambda f: f.at)
    played: list[dict[str, Any]] = []
    cluster = ClusterState(n_workers=n_workers)  # joining workers are named N, N+1, ...
    for fault in (f for f in ordered if f.at <= end):
        played.append(fault.to_event(cluster))
        cluster = fault.apply(cluster)
    return played, [f for f in ordered if f.at > end]


def _decision_events(pool: Any, joins: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pool's moves and helpers (its decision log, in the order taken) as events."""
    offsets = np.concatenate([[0], np.cumsum(pool.partition_rows)]).astype(int).tolist()
    events: list[dict[str, Any]] = []
    for decision in pool.log:
        event = _decision_event(decision.instruction, joins)
        if event is not None:
            index = decision.instruction.index
            events.append({"time": float(decision.time), **event, "worker_index": index,
                           "rows": _row_ranges(pool.placement[index], offsets),
                           "stimulus_id": decision.instruction.stimulus_id})
    return events


def _decision_event(instruction: Any, joins: list[dict[str, Any]]) -> dict[str, Any] | None:
    """One pool decision as an event (None: not a move or a helper's start or stop)."""
    if isinstance(instruction, MoveIndex):
        data = "from-helper" if instruction.from_helper else \
            "fetched" if instruction.how == "fetch" else "reloaded"
        return {"event": "move", "kind": instruction.kind, "from": instruction.previous,
                "to": instruction.to, "reason": instruction.why, "data": data}
    if isinstance(instruction, StartHelping):
        record = next((j for j in joins if j.get("worker") == instruction.worker
                       and j.get("helps") == instruction.index), {})
        return {"event": "help", "worker": instruction.worker,
                "split_units": int(record.get("split_units", 0))}
    if isinstance(instruction, StopHelping):
        return {"event": "stop-helping", "worker": instruction.worker,
                "reason": instruction.why}
    return None


def _row_ranges(partitions: Sequence[int], offsets: list[int]) -> list[list[int]]:
    """The rows ``[start, stop)`` of ``partitions``, adjacent ones merged."""
    ranges: list[list[int]] = []
    for p in sorted(partitions):
        start, stop = offsets[p], offsets[p + 1]
        if ranges and ranges[-1][1] == start:
            ranges[-1][1] = stop
        else:
            ranges.append([start, stop])
    return ranges
