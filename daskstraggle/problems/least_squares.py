"""(Ridge) least-squares regression, and the plumbing shared with logistic regression."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import ClassVar, Self

import numpy as np

from daskstraggle._declared_options import CliOption
from daskstraggle._validation import _real, check_bool
from daskstraggle.errors import InvalidDataError, StraggleError
from daskstraggle.problems._kernels import glm_pass
from daskstraggle.problems._linalg import (
    check_dense_size,
    power_iteration,
    stack_r,
)
from daskstraggle.problems.base import KernelResult, MapReduce, Problem, Reference
from daskstraggle.problems.block import Block, MatrixStats

__all__ = ["LeastSquares"]

#: Safety factor on the power-iteration estimate of the largest Gram eigenvalue (the
#: Rayleigh quotient is a lower bound).
_SMOOTHNESS_MARGIN = 1.05
#: Power iterations (passes over the data) used by ``default_step_size``.
_POWER_ITERATIONS = 20
#: Rows of [X, 1, y] factorised at once by the TSQR leaf (bytes, at least one square).
_QR_BUFFER_BYTES = 1 << 25


@dataclass(frozen=True, kw_only=True, slots=True)
class _LinearModel(Problem):
    """Shared parts of the regressions on ``[X, 1] @ x`` with ``x = [w, b]``.

    The user's ``alpha`` (None, where allowed, is resolved by :meth:`bind` into
    ``penalty``) and ``fit_intercept``; the other fields are set by :meth:`bind`.

    Optimality is judged in *standardised coordinates*: with an intercept, column ``j``
    enters as ``z_j = (x_j - m_j) / s_j`` (``m_j`` its mean, ``s_j`` its standard
    deviation), without one as ``z_j = x_j / s_j`` (``s_j`` its root mean square). The
    model ``x^T w + b`` is ``z^T v + c`` with ``v = s * w`` and ``c = b + m^T w``, and the
    gradient in ``(v, c)`` is ``(g_w - m g_b) / s`` and ``g_b``: the same for any column
    scale and shift, so a tiny or huge column cannot hide its gradient behind the
    intercept's (or another column's).
    """

    needs_labels: ClassVar[bool] = True
    #: Iterates live in a vector space: momentum (NAG) applies.
    supports_momentum: ClassVar[bool] = True
    #: Bound on the second derivative of the per-sample loss in the linear prediction.
    _curvature: ClassVar[float] = 1.0
    #: The loss: logistic (True) or squared (False).
    _logistic: ClassVar[bool] = False
    _bound_fields: ClassVar[tuple[str, ...]] = ("n_features", "n_samples", "penalty")
    _params: ClassVar[tuple[str, ...]] = ("alpha", "fit_intercept")

    alpha: float | None = None
    fit_intercept: bool = True
    n_samples: int | None = None
    n_features: int | None = None
    penalty: float | None = None
    column_mean: np.ndarray | None = field(default=None, compare=False, repr=False)
    column_scale: np.ndarray | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        """Validate the user parameters (``alpha`` may be None where that is its default)."""
        caller = type(self).__name__
        optional = type(self).__dataclass_fields__["alpha"].default is None
        if self.alpha is not None or not optional:
            object.__setattr__(self, "alpha", _real(
                self.alpha, lambda x: bool(np.isfinite(x)) and x >= 0, "alpha", caller,
                "a finite number >= 0" + (" or None" if optional else "")))
        object.__setattr__(self, "fit_intercept", check_bool(
            self.fit_intercept, name="fit_intercept", caller=caller))

    # ---------------------------------------------------------------- parameters
    def kernel(self, block: Block, iterate: np.ndarray) -> KernelResult:
        """As :meth:`Problem.kernel` for coefficients ``[w, b]``
        (:func:`~daskstraggle.problems._kernels.glm_pass`): ``gradient = [X_b^T q, sum(q)]
        / n``, ``n`` the rows of the whole matrix; least squares: ``q = r = X_b w + b - y_b``
        and ``values = [|r|^2 / (2n)]``; logistic (labels in {-1, +1}): ``q = -y expit(-y
        (X_b w + b))`` and ``values = [sum(log(1 + exp(-y (X_b w + b)))) / n]``.

        Raises
        ------
        InvalidDataError
            If the block has no labels.
        """
        w, b = self._split(iterate)
        n = self._bound()[1]
        self._labels(block)
        d = w.shape[0]
        grad = np.zeros(self.n_params)
        grad[:d], total, loss = glm_pass(block, w, b, logistic=self._logistic)
        if self.fit_intercept:
            grad[d] = total
        loss /= n if self._logistic else 2.0 * n
        return KernelResult(gradient=grad / n, values=np.array([loss]), n_rows=block.n_rows)

    @property
    def n_params(self) -> int:
        """Length of the iterate: ``n_features`` plus one with an intercept."""
        return self._bound()[0] + int(self.fit_intercept)

    def _bound(self) -> tuple[int, int, float]:
        """As :meth:`Problem._bound`: ``(n_features, n_samples, penalty)``."""
        d, n, penalty = Problem._bound(self)
        return d, n, penalty

    def bind(self, stats: MatrixStats) -> Self:
        """As :meth:`Problem.bind`: a copy fixed to the matrix's shape, ``alpha`` (None:
        ``1/n_samples``) resolved into ``penalty``.

        Raises
        ------
        InvalidDataError
            If the matrix has no rows, the labels are not finite, the values' or labels'
            squares overflow or underflow float64
            (:func:`~daskstraggle.problems.block.check_float_range`), or the labels do not
            fit the problem (:class:`Logistic`: not exactly the two classes -1 and +1).
        """
        self._check_stats(stats, labels=True)
        self._check_labels(stats)
        mean, scale = _column_standardisation(stats, center=self.fit_intercept)
        penalty = 1.0 / stats.n_samples if self.alpha is None else self.alpha
        return dataclasses.replace(
            self, penalty=penalty, n_samples=int(stats.n_samples),
            n_features=int(stats.n_features), column_mean=mean, column_scale=scale)

    def _check_labels(self, stats: MatrixStats) -> None:
        """Raise InvalidDataError if the labels do not fit the problem (default: any)."""

    def _standardisation(self) -> tuple[np.ndarray, np.ndarray]:
        """Return ``(m, s)``: the column shift and scale of the standardised coordinates."""
        d = self._bound()[0]
        if self.column_mean is None or self.column_scale is None:
            return np.zeros(d), np.ones(d)
        return self.column_mean, self.column_scale

    def standard_gradient(self, gradient: np.ndarray) -> np.ndarray:
        """Return a gradient ``[g_w, g_b]`` in standardised coordinates (see the class
        notes): ``[(g_w - m g_b) / s, g_b]`` (``g_w / s`` without an intercept)."""
        return self.standard_columns(np.asarray(gradient)[None, :])[0]

    def standard_point(self, iterate: np.ndarray) -> np.ndarray:
        """Return an iterate ``[w, b]`` in standardised coordinates ``[s * w, b + m^T w]``."""
        mean, scale = self._standardisation()
        w, b = self._split(iterate)
        u = np.empty(self.n_params)
        u[: w.shape[0]] = scale * w
        if self.fit_intercept:
            u[-1] = b + float(mean @ w)
        return u

    def from_standard_point(self, point: np.ndarray) -> np.ndarray:
        """Return the iterate ``[v / s, c - m^T (v / s)]`` of a point ``[v, c]`` (``v``
        without an intercept) in standardised coordinates: the inverse of
        :meth:`standard_point`, the map ``T`` whose transpose :meth:`standard_gradient`
        applies."""
        mean, scale = self._standardisation()
        d = mean.shape[0]
        x = np.array(point, dtype=np.float64)
        x[:d] /= scale
        if self.fit_intercept:
            x[d] -= float(mean @ x[:d])
        return x

    def standard_columns(self, matrix: np.ndarray) -> np.ndarray:
        """Return ``M T`` for ``matrix`` ``M`` of shape (m, n_params): its columns on
        ``[w, b]`` moved to ``[v, c]`` (for a triangular factor ``R`` of ``A = [X, 1]``,
        ``R T`` is one of the standardised rows')."""
        mean, scale = self._standardisation()
        d = mean.shape[0]
        out = np.array(matrix, dtype=np.float64)
        if self.fit_intercept:
            out[:, :d] -= np.outer(out[:, d], mean)
        out[:, :d] /= scale
        return out

    def _split(self, iterate: np.ndarray) -> tuple[np.ndarray, float]:
        """Return ``(w, b)``; ``b = 0`` without an intercept."""
        d = self._bound()[0]
        x = np.asarray(iterate, dtype=np.float64)
        if x.shape != (self.n_params,):
            raise StraggleError(
                f"{type(self).__name__} iterates have shape ({self.n_params},); "
                f"got {x.shape}."
            )
        return x[:d], float(x[d]) if self.fit_intercept else 0.0

    def _labels(self, block: Block) -> np.ndarray:
        if block.y is None:
            raise InvalidDataError(
                f"{type(self).__name__} needs labels, but the block of rows "
                f"[{block.start}, {block.stop}) has none."
            )
        return block.y

    def _penalty_gradient(self, iterate: np.ndarray) -> np.ndarray:
        """Return ``alpha * [w, 0]`` (the intercept is not regularised)."""
        d, _, penalty = self._bound()
        out = np.zeros(self.n_params)
        out[:d] = penalty * np.asarray(iterate, dtype=np.float64)[:d]
        return out

    # ---------------------------------------------------------------- iteration
    def init_iterate(self, rng: np.random.Generator) -> np.ndarray:
        """Return zeros of shape (n_params,) (the regressions are convex; ``rng`` unused)."""
        return np.zeros(self.n_params)

    def objective(self, values: np.ndarray, iterate: np.ndarray) -> float:
        """Return the mean loss (``values[0]``) plus ``alpha/2 |w|^2``."""
        d, _, penalty = self._bound()
        w = np.asarray(iterate, dtype=np.float64)[:d]
        return float(values[0] + 0.5 * penalty * (w @ w))

    def update(self, iterate: np.ndarray, gradient: np.ndarray, step_size: float) -> np.ndarray:
        """Return ``x - eta (g + alpha [w, 0])``: a gradient step (``g`` the mean loss's
        gradient or an estimate) with the L2 penalty."""
        x = np.asarray(iterate, dtype=np.float64)
        return x - float(step_size) * (gradient + self._penalty_gradient(x))

    def gram_matvec(self, block: Block, v: np.ndarray) -> np.ndarray:
        """Return ``A_b^T (A_b v)`` with ``A_b = [X_b, 1]`` (or ``X_b``), tile by tile: a
        sum over the block's rows (not divided by ``n_samples``), of shape (n_params,)."""
        w, b = self._split(v)
        d = w.shape[0]
        out = np.zeros(self.n_params)
        for _, _, tile in block.tiles():
            z = tile @ w + b
            out[:d] += tile.T @ z
            if self.fit_intercept:
                out[d] += z.sum()
        return out

    def default_step_size(self, map_reduce: MapReduce, rng: np.random.Generator) -> float:
        """Return ``1/L`` with ``L = c * 1.05 * lam + alpha``: ``lam`` estimates the largest
        eigenvalue of ``A^T A / n`` (``A = [X, 1]``) from 20 power iterations (passes), ``c``
        bounds the loss's second derivative (1 squared loss, 1/4 logistic); 1.0 if ``L``
        is zero (all-zero matrix, no intercept, no penalty). ``map_reduce`` folds
        :meth:`gram_matvec`; ``rng`` draws the starting vector.
        """
        _, n, penalty = self._bound()

        def matvec(v: np.ndarray) -> np.ndarray:
            return np.asarray(map_reduce(self.gram_matvec, v), dtype=np.float64) / n

        lam = power_iteration(matvec, rng.standard_normal(self.n_params), n_iter=_POWER_ITERATIONS)
        smoothness = self._curvature * _SMOOTHNESS_MARGIN * lam + penalty
        return 1.0 / smoothness if smoothness > 0 else 1.0

    # ---------------------------------------------------------------- results
    def _full_gradient(self, result: KernelResult, iterate: np.ndarray) -> np.ndarray:
        """Return the objective's gradient: the loss part plus ``alpha [w, 0]``."""
        return np.asarray(result.gradient, dtype=np.float64) + self._penalty_gradient(iterate)

    def optimality(self, result: KernelResult, iterate: np.ndarray) -> float:
        """Return ``|standard_gradient(grad f(iterate))|``, the norm of the objective's
        gradient (penalty included) in standardised coordinates: 0 at the optimum,
        unchanged when a column is scaled or shifted."""
        gradient = self.standard_gradient(self._full_gradient(result, iterate))
        return float(np.linalg.norm(gradient))

    def optimality_scale(self, result: KernelResult, iterate: np.ndarray) -> float:
        """Return the coefficients' standardised gradient norm at the start; the
        intercept's component (large whenever the labels' mean is) counts only when every
        coefficient's is zero (floored at 1e-300)."""
        gradient = self.standard_gradient(self._full_gradient(result, iterate))
        coefficients = float(np.linalg.norm(gradient[: self._bound()[0]]))
        return max(coefficients or float(np.linalg.norm(gradient)), 1e-300)

    def iterate_change(self, new: np.ndarray, old: np.ndarray) -> float:
        """Return ``|u_new - u_old| / |u_new|`` with ``u = standard_point(x)`` (1e-300
        floor on the denominator)."""
        u_new, u_old = self.standard_point(new), self.standard_point(old)
        return float(np.linalg.norm(u_new - u_old) / max(float(np.linalg.norm(u_new)), 1e-300))

    def finalize(self, iterate: np.ndarray, result: KernelResult) -> dict[str, np.ndarray]:
        """Return the coefficients, the intercept and the gradient norm.

        Returns
        -------
        fitted : dict
            ``coef`` of shape (n_features,), ``intercept`` (0-d array; 0.0 without
            an intercept) and ``grad_norm`` (0-d array): the norm of the objective's
            gradient at ``iterate``.
        """
        w, b = self._split(iterate)
        grad_norm = float(np.linalg.norm(self._full_gradient(result, iterate)))
        return {"coef": w.copy(), "intercept": np.array(b, dtype=np.float64),
                "grad_norm": np.array(grad_norm, dtype=np.float64)}


def _column_standardisation(stats: MatrixStats, *, center: bool
                            ) -> tuple[np.ndarray, np.ndarray]:
    """Return the shift ``m`` and scale ``s`` of each column's standardised coordinate:
    with ``center`` the mean and the standard deviation (a constant column's ``|mean|``),
    else zero and the root mean square; scale 1 for a column of zeros, and zero shifts and
    unit scales without per-column deviations in ``stats``."""
    n = max(stats.n_samples, 1)
    mean = np.asarray(stats.column_means, dtype=np.float64)
    if stats.column_sq_dev is None:
        return np.zeros_like(mean), np.ones_like(mean)
    spread = np.sqrt(np.asarray(stats.column_sq_dev, dtype=np.float64) / n)
    if center:
        scale = np.where(spread > 0, spread, np.abs(mean))
    else:
        scale, mean = np.hypot(spread, mean), np.zeros_like(mean)
    return mean, np.where(scale > 0, scale, 1.0)


@dataclass(frozen=True, kw_only=True, slots=True)
class LeastSquares(_LinearModel):
    r"""(Ridge) least-squares regression.

    Minimises

    .. math:: f(w, b) = \frac{1}{2n} \sum_i (x_i^T w + b - y_i)^2
              + \frac{\alpha}{2} \|w\|^2,

    the intercept ``b`` not being penalised. The iterate is ``[w, b]`` (shape
    (n_features + 1,)), or ``w`` without an intercept.

    Parameters
    ----------
    alpha : float, default=0.0
        L2 penalty, >= 0.
    fit_intercept : bool, default=True
        Fit an intercept.

    Attributes
    ----------
    n_samples : int or None
        Number of rows; set by :meth:`bind`.
    n_features : int or None
        Number of columns; set by :meth:`bind`.
    penalty : float or None
        The penalty in use (``alpha``); set by :meth:`bind`.
    column_mean, column_scale : ndarray of shape (n_features,) or None
        Shift and scale of each column's standardised coordinate (see ``_LinearModel``);
        set by :meth:`bind`.

    See Also
    --------
    Logistic : L2-regularised logistic regression.

    Notes
    -----
    The reference solution is a TSQR: the partitions' R factors of ``[X_b, 1, y_b]`` are
    stacked and re-factorised (no normal equations).

    References
    ----------
    Demmel, Grigori, Hoemmen & Langou, "Communication-optimal parallel and sequential QR
    and LU factorizations", SIAM J. Sci. Comput. 2012 (TSQR).

    Examples
    --------
    >>> import numpy as np
    >>> from daskstraggle.problems import Block, LeastSquares, block_stats
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(50, 3))
    >>> y = X @ [1.0, -2.0, 0.5] + 3.0
    >>> block = Block(X, y=y)
    >>> problem = LeastSquares().bind(block_stats(block))
    >>> ref = problem.reference_solution(lambda fn, *a, combine=None: fn(block, *a))
    >>> ref.iterate.round(6)
    array([ 1. , -2. ,  0.5,  3. ])
    """

    name: ClassVar[str] = "least-squares"
    cli_options: ClassVar[tuple[CliOption, ...]] = (
        CliOption("--alpha", "alpha", "L2 penalty.", type=float, default=0.0,
                  show_default=True),
    )

    alpha: float = 0.0

    def qr_kernel(self, block: Block) -> np.ndarray:
        """Return the R factor of ``[X_b, 1, y_b]`` (TSQR leaf; tiles folded about 32 MiB
        at a time): shape (min(n_rows, n_params + 1), n_params + 1), upper triangular
        (trapezoidal for short blocks), ``R^T R`` the Gram matrix of ``[X_b, 1, y_b]``."""
        y = self._labels(block)
        width = self.n_params + 1
        R = np.zeros((0, width))
        target = max(width, _QR_BUFFER_BYTES // (8 * width))
        pending: list[np.ndarray] = []
        n_pending = 0
        for lo, hi, tile in block.tiles():
            columns = [tile, np.ones((hi - lo, 1))] if self.fit_intercept else [tile]
            pending.append(np.hstack([*columns, y[lo:hi, None]]))
            n_pending += hi - lo
            if n_pending >= target:
                R = stack_r(R, np.vstack(pending))
                pending, n_pending = [], 0
        if pending:
            R = stack_r(R, np.vstack(pending))
        return R

    def reference_solution(self, map_reduce: MapReduce) -> Reference:
        """Return the exact (ridge) least-squares solution by TSQR (one pass).

        The penalty enters as ``sqrt(n alpha) I`` rows for ``w`` before the last
        factorisation. With ``R = [[R11, r], [0, rho]]`` the final factor, ``x`` solves
        ``R11 x = r`` in standardised coordinates (``R11 T u = r``, ``x = T u``); when that
        system is singular, ``x`` is the minimum-norm solution of ``R11 x = r`` (as
        :func:`numpy.linalg.lstsq`). The objective is ``(|R11 x - r|^2 + rho^2) / (2n)``.

        As :meth:`Problem.reference_solution`, ``map_reduce`` folding :meth:`qr_kernel`;
        ``info`` holds ``passes`` (1) and ``rank`` (numerical rank of ``R11 T``).
        """
        import scipy.linalg  # loaded when first needed

        d, n, penalty = self._bound()
        check_dense_size(d, "LeastSquares")
        p = self.n_params
        R = np.asarray(map_reduce(self.qr_kernel, combine=stack_r), dtype=np.float64)
        if penalty > 0:
            ridge = np.zeros((d, p + 1))
            ridge[:, :d] = np.sqrt(n * penalty) * np.eye(d)
            R = stack_r(R, ridge)
        if R.shape[0] < p + 1:  # fewer rows than unknowns: pad the trapezoid
            R = np.vstack([R, np.zeros((p + 1 - R.shape[0], p + 1))])
        R11, rhs, rho = R[:p, :p], R[:p, p], float(R[p, p])
        u, _, rank, _ = scipy.linalg.lstsq(self.standard_columns(R11), rhs)
        if rank == p:
            x = self.from_standard_point(u)
        else:  # not unique: the minimum-norm solution in the user's coordinates
            x = scipy.linalg.lstsq(R11, rhs)[0]
        residual = R11 @ x - rhs
        objective = (float(residual @ residual) + rho * rho) / (2.0 * n)
        return Reference(iterate=x, objective=objective, info={"passes": 1, "rank": int(rank)})
