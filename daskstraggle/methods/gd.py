"""Synchronous gradient descent and Nesterov's accelerated gradient (wait for all workers)."""

from __future__ import annotations

import numpy as np

from daskstraggle._validation import check_choice
from daskstraggle.errors import InvalidParameterError
from daskstraggle.methods.base import Method, RoundSummary, WorkResult, WorkUnit
from daskstraggle.problems.base import Problem

__all__ = ["GD", "NAG", "Nesterov"]


class GD(Method):
    """Synchronous gradient descent: every worker's result, every iteration.

    Each worker index sums the kernel over all partitions it stores; the iterate steps
    once all workers have answered for the current version (older results are ignored).
    With PCA and step size 1 this is the block power method.

    Examples
    --------
    >>> from daskstraggle.methods import GD
    >>> GD().name
    'gd'
    """

    name = "gd"
    description = "power method for PCA"
    exact_rounds = True
    dispatch_once_per_version = True

    def _reset(self) -> None:
        self._sent: set[int] = set()
        self._results: dict[int, WorkResult] = {}
        self._n_holding = sum(1 for p in self._placement if p)  # workers that answer a round

    def dispatch(self, worker_index: int) -> WorkUnit | None:
        """Send the current point to a worker that has not had it yet this round."""
        if worker_index in self._sent or not self._placement[worker_index]:
            return None
        self._sent.add(worker_index)
        return WorkUnit(worker_index, self._placement[worker_index], self._point(), self._version)

    def receive(self, result: WorkResult) -> None:
        """Keep results of the current version; ignore older ones."""
        self._plain(result)
        if result.unit.version == self._version:
            self._results[result.unit.worker_index] = result

    def ready(self) -> bool:
        """True once every worker holding data has answered for this version."""
        return len(self._results) == self._n_holding

    def _summarise(self) -> RoundSummary:
        """The exact kernel sum at the evaluated point."""
        assert self.ready()
        order = sorted(self._results)
        return self._summary_of(self._plain_sum(self._results), workers_used=tuple(order),
                                n_fresh=len(order))

    def step(self) -> None:
        """Take the gradient step from the evaluated point (then extrapolate, for NAG)."""
        summary = self.summary()
        self._update(summary.result.gradient, summary.objective)
        self._next_version(self._sent, self._results)


class NAG(GD):
    """Nesterov's accelerated gradient with adaptive restart, synchronous.

    ``x_{t+1} = y_t - eta grad f(y_t)``, ``y_{t+1} = x_{t+1} + beta_t (x_{t+1} - x_t)``,
    ``beta_t = t / (t + 3)``. The momentum restarts (``t <- 0``) when the objective at the
    evaluated point rises (O'Donoghue & Candès 2015). Only for convex problems (logistic
    regression, least squares), not PCA.

    Parameters
    ----------
    restart : {"objective", "none"}, default="objective"
        Adaptive restart rule.

    References
    ----------
    Nesterov, "A method of solving a convex programming problem with convergence rate
    O(1/k^2)", 1983. O'Donoghue & Candès, "Adaptive restart for accelerated gradient
    schemes", 2015.
    """

    name = "nag"
    description = "Nesterov momentum, regression"

    def __init__(self, *, restart: str = "objective") -> None:
        self.restart = check_choice(restart, name="restart", caller="NAG",
                                    choices=("objective", "none"))

    def check_problem(self, problem: Problem) -> None:
        """Refuse problems whose iterates are not in a vector space (PCA)."""
        if not getattr(problem, "supports_momentum", True):
            from daskstraggle.methods import list_methods  # the registry imports this module

            usable = [m for m in list_methods() if m != "nag"]
            raise InvalidParameterError(
                f"The 'method' parameter (CLI: --method) must be one of {usable} for "
                f"{problem.name}: its iterates are subspaces (orthonormal bases), not "
                "vectors, so Nesterov momentum does not apply; 'gd' is the power method. "
                "Got 'nag' instead."
            )

    def _reset(self) -> None:
        super()._reset()
        self._momentum = Nesterov(self._x, restart=self.restart)


class Nesterov:
    """Nesterov momentum with objective restart: the state NAG and accelerated codes share
    (the last iterate ``x``, the look-ahead ``point`` and the momentum counter).

    Parameters
    ----------
    iterate : ndarray
        Starting point (``x_0 = y_0``).
    restart : {"objective", "none"}, default="objective"
        Restart the momentum when the objective at the evaluated point rises.
    """

    def __init__(self, iterate: np.ndarray, *, restart: str = "objective") -> None:
        self.restart = restart
        self.x = np.array(iterate, dtype=np.float64)
        self.point = self.x.copy()
        self._k = 0
        self._last_objective = np.inf

    def step(self, problem: Problem, gradient: np.ndarray, objective: float | None,
             step_size: float) -> np.ndarray:
        """Step from the look-ahead point with ``gradient`` (taken there); return ``x_{t+1}``."""
        if self.restart == "objective" and objective is not None \
                and objective > self._last_objective:
            self._k = 0
        self._last_objective = objective if objective is not None else np.inf
        x_new = problem.update(self.point, gradient, step_size)
        beta = self._k / (self._k + 3.0)
        self.point = x_new + beta * (x_new - self.x)
        self.x = x_new
        self._k += 1
        return x_new
