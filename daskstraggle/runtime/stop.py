"""Stop rules: tolerance on the relative objective change or the gap, iterations, time."""

from __future__ import annotations

from dataclasses import dataclass

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
        Stop when ``|f_t - f_{t-1}| <= tol * max(|f_{t-1}|, 1e-300)``. None disables.
    gap_tol : float or None, default=None
        Stop when ``f_t - f_ref <= gap_tol`` (needs a reference solution).
    time_budget : float or None, default=None
        Stop at the first iteration that ends after this many seconds.

    Examples
    --------
    >>> StopRule(max_iter=10).check(iteration=9, objective=1.0, previous=2.0, gap=None, elapsed=0.0)
    'max_iter'
    """

    max_iter: int = 100
    tol: float | None = 1e-6
    gap_tol: float | None = None
    time_budget: float | None = None

    def __post_init__(self) -> None:
        check_int(self.max_iter, name="max_iter", caller="StopRule", low=1)
        check_positive(self.tol, name="tol", caller="StopRule", allow_none=True)
        check_positive(self.gap_tol, name="gap_tol", caller="StopRule", allow_none=True)
        check_positive(self.time_budget, name="time_budget", caller="StopRule", allow_none=True)

    def check(
        self,
        *,
        iteration: int,
        objective: float | None,
        previous: float | None,
        gap: float | None,
        elapsed: float,
    ) -> str | None:
        """Return why to stop after 0-based ``iteration``, or None to go on."""
        if self.gap_tol is not None and gap is not None and gap <= self.gap_tol:
            return "gap"
        if self.tol is not None and objective is not None and previous is not None:
            if abs(objective - previous) <= self.tol * max(abs(previous), 1e-300):
                return "tol"
        if iteration + 1 >= self.max_iter:
            return "max_iter"
        if self.time_budget is not None and elapsed >= self.time_budget:
            return "time"
        return None
