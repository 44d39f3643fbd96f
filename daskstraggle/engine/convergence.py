"""When a run has converged, when it has diverged: the coordinator's verdict (pure).

:class:`ConvergenceMonitor` judges each round on the problem's relative optimality measure,
exactly or from the method's estimate with exact checks; the rules (checks, the noise floor's
``"stalled"``, divergence) are ``docs/convergence.md``.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

import numpy as np

from daskstraggle.errors import DivergenceError
from daskstraggle.problems.base import KernelResult, Problem
from daskstraggle.problems.separation import Separation

__all__ = ["GROWTH_FACTOR", "STALL_CHECKS", "ConvergenceMonitor"]

#: An exact objective this many times ``max(|best|, start - best)`` above its best
#: diverged.
GROWTH_FACTOR = 10.0
#: Failed exact checks in a row, each triggered by a standing iterate, that end a run
#: as stalled.
STALL_CHECKS = 3
#: Largest gap between exact checks, in multiples of the window.
_MAX_INTERVAL = 64


class ConvergenceMonitor:
    """Judge each round of a run: converged, needs an exact check, or diverged.

    Parameters
    ----------
    problem : Problem
        The bound problem.
    tol : float or None
        Tolerance on the relative optimality measure (None: never converged by ``tol``).
    start_result : KernelResult or None
        Exact kernel sum at the starting point. None for a method without a starting
        pass (:attr:`Method.start_pass`): the measure is taken as relative already (scale
        1) and no objective is compared with a start.
    start : ndarray
        The starting point.
    step_size : float
        Step size of the run (named in divergence messages).
    window : int, default=1
        Rounds over which the iterate's change is measured, and the least number of
        rounds between exact checks (a worker's subpartitions, or the workers for
        asynchronous updates).
    max_iter : int or None, default=None
        The run's round limit: a standing iterate whose exact measure still falls fast
        enough to reach ``tol`` before it is not stalled (None: within ten times the
        rounds so far).
    """

    def __init__(self, problem: Problem, *, tol: float | None,
                 start_result: KernelResult | None, start: np.ndarray, step_size: float,
                 window: int = 1, max_iter: int | None = None) -> None:
        self.problem = problem
        self.tol = tol
        self.max_iter = max_iter
        self.step_size = float(step_size)
        self.window = max(int(window), 1)
        if start_result is None:
            self.scale, self.start_objective = 1.0, math.inf
        else:
            self.scale = problem.optimality_scale(start_result, start)
            self.start_objective = problem.objective(start_result.values, start)
        self.best = self.start_objective
        self.optimality = math.nan  # last measure (exact or estimated)
        self.n_checks = 0
        self._iterates: deque[np.ndarray] = deque(maxlen=self.window + 1)
        self._next_check = 0
        self._interval = self.window
        self._stalls = 0
        self._pending_stall = False
        self._checked: tuple[np.ndarray, KernelResult] | None = None
        #: The objective found by the last exact check (:meth:`verify`), or None.
        self.checked_objective: float | None = None
        self._streak: tuple[int, float] | None = None  # first check of a standing streak
        #: Ritz values (or the problem's equivalent) of the last exact rounds, oldest first.
        self._values: deque[np.ndarray] = deque(maxlen=3)
        #: The last exact judgement of the parts the data determine (PCA), or None.
        self.separation: Separation | None = None

    # ------------------------------------------------------------------ per round
    def observe(self, iteration: int, iterate: np.ndarray, result: KernelResult,
                objective: float | None, *, next_value: float | None = None) -> str | None:
        """Judge a round from the evaluated point and its kernel sum.

        Parameters
        ----------
        iteration : int
            0-based round.
        iterate : ndarray
            The point the round evaluated.
        result : KernelResult
            The round's kernel sum at ``iterate`` (exact when ``objective`` is not None).
        objective : float or None
            Exact objective at ``iterate``, when the round saw every row there.
        next_value : float or None, default=None
            For PCA, the largest Ritz value beyond the requested components in the
            method's space (``block``), which decides the boundary cluster
            (:mod:`daskstraggle.problems.separation`).

        Returns
        -------
        decision : {"tol", "check"} or None
            ``"tol"``: converged (exact); ``"check"``: make an exact pass at ``iterate``
            and call :meth:`verify`; None: go on.

        Raises
        ------
        DivergenceError
            If the round's values are not finite or the objective exploded.
        """
        self._check_finite(iteration, iterate, result, objective)
        if objective is not None:
            self._check_growth(iteration, objective)
            self.optimality = self._judge(result, iterate, next_value)
        else:
            self.optimality = self.problem.optimality(result, iterate) / self.scale
        self._iterates.append(np.array(iterate, dtype=np.float64, copy=True))
        if self.tol is None:
            return None
        if objective is not None:
            return "tol" if self.optimality <= self.tol else None
        standing = self._standing()
        if (self.optimality <= self.tol or standing) and iteration >= self._next_check:
            self._pending_stall = standing and self.optimality > self.tol
            return "check"
        return None

    def verify(self, iteration: int, iterate: np.ndarray, result: KernelResult) -> str | None:
        """Decide on an exact pass at ``iterate`` asked for by :meth:`observe`.

        Parameters
        ----------
        iteration : int
            0-based round.
        iterate : ndarray
            The point checked.
        result : KernelResult
            Exact kernel sum at ``iterate``.

        Returns
        -------
        decision : {"tol", "stalled"} or None
        """
        self.n_checks += 1
        self._checked = (iterate, result)
        objective = self.checked_objective = self.problem.objective(result.values, iterate)
        self._check_finite(iteration, iterate, result, objective)
        self._check_growth(iteration, objective)
        self.optimality = self._judge(result, iterate, None)
        if self.tol is not None and self.optimality <= self.tol:
            return "tol"
        if self._pending_stall:
            self._stalls += 1
            self._streak = self._streak or (iteration, self.optimality)
        else:
            self._stalls, self._streak = 0, None
        self._interval = min(2 * self._interval, _MAX_INTERVAL * self.window)
        self._next_check = iteration + self._interval
        if self._stalls < STALL_CHECKS or self._reaches_tol(iteration):
            return None
        return "stalled"

    def _reaches_tol(self, iteration: int) -> bool:
        """Whether the exact measure, falling at its rate since the standing streak began,
        reaches ``tol`` within the rounds left (``max_iter``; without one, ten times the
        rounds so far): a slowly converging run (a rate close to 1, the iterate moving
        by less than ``tol`` a window) is not stalled at a noise floor."""
        assert self._streak is not None and self.tol is not None
        first, measure = self._streak
        if not 0 < self.optimality < measure or iteration <= first:
            return False
        rate = math.log(measure / self.optimality) / (iteration - first)  # per round
        left = (10 * (iteration + 1) if self.max_iter is None
                else self.max_iter - iteration - 1)
        return math.log(self.optimality / self.tol) / rate <= left

    def checked_result(self, iterate: np.ndarray) -> KernelResult | None:
        """Return the exact kernel sum of the last exact check if it was made at ``iterate``
        (the same array), so the final pass need not be made again; else None."""
        if self._checked is not None and self._checked[0] is iterate:
            return self._checked[1]
        return None

    def final(self, iterate: np.ndarray, result: KernelResult, objective: float) -> float:
        """Check the exact final pass; return the relative optimality measure there.

        Raises
        ------
        DivergenceError
            If the final values are not finite or the objective ended above the start.
        """
        self._check_finite(-1, iterate, result, objective)
        slack = 1e-9 * max(1.0, abs(self.start_objective))
        if objective > self.start_objective + slack:
            raise DivergenceError(self._message(
                f"the objective ended at {objective:.6g}, above its starting value "
                f"{self.start_objective:.6g}"))
        last = self.separation
        if last is None:
            return self.problem.optimality(result, iterate) / self.scale
        # judged with the last round's estimates: the final pass is at the same point, so
        # its Ritz values are no new round of the run
        self.separation = self.problem.separation(
            result, iterate, next_value=last.next_value, errors=last.errors, tol=self.tol)
        assert self.separation is not None
        return self.separation.verdict / self.scale

    def converged(self, optimality: float, reason: str) -> bool:
        """Return the verdict for the final point's exact ``optimality`` measure."""
        if self.tol is None:
            return reason == "gap"
        return bool(optimality <= self.tol)

    # ------------------------------------------------------------------ internals
    def _judge(self, result: KernelResult, iterate: np.ndarray,
               next_value: float | None) -> float:
        """The exact measure at ``iterate``: the problem's separation when it has one
        (each PCA component by what the data determine), else its optimality."""
        separation = self.problem.separation(result, iterate, next_value=next_value,
                                             history=tuple(self._values), tol=self.tol)
        if separation is None:
            return self.problem.optimality(result, iterate) / self.scale
        self.separation = separation
        self._values.append(separation.values)
        return separation.measure / self.scale

    def _standing(self) -> bool:
        """Whether the iterate moved by at most ``tol`` over the last window."""
        if self.tol is None or len(self._iterates) <= self.window:
            return False
        change = self.problem.iterate_change(self._iterates[-1], self._iterates[0])
        return change <= self.tol

    def _check_finite(self, iteration: int, iterate: np.ndarray, result: KernelResult,
                      objective: float | None) -> None:
        bad = [name for name, value in (("iterate", iterate), ("gradient", result.gradient),
                                        ("objective terms", result.values))
               if not np.all(np.isfinite(value))]
        if objective is not None and not math.isfinite(objective):
            bad.append("objective")
        if bad:
            where = "at the end" if iteration < 0 else f"at iteration {iteration}"
            raise DivergenceError(self._message(
                f"non-finite {' and '.join(bad)} {where}"))

    def _check_growth(self, iteration: int, objective: float) -> None:
        # plus rounding slack: an objective at its floor (0, e.g. PCA with every
        # component) moves by rounding errors that are not growth
        slack = 1e-9 * max(1.0, abs(self.start_objective))
        limit = self.best + slack + GROWTH_FACTOR * max(abs(self.best),
                                                        self.start_objective - self.best)
        if objective > limit:
            raise DivergenceError(self._message(
                f"the objective grew to {objective:.6g} at iteration {iteration}, far above "
                f"its best {self.best:.6g}"))
        self.best = min(self.best, objective)

    def _message(self, what: str) -> str:
        return (f"The run diverged: {what}, with step size {self.step_size:.6g}. Use a "
                f"smaller step size (CLI: --step-size), e.g. {self.step_size / 10:.3g}, or "
                "leave it unset for the method's safe default.")

    def describe(self) -> dict[str, Any]:
        """Return the monitor's settings and counters (for the result's attributes)."""
        return {"tol": self.tol, "window": self.window, "scale": self.scale,
                "start_objective": (None if math.isinf(self.start_objective)
                                    else self.start_objective),
                "exact_checks": self.n_checks,
                **({} if self.separation is None else {
                    "components": list(self.separation.labels),
                    "variance_errors": [float(e) if math.isfinite(e) else None
                                        for e in self.separation.errors]})}
