"""The Problem contract: block kernels, objective, update and an exact reference.

A problem is a frozen value object, created with its user parameters
(``make_problem("pca", n_components=3)``), then *bound* to the matrix's statistics
(:meth:`Problem.bind`); bound problems are pickled to the workers with each task.
Kernels return **sums over the rows of a block**, so partial results from any set of
partitions add up.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, Self

import numpy as np

from daskstraggle._declared_options import CliOption
from daskstraggle.errors import InvalidDataError, StraggleError
from daskstraggle.problems.block import Block, MatrixStats, check_float_range
from daskstraggle.problems.held import KernelResult, combine
from daskstraggle.problems.separation import Separation

__all__ = [
    "KernelResult",
    "MapReduce",
    "Problem",
    "Reference",
    "combine",
]


@dataclass(frozen=True, slots=True)
class Reference:
    """The exact optimum of a bound problem, computed independently of the methods.

    Parameters
    ----------
    iterate : ndarray
        The optimal iterate (PCA: orthonormal basis of the top-k subspace, shape
        (n_features, k); regression: coefficients with the intercept last).
    objective : float
        Objective at the optimum.
    info : dict
        Solver details (passes over the data, iterations, final gradient norm...).
    """

    iterate: np.ndarray
    objective: float
    info: dict[str, Any] = field(default_factory=dict)


class MapReduce(Protocol):
    """Apply ``fn(block, *args)`` to every partition once and fold the results with
    ``combine`` (default: ``+``); runtimes provide it, for reference solutions and step
    sizes."""

    def __call__(
        self,
        fn: Callable[..., Any],
        *args: Any,
        combine: Callable[[Any, Any], Any] | None = None,
    ) -> Any: ...


class Problem(ABC):
    """Abstract base of the learning problems (PCA, logistic, least squares).

    Subclasses are frozen dataclasses whose :meth:`bind` fields are None until bound
    (:attr:`is_bound`); what derives from them raises StraggleError until then.
    """

    #: Registry name, e.g. ``"pca"``.
    name: ClassVar[str]
    #: Whether the problem needs labels ``y``.
    needs_labels: ClassVar[bool] = False
    #: The options its CLI command (``pca``, ``logreg``, ``linreg``) offers for its
    #: parameters, each passed to the problem's ``fit_*`` function under its ``target``.
    cli_options: ClassVar[tuple[CliOption, ...]] = ()

    #: The fields :meth:`bind` fills (None until then), in :meth:`_bound`'s order.
    _bound_fields: ClassVar[tuple[str, ...]] = ()
    #: The user parameters, in :meth:`get_params`'s order.
    _params: ClassVar[tuple[str, ...]] = ()

    def get_params(self) -> dict[str, Any]:
        """Return the user parameters (``make_problem(name, **params)`` rebuilds it)."""
        return {name: getattr(self, name) for name in self._params}

    @property
    def is_bound(self) -> bool:
        """Whether :meth:`bind` has fixed the data-dependent fields."""
        return all(getattr(self, name) is not None for name in self._bound_fields)

    def _bound(self) -> tuple[Any, ...]:
        """Return the values of :attr:`_bound_fields`; raise StraggleError until bound."""
        if not self.is_bound:
            raise StraggleError(
                f"{type(self).__name__} is not bound to data: call bind(stats) first.")
        return tuple(getattr(self, name) for name in self._bound_fields)

    def _check_stats(self, stats: MatrixStats, *, labels: bool = False) -> None:
        """Raise InvalidDataError if the matrix has no rows, ``labels`` and the labels are
        not finite, or its (or its labels') squares leave float64's range."""
        caller = type(self).__name__
        if stats.n_samples < 1:
            raise InvalidDataError(f"{caller} needs a matrix with at least one row; got 0 rows.")
        if labels and not np.isfinite(stats.label_sum):
            raise InvalidDataError(
                f"The labels of {caller} must be finite; their sum is {stats.label_sum!r}.")
        check_float_range(stats, caller=caller, labels=labels)

    def check_shape(self, n_samples: int, n_features: int) -> None:  # noqa: B027 - optional
        """Raise InvalidParameterError if the parameters cannot fit a matrix of this shape
        (called before any cluster work; :meth:`bind` checks again)."""

    def check_step_size(self, step_size: float) -> None:  # noqa: B027 - optional hook
        """Raise DivergenceError if ``step_size`` is known to make the iteration diverge."""

    @abstractmethod
    def bind(self, stats: MatrixStats) -> Self:
        """Return a copy fixed to a matrix's statistics, after validating parameters.

        Raises
        ------
        InvalidParameterError
            If a parameter does not fit the data (e.g. more components than columns).
        InvalidDataError
            If the labels do not fit the problem (e.g. three classes for logistic).
        """

    @abstractmethod
    def init_iterate(self, rng: np.random.Generator) -> np.ndarray:
        """Return the starting iterate (PCA: a random orthonormal basis; else zeros)."""

    @abstractmethod
    def kernel(self, block: Block, iterate: np.ndarray) -> KernelResult:
        """Return the gradient-like sum and objective terms over the block's rows (one
        fused pass over its stored bytes, :mod:`daskstraggle.problems._kernels`).

        Parameters
        ----------
        block : Block
            Rows of the matrix (with their labels for the regressions).
        iterate : ndarray
            The current iterate.

        Returns
        -------
        result : KernelResult
            Sums over the block's rows: a ``gradient`` shaped like the iterate and the
            objective terms ``values``.
        """

    def kernel_sum(self, blocks: Sequence[Block], iterate: np.ndarray) -> KernelResult:
        """Return :meth:`kernel` at ``iterate`` summed over ``blocks`` (at least one: a
        worker's partitions); a problem may sum into one buffer instead, as PCA does."""
        return sum((self.kernel(block, iterate) for block in blocks[1:]),
                   self.kernel(blocks[0], iterate))

    @abstractmethod
    def objective(self, values: np.ndarray, iterate: np.ndarray) -> float:
        """Return the objective (lower is better) from the summed ``values`` at ``iterate``."""

    @abstractmethod
    def update(self, iterate: np.ndarray, gradient: np.ndarray, step_size: float) -> np.ndarray:
        """Return the next iterate from a full (or estimated) gradient sum, regularisation
        and projection (PCA's orthonormalisation) included."""

    @abstractmethod
    def default_step_size(self, map_reduce: MapReduce, rng: np.random.Generator) -> float:
        """Return a safe step size for gradient descent (may use a few passes)."""

    def stochastic_step_factor(self, staleness: int) -> float:
        """Return the fraction of :meth:`default_step_size` for steps from cached sums.

        SAG and DSAG step along sums whose parts are up to ``staleness`` iterations old;
        the stable gradient step shrinks about as ``1/staleness``: ``min(1, 2 / staleness)``.

        Parameters
        ----------
        staleness : int
            Iterations a cached part may age (>= 1).
        """
        return min(1.0, 2.0 / max(int(staleness), 1))

    @abstractmethod
    def finalize(self, iterate: np.ndarray, result: KernelResult) -> dict[str, np.ndarray]:
        """Return the fitted quantities from the final iterate and its kernel sum."""

    @abstractmethod
    def optimality(self, result: KernelResult, iterate: np.ndarray) -> float:
        """Return how far ``iterate`` is from optimal (zero at an optimum), from the kernel
        sum there (exact or a method's estimate)."""

    def separation(self, result: KernelResult, iterate: np.ndarray, *,
                   next_value: float | None = None, history: Sequence[np.ndarray] = (),
                   errors: np.ndarray | None = None, tol: float | None = None
                   ) -> Separation | None:
        """Judge the parts of the answer the data do not determine (exact sums only).

        Default: None, every part is judged by :meth:`optimality`
        (:meth:`daskstraggle.problems.PCA.separation` overrides it).
        """
        return None

    def optimality_scale(self, result: KernelResult, iterate: np.ndarray) -> float:
        """Return what :meth:`optimality` is divided by to make it relative, from the exact
        kernel sum at the starting point (default: 1, relative already)."""
        return 1.0

    @abstractmethod
    def iterate_change(self, new: np.ndarray, old: np.ndarray) -> float:
        """Return the relative change between two iterates (0 when they are equal)."""

    @property
    def oversampled(self) -> bool:
        """Whether the iterate carries extra columns (PCA's ``oversample``; needs methods
        with exact rounds)."""
        return False

    def conclude(self, iterate: np.ndarray, result: KernelResult
                 ) -> tuple[np.ndarray, KernelResult]:
        """Return the point to report and its exact kernel sum, from the final pass
        (default: both unchanged; oversampled PCA keeps its top ``k`` Ritz vectors).

        Parameters
        ----------
        iterate : ndarray
            The last iterate.
        result : KernelResult
            Exact kernel sum at ``iterate``.

        Returns
        -------
        iterate, result : ndarray, KernelResult
        """
        return iterate, result

    @abstractmethod
    def reference_solution(self, map_reduce: MapReduce) -> Reference:
        """Compute the exact optimum with an independent solver, via ``map_reduce``.

        Parameters
        ----------
        map_reduce : MapReduce
            Folds one of the problem's kernels over the partitions.

        Returns
        -------
        reference : Reference
            The optimum; ``info`` holds the solver's figures, named by each problem.

        Raises
        ------
        InvalidParameterError
            If the matrix is too wide for the dense solver (more than 20000 columns:
            pass ``reference=False``).
        """

    def distance(self, iterate: np.ndarray, reference: Reference) -> float:
        """Return a distance between ``iterate`` and the reference optimum (here the
        relative Euclidean distance; PCA: the sine of the largest principal angle)."""
        denom = max(float(np.linalg.norm(reference.iterate)), 1e-300)
        return float(np.linalg.norm(iterate - reference.iterate) / denom)
