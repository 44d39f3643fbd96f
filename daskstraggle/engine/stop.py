"""Stop rules: a tolerance on the optimality measure, the gap, iterations, time."""

from __future__ import annotations

from dataclasses import dataclass

from daskstraggle._declared_options import CliOption, Constraint, declared
from daskstraggle._validation import check_int, check_positive

__all__ = ["StopRule"]


@dataclass(frozen=True, kw_only=True, slots=True)
class StopRule:
    """When a run ends: whichever criterion is met first.

    Parameters
    ----------
    max_iter : int, default=100
        Maximum number of iterations (rounds over the data).
    tol : float or None, default=1e-6
        Stop, converged, once the problem's relative optimality measure at the evaluated
        point is at most ``tol`` (judged exactly; see
        :mod:`daskstraggle.engine.convergence`): for PCA every component's relative
        eigen-residual ``|X_c^T X_c y_i - lambda_i y_i| / lambda_i``, for regression the
        gradient norm over its value at the start. None disables.
    gap_tol : float or None, default=None
        Stop when ``f_t - f_ref <= gap_tol`` (needs a reference solution).
    time_budget : float or None, default=None
        Stop at the first iteration that ends after this many seconds.

    Examples
    --------
    >>> StopRule(max_iter=10).check(iteration=9, gap=None, elapsed=0.0)
    'max_iter'
    """

    max_iter: int = declared(100, constraint=Constraint(int, low=1, none=False), cli=CliOption(
        "--max-iter", "max_iter", "Maximum number of iterations.", type=int,
        show_default="the daskstraggle.max-iter setting, 100"))
    tol: float | None = declared(1e-6, constraint=Constraint(float), cli=CliOption(
        "--tol", "tol", "Stop, converged, once the optimality measure (PCA: every component's "
        "relative eigen-residual; regression: gradient norm relative to the start) is at most "
        "this, judged exactly.", type=float, show_default="the daskstraggle.tol setting, 1e-6"))
    gap_tol: float | None = declared(None, constraint=Constraint(float))
    time_budget: float | None = declared(None, constraint=Constraint(float), cli=CliOption(
        "--time-budget", "time_budget", "Stop after this many seconds.", type=float))

    def __post_init__(self) -> None:
        check_int(self.max_iter, name="max_iter", caller="StopRule", low=1)
        check_positive(self.tol, name="tol", caller="StopRule", allow_none=True)
        check_positive(self.gap_tol, name="gap_tol", caller="StopRule", allow_none=True)
        check_positive(self.time_budget, name="time_budget", caller="StopRule", allow_none=True)

    def check(self, *, iteration: int, gap: float | None, elapsed: float) -> str | None:
        """Return why to stop after 0-based ``iteration`` (the ``tol`` test aside), or None.

        Parameters
        ----------
        iteration : int
            0-based round just finished.
        gap : float or None
            Objective minus the reference objective, when known exactly.
        elapsed : float
            Seconds since the run started.

        Returns
        -------
        reason : {"gap", "max_iter", "time_budget"} or None
        """
        if self.gap_tol is not None and gap is not None and gap <= self.gap_tol:
            return "gap"
        if iteration + 1 >= self.max_iter:
            return "max_iter"
        if self.time_budget is not None and elapsed >= self.time_budget:
            return "time_budget"
        return None
