"""The load balancer's settings and its one entry point for runtimes, :meth:`LoadBalancer.plan`.

A runtime feeds a profiler from :meth:`LoadBalancer.make_profiler` every result's compute and
communication time and asks :meth:`LoadBalancer.plan` in the background for new subpartition
counts (DSAG Alg. 1); an accepted plan reaches the method through ``method.set_subpartitions``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from daskstraggle._validation import _fail, check_fraction, check_int, check_positive
from daskstraggle.balance.optimizer import BalancePlan, optimize
from daskstraggle.latency.profiler import LatencyProfiler, ProfileStatistics

__all__ = ["LoadBalancer", "check_balance"]


class LoadBalancer:
    """Settings of the DSAG load balancer (paper §VI) and the plan it proposes.

    Parameters
    ----------
    margin, tolerance, comm_fraction : float, default=0.1, 0.01, 0.1
        As in :func:`~daskstraggle.balance.optimizer.optimize` (the paper's values).
    window : float, default=10.0
        Seconds of latency samples the profiler keeps per worker (runtime clock); > 0.
    min_samples : int, default=10
        Samples a worker needs in its window before any plan is made (>= 2).
    interval : float, default=0.5
        Seconds (runtime clock) between the starts of two optimizer runs; > 0.
    n_iterations : int, default=100
        As in ``optimize`` (>= 10).
    rng : int, default=0
        Seed of ``optimize``'s simulations (>= 0).

    Examples
    --------
    >>> LoadBalancer(margin=0.2).get_params()["margin"]
    0.2
    >>> LoadBalancer(margin=1.5)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    daskstraggle.errors.InvalidParameterError: The 'margin' parameter of LoadBalancer must be ...
    """

    def __init__(self, *, margin: float = 0.1, window: float = 10.0, min_samples: int = 10,
                 tolerance: float = 0.01, comm_fraction: float = 0.1, interval: float = 0.5,
                 n_iterations: int = 100, rng: int = 0) -> None:
        caller = "LoadBalancer"
        self.margin = check_fraction(margin, name="margin", caller=caller)
        self.window = check_positive(window, name="window", caller=caller)
        self.min_samples = check_int(min_samples, name="min_samples", caller=caller, low=2)
        self.tolerance = check_fraction(tolerance, name="tolerance", caller=caller)
        self.comm_fraction = check_fraction(comm_fraction, name="comm_fraction", caller=caller,
                                            closed_low=True)
        self.interval = check_positive(interval, name="interval", caller=caller)
        self.n_iterations = check_int(n_iterations, name="n_iterations", caller=caller, low=10)
        self.rng = check_int(rng, name="rng", caller=caller, low=0)

    def get_params(self) -> dict[str, Any]:
        """Return the settings."""
        return {k: getattr(self, k) for k in ("margin", "window", "min_samples", "tolerance",
                                              "comm_fraction", "interval", "n_iterations", "rng")}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"LoadBalancer({args})"

    def make_profiler(self, n_workers: int) -> LatencyProfiler:
        """Return a profiler with this balancer's window and sample threshold."""
        return LatencyProfiler(n_workers, window=self.window, min_samples=self.min_samples)

    def ready(self, stats: ProfileStatistics, rows: Sequence[int] | np.ndarray) -> bool:
        """Return whether every worker holding rows has enough samples for a plan.

        Parameters
        ----------
        stats : ProfileStatistics
            The profiler's statistics.
        rows : sequence or ndarray of int
            Rows ``n_i`` per worker; workers without rows need no statistics.
        """
        holders = np.flatnonzero(np.asarray(rows, dtype=np.int64) > 0)
        return holders.size > 0 and bool(stats.ready[holders].all())

    def plan(self, stats: ProfileStatistics, subpartitions: Sequence[int], rows: Sequence[int], *,
             n_wait: int, p_initial: Sequence[int],
             collect_window: float = 0.02) -> BalancePlan | None:
        """Propose new subpartition counts from the profiler's statistics.

        Parameters
        ----------
        stats : ProfileStatistics
            The profiler's statistics; compute times per unit load (load 1.0 is ``n / N``
            rows, ``N`` workers, ``n`` rows in all).
        subpartitions, rows : sequence of int
            Current ``p_i`` and rows ``n_i`` per worker; workers without rows are left out.
        n_wait, p_initial, collect_window
            As in :func:`~daskstraggle.balance.optimizer.optimize` (``p_initial``: the
            run's first counts).

        Returns
        -------
        plan : BalancePlan or None
            None while some worker holding rows lacks statistics or has no measurable
            compute; else the optimizer's plan over all workers (``plan.accepted`` says
            whether to send it).
        """
        n_workers = len(subpartitions)
        rows_a = np.asarray(rows, dtype=np.int64)
        holders = np.flatnonzero(rows_a > 0)
        if not self.ready(stats, rows_a):
            return None
        p = np.asarray(subpartitions, dtype=np.int64)
        load = rows_a[holders] / p[holders] * n_workers / rows_a.sum()
        compute_mean = stats.compute_mean[holders] * load
        if not (compute_mean > 0).all():
            return None
        plan = optimize(
            p[holders], rows_a[holders], compute_mean, stats.compute_var[holders] * load**2,
            stats.communication_mean[holders], stats.communication_var[holders],
            n_wait=min(int(n_wait), int(holders.size)),
            p_initial=np.asarray(p_initial, dtype=np.int64)[holders],
            margin=self.margin, tolerance=self.tolerance, comm_fraction=self.comm_fraction,
            collect_window=collect_window, n_iterations=self.n_iterations, rng=self.rng,
        )
        if holders.size == n_workers:
            return plan
        full = p.copy()
        full[holders] = plan.subpartitions
        return _widen(plan, tuple(int(v) for v in full), tuple(int(v) for v in p), holders,
                      n_workers)


def _widen(plan: BalancePlan, new: tuple[int, ...], old: tuple[int, ...],
           holders: np.ndarray, n_workers: int) -> BalancePlan:
    """Return ``plan`` over all workers (NaN latency for workers without rows)."""
    def spread(values: np.ndarray) -> np.ndarray:
        out = np.full(n_workers, np.nan)
        out[holders] = values
        return out

    return dataclasses.replace(plan, subpartitions=new, previous=old,
                               expected_latency=spread(plan.expected_latency),
                               previous_latency=spread(plan.previous_latency))


def check_balance(balance: Any, *, caller: str) -> LoadBalancer | None:
    """Return the LoadBalancer a method's ``balance`` parameter asks for (None: off)."""
    if balance is None or balance is False:
        return None
    if balance is True:
        return LoadBalancer()
    if isinstance(balance, LoadBalancer):
        return balance
    _fail("balance", caller, "True, False, None or a LoadBalancer", balance)
