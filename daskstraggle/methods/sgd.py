"""Distributed SGD that waits only for the fastest ``n_wait`` workers (DSAG paper, §V), and
what SGD, SAG and DSAG share: subpartitions of each worker's rows, processed in turn, and
their resizing by the load balancer (§VI)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from daskstraggle._validation import check_int, check_nonnegative
from daskstraggle.balance.balancer import LoadBalancer, check_balance
from daskstraggle.balance.partition import align_next, subpartition_bounds
from daskstraggle.errors import InvalidParameterError
from daskstraggle.methods.base import Method, RoundSummary, WorkResult, WorkUnit
from daskstraggle.methods.cache import normalize_ranges
from daskstraggle.methods.options import MethodOption
from daskstraggle.problems.base import Problem

__all__ = ["SGD"]


class SGD(Method):
    """Wait for the ``n_wait`` fastest fresh results, scale their sum by the rows covered.

    The coordinator loop of the DSAG paper (§V-A) with stale results discarded:

    - an idle worker gets the current iterate unless it already delivered a fresh result
      for it (it then waits for the next iteration);
    - a result computed at an older version is *stale*: it is dropped and the worker is
      given the current iterate at once;
    - once ``n_wait`` fresh results arrived (plus ``collect_window`` of the round's
      elapsed time, collected by the runtime), the gradient estimate is the sum of the
      fresh results divided by ``xi`` = rows covered / all rows, and the iterate steps.

    With ``n_wait`` equal to the number of workers and one subpartition each it is GD.

    Parameters
    ----------
    n_wait : int or None, default=None
        Fresh results waited for each iteration (None: all workers holding data).
    subpartitions : int or sequence of int, default=1
        Subpartitions ``p_i`` per worker (one value for all, or one per worker). Each
        task covers one subpartition of the worker's rows, in turn; the load balancer
        changes them without moving data.
    collect_window : float, default=0.02
        Fraction of the round's elapsed time to keep collecting after the ``n_wait``-th
        fresh result.
    balance : bool or LoadBalancer or None, default=None
        Balance the load while running (DSAG paper §VI): the runtime profiles each
        worker's latency and asks the balancer for new subpartition counts, used from each
        worker's next task. True uses ``LoadBalancer()``; None or False: fixed.

    Notes
    -----
    Without an explicit ``step_size`` the runtime scales the problem's GD step by
    :meth:`step_factor`.

    References
    ----------
    Severinson, Rosnes, El Rouayheb, Graell i Amat, "DSAG: A mixed synchronous-
    asynchronous iterative method for straggler-resilient learning", IEEE Trans.
    Commun., 2022, §V-A (notes: ``docs/algorithms.md``).

    Examples
    --------
    >>> SGD(n_wait=2).get_params()
    {'n_wait': 2, 'subpartitions': 1, 'collect_window': 0.02, 'balance': None}
    """

    name = "sgd"
    description = "wait for the fastest --wait workers"
    cli_options: ClassVar[tuple[MethodOption, ...]] = (
        MethodOption("--wait", "n_wait", "fresh results waited for each iteration "
                     "(default: all workers).", type=int),
        MethodOption("--subpartitions", "subpartitions", "subpartitions per worker, "
                     "processed in turn (default 1).", type=int),
        MethodOption("--balance", "balance", "balance the load while running (DSAG paper "
                     "§VI): resize each worker's subpartitions from its measured latency; "
                     "start from --subpartitions well above 1 (e.g. 10).", type=bool),
        MethodOption("--balance-margin", "balance_margin", "with --balance: send a new plan "
                     "only if it lowers the max/min expected worker latency by this fraction "
                     "(default 0.1).", type=float),
        MethodOption("--balance-window", "balance_window", "with --balance: seconds of "
                     "latency samples kept per worker (default 10).", type=float),
    )

    @classmethod
    def params_from_cli(cls, values: dict[str, Any]) -> dict[str, Any]:
        """Return the parameters; ``--balance`` with its margin and window becomes a
        :class:`~daskstraggle.balance.LoadBalancer` (margin or window alone is refused)."""
        values = dict(values)
        tuning = {key: values.pop(f"balance_{key}") for key in ("margin", "window")
                  if f"balance_{key}" in values}
        balanced = values.pop("balance", False)
        if tuning and not balanced:
            raise InvalidParameterError(
                f"{', '.join('--balance-' + key for key in tuning)}: only with --balance")
        params = super().params_from_cli(values)
        if balanced:
            params["balance"] = LoadBalancer(**tuning)
        return params

    def __init__(self, n_wait: int | None = None, *, subpartitions: int | Sequence[int] = 1,
                 collect_window: float = 0.02,
                 balance: bool | LoadBalancer | None = None) -> None:
        caller = type(self).__name__
        if n_wait is not None:
            n_wait = check_int(n_wait, name="n_wait", caller=caller, low=1)
        self.n_wait = n_wait
        self.subpartitions = _check_subpartitions(subpartitions, caller)
        self.collect_window = check_nonnegative(collect_window, name="collect_window",
                                                caller=caller)
        self.balance = balance
        self.balancer = check_balance(balance, caller=caller)

    def get_params(self) -> dict[str, Any]:
        """Return the parameters (``balance``: the balancer's)."""
        return {**super().get_params(),
                "balance": None if self.balancer is None else self.balancer.get_params()}

    def step_factor(self, problem: Problem, n_workers: int) -> float:
        """Return ``problem.stochastic_step_factor`` for :meth:`convergence_window`, the
        staleness of a cached part (0.9 for PCA, ``min(1, 2 / p)`` for regression)."""
        return float(problem.stochastic_step_factor(self.convergence_window(n_workers)))

    def load_balancer(self) -> LoadBalancer | None:
        """Return the load balancer (``balance``), or None when balancing is off."""
        return self.balancer

    def convergence_window(self, n_workers: int) -> int:
        """Return the largest subpartition count, doubled with ``balance`` (which typically
        doubles the slowest workers' counts): a cached part is refreshed about that often."""
        p = self.subpartitions
        window = max(p) if isinstance(p, tuple) else int(p)
        return 2 * window if self.balancer is not None else window

    def check_n_workers(self, n_workers: int) -> None:
        """Refuse ``n_wait`` > ``n_workers`` and per-worker lists of another length."""
        if self.n_wait is not None and self.n_wait > n_workers:
            raise self._n_wait_error(self.n_wait, n_workers, "the number of workers")
        if isinstance(self.subpartitions, tuple) and len(self.subpartitions) != n_workers:
            raise InvalidParameterError(
                f"The 'subpartitions' parameter of {type(self).__name__} has "
                f"{len(self.subpartitions)} values but there are {n_workers} workers; give "
                "one value or one per worker."
            )

    def _reset(self) -> None:
        """Every worker at its first subpartition."""
        placement = self._placement
        self.check_n_workers(len(placement))
        holders = [i for i, parts in enumerate(placement) if parts]
        n_wait = len(holders) if self.n_wait is None else self.n_wait
        if n_wait > len(holders):
            raise self._n_wait_error(n_wait, len(holders), "the workers holding data")
        partition_rows = self._worker_rows_of()
        self._n_wait_run = n_wait
        self._fresh: dict[int, WorkResult] = {}
        self._partition_starts = np.concatenate([[0], np.cumsum(partition_rows)]).astype(int)
        self._next_sub = [0] * len(placement)
        self._bounds: list[np.ndarray] = []
        for i, rows in enumerate(self._worker_rows):
            p = self.subpartitions[i] if isinstance(self.subpartitions, tuple) \
                else self.subpartitions
            if placement[i] and p > rows:
                raise InvalidParameterError(
                    f"The 'subpartitions' parameter of {type(self).__name__} asks for {p} "
                    f"subpartitions of worker {i}, which holds {rows} rows; use at most {rows}."
                )
            self._bounds.append(subpartition_bounds(rows, p) if rows else np.zeros(2, int))

    def _n_wait_error(self, n_wait: int, most: int, what: str) -> InvalidParameterError:
        return InvalidParameterError(
            f"The 'n_wait' parameter of {type(self).__name__} must be an int in [1, {most}] "
            f"({what}). Got {n_wait!r} instead.")

    @property
    def n_wait_run(self) -> int:
        """Fresh results waited for per iteration in the current run."""
        return self._n_wait_run

    @property
    def subpartition_counts(self) -> tuple[int, ...]:
        """Current number of subpartitions ``p_i`` of each worker (1 for workers without rows)."""
        return tuple(len(b) - 1 for b in self._bounds)

    @property
    def worker_rows(self) -> tuple[int, ...]:
        """Rows each worker stores (``n_i``)."""
        return tuple(self._worker_rows)

    def set_subpartitions(self, counts: Sequence[int]) -> list[tuple[int, int, int]]:
        """Resize the subpartitions; each worker's next task uses its new ``p_i``.

        A resized worker's next subpartition starts where an old one started (DSAG paper,
        Algorithm 2: :func:`~daskstraggle.balance.partition.align_next`); no data moves.

        Parameters
        ----------
        counts : sequence of int
            New ``p_i`` per worker, each in ``[1, n_i]`` (ignored for workers without rows).

        Returns
        -------
        changes : list of (int, int, int)
            ``(worker, old p, new p)`` for every worker whose count changed.

        Raises
        ------
        InvalidParameterError
            If ``counts`` has the wrong length or a count is out of range.
        """
        caller = f"{type(self).__name__}.set_subpartitions"
        if len(counts) != len(self._bounds):
            raise InvalidParameterError(
                f"The 'counts' parameter of {caller} needs one value per worker "
                f"({len(self._bounds)}). Got {len(counts)} instead."
            )
        changes = []
        for i, (p_new, rows) in enumerate(zip(counts, self._worker_rows, strict=True)):
            if not rows:
                continue
            p_new = check_int(p_new, name="counts", caller=caller, low=1, high=rows,
                              remedy=f"Worker {i} holds {rows} rows.")
            p_old = len(self._bounds[i]) - 1
            if p_new == p_old:
                continue
            self._next_sub[i] = align_next(rows, p_old, p_new, self._next_sub[i])
            self._bounds[i] = subpartition_bounds(rows, p_new)
            changes.append((i, p_old, p_new))
        return changes

    def subpartition_ranges(self, worker_index: int, k: int) -> tuple[tuple[int, int], ...]:
        """Global row ranges of subpartition ``k`` (0-based) of a worker."""
        bounds = self._bounds[worker_index]
        return self._global_ranges(worker_index, int(bounds[k]), int(bounds[k + 1]))

    def _global_ranges(self, worker_index: int, a: int, b: int) -> tuple[tuple[int, int], ...]:
        """Map rows ``[a, b)`` of a worker's concatenated partitions to global ranges."""
        out, offset = [], 0
        for p in self._placement[worker_index]:
            lo, hi = int(self._partition_starts[p]), int(self._partition_starts[p + 1])
            n = hi - lo
            s, e = max(a - offset, 0), min(b - offset, n)
            if s < e:
                out.append((lo + s, lo + e))
            offset += n
        return normalize_ranges(out)

    def _unit_rows(self, unit: WorkUnit) -> int:
        return self._worker_rows[unit.worker_index] if unit.rows is None \
            else unit.rows[1] - unit.rows[0]

    def dispatch(self, worker_index: int) -> WorkUnit | None:
        """Give an idle worker with no fresh result the current iterate and its next rows."""
        if worker_index in self._fresh or not self._placement[worker_index]:
            return None
        bounds = self._bounds[worker_index]
        k = self._next_sub[worker_index]
        self._next_sub[worker_index] = (k + 1) % (len(bounds) - 1)
        rows = None if len(bounds) == 2 else (int(bounds[k]), int(bounds[k + 1]))
        return WorkUnit(worker_index, self._placement[worker_index], self._x, self._version,
                        rows=rows)

    def receive(self, result: WorkResult) -> None:
        """Keep fresh results; drop stale ones (the runtime re-tasks their workers)."""
        self._plain(result)
        if result.unit.version == self._version:
            self._fresh[result.unit.worker_index] = result
            self._summary = None
        else:
            self._dropped += 1

    def ready(self) -> bool:
        """True once ``n_wait`` fresh results arrived."""
        return len(self._fresh) >= self._n_wait_run

    def _summarise(self) -> RoundSummary:
        """The scaled sum of the fresh results (exact when every row is covered)."""
        assert self.ready()
        order = sorted(self._fresh)
        covered = sum(self._unit_rows(self._fresh[i].unit) for i in order)
        return self._summary_of(self._plain_sum(self._fresh), covered=covered,
                                n_rows=self._total_rows, exact=covered == self._total_rows,
                                workers_used=tuple(order), n_fresh=len(order))

    def step(self) -> None:
        """Step along the estimated gradient."""
        self._update(self.summary().result.gradient)
        self._next_version(self._fresh)


def _check_subpartitions(value: Any, caller: str) -> int | tuple[int, ...]:
    """Return ``subpartitions`` as an int >= 1 or a non-empty tuple of them."""
    if isinstance(value, (list, tuple, np.ndarray)):
        values = tuple(check_int(p, name="subpartitions", caller=caller, low=1) for p in value)
        if not values:
            raise InvalidParameterError(
                f"The 'subpartitions' parameter of {caller} must be an int >= 1 or one "
                "per worker. Got an empty sequence instead."
            )
        return values
    return check_int(value, name="subpartitions", caller=caller, low=1)
