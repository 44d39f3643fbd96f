"""L2-regularised logistic regression with labels in {-1, +1}."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from daskstraggle._declared_options import CliOption
from daskstraggle.errors import InvalidDataError
from daskstraggle.problems._linalg import check_dense_size, solve_psd
from daskstraggle.problems.base import MapReduce, Reference
from daskstraggle.problems.block import Block, MatrixStats
from daskstraggle.problems.least_squares import _LinearModel

__all__ = ["Logistic"]

#: Newton's method stops when the largest gradient entry falls below this.
_NEWTON_TOL = 1e-12
_NEWTON_MAX_ITER = 50
#: Halvings of the step before the line search gives up.
_MAX_HALVINGS = 40
#: Armijo sufficient-decrease constant.
_ARMIJO = 1e-4


@dataclass(frozen=True, slots=True)
class _NewtonTerms:
    """Mean-loss gradient, Hessian and loss over a set of rows (they add up)."""

    gradient: np.ndarray
    hessian: np.ndarray
    loss: float

    def __add__(self, other: _NewtonTerms) -> _NewtonTerms:
        """Add the terms of two disjoint row sets."""
        return _NewtonTerms(
            self.gradient + other.gradient, self.hessian + other.hessian, self.loss + other.loss
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class Logistic(_LinearModel):
    r"""L2-regularised logistic regression.

    Minimises

    .. math:: f(w, b) = \frac{1}{n} \sum_i \log\big(1 + e^{-y_i (x_i^T w + b)}\big)
              + \frac{\alpha}{2} \|w\|^2

    with labels :math:`y_i \in \{-1, +1\}`; the intercept ``b`` is not penalised. The
    iterate is ``[w, b]`` (shape (n_features + 1,)), or ``w`` without an intercept.

    Parameters
    ----------
    alpha : float or None, default=None
        L2 penalty, >= 0; None uses ``1/n_samples`` (fixed by :meth:`bind`).
    fit_intercept : bool, default=True
        Fit an intercept.

    Attributes
    ----------
    n_samples, n_features, penalty, column_mean, column_scale
        As in :class:`LeastSquares`; ``penalty`` is ``alpha``, or ``1/n_samples``.

    See Also
    --------
    LeastSquares : (Ridge) least-squares regression.

    Notes
    -----
    Blocks carry labels already mapped to {-1.0, +1.0} (the data layer maps {0, 1}).

    References
    ----------
    Severinson et al., "DSAG: a mixed synchronous-asynchronous iterative method for
    straggler-resilient learning", IEEE Trans. Commun. 2023 (the problem and its
    default ``lambda = 1/n``). Nocedal & Wright, "Numerical Optimization", 2nd ed.,
    2006, ch. 3 (Newton's method with backtracking, the reference solver).

    Examples
    --------
    >>> import numpy as np
    >>> from daskstraggle.problems import Block, Logistic, block_stats
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 3))
    >>> y = np.where(X @ [1.0, -1.0, 0.5] + 0.3 * rng.normal(size=200) > 0, 1.0, -1.0)
    >>> block = Block(X, y=y)
    >>> problem = Logistic().bind(block_stats(block))
    >>> ref = problem.reference_solution(lambda fn, *a, combine=None: fn(block, *a))
    >>> ref.info["grad_norm"] < 1e-12
    True
    """

    name: ClassVar[str] = "logistic"
    _curvature: ClassVar[float] = 0.25
    _logistic: ClassVar[bool] = True
    cli_options: ClassVar[tuple[CliOption, ...]] = (
        CliOption("--alpha", "alpha", "L2 penalty (default 1/n_samples).", type=float),
    )

    def _check_labels(self, stats: MatrixStats) -> None:
        """Raise InvalidDataError unless the labels are exactly -1 and +1 (both present)."""
        counts = stats.label_counts
        if counts is None or set(counts) != {-1.0, 1.0}:
            shown = "unknown (no labels, or many distinct values)" if counts is None \
                else sorted(counts)
            raise InvalidDataError(
                "The labels of logistic regression must take exactly two values, {-1, +1} "
                f"or {{0, 1}} (mapped to -1/+1 when the data is opened); got {shown}."
            )

    def _tiles(self, block: Block) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Yield ``(tile, y)`` for each tile of the block."""
        y = self._labels(block)
        for lo, hi, tile in block.tiles():
            yield tile, y[lo:hi]

    def newton_kernel(self, block: Block, iterate: np.ndarray) -> _NewtonTerms:
        """Return the mean-loss gradient, Hessian and loss over a block (one pass), with
        :meth:`~LeastSquares.kernel`'s parameters.

        Returns
        -------
        terms : _NewtonTerms
            ``hessian = A_b^T diag(p (1 - p)) A_b / n`` with ``A_b = [X_b, 1]``; terms
            of disjoint row sets add with ``+``. No penalty included.
        """
        w, b = self._split(iterate)
        return self._newton_terms(self._tiles(block), w, b)

    def standard_newton_kernel(self, block: Block, point: np.ndarray) -> _NewtonTerms:
        """Return :meth:`newton_kernel`'s terms in standardised coordinates (one pass; the
        tiles are standardised, ``z = (x - m) / s``, before any product, so a column far
        from zero loses no digits to cancellation).

        Parameters
        ----------
        block : Block
            Rows with labels in {-1, +1}.
        point : ndarray of shape (n_params,)
            ``[v, c]`` in standardised coordinates (see :meth:`standard_point`).

        Returns
        -------
        terms : _NewtonTerms
            The gradient, Hessian and loss on the rows ``[z_i, 1]``; no penalty.
        """
        mean, scale = self._standardisation()
        shift = mean if self.fit_intercept else np.zeros_like(mean)
        tiles = (((tile - shift) / scale, y) for tile, y in self._tiles(block))
        v, c = self._split(point)
        return self._newton_terms(tiles, v, c)

    def _newton_terms(self, tiles: Iterator[tuple[np.ndarray, np.ndarray]], w: np.ndarray,
                      b: float) -> _NewtonTerms:
        """Gradient, Hessian and loss of the mean loss of ``tiles`` at ``[w, b]``."""
        from scipy.special import expit  # scipy: loaded when first needed

        n = self._bound()[1]
        d, p = w.shape[0], self.n_params
        grad = np.zeros(p)
        hess = np.zeros((p, p))
        loss = 0.0
        for tile, y in tiles:
            margin = y * (tile @ w + b)
            loss += float(np.logaddexp(0.0, -margin).sum())
            prob = expit(-margin)
            s = -y * prob
            weight = prob * (1.0 - prob)
            weighted = tile * weight[:, None]
            grad[:d] += tile.T @ s
            hess[:d, :d] += weighted.T @ tile
            if self.fit_intercept:
                grad[d] += s.sum()
                column = weighted.sum(axis=0)
                hess[:d, d] += column
                hess[d, :d] += column
                hess[d, d] += weight.sum()
        return _NewtonTerms(gradient=grad / n, hessian=hess / n, loss=loss / n)

    def reference_solution(self, map_reduce: MapReduce) -> Reference:
        """Return the exact optimum by Newton's method with backtracking line search.

        Newton's method runs in standardised coordinates (see ``_LinearModel``), one pass
        per iteration and per line-search trial. Stops when the largest standardised
        gradient entry is below 1e-12, when the gradient stops shrinking at rounding
        level, or after 50 iterations.

        As :meth:`Problem.reference_solution`, ``map_reduce`` folding
        :meth:`newton_kernel`; ``info`` holds ``newton_iterations``, ``grad_norm``
        (largest standardised gradient entry at the returned point), ``passes`` and
        ``converged``.
        """
        d, _, penalty = self._bound()
        check_dense_size(d, "Logistic")
        p = self.n_params
        scale = self._standardisation()[1]
        ridge = np.zeros(p)  # the penalty's curvature on v = s * w
        ridge[:d] = penalty / (scale * scale)
        eps = np.finfo(np.float64).eps

        def evaluate(x: np.ndarray) -> tuple[_NewtonTerms, float, np.ndarray]:
            terms = map_reduce(self.standard_newton_kernel, x)
            value = terms.loss + 0.5 * float(x[:d] @ (ridge[:d] * x[:d]))
            return terms, value, terms.gradient + ridge * x

        x = np.zeros(p)
        terms, value, grad = evaluate(x)
        passes, iterations = 1, 0
        previous_norm = np.inf
        full_step = False
        while True:
            grad_norm = float(np.max(np.abs(grad), initial=0.0))
            converged = grad_norm < _NEWTON_TOL
            stalled = full_step and grad_norm < 1e-8 and grad_norm > 0.5 * previous_norm
            if converged or stalled or iterations >= _NEWTON_MAX_ITER:
                break
            direction = -solve_psd(terms.hessian + np.diag(ridge), grad)
            slope = float(grad @ direction)
            t = 1.0
            for _ in range(_MAX_HALVINGS):
                trial = x + t * direction
                new_terms, new_value, new_grad = evaluate(trial)
                passes += 1
                sufficient = new_value <= value + _ARMIJO * t * slope
                if sufficient or new_value <= value + 4 * eps * abs(value):
                    break
                t *= 0.5
            else:  # no decrease even for tiny steps: x is optimal to rounding
                break
            iterations += 1
            full_step = t == 1.0
            previous_norm = grad_norm
            x, terms, value, grad = trial, new_terms, new_value, new_grad
        grad_norm = float(np.max(np.abs(grad), initial=0.0))
        return Reference(
            iterate=self.from_standard_point(x),
            objective=float(value),
            info={
                "newton_iterations": iterations,
                "grad_norm": grad_norm,
                "passes": passes,
                "converged": grad_norm < _NEWTON_TOL,
            },
        )
