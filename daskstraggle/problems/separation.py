"""Which principal components the data separate, and what converges for the others.

North's rule of thumb: an eigenvalue estimated from ``n`` rows has a sampling error of
about ``lambda sqrt(2 / n)``, so two components closer than that are mixed by sampling and
only the subspace they span is determined. Consecutive components closer than a relative
gap ``g`` (by default ``sqrt(2 / n)``) form a *cluster*. The cluster that contains the
``k``-th component and runs on into the ``(k + 1)``-th is the *boundary cluster*: not even
the subspace of its requested part is determined, so its components converge in
*variance* instead (the remaining rise of their Ritz values, :func:`variance_errors`).
The others are judged by their eigen-residual. Every function here is pure (numpy only).

References
----------
North, Bell, Cahalan & Moeng, "Sampling errors in the estimation of empirical orthogonal
functions", Monthly Weather Review 110, 1982. Musco & Musco, "Randomized block Krylov
methods for stronger and faster approximate singular value decomposition", NeurIPS 2015
(per-vector variance guarantees that need no eigengap).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["Separation", "boundary_start", "clusters", "labels", "north_gap",
           "variance_errors"]

#: A Ritz value that moved by at most this fraction between rounds has settled to rounding.
_ROUNDING = 1e-13


@dataclass(frozen=True)
class Separation:
    """A round's judgement of each component (:meth:`daskstraggle.problems.PCA.separation`).

    Attributes
    ----------
    measure : float
        The optimality measure: the largest of the components' judged values (residual,
        or for the boundary cluster the smaller of residual and variance error).
    values : ndarray of shape (k,)
        Ritz values, descending.
    errors : ndarray of shape (k,)
        Estimated remaining relative rise of each Ritz value (:func:`variance_errors`).
    next_value : float or None
        The largest Ritz value beyond the ``k`` requested.
    labels : list of str
        What each component's result determines (:func:`labels`), or ``"zero"`` (the
        rank is lower) and ``"unresolved"`` (below float64's working precision, see
        :class:`~daskstraggle.problems.PCA`) for components no residual judges.
    """

    measure: float
    values: np.ndarray
    errors: np.ndarray
    next_value: float | None
    labels: list[str]

    @property
    def verdict(self) -> float:
        """The measure a run's final point is judged by: ``measure``, or inf while a
        component is ``"unresolved"`` (the run stops on the others, but never says it
        converged)."""
        return math.inf if "unresolved" in self.labels else self.measure


def north_gap(n_rows: int) -> float:
    """Return North's relative sampling error of an eigenvalue, ``sqrt(2 / n_rows)``.

    Parameters
    ----------
    n_rows : int
        Rows (samples of the distribution; variants for a genotype PCA of samples).

    Returns
    -------
    gap : float
        Relative eigengap below which two components are not separated.

    Examples
    --------
    >>> round(north_gap(20_000), 4)
    0.01
    """
    return math.sqrt(2.0 / max(int(n_rows), 1))


def _separated(upper: float, lower: float, gap: float) -> bool:
    """Whether eigenvalue ``upper`` stands at least ``gap`` (relative) above ``lower``."""
    return upper - lower >= gap * abs(upper)


def boundary_start(values: np.ndarray, next_value: float | None, gap: float) -> int:
    """Return the first component (0-based) of the boundary cluster; ``k`` if there is none.

    Parameters
    ----------
    values : ndarray of shape (k,)
        Ritz values of the requested components, descending.
    next_value : float or None
        The largest Ritz value beyond them (None: unknown, no boundary cluster).
    gap : float
        Relative eigengap that separates two components (0: every component separated).

    Returns
    -------
    start : int
        Components ``start .. k - 1`` run on into the ``(k + 1)``-th without a gap of
        ``gap``.

    Examples
    --------
    >>> boundary_start(np.array([10.0, 2.0, 1.99, 1.98]), 1.97, 0.05)
    1
    >>> boundary_start(np.array([10.0, 2.0]), 1.0, 0.05)
    2
    """
    k = len(values)
    if next_value is None or gap <= 0 or k == 0:
        return k
    start, lower = k, float(next_value)
    while start > 0 and not _separated(float(values[start - 1]), lower, gap):
        start -= 1
        lower = float(values[start])
    return start


def clusters(values: np.ndarray, gap: float) -> list[tuple[int, int]]:
    """Return the runs of two or more consecutive components not separated by ``gap``.

    Parameters
    ----------
    values : ndarray of shape (k,)
        Eigenvalues, descending.
    gap : float
        Relative eigengap that separates two components.

    Returns
    -------
    runs : list of (start, stop)
        0-based, ``stop`` exclusive.

    Examples
    --------
    >>> clusters(np.array([10.0, 5.0, 4.99, 1.0]), 0.01)
    [(1, 3)]
    """
    runs: list[tuple[int, int]] = []
    start = 0
    for j in range(1, len(values) + 1):
        if j == len(values) or _separated(float(values[j - 1]), float(values[j]), gap):
            if j - start > 1:
                runs.append((start, j))
            start = j
    return runs


def _aitken(v0: np.ndarray, v1: np.ndarray, v2: np.ndarray) -> np.ndarray:
    """Remaining relative rise of each value after ``v0, v1, v2`` (see
    :func:`variance_errors`)."""
    d1, d2 = v1 - v0, v2 - v1
    scale = np.maximum(np.abs(v2), np.finfo(np.float64).tiny)
    errors = np.full(v2.shape, np.inf)
    shrinking = (d1 > 0) & (d2 >= 0) & (d2 < d1)
    rho = np.divide(d2, d1, out=np.ones_like(d2), where=shrinking)
    errors[shrinking] = d2[shrinking] / (1.0 - rho[shrinking]) / scale[shrinking]
    settled = np.abs(d2) <= _ROUNDING * scale
    errors[settled] = (np.abs(d2) / scale)[settled]
    return errors


def variance_errors(history: Sequence[np.ndarray]) -> np.ndarray:
    """Estimate each Ritz value's remaining relative rise from its last four values.

    With ``d1``, ``d2`` two consecutive rises of a Ritz value ``theta`` and ``rho = d2 / d1``,
    the three-point (Aitken) estimate is ``d2 / (1 - rho)`` relative to ``theta``. A value
    that moved by rounding only (``1e-13`` relative) has settled; one that fell, or whose
    rise did not shrink, has not (``inf``). The larger of the estimates ending at the last
    and at the second-to-last value is returned (restarted Krylov values settle in cycles).

    Parameters
    ----------
    history : sequence of ndarray of shape (k,)
        Ritz values of the same components (descending) at consecutive exact rounds, the
        newest last.

    Returns
    -------
    errors : ndarray of shape (k,)
        ``inf`` for every component when fewer than four rounds are given.

    Examples
    --------
    >>> variance_errors([2 - 0.5 ** t * np.ones(1) for t in (1, 2, 3, 4)])
    array([0.13333333])
    """
    if len(history) < 4:
        return np.full(len(history[-1]) if history else 0, np.inf)
    v = [np.asarray(h, dtype=np.float64) for h in history[-4:]]
    return np.maximum(_aitken(v[0], v[1], v[2]), _aitken(v[1], v[2], v[3]))


def labels(values: np.ndarray, residuals: np.ndarray, boundary: int, gap: float,
           tol: float | None) -> list[str]:
    """Name what each component's result determines.

    ``"vector"``: separated from its neighbours, or a boundary component whose residual
    reached ``tol``; ``"subspace i-j"``: in a cluster of components ``i .. j`` (1-based)
    that stands apart from the rest; ``"variance"``: in the boundary cluster, residual
    above ``tol`` (its direction is one of many equally good ones).

    Parameters
    ----------
    values, residuals : ndarray of shape (k,)
        Ritz values (descending) and relative eigen-residuals.
    boundary : int
        First component of the boundary cluster (:func:`boundary_start`).
    gap : float
        Relative eigengap that separates two components.
    tol : float or None
        The run's tolerance (None: every boundary component is ``"variance"``).

    Returns
    -------
    labels : list of str

    Examples
    --------
    >>> labels(np.array([9.0, 5.0, 4.99, 1.0, 0.99]), np.zeros(5) + [0, 0, 0, 0, 1], 3,
    ...        0.01, 1e-6)
    ['vector', 'subspace 2-3', 'subspace 2-3', 'vector', 'variance']
    """
    names = ["vector"] * len(values)
    for start, stop in clusters(values[:boundary], gap):
        for j in range(start, stop):
            names[j] = f"subspace {start + 1}-{stop}"
    for j in range(boundary, len(values)):
        if tol is None or not residuals[j] <= tol:
            names[j] = "variance"
    return names
