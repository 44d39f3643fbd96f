"""Learning problems (pure: no dask): the Problem contract, PCA and two regressions.

A problem turns a row block and an iterate into a :class:`KernelResult` (sums over the
block's rows), and knows its objective, update rule, safe step size and an exact
reference solver. Problems are looked up by name with :func:`make_problem`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from daskstraggle._lazy import attach
from daskstraggle._registry import Registry
from daskstraggle.errors import InvalidParameterError

if TYPE_CHECKING:  # what type checkers see; at run time each loads on first use
    from daskstraggle.problems.base import KernelResult, MapReduce, Problem, Reference
    from daskstraggle.problems.block import Block, MatrixStats, block_stats
    from daskstraggle.problems.least_squares import LeastSquares
    from daskstraggle.problems.logistic import Logistic
    from daskstraggle.problems.pca import PCA

__all__ = [
    "PCA",
    "Block",
    "KernelResult",
    "LeastSquares",
    "Logistic",
    "MapReduce",
    "MatrixStats",
    "Problem",
    "Reference",
    "block_stats",
    "get_problem_class",
    "list_problems",
    "make_problem",
]

#: The classes and functions loaded on first use (PEP 562), by the module defining each:
#: importing a submodule (``problems._kernels``) or the registry loads no problem module.
_LAZY = {
    "PCA": "pca",
    "Block": "block",
    "KernelResult": "base",
    "LeastSquares": "least_squares",
    "Logistic": "logistic",
    "MapReduce": "base",
    "MatrixStats": "block",
    "Problem": "base",
    "Reference": "base",
    "block_stats": "block",
}


__getattr__, __dir__ = attach(__name__, _LAZY, __all__)


def _package_problems() -> tuple[type[Problem], ...]:
    """The package's own problems (importing their modules)."""
    from daskstraggle.problems.least_squares import LeastSquares
    from daskstraggle.problems.logistic import Logistic
    from daskstraggle.problems.pca import PCA

    return PCA, Logistic, LeastSquares


#: The problems by name, the package's own registered on the first look-up; other packages
#: add theirs under the entry-point group ``daskstraggle.problems`` (see
#: :mod:`daskstraggle._registry`).
_REGISTRY: Registry[Problem] = Registry(
    "problem", group="daskstraggle.problems", load=_package_problems,
    unknown=lambda name, names: (
        f"The 'name' parameter of make_problem must be one of {names}. Got {name!r} "
        "instead."),
)


# The registry's methods are the public functions (see daskstraggle._registry).
list_problems = _REGISTRY.names
get_problem_class = _REGISTRY.get


def make_problem(name: str, **params: Any) -> Problem:
    """Return a new, unbound problem by registry name.

    Parameters
    ----------
    name : str
        One of :func:`list_problems`.
    **params
        The problem's parameters (e.g. ``n_components=3`` for ``"pca"``).

    Returns
    -------
    problem : Problem

    Raises
    ------
    InvalidParameterError
        If ``name`` is not registered, a parameter is unknown, or a value is invalid.

    Examples
    --------
    >>> from daskstraggle.problems import make_problem
    >>> make_problem("pca", n_components=3).n_components
    3
    """
    cls = _REGISTRY.get(name)  # (a name that is not a str is unknown too)
    accepted = list(cls().get_params())
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise InvalidParameterError(
            f"Unknown parameter(s) {unknown} for the {name!r} problem; valid parameters are "
            f"{accepted}."
        )
    return cls(**params)

