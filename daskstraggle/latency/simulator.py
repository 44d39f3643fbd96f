"""Event-driven simulation of iteration times with the DSAG coordinator's semantics.

Unlike order statistics (:mod:`daskstraggle.latency.order`), workers the coordinator did
not wait for stay busy into later iterations (DSAG paper §IV-B, coordinator loop §V-A):

- Each worker is idle or busy with one task stamped with the iterate version it computes.
  Iteration ``t`` starts at ``s_t`` (``s_0 = 0``), when every idle worker starts a task of
  version ``t``; a task started at ``a`` by worker ``i`` takes ``compute + communication``
  drawn with ``sampler.sample(i, time=a, iteration=version, load=load_i)``.
- A completion of version ``t`` during iteration ``t`` is fresh (the worker then idles);
  an older one is stale, and the worker at once starts a task of version ``t``.
- Iteration ``t`` ends at ``E_t = T_w + collect_window * (T_w - s_t)``, ``T_w`` the
  ``n_wait``-th fresh completion, or at the last fresh completion once every worker
  delivered one; ``s_{t+1} = E_t + update_duration``. Completions in ``(E_t, s_{t+1}]``
  are stale in iteration ``t + 1``.

``method="event"`` runs a priority queue of finish times (ties by worker index) and takes
any sampler; ``method="vectorised"`` (stateless samplers only) computes each worker's next
fresh completion ``max(s_t, f_i) + d_i`` and ``T_w`` with :func:`numpy.partition`. Both give
the same numbers: stateless samplers draw every worker's latencies up front in one block
(:meth:`~daskstraggle.latency.base.LatencySampler.draw`), consumed in task order.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from daskstraggle._validation import check_choice, check_int, check_nonnegative
from daskstraggle.errors import InvalidParameterError
from daskstraggle.latency.base import LatencyModel, LatencySampler, Seed
from daskstraggle.latency.order import _check_finite, _check_load, check_model

__all__ = ["SimulationResult", "simulate"]

_CALLER = "simulate"


@dataclass(frozen=True, kw_only=True, slots=True)
class SimulationResult:
    """Iteration times and per-worker participation of one simulated run.

    Parameters
    ----------
    iteration_time : ndarray of shape (n_iterations,)
        End time ``E_t`` of each iteration (seconds since the start).
    iteration_duration : ndarray of shape (n_iterations,)
        ``E_t - E_{t-1}`` (``E_{-1} = 0``), the previous ``update_duration`` included.
    n_fresh : ndarray of int of shape (n_iterations,)
        Fresh results per iteration (``>= n_wait``).
    n_stale : ndarray of int of shape (n_iterations,)
        Stale results per iteration.
    fresh : ndarray of bool of shape (n_iterations, n_workers)
        Which workers delivered a fresh result in each iteration.
    stale : ndarray of bool of shape (n_iterations, n_workers)
        Which workers delivered a stale result in each iteration.
    n_wait : int
        Fresh results waited for per iteration.

    See Also
    --------
    simulate : Run the simulation.
    """

    iteration_time: NDArray[np.float64]
    iteration_duration: NDArray[np.float64]
    n_fresh: NDArray[np.int64]
    n_stale: NDArray[np.int64]
    fresh: NDArray[np.bool_]
    stale: NDArray[np.bool_]
    n_wait: int

    @property
    def n_iterations(self) -> int:
        """Number of simulated iterations."""
        return int(self.iteration_time.shape[0])

    @property
    def n_workers(self) -> int:
        """Number of workers."""
        return int(self.fresh.shape[1])

    @property
    def total_time(self) -> float:
        """End time of the last iteration (seconds)."""
        return float(self.iteration_time[-1])

    @property
    def participation(self) -> NDArray[np.float64]:
        """Fraction of iterations each worker delivered a fresh result in (DSAG's ``u_i``)."""
        return self.fresh.mean(axis=0)

    def to_dict(self) -> dict[str, Any]:
        """Return the result as plain Python lists and numbers (JSON-ready)."""
        arrays = ("iteration_time", "iteration_duration", "n_fresh", "n_stale", "fresh",
                  "stale", "participation")
        return {"n_workers": self.n_workers, "n_wait": self.n_wait,
                "n_iterations": self.n_iterations, "total_time": self.total_time,
                **{name: getattr(self, name).tolist() for name in arrays}}


class _Loop(NamedTuple):
    """The coordinator's settings and the arrays a simulation fills."""

    n_wait: int
    collect_window: float
    update_duration: float
    ends: NDArray[np.float64]  # (n_iterations,)
    fresh: NDArray[np.bool_]  # (n_iterations, n_workers)
    stale: NDArray[np.bool_]  # (n_iterations, n_workers)


def _run_vectorised(durations: NDArray[np.float64], loop: _Loop) -> None:
    """Fill ``loop``'s ``ends``, ``fresh`` and ``stale`` from pre-drawn latencies (stateless
    models)."""
    n_wait, collect_window, update_duration, ends, fresh, stale = loop
    n_workers, n_draws = durations.shape
    flat = durations.ravel()
    pos = np.arange(n_workers) * n_draws  # flat index of each worker's next draw
    finish = np.zeros(n_workers)  # finish time of each worker's current or last task
    pending = np.zeros(n_workers, dtype=bool)  # current task not yet counted
    begin = np.empty(n_workers)
    done = np.empty(n_workers)
    started = np.empty(n_workers, dtype=bool)
    k = n_wait - 1
    s = 0.0
    for t in range(ends.shape[0]):
        np.maximum(finish, s, out=begin)
        np.add(begin, flat.take(pos), out=done)
        tw = float(np.partition(done, k)[k])
        e = tw + collect_window * (tw - s)
        last = float(done.max())
        if last <= e:  # every worker fresh: nothing left to collect, close the window
            e = last
        np.less_equal(finish, e, out=started)
        np.logical_and(pending, started, out=stale[t])
        np.less_equal(done, e, out=fresh[t])
        np.copyto(finish, done, where=started)
        pos += started
        np.logical_not(fresh[t], out=pending)
        ends[t] = e
        s = e + update_duration


def _run_events(draw: Callable[[int, float, int], float], loop: _Loop) -> None:
    """Fill ``loop``'s ``ends``, ``fresh`` and ``stale`` event by event (any sampler).

    ``draw(i, start_time, version)`` returns the latency of worker ``i``'s next task.
    """
    n_wait, collect_window, update_duration, ends, fresh, stale = loop
    n_workers = fresh.shape[1]
    heap: list[tuple[float, int]] = []
    version = [-1] * n_workers
    busy = [False] * n_workers
    push, pop = heapq.heappush, heapq.heappop
    s = 0.0
    for t in range(ends.shape[0]):
        fresh_row, stale_row = fresh[t], stale[t]
        # completions during the update (E_{t-1}, s_t] are stale, processed at s_t
        while heap and heap[0][0] <= s:
            _, i = pop(heap)
            busy[i] = False
            stale_row[i] = True
        for i in range(n_workers):
            if not busy[i]:
                busy[i] = True
                version[i] = t
                push(heap, (s + draw(i, s, t), i))
        n_fresh = 0
        e = math.inf
        while heap and heap[0][0] <= e:
            f, i = pop(heap)
            if version[i] == t:
                fresh_row[i] = True
                busy[i] = False
                n_fresh += 1
                if n_fresh == n_wait:
                    e = f + collect_window * (f - s)
                if n_fresh == n_workers:  # nothing left to collect: close the window
                    e = f
            else:
                stale_row[i] = True
                version[i] = t
                push(heap, (f + draw(i, f, t), i))
        ends[t] = e
        s = e + update_duration


def _run(sampler: LatencySampler, method: str, loads: NDArray[np.float64], loop: _Loop,
         model: LatencyModel) -> None:
    """Fill ``loop``'s arrays with the chosen engine."""
    if not sampler.stateless:
        load_list = loads.tolist()

        def draw_one(i: int, start: float, version: int) -> float:
            compute, communication = sampler.sample(i, time=start, iteration=version,
                                                    load=load_list[i])
            return float(compute) + float(communication)

        _run_events(draw_one, loop)
        return
    durations = sampler.draw(loads, loop.ends.shape[0])  # (n_workers, n_iterations)
    _check_finite(durations, caller=_CALLER, model=model)
    if method != "event":
        _run_vectorised(durations, loop)
        return
    rows = [iter(row) for row in durations.tolist()]  # each worker's draws, in task order
    _run_events(lambda i, start, version: next(rows[i]), loop)


def check_counts(n_workers: Any, n_wait: Any, n_iterations: Any,
                 caller: str) -> tuple[int, int, int]:
    """Check a simulation's worker, wait and iteration counts (each an int >= 1, ``n_wait``
    at most ``n_workers``); return them as ints, or raise one line naming ``caller``."""
    n_workers = check_int(n_workers, name="n_workers", caller=caller, low=1)
    n_wait = check_int(
        n_wait, name="n_wait", caller=caller, low=1, high=n_workers,
        remedy="It is the number of fresh results waited for per iteration: at least 1 "
        "and at most n_workers.",
    )
    return n_workers, n_wait, check_int(n_iterations, name="n_iterations", caller=caller, low=1)


def simulate(model: LatencyModel, n_workers: int, n_wait: int, n_iterations: int, *,
             load: float | ArrayLike = 1.0, collect_window: float = 0.02,
             update_duration: float = 0.0, method: str = "auto",
             rng: Seed = None) -> SimulationResult:
    """Simulate ``n_iterations`` iterations of a coordinator that waits for ``n_wait`` workers
    (DSAG's coordinator; see the module docstring).

    Parameters
    ----------
    model : LatencyModel
        Per-worker latency; it must have a distribution (``model.has_distribution``).
    n_workers : int
        Number of workers ``N``.
    n_wait : int
        Fresh results waited for per iteration, in ``[1, n_workers]``.
    n_iterations : int
        Number of iterations (>= 1).
    load : float or array-like of shape (n_workers,), default=1.0
        Work per task relative to an equal share of the rows (one value, or per worker).
    collect_window : float, default=0.02
        After the ``n_wait``-th fresh result, keep collecting for this fraction of the
        iteration's elapsed time (DSAG uses 2 %).
    update_duration : float, default=0.0
        Seconds the coordinator spends updating the iterate between iterations.
    method : {"auto", "event", "vectorised"}, default="auto"
        ``"event"``: priority-queue simulation, any sampler. ``"vectorised"``: one array
        step per iteration, stateless samplers only (much faster). ``"auto"``: vectorised
        when the sampler is stateless, else event.
    rng : int, SeedSequence, Generator or None, default=None
        Seed of the per-worker latency streams.

    Returns
    -------
    result : SimulationResult

    Raises
    ------
    InvalidParameterError
        If a parameter is out of range, ``model`` has no distribution or does not fit
        ``n_workers``, ``method="vectorised"`` is asked for a stateful model, or a
        latency (times ``load``) or a simulated time overflows float64.

    See Also
    --------
    daskstraggle.latency.order.order_statistics : Latency of the ``w``-th fastest worker
        when all workers start together.

    References
    ----------
    .. [1] The DSAG paper (:mod:`daskstraggle.latency`), §IV-B (event-driven simulation) and
       §V-A (coordinator loop, 2 % collect window).

    Notes
    -----
    The paper's simulator has no stale results; here a stale completion is counted and
    the worker gets the current iterate at once, as DSAG's coordinator does.

    Examples
    --------
    Two fast workers and a slow one; waiting for 2 of 3, the slow worker never delivers
    a fresh result: its results arrive stale (in iteration 2) or not at all.

    >>> from daskstraggle.latency import Constant
    >>> res = simulate(Constant(compute=(1.0, 1.0, 3.0)), 3, 2, 4, collect_window=0.0)
    >>> res.iteration_time
    array([1., 2., 3., 4.])
    >>> res.n_stale
    array([0, 0, 1, 0])
    >>> res.participation
    array([1., 1., 0.])
    """
    n_workers, n_wait, n_iterations = check_counts(n_workers, n_wait, n_iterations, _CALLER)
    collect_window = check_nonnegative(collect_window, name="collect_window", caller=_CALLER)
    update_duration = check_nonnegative(update_duration, name="update_duration", caller=_CALLER)
    method = check_choice(method, name="method", caller=_CALLER,
                          choices=["auto", "event", "vectorised"])
    loads = _check_load(load, n_workers, _CALLER)
    sampler = check_model(model, n_workers, _CALLER).sampler(n_workers, rng=rng)
    if method == "vectorised" and not sampler.stateless:
        raise InvalidParameterError(
            f"The 'method' parameter of {_CALLER} can be 'vectorised' only for a stateless "
            f"latency model (draws independent of time, iteration and history); "
            f"the {model.name!r} latency model is stateful. Use method='event' or 'auto'."
        )

    ends = np.empty(n_iterations)
    fresh = np.zeros((n_iterations, n_workers), dtype=bool)
    stale = np.zeros((n_iterations, n_workers), dtype=bool)
    with np.errstate(over="ignore", invalid="ignore"):
        _run(sampler, method, loads,
             _Loop(n_wait, collect_window, update_duration, ends, fresh, stale), model)
    _check_finite(ends, caller=_CALLER, model=model, what="a simulated time",
                  remedy="use smaller times in the model, a smaller load, collect_window or "
                  "update_duration.")
    return SimulationResult(
        iteration_time=ends,
        iteration_duration=np.diff(ends, prepend=0.0),
        n_fresh=fresh.sum(axis=1),
        n_stale=stale.sum(axis=1),
        fresh=fresh,
        stale=stale,
        n_wait=n_wait,
    )
