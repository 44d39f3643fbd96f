"""Principal component analysis by (relaxed) block power iteration on row partitions."""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Self

import numpy as np

from daskstraggle._declared_options import CliOption
from daskstraggle._validation import check_bool, check_int, check_nonnegative
from daskstraggle.errors import (
    DivergenceError,
    InvalidDataError,
    InvalidParameterError,
    StraggleWarning,
)
from daskstraggle.problems._kernels import gram_sum, pca_pass_sum
from daskstraggle.problems._linalg import (
    check_dense_size,
    orthonormalize,
    precision_floor,
    sin_largest_angle,
)
from daskstraggle.problems.base import KernelResult, MapReduce, Problem, Reference
from daskstraggle.problems.block import Block, MatrixStats
from daskstraggle.problems.separation import (
    Separation,
    boundary_start,
    labels,
    north_gap,
    variance_errors,
)

__all__ = ["PCA"]

#: Below this fraction of the uncentred squared norm, the centred norm is rounding noise
#: (used only when the statistics carry no per-column squared deviations).
_CONSTANT_TOL = 1e-12
#: A column whose squared deviation is at most ``n (_CONSTANT_EPS mean)^2`` is constant.
_CONSTANT_EPS = 16 * float(np.finfo(np.float64).eps)


@dataclass(frozen=True, kw_only=True, slots=True)
class PCA(Problem):
    r"""Top-``k`` principal subspace of a matrix whose rows are samples.

    The iterate is an orthonormal basis ``V`` of shape (n_features, k). A kernel returns
    ``X_c^T X_c V`` summed over a block's rows, ``X_c`` the column-centred matrix (centred
    implicitly: no centred copy of the data is made). The update

    .. math:: V \leftarrow \operatorname{orth}\big((1 - \eta) V + \eta\, G / \lambda\big)

    with :math:`\lambda` the current top eigenvalue estimate (see :meth:`update`) is the
    block power method for :math:`\eta = 1` (the default) and DSAG's relaxed update for
    :math:`\eta < 1`. The objective is the unexplained variance fraction
    ``1 - |X_c V|_F^2 / |X_c|_F^2``.

    Parameters
    ----------
    n_components : int, default=2
        Number of principal components ``k``, in ``[1, n_features]``.
    center : bool, default=True
        Subtract the column means (implicitly). False analyses ``X`` as it is, e.g.
        genotypes whose rows the data layer has already standardised.
    oversample : int or None, default=None
        Extra columns ``p`` carried beyond the ``k`` components (block ``k + p``, at most
        the number of columns): the update rotates the block to its Ritz vectors before
        orthonormalising (Rayleigh-Ritz), so component ``i`` converges at the rate
        ``lambda_{k+p+1} / lambda_i`` instead of ``lambda_{k+1} / lambda_i``; only the
        top ``k`` Ritz pairs are judged and returned. None: the method's default (0; ``k``
        for ``block``).
    min_eigengap : float or None, default=None
        Relative eigengap ``g`` in ``[0, 1)`` that separates two components (see
        :mod:`daskstraggle.problems.separation`). Components that run on into the largest
        eigenvalue not asked for without a gap of ``g`` converge in variance, not in
        direction, and are named ``"variance"`` in
        ``Result.attrs["convergence"]["components"]``. Needs a method that reports the
        next Ritz value (``block``, or an oversampled block). None: North's rule,
        ``sqrt(2 / n_samples)``; 0: every component converges in direction.

    Attributes
    ----------
    n_samples : int or None
        Number of rows; set by :meth:`bind`.
    mean : ndarray of shape (n_features,) or None
        Column means subtracted (zeros when ``center=False``); set by :meth:`bind`.
    total : float or None
        Squared Frobenius norm ``|X_c|_F^2`` of the (centred) matrix; set by :meth:`bind`.
    least_column : float or None
        The smallest squared norm of a (centred) column that is not constant; set by
        :meth:`bind` (None: unknown). Components whose variance lies below float64's
        working precision (:func:`~daskstraggle.problems._linalg.precision_floor` times
        the top one) are *unresolved* when such a column exists, and of zero variance
        otherwise (the rank is lower).

    See Also
    --------
    Logistic, LeastSquares : The two regression problems.

    Notes
    -----
    PCA iterates live on a Grassmannian, not in a vector space, so momentum methods
    (NAG) are refused (:attr:`supports_momentum` is False).

    References
    ----------
    Halko, Martinsson & Tropp, "Finding structure with randomness", SIAM Review 2011
    (block power iteration, Rayleigh-Ritz). Severinson, Rosnes, El Rouayheb & Graell i
    Amat, "DSAG: a mixed synchronous-asynchronous iterative method for
    straggler-resilient learning", IEEE Trans. Commun. 2023 (relaxed update for PCA).

    Examples
    --------
    >>> import numpy as np
    >>> from daskstraggle.problems import PCA, Block, block_stats
    >>> X = np.random.default_rng(0).normal(size=(100, 4)) * [3.0, 2.0, 1.0, 0.5]
    >>> block = Block(X)
    >>> pca = PCA(n_components=2).bind(block_stats(block))
    >>> V = pca.init_iterate(np.random.default_rng(0))
    >>> for _ in range(100):
    ...     V = pca.update(V, pca.kernel(block, V).gradient, 1.0)
    >>> result = pca.kernel(block, V)
    >>> fitted = pca.finalize(V, result)
    >>> fitted["components"].shape
    (2, 4)
    """

    name: ClassVar[str] = "pca"
    needs_labels: ClassVar[bool] = False
    cli_options: ClassVar[tuple[CliOption, ...]] = (
        CliOption("--components", "n_components", "Number of principal components.", type=int,
                  short="-k", default=2, show_default=True),
        CliOption("--center", "center", "Centre the columns (default: yes, except "
                  "Patterson-scaled genotypes).", type=bool, off_flag="--no-center"),
        CliOption("--oversample", "oversample", "Extra columns p carried beyond the k "
                  "components (block k + p with Rayleigh-Ritz; default: 0, or k with --method "
                  "block).", type=int),
        CliOption("--min-eigengap", "min_eigengap", "Relative eigengap that separates two "
                  "components; components in a bulk without such a gap that runs past k "
                  "converge in variance only (default: North's rule sqrt(2 / rows); 0: every "
                  "component converges as a vector).", type=float),
    )
    #: Momentum methods are refused: iterates are subspaces.
    supports_momentum: ClassVar[bool] = False
    _bound_fields: ClassVar[tuple[str, ...]] = ("mean", "total")
    _params: ClassVar[tuple[str, ...]] = ("n_components", "center", "oversample", "min_eigengap")

    n_components: int = 2
    center: bool = True
    oversample: int | None = None
    min_eigengap: float | None = None
    n_samples: int | None = None
    mean: np.ndarray | None = field(default=None, compare=False, repr=False)
    total: float | None = None
    least_column: float | None = None

    def __post_init__(self) -> None:
        """Validate the user parameters."""
        object.__setattr__(self, "n_components", check_int(
            self.n_components, name="n_components", caller="PCA", low=1))
        object.__setattr__(self, "center", check_bool(self.center, name="center", caller="PCA"))
        if self.oversample is not None:
            object.__setattr__(self, "oversample", check_int(
                self.oversample, name="oversample", caller="PCA", low=0))
        if self.min_eigengap is not None:
            gap = check_nonnegative(self.min_eigengap, name="min_eigengap", caller="PCA")
            if gap >= 1:
                raise InvalidParameterError(
                    "The 'min_eigengap' parameter of PCA (CLI: --min-eigengap) is a relative "
                    f"gap and must be in [0, 1), e.g. 0.01; got {gap!r} instead.")
            object.__setattr__(self, "min_eigengap", gap)

    # ---------------------------------------------------------------- parameters
    @property
    def n_features(self) -> int:
        """Number of columns of the bound matrix."""
        return int(self._bound()[0].shape[0])

    @property
    def oversampled(self) -> bool:
        """Whether the iterate carries ``oversample > 0`` extra columns."""
        return bool(self.oversample)

    @property
    def block_width(self) -> int:
        """Columns of the iterate: ``k + p`` (``p`` the oversampling, 0 when None), at
        most the number of columns of the bound matrix."""
        return min(self.n_components + (self.oversample or 0), self.n_features)

    def _bound(self) -> tuple[np.ndarray, float]:
        """As :meth:`Problem._bound`: ``(mean, total)``."""
        mean, total = Problem._bound(self)
        return mean, total

    def check_shape(self, n_samples: int, n_features: int) -> None:
        """As :meth:`Problem.check_shape`.

        Raises
        ------
        InvalidParameterError
            If ``n_components`` exceeds the number of columns, or the rank the number of
            rows allows (rows minus one when centring).
        """
        if self.n_components > n_features:
            raise InvalidParameterError(
                f"The 'n_components' parameter of PCA must be an int in [1, {n_features}] "
                f"(the matrix has {n_features} columns). Got {self.n_components!r} instead."
            )
        rank = n_samples - 1 if self.center else n_samples
        if self.n_components > max(rank, 1):
            why = "rows minus one (centring removes one dimension)" if self.center else "rows"
            raise InvalidParameterError(
                f"The 'n_components' parameter of PCA (CLI: -k) must be at most {max(rank, 1)}, "
                f"the matrix's {why}: further components have zero variance. "
                f"Got {self.n_components!r} instead."
            )

    def check_step_size(self, step_size: float) -> None:
        """Refuse a relaxed power step of 2 or more: it converges to the wrong components.

        The update multiplies the part of ``V`` along an eigenvector with relative
        eigenvalue ``mu`` by ``1 - eta + eta mu``: for ``eta >= 2`` the smallest
        components grow at least as fast as the largest.

        Raises
        ------
        DivergenceError
            If ``step_size >= 2``.
        """
        if float(step_size) >= 2.0:
            raise DivergenceError(
                f"A PCA step size of {float(step_size):.6g} diverges: relaxed power steps of 2 "
                "or more converge to the smallest components, not the largest. Use a step "
                "size in (0, 2) (CLI: --step-size), e.g. 1 (the power method), or leave it "
                "unset for the default."
            )

    def bind(self, stats: MatrixStats) -> Self:
        """As :meth:`Problem.bind`: a copy fixed to the column means and total variance.

        Raises
        ------
        InvalidParameterError
            If ``n_components`` exceeds the number of columns.
        InvalidDataError
            If the matrix has no rows, its values' squares overflow or underflow float64
            (:func:`~daskstraggle.problems.block.check_float_range`), or its (centred)
            total variance is zero.
        """
        self.check_shape(stats.n_samples, stats.n_features)
        self._check_stats(stats)
        if self.center:
            mean = np.asarray(stats.column_means, dtype=np.float64).copy()
            total = float(stats.centered_sq_norm)
        else:
            mean = np.zeros(stats.n_features)
            total = float(stats.sq_norm)
        columns = _column_norms(stats, center=self.center)
        empty = (not np.isfinite(total) or total <= 0.0 or (
            total <= _CONSTANT_TOL * float(stats.sq_norm) if columns is None
            else not columns.size))
        if empty:
            kind = "every column is constant" if self.center else "the matrix is all zeros"
            raise InvalidDataError(
                f"PCA needs a matrix with non-zero variance, but {kind} (total "
                f"{'centred ' if self.center else ''}squared norm {total:.3g}, rounding "
                "included)."
            )
        least = None if columns is None else float(columns.min())
        return dataclasses.replace(self, n_samples=int(stats.n_samples), mean=mean,
                                   total=total, least_column=least)

    # ---------------------------------------------------------------- iteration
    def init_iterate(self, rng: np.random.Generator) -> np.ndarray:
        """Return a random orthonormal basis of shape (n_features, block_width), from a
        Gaussian matrix drawn by ``rng``."""
        return orthonormalize(rng.standard_normal((self.n_features, self.block_width)))

    def kernel(self, block: Block, iterate: np.ndarray) -> KernelResult:
        """As :meth:`Problem.kernel`: ``gradient = X_c^T X_c V`` for the orthonormal basis
        ``V`` (n_features, block_width), ``values`` the captured variances ``|X_c v_j|^2``.

        With ``mu`` the column means and ``m = V^T mu``, ``P = X V - 1 m^T`` and ``G = X^T
        P - mu (1^T P)^T`` equals ``X_c^T X_c V`` exactly without centring the data
        (:func:`~daskstraggle.problems._kernels.pca_pass`).
        """
        return self.kernel_sum((block,), iterate)

    def kernel_sum(self, blocks: Sequence[Block], iterate: np.ndarray) -> KernelResult:
        """As :meth:`Problem.kernel_sum`, summed into one ``n_features x k`` buffer (not
        one array per partition); equal to the per-block sums to rounding."""
        mean = self._bound()[0]
        V = np.asarray(iterate, dtype=np.float64)
        shift = V.T @ mean if self.center else None
        G, colsum, values = pca_pass_sum(blocks, V, shift)
        if shift is not None:
            for a in range(0, G.shape[0], 4096):  # G -= outer(mean, colsum), in row slices
                G[a:a + 4096] -= mean[a:a + 4096, None] * colsum  # (no n_features x k temporary)
        return KernelResult(gradient=G, values=values,
                            n_rows=sum(block.n_rows for block in blocks))

    def objective(self, values: np.ndarray, iterate: np.ndarray) -> float:
        """Return the unexplained variance fraction ``1 - sum(values[:k]) / |X_c|_F^2``.

        With oversampling only the first ``k`` columns count (the update orders the block
        by decreasing Ritz value); in [0, 1] for an orthonormal iterate (unused here).
        """
        total = self._bound()[1]
        return float(1.0 - np.sum(np.asarray(values)[:self.n_components]) / total)

    def update(self, iterate: np.ndarray, gradient: np.ndarray, step_size: float) -> np.ndarray:
        """Return ``orth((1 - eta) V + eta G / lambda)``, ``lambda`` the top Rayleigh quotient.

        ``G`` is (an estimate of) ``X_c^T X_c V``; ``eta = 1`` gives the power method. The
        result is orthonormal (:func:`~daskstraggle.problems._linalg.orthonormalize`).
        ``lambda`` is the largest eigenvalue of the symmetric part of ``V^T G`` (the total
        variance when that is not positive), so ``G / lambda`` has eigenvalues near 1 on
        the components found whatever share of the variance they explain.
        """
        eta = float(step_size)
        V = np.asarray(iterate, dtype=np.float64)
        G = np.asarray(gradient, dtype=np.float64)
        if V.shape[1] > self.n_components:  # oversampled: order the block by Ritz value
            V, G = self._ritz_rotate(V, G)
        if eta == 1.0:  # the power method: any positive scale gives the same basis
            return orthonormalize((1.0 / self._bound()[1]) * G)
        M = V.T @ G
        scale = float(np.linalg.eigvalsh(0.5 * (M + M.T))[-1]) if np.isfinite(M).all() \
            else math.nan
        if not (math.isfinite(scale) and scale > 0.0):
            scale = self._bound()[1]
        return orthonormalize((1.0 - eta) * V + (eta / scale) * G)

    def _ritz_rotate(self, V: np.ndarray, G: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rotate ``V`` and ``G`` (same span) so the first ``k`` columns span the top ``k``
        Ritz vectors of ``V^T G``, each group by the rotation closest to the identity: the
        columns move continuously from step to step, so the stale partial products that
        SAG and DSAG cache still match the current basis."""
        M = V.T @ G
        if not np.isfinite(M).all():
            return V, G
        _, U = _ritz_pairs(M)
        k = self.n_components
        R = np.hstack([_closest_rotation(U[:, :k], slice(0, k)),
                       _closest_rotation(U[:, k:], slice(k, None))])
        return V @ R, G @ R

    def stochastic_step_factor(self, staleness: int) -> float:
        """Return the DSAG paper's eta = 0.9 for stochastic methods, however stale (the
        step is normalised by the top Rayleigh quotient, so stale parts do not
        destabilise it)."""
        return 0.9

    def default_step_size(self, map_reduce: MapReduce, rng: np.random.Generator) -> float:
        """Return 1.0 (the power method); no pass over the data."""
        return 1.0

    # ---------------------------------------------------------------- results
    def _ritz(self, iterate: np.ndarray, gradient: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Return Ritz values (descending), rotation ``U`` and relative residuals
        ``|G u_i - lambda_i V u_i| / lambda_i``; below the working precision
        (:meth:`_below_precision`) 0 when the rank is lower, inf when hidden."""
        V = np.asarray(iterate, dtype=np.float64)
        G = np.asarray(gradient, dtype=np.float64)
        eigvals, U = _ritz_pairs(V.T @ G)
        R = G @ U - (V @ U) * eigvals
        with np.errstate(divide="ignore", invalid="ignore"):
            residuals = np.linalg.norm(R, axis=0) / eigvals
        residuals = np.where(eigvals > 0, residuals, np.inf)
        below, hidden = self._below_precision(eigvals)
        residuals[below] = np.inf if hidden else 0.0
        return eigvals, U, residuals

    def _below_precision(self, eigvals: np.ndarray) -> tuple[np.ndarray, bool]:
        """Which Ritz values (descending) lie at or below
        :func:`~daskstraggle.problems._linalg.precision_floor` times the top one (none
        when the top one is not positive), and whether they may carry variance (*hidden*:
        some column's own variance lies below that too; otherwise the rank is lower)."""
        top = float(eigvals[0]) if len(eigvals) else 0.0
        floor = precision_floor(self.n_features) * max(top, 0.0)
        hidden = self.least_column is not None and self.least_column <= floor
        below = eigvals <= floor if top > 0 else np.zeros(len(eigvals), dtype=bool)
        return np.asarray(below), hidden

    def optimality(self, result: KernelResult, iterate: np.ndarray) -> float:
        """Return the largest relative eigen-residual of the Ritz pairs at ``iterate``.

        With ``G = X_c^T X_c V``, the Ritz pairs ``(lambda_i, y_i = V u_i)`` of ``V^T G``
        have residuals ``r_i = |X_c^T X_c y_i - lambda_i y_i| / lambda_i``; each component
        is judged on its own. ``r_i <= tol`` puts it within an angle of about
        ``tol * lambda_i / gap_i`` of an eigenvector. With oversampling only the top ``k``
        pairs are judged. Returns ``max_i r_i`` over the top ``k`` pairs (inf when the top
        Ritz value is not positive).
        """
        return float(np.max(self._ritz(iterate, result.gradient)[2][:self.n_components]))

    @property
    def eigengap(self) -> float:
        """The relative eigengap that separates two components: ``min_eigengap``, or
        North's ``sqrt(2 / n_samples)`` once bound (0 before)."""
        if self.min_eigengap is not None:
            return float(self.min_eigengap)
        return 0.0 if self.n_samples is None else north_gap(self.n_samples)

    def separation(self, result: KernelResult, iterate: np.ndarray, *,
                   next_value: float | None = None, history: Sequence[np.ndarray] = (),
                   errors: np.ndarray | None = None, tol: float | None = None
                   ) -> Separation:
        """Judge each component by what the data determine (exact sums only).

        Components outside the boundary cluster (:mod:`daskstraggle.problems.separation`)
        are judged by their eigen-residual; those in it by the smaller of their residual
        and their variance error (``variance_errors`` over ``history`` and this round).

        Parameters
        ----------
        result : KernelResult
            Exact kernel sum at ``iterate``.
        iterate : ndarray of shape (n_features, block_width)
            Orthonormal basis ``V``.
        next_value : float or None, default=None
            The largest Ritz value beyond the ``k`` requested; None: from an oversampled
            ``iterate``, else unknown (no boundary cluster).
        history : sequence of ndarray, default=()
            The top ``k`` Ritz values of earlier exact rounds, oldest first.
        errors : ndarray of shape (k,) or None, default=None
            Variance errors to use instead of estimating them.
        tol : float or None, default=None
            The run's tolerance (names the components, see ``separation.labels``).

        Returns
        -------
        separation : Separation
            Without a boundary cluster its measure is :meth:`optimality`'s.
        """
        eigvals, _, residuals = self._ritz(iterate, result.gradient)
        k = self.n_components
        values, residuals = eigvals[:k], residuals[:k]
        if next_value is None and len(eigvals) > k:
            next_value = float(eigvals[k])
        gap = self.eigengap
        start = boundary_start(values, next_value, gap)
        if errors is None:
            errors = variance_errors([*history, values])
        judged = residuals.copy()
        judged[start:] = np.minimum(residuals[start:], errors[start:])
        names = labels(values, residuals, start, gap, tol)
        below, hidden = self._below_precision(eigvals)
        below = below[:k]
        if below.any():  # no eigengap, residual or variance error means anything there:
            judged[below] = 0.0  # the run stops on the others; the verdict names them
            names = [("unresolved" if hidden else "zero") if low else name
                     for name, low in zip(names, below, strict=True)]
        return Separation(
            measure=float(np.max(judged)), values=values, errors=np.asarray(errors),
            next_value=next_value, labels=names)

    def iterate_change(self, new: np.ndarray, old: np.ndarray) -> float:
        """Return the sine of the largest principal angle between two bases, in [0, 1]
        (their leading ``k`` columns with oversampling)."""
        k = self.n_components
        return sin_largest_angle(np.asarray(new, dtype=np.float64)[:, :k],
                                 np.asarray(old, dtype=np.float64)[:, :k])

    def conclude(self, iterate: np.ndarray, result: KernelResult
                 ) -> tuple[np.ndarray, KernelResult]:
        """Return the top ``k`` Ritz vectors of an oversampled block and their products.

        With ``U`` the top ``k`` eigenvectors of ``V^T G``, ``V U`` has the exact products
        ``G U``: no further pass. Without oversampling both are returned unchanged.

        Returns
        -------
        iterate : ndarray of shape (n_features, n_components)
        result : KernelResult
            Its gradient ``G U`` and values ``|X_c V u_i|^2``.
        """
        V = np.asarray(iterate, dtype=np.float64)
        k = self.n_components
        if V.shape[1] <= k:
            return iterate, result
        _, U, _ = self._ritz(V, result.gradient)
        Y, AY = V @ U[:, :k], np.asarray(result.gradient, dtype=np.float64) @ U[:, :k]
        values = np.einsum("ij,ij->j", Y, AY)
        return Y, KernelResult(gradient=AY, values=values, n_rows=result.n_rows)

    def finalize(self, iterate: np.ndarray, result: KernelResult) -> dict[str, np.ndarray]:
        """Return components and explained variances by a Rayleigh-Ritz step.

        The eigenvectors of ``M = V^T X_c^T X_c V`` rotate ``V`` into the Ritz vectors,
        by decreasing variance (``result``'s gradient is ``X_c^T X_c V``).

        Returns
        -------
        fitted : dict
            ``components`` (n_components, n_features): Ritz vectors as rows, each with
            its largest-magnitude entry positive; ``explained_variance``
            (n_components,): eigenvalues over ``n_samples - 1`` (as scikit-learn;
            ``n_samples`` when there is one row); ``explained_variance_ratio``:
            eigenvalues over ``|X_c|_F^2``; ``singular_values``: square roots of the
            eigenvalues; ``mean`` (n_features,); ``residuals`` (n_components,): each
            component's relative eigen-residual (see :meth:`optimality`).

        Warns
        -----
        StraggleWarning
            If some components' variance lies below float64's working precision next to
            the top one: either the rank is below ``n_components`` (variances reported as
            0), or the columns' dynamic range hides them (NaN, ``unresolved``).
        """
        mean, total = self._bound()
        V = np.asarray(iterate, dtype=np.float64)
        eigvals, U, residuals = self._ritz(V, result.gradient)
        k = self.n_components
        eigvals, U, residuals = eigvals[:k], U[:, :k], residuals[:k]
        below, hidden = self._below_precision(eigvals)
        if below.any():
            eigvals = np.where(below, np.nan if hidden else 0.0, eigvals)
            warnings.warn(self._precision_message(below, hidden), StraggleWarning, stacklevel=2)
        components = (V @ U).T
        pivot = np.argmax(np.abs(components), axis=1)
        signs = np.where(components[np.arange(components.shape[0]), pivot] < 0, -1.0, 1.0)
        components = components * signs[:, None]
        assert self.n_samples is not None
        dof = max(self.n_samples - 1, 1)
        return {
            "components": np.ascontiguousarray(components, dtype=np.float64),
            "explained_variance": (eigvals / dof).astype(np.float64),
            "explained_variance_ratio": (eigvals / total).astype(np.float64),
            "singular_values": np.sqrt(np.maximum(eigvals, 0.0)),
            "mean": mean.astype(np.float64, copy=True),
            "residuals": residuals.astype(np.float64),
        }

    def _precision_message(self, below: np.ndarray, hidden: bool) -> str:
        """The warning for the components below the working precision."""
        which = np.flatnonzero(below) + 1
        names = f"PC{which[0]}" + (f"-PC{which[-1]}" if len(which) > 1 else "")
        floor = precision_floor(self.n_features)
        if not hidden:
            return (f"PCA: only {int((~below).sum())} of the {self.n_components} components "
                    f"have non-zero variance (the matrix's rank is lower: {names} lie below "
                    f"{floor:.1e} of PC1's variance, float64's working precision for "
                    f"{self.n_features} columns); the others are arbitrary directions with "
                    "variance 0. Ask for fewer components (CLI: -k).")
        assert self.least_column is not None and self.total is not None
        return (f"PCA: {names} cannot be resolved: their variance lies below {floor:.1e} of "
                f"PC1's (float64's working precision for {self.n_features} columns), and "
                f"the columns' variances span {math.log10(self.total / self.least_column):.0f}"
                " decades (the smallest column holds "
                f"{self.least_column / self.total:.1e} of the total). They are reported "
                "as NaN and not converged ('unresolved'). Standardise the columns first "
                "(divide each by its standard deviation: a PCA of the correlation matrix), "
                "or ask for fewer components (CLI: -k).")

    def gram_kernel(self, block: Block, *, upper: bool = False) -> np.ndarray:
        """Return ``X_c^T X_c`` over the block's rows, centred by the global means before
        the products (:func:`~daskstraggle.problems._kernels.gram`; ``upper``: the upper
        triangle only, zeros below the diagonal)."""
        return self.gram_kernel_sum((block,), upper=upper)

    def gram_kernel_sum(self, blocks: Sequence[Block], *, upper: bool = False) -> np.ndarray:
        """Return :meth:`gram_kernel` summed over ``blocks`` (at least one), in one
        ``d x d`` matrix."""
        mean = self._bound()[0]
        return gram_sum(blocks, mean if self.center else None, upper=upper)

    def reference_solution(self, map_reduce: MapReduce) -> Reference:
        """Return the exact top-``k`` subspace from the dense covariance (one pass).

        As :meth:`Problem.reference_solution`, ``map_reduce`` folding :meth:`gram_kernel`:
        ``iterate`` (n_features, n_components) holds the top eigenvectors of
        ``X_c^T X_c``, ``objective`` the unexplained variance fraction, ``info`` the
        ``eigenvalues`` (descending) and ``passes`` (1). Refused above 20000 columns.
        """
        import scipy.linalg  # loaded when first needed (not by the CLI's --help)

        d = self.n_features
        total = self._bound()[1]
        check_dense_size(d, "PCA")
        gram = np.asarray(map_reduce(self.gram_kernel), dtype=np.float64)
        gram = 0.5 * (gram + gram.T)
        k = self.n_components
        eigvals, vectors = scipy.linalg.eigh(gram, subset_by_index=[d - k, d - 1])
        eigvals, vectors = eigvals[::-1], vectors[:, ::-1]
        return Reference(
            iterate=np.ascontiguousarray(vectors),
            objective=float(1.0 - eigvals.sum() / total),
            info={"eigenvalues": eigvals.copy(), "passes": 1},
        )

    def distance(self, iterate: np.ndarray, reference: Reference) -> float:
        """Return the sine of the largest principal angle to the reference subspace, in
        [0, 1] (0 when the subspaces coincide)."""
        return sin_largest_angle(np.asarray(iterate, dtype=np.float64), reference.iterate)


