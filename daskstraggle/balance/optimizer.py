"""Choose each worker's number of subpartitions from its latency statistics (DSAG Alg. 1).

Worker ``i`` stores ``n_i`` rows split into ``p_i`` subpartitions, one per task, so raising
``p_i`` makes its tasks shorter. :func:`optimize` proposes ``p'`` that even out the expected
latencies ``e'_X,i = e_Y,i + e_Z,i p_i / p'_i`` while keeping the expected per-iteration
contribution ``h(p') = sum_i u_i(p') n_i / (p'_i n)`` above ``h_min`` (DSAG paper §VI-B).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from daskstraggle._validation import check_fraction, check_int, check_nonnegative, check_positive
from daskstraggle.errors import InvalidParameterError
from daskstraggle.latency.base import Seed
from daskstraggle.latency.models import Gamma
from daskstraggle.latency.simulator import simulate

__all__ = ["BalancePlan", "optimize"]

_CALLER = "optimize"
_MAX_STEPS = 100_000  # bound on the steps of each loop of Alg. 1
_FLOOR_SAMPLES = 1_000  # Monte Carlo rounds estimating P(worker i is the fastest)


@dataclass(frozen=True, kw_only=True, slots=True)
class BalancePlan:
    """New numbers of subpartitions proposed by :func:`optimize`, with their predictions.

    Parameters
    ----------
    subpartitions : tuple of int
        ``p'``: the proposed number of subpartitions of each worker.
    previous : tuple of int
        ``p``: the numbers the statistics were recorded at.
    expected_latency : ndarray of shape (n_workers,)
        ``e'_X,i``: expected seconds per task (compute plus communication) under ``p'``.
    previous_latency : ndarray of shape (n_workers,)
        ``e_X,i``: expected seconds per task under ``p``.
    contribution : float
        ``h(p')``, the expected per-iteration contribution under ``p'``.
    h_min : float
        The constraint ``h(p') >= h_min`` was evaluated against (with the tolerance).
    imbalance : float
        ``max / min`` of ``expected_latency`` over the adjustable workers.
    previous_imbalance : float
        ``max / min`` of ``previous_latency`` over the adjustable workers.
    improvement : float
        ``1 - imbalance / previous_imbalance`` (> 0 when ``p'`` is better balanced).
    accepted : bool
        Whether ``p'`` should be sent to the workers.

    See Also
    --------
    optimize : Build this object.
    """

    subpartitions: tuple[int, ...]
    previous: tuple[int, ...]
    expected_latency: NDArray[np.float64]
    previous_latency: NDArray[np.float64]
    contribution: float
    h_min: float
    imbalance: float
    previous_imbalance: float
    improvement: float
    accepted: bool

    def to_dict(self) -> dict[str, Any]:
        """Return the plan as plain Python lists and numbers (JSON-ready)."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        return {k: v.tolist() if isinstance(v, np.ndarray) else list(v) if isinstance(v, tuple)
                else v for k, v in values.items()}


def _fail(name: str, constraint: str, got: str, remedy: str = "") -> None:
    message = f"The {name!r} parameter of {_CALLER} must be {constraint}. Got {got} instead."
    raise InvalidParameterError(message + (f" {remedy}" if remedy else ""))


def _fail_first(bad: NDArray[np.bool_], values: NDArray[Any], name: str, constraint: str,
                remedy: str = "") -> None:
    """Fail naming the first entry of ``values`` that ``bad`` marks, if there is one."""
    if bad.any():
        k = int(np.argmax(bad))
        _fail(name, constraint, f"{name}[{k}]={values[k].item()!r}", remedy)


def _check_array(value: object, name: str, n_workers: int | None) -> NDArray[Any]:
    """Return ``value`` as a 1-D array with one entry per worker."""
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError):  # ragged nested sequences
        arr = np.asarray(None)
    if arr.ndim != 1 or arr.size == 0 or arr.dtype.kind not in "iuf":
        _fail(name, "a 1-D array of numbers, one per worker", repr(value))
    if n_workers is not None and arr.shape[0] != n_workers:
        _fail(name, f"an array of {n_workers} values (one per worker, like 'subpartitions')",
              f"{arr.shape[0]} values")
    return arr


def _check_counts(value: object, name: str, n_workers: int | None, low: int) -> NDArray[np.int64]:
    """Return per-worker integers >= ``low``, naming the first bad entry."""
    arr = _check_array(value, name, n_workers)
    bad = ~np.isfinite(arr) | (arr != np.round(arr)) | (arr < low) if arr.dtype.kind == "f" \
        else arr < low
    _fail_first(bad, arr, name, f"integers >= {low}, one per worker")
    return arr.astype(np.int64)


def _check_stat(value: object, name: str, n_workers: int, *, strict: bool) -> NDArray[np.float64]:
    """Return finite per-worker statistics (> 0 when ``strict``, else >= 0)."""
    arr = _check_array(value, name, n_workers).astype(float)
    bad = ~np.isfinite(arr) | ((arr <= 0) if strict else (arr < 0))
    remedy = ("A worker without latency samples has no statistics yet: check "
              "ProfileStatistics.ready first.") if np.isnan(arr[int(np.argmax(bad))]) else ""
    _fail_first(bad, arr, name, f"finite numbers {'>' if strict else '>='} 0, one per worker",
                remedy)
    return arr


class _Contribution:
    """Evaluate ``h(p')`` for candidate ``p'`` with common random numbers."""

    def __init__(self, p: NDArray[np.int64], rows: NDArray[np.int64], e_z: NDArray[np.float64],
                 v_z: NDArray[np.float64], e_y: NDArray[np.float64], v_y: NDArray[np.float64],
                 *, n_wait: int, collect_window: float, n_iterations: int,
                 rng: np.random.Generator) -> None:
        self.p, self.e_z, self.v_z = p, e_z, v_z
        self.e_y, self.v_y = tuple(e_y.tolist()), tuple(v_y.tolist())
        self.share = rows / rows.sum()
        self.n_workers, self.n_wait = p.shape[0], n_wait
        self.collect_window, self.n_iterations = collect_window, n_iterations
        self.sim_seed = int(rng.integers(2**63))
        if n_wait < self.n_workers:
            # draws at the current p; a gamma law scaled by p/p' is the same draw scaled
            sampler = Gamma(mean=tuple(e_z.tolist()), var=tuple(v_z.tolist()),
                            communication_mean=self.e_y, communication_var=self.v_y,
                            ).sampler(self.n_workers, rng=int(rng.integers(2**63)))
            draws = [sampler.sample(i, size=_FLOOR_SAMPLES) for i in range(self.n_workers)]
            self.z0 = np.array([d[0] for d in draws])
            self.y0 = np.array([d[1] for d in draws])

    def floor(self, p_new: NDArray[np.int64]) -> NDArray[np.float64]:
        """Return the smoothed Monte Carlo estimate of P(worker i is the fastest)."""
        x = self.z0 * (self.p / p_new)[:, None] + self.y0
        wins = np.bincount(x.argmin(axis=0), minlength=self.n_workers)
        return (wins + 1.0 / self.n_workers) / (_FLOOR_SAMPLES + 1.0)

    def participation(self, p_new: NDArray[np.int64]) -> NDArray[np.float64]:
        """Return ``u_i(p')``, floored by :meth:`floor`."""
        if self.n_wait == self.n_workers:
            return np.ones(self.n_workers)
        ratio = self.p / p_new
        model = Gamma(mean=tuple((self.e_z * ratio).tolist()),
                      var=tuple((self.v_z * ratio**2).tolist()),
                      communication_mean=self.e_y, communication_var=self.v_y)
        result = simulate(model, self.n_workers, self.n_wait, self.n_iterations,
                          collect_window=self.collect_window, method="vectorised",
                          rng=self.sim_seed)
        return np.maximum(result.participation, self.floor(p_new))

    def __call__(self, p_new: NDArray[np.int64]) -> float:
        return float(np.sum(self.participation(p_new) * self.share / p_new))


def _imbalance(latency: NDArray[np.float64], mask: NDArray[np.bool_]) -> float:
    values = latency[mask] if mask.any() else latency
    return float(values.max() / values.min())


def _check_within_rows(counts: dict[str, NDArray[np.int64]], n_rows: NDArray[np.int64]) -> None:
    """Raise if a worker has more subpartitions than rows in any of ``counts``."""
    for name, values in counts.items():
        over = values > n_rows
        if over.any():
            k = int(np.argmax(over))
            _fail(name, "at most 'rows' for every worker", f"{name}[{k}]={int(values[k])} > "
                  f"rows[{k}]={int(n_rows[k])}", "A worker cannot split its rows into more "
                  "subpartitions than rows.")


_Latency = Callable[[NDArray[np.int64]], NDArray[np.float64]]


def _equalise(p: NDArray[np.int64], n_rows: NDArray[np.int64], e_x: NDArray[np.float64],
              e_y: NDArray[np.float64], e_z: NDArray[np.float64],
              adjustable: NDArray[np.bool_]) -> NDArray[np.int64]:
    """Step (1): every adjustable worker's ``p'`` that matches the slowest one's latency."""
    i = int(np.argmax(np.where(adjustable, e_x, -np.inf)))
    denom = e_y[i] + e_z[i] - e_y
    ok = adjustable & (denom > 0)
    target = e_z * p / np.where(ok, denom, 1.0)
    target = np.floor(target + 1e-9 * np.maximum(target, 1.0))  # e.g. 0.3 * 7 / 0.3
    return np.where(ok, np.clip(target, 1, n_rows), p).astype(np.int64)


def _add_work(h: _Contribution, latency: _Latency, adjustable: NDArray[np.bool_],
              new: NDArray[np.int64], h_min: float) -> tuple[NDArray[np.int64], float, bool]:
    """Step (2): give the fastest worker 1 % more work until ``h(new) >= h_min``.

    Returns ``new``, ``h(new)`` and whether the constraint holds.
    """
    value = h(new)
    for _ in range(_MAX_STEPS):
        if value >= h_min:
            return new, value, True
        movable = adjustable & (new > 1)
        if not movable.any():
            return new, value, False
        j = int(np.argmin(np.where(movable, latency(new), np.inf)))
        new[j] = max(min(99 * new[j] // 100, new[j] - 1), 1)
        value = h(new)
    return new, value, value >= h_min


def _shed_work(h: _Contribution, latency: _Latency, adjustable: NDArray[np.bool_],
               new: NDArray[np.int64], value: float, n_rows: NDArray[np.int64],
               threshold: float) -> tuple[NDArray[np.int64], float]:
    """Step (3): take 1 % off the slowest worker while ``h >= threshold``.

    A step that breaks it is not taken (the paper returns one step past it).
    """
    for _ in range(_MAX_STEPS):
        movable = adjustable & (new < n_rows)
        if not movable.any():
            break
        j = int(np.argmax(np.where(movable, latency(new), -np.inf)))
        candidate = new.copy()
        candidate[j] = min(max(-(-101 * new[j] // 100), new[j] + 1), n_rows[j])
        candidate_value = h(candidate)
        if candidate_value < threshold:
            break
        new, value = candidate, candidate_value
    return new, value


def optimize(subpartitions: ArrayLike, rows: ArrayLike, compute_mean: ArrayLike,
             compute_var: ArrayLike, communication_mean: ArrayLike, communication_var: ArrayLike,
             *, n_wait: int, p_initial: ArrayLike | None = None, h_min: float | None = None,
             margin: float = 0.1, tolerance: float = 0.01, comm_fraction: float = 0.1,
             collect_window: float = 0.02, n_iterations: int = 100, rng: Seed = 0) -> BalancePlan:
    """Propose new numbers of subpartitions that even out the workers' latencies.

    Parameters
    ----------
    subpartitions : array-like of int of shape (n_workers,)
        ``p_i``: current subpartitions of each worker, in ``[1, rows[i]]``.
    rows : array-like of int of shape (n_workers,)
        ``n_i``: rows stored by each worker (>= 1).
    compute_mean, compute_var : array-like of shape (n_workers,)
        ``e_Z,i`` (> 0) and ``v_Z,i`` (>= 0): mean and variance of the compute seconds of
        one task at the current ``p_i``.
    communication_mean, communication_var : array-like of shape (n_workers,)
        ``e_Y,i`` and ``v_Y,i`` (>= 0): mean and variance of the communication seconds.
    n_wait : int
        Fresh results the coordinator waits for per iteration, in ``[1, n_workers]``.
    p_initial : array-like of int of shape (n_workers,), default=None
        ``p_0``, the baseline giving ``h_min = h(p_0)``; None means ``subpartitions``.
    h_min : float, default=None
        The contribution constraint (> 0); None computes ``h(p_initial)`` from the
        current statistics.
    margin : float, default=0.1
        Accept ``p'`` only if ``max/min`` expected latency drops by at least this
        fraction, in (0, 1).
    tolerance : float, default=0.01
        Relative tolerance of the constraint: ``h(p') >= (1 - tolerance) h_min``, in (0, 1).
    comm_fraction : float, default=0.1
        Workers whose compute is below this fraction of their latency keep ``p_i``,
        in [0, 1).
    collect_window : float, default=0.02
        The coordinator's collect window (see :func:`~daskstraggle.latency.simulate`).
    n_iterations : int, default=100
        Simulated iterations per evaluation of ``u_i`` (>= 1).
    rng : int, SeedSequence, Generator or None, default=0
        Seed of the simulations; every evaluation of ``h`` uses the same draws.

    Returns
    -------
    plan : BalancePlan
        The proposed ``p'``, its predicted latencies and contribution, and whether to
        send it.

    Raises
    ------
    InvalidParameterError
        If a parameter is out of range, the arrays differ in length, or a statistic is
        not finite (a worker without samples).

    See Also
    --------
    daskstraggle.latency.LatencyProfiler : Provides the statistics.
    daskstraggle.latency.simulate : Estimates ``u_i``.

    References
    ----------
    .. [1] A. Severinson, E. Rosnes, S. El Rouayheb, A. Graell i Amat, "DSAG: A
       Mixed Synchronous-Asynchronous Iterative Method for Straggler-Resilient Learning",
       IEEE Trans. Commun., 2022, §VI-B, Algorithm 1 (notes: ``docs/algorithms.md``).

    Notes
    -----
    Algorithm 1 runs over the *adjustable* workers (``e_Z,i >= comm_fraction * e_X,i``;
    the others keep ``p_i``): (1) ``p'_j = floor(e_Z,j p_j / (e_Y,i + e_Z,i - e_Y,j))``
    within ``[1, n_j]``, ``i`` the slowest (unchanged if the denominator is not positive);
    (2) while ``h(p') < h_min``, the fastest worker with ``p'_j > 1`` takes 1 % more work
    (at least one subpartition); (3) while ``h(p') >= (1 - tolerance) h_min``, the slowest
    with ``p'_j < n_j`` sheds 1 %. Each loop stops after 100 000 steps or when no worker
    can move; if loop (2) stops that way the plan is not accepted.

    ``u_i(p')`` is the participation of :func:`~daskstraggle.latency.simulate` on a gamma
    model of ``e'_Z, v'_Z, e_Y, v_Y``, always with the same seed (common random numbers),
    floored by ``(k_i + 1/N) / (S + 1)``, ``k_i`` the rounds of ``S = 1000`` common draws
    worker ``i`` is the fastest in, so no worker's load is free to remove. With
    ``n_wait = n_workers``, ``u_i = 1`` and nothing is simulated.

    Differences from the paper: loop (3) returns the last ``p'`` that satisfied the
    constraint (the paper one step past it); step (1)'s slowest worker and the imbalance
    are over the adjustable workers only (all if none is); a plan is accepted only if it
    changes ``p``, meets the constraint and lowers the imbalance by ``margin``.

    Examples
    --------
    Worker 1 computes twice as slowly; waiting for both, it ends with about twice the
    subpartitions (half the work per task) of worker 0.

    >>> plan = optimize([100, 100], [1000, 1000], [1.0, 2.0], [0.0, 0.0], [0.01, 0.01],
    ...                 [0.0, 0.0], n_wait=2)
    >>> plan.subpartitions, plan.accepted
    ((75, 151), True)
    >>> round(plan.imbalance, 3), round(plan.previous_imbalance, 3)
    (1.007, 1.99)
    """
    p = _check_counts(subpartitions, "subpartitions", None, 1)
    n_workers = p.shape[0]
    n_rows = _check_counts(rows, "rows", n_workers, 1)
    p0 = p if p_initial is None else _check_counts(p_initial, "p_initial", n_workers, 1)
    _check_within_rows({"subpartitions": p, "p_initial": p0}, n_rows)
    e_z = _check_stat(compute_mean, "compute_mean", n_workers, strict=True)
    v_z = _check_stat(compute_var, "compute_var", n_workers, strict=False)
    e_y = _check_stat(communication_mean, "communication_mean", n_workers, strict=False)
    v_y = _check_stat(communication_var, "communication_var", n_workers, strict=False)
    _fail_first((v_y > 0) & (e_y == 0), v_y, "communication_var",
                "0 where 'communication_mean' is 0")
    n_wait = check_int(n_wait, name="n_wait", caller=_CALLER, low=1, high=n_workers)
    h_min = check_positive(h_min, name="h_min", caller=_CALLER, allow_none=True)
    margin = check_fraction(margin, name="margin", caller=_CALLER)
    tolerance = check_fraction(tolerance, name="tolerance", caller=_CALLER)
    comm_fraction = check_fraction(comm_fraction, name="comm_fraction", caller=_CALLER,
                                   closed_low=True)
    collect_window = check_nonnegative(collect_window, name="collect_window", caller=_CALLER)
    n_iterations = check_int(n_iterations, name="n_iterations", caller=_CALLER, low=1)

    h = _Contribution(p, n_rows, e_z, v_z, e_y, v_y, n_wait=n_wait,
                      collect_window=collect_window, n_iterations=n_iterations,
                      rng=np.random.default_rng(rng))
    if h_min is None:
        h_min = h(p0)

    def latency(q: NDArray[np.int64]) -> NDArray[np.float64]:
        return e_y + e_z * p / q

    e_x = latency(p)
    adjustable = e_z >= comm_fraction * e_x
    new, feasible = p.copy(), True
    if adjustable.any():
        new = _equalise(p, n_rows, e_x, e_y, e_z, adjustable)
        new, value, feasible = _add_work(h, latency, adjustable, new, h_min)
        if feasible:
            new, value = _shed_work(h, latency, adjustable, new, value, n_rows,
                                    (1.0 - tolerance) * h_min)
    else:
        value = h(new)

    expected = latency(new)
    imbalance = _imbalance(expected, adjustable)
    previous_imbalance = _imbalance(e_x, adjustable)
    accepted = (
        feasible
        and bool(np.any(new != p))
        and value >= (1.0 - tolerance) * h_min
        and imbalance <= (1.0 - margin) * previous_imbalance
    )
    return BalancePlan(
        subpartitions=tuple(int(v) for v in new),
        previous=tuple(int(v) for v in p),
        expected_latency=expected,
        previous_latency=e_x,
        contribution=value,
        h_min=float(h_min),
        imbalance=imbalance,
        previous_imbalance=previous_imbalance,
        improvement=1.0 - imbalance / previous_imbalance,
        accepted=bool(accepted),
    )