def _column_norms(stats: MatrixStats, *, center: bool) -> np.ndarray | None:
    """The squared norms of the (centred) columns that are not constant (not zero without
    centring), or None when the statistics carry no per-column squared deviations.

    A column's squared deviation is rounding when it is at most ``n (16 eps mean)^2``.
    """
    if stats.column_sq_dev is None:
        return None
    sq_dev = np.asarray(stats.column_sq_dev, dtype=np.float64)
    mean = np.asarray(stats.column_means, dtype=np.float64)
    n = max(int(stats.n_samples), 1)
    if center:
        varies = sq_dev > n * (_CONSTANT_EPS * mean) ** 2
        return sq_dev[varies & (sq_dev > 0)]
    norms = sq_dev + n * mean * mean
    return norms[norms > 0]


def _ritz_pairs(M: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Eigenpairs of the symmetric part of ``M = V^T G``, by decreasing value."""
    eigvals, U = np.linalg.eigh(0.5 * (M + M.T))
    order = np.argsort(eigvals)[::-1]
    return eigvals[order], U[:, order]


def _closest_rotation(U: np.ndarray, rows: slice) -> np.ndarray:
    """Return ``U Q`` (same span) with ``Q`` orthogonal and ``U Q`` closest to the
    coordinate directions ``rows`` (the polar factor of ``U[rows]^T``)."""
    if U.shape[1] == 0:
        return U
    left, _, right = np.linalg.svd(U[rows].T)
    return U @ (left @ right)
