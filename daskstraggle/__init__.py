"""daskstraggle: straggler-resilient iterative learning on Dask.

PCA, logistic regression and least squares over Zarr-chunked matrices whose row
partitions are pinned to Dask workers; methods are pure policies driven by a Dask
runtime, an in-process one, or a simulated clock with a latency model
(:mod:`daskstraggle.latency`).

The scikit-learn estimators ``PCA``, ``LogisticRegression``, ``LinearRegression`` and
``Ridge`` (:mod:`daskstraggle.estimators`) load on first use and need scikit-learn
(``pip install 'daskstraggle[sklearn]'``); the problem classes are in
:mod:`daskstraggle.problems` (``daskstraggle.problems.PCA``). Pictures of runs are in
:mod:`daskstraggle.plot` (loaded on first use; matplotlib: ``pip install 'daskstraggle[plot]'``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time they load on first use
    from daskstraggle import latency
    from daskstraggle.api import fit_least_squares, fit_logistic, fit_pca, genotype_pca, solve
    from daskstraggle.balance import LoadBalancer
    from daskstraggle.data import Matrix, open_matrix
    from daskstraggle.data.genotypes import GenotypeQC
    from daskstraggle.errors import (
        ClusterConnectionError,
        ConvergenceWarning,
        CorruptDataError,
        DataNotFoundError,
        DivergenceError,
        InputError,
        InvalidDataError,
        InvalidParameterError,
        InvalidTypeError,
        MissingChunksError,
        NonFiniteDataError,
        OutputExistsError,
        OutputNotWritableError,
        StraggleError,
    )
    from daskstraggle.latency import LatencyModel, Stragglers, parse_stragglers, simulate
    from daskstraggle.methods import DSAG, GD, NAG, SAG, SGD, Method, make_method
    from daskstraggle.problems import LeastSquares, Logistic, Problem, make_problem
    from daskstraggle.runtime import DaskRuntime, LocalRuntime, SimRuntime, StopRule
    from daskstraggle.trace import Result

#: Public names and the module each is loaded from on first use (PEP 562): importing the
#: package loads neither dask, xarray nor numba, so the console script can catch a Ctrl-C
#: during those imports (``daskstraggle._entry``). ``module#module`` names a submodule.
_LAZY = {
    "latency": "daskstraggle.latency#module",
    "fit_least_squares": "daskstraggle.api",
    "fit_logistic": "daskstraggle.api",
    "fit_pca": "daskstraggle.api",
    "genotype_pca": "daskstraggle.api",
    "solve": "daskstraggle.api",
    "LoadBalancer": "daskstraggle.balance",
    "Matrix": "daskstraggle.data",
    "open_matrix": "daskstraggle.data",
    "GenotypeQC": "daskstraggle.data.genotypes",
    "ClusterConnectionError": "daskstraggle.errors",
    "ConvergenceWarning": "daskstraggle.errors",
    "CorruptDataError": "daskstraggle.errors",
    "DataNotFoundError": "daskstraggle.errors",
    "DivergenceError": "daskstraggle.errors",
    "InputError": "daskstraggle.errors",
    "InvalidDataError": "daskstraggle.errors",
    "InvalidParameterError": "daskstraggle.errors",
    "InvalidTypeError": "daskstraggle.errors",
    "MissingChunksError": "daskstraggle.errors",
    "NonFiniteDataError": "daskstraggle.errors",
    "OutputExistsError": "daskstraggle.errors",
    "OutputNotWritableError": "daskstraggle.errors",
    "StraggleError": "daskstraggle.errors",
    "LatencyModel": "daskstraggle.latency",
    "Stragglers": "daskstraggle.latency",
    "parse_stragglers": "daskstraggle.latency",
    "simulate": "daskstraggle.latency",
    "DSAG": "daskstraggle.methods",
    "GD": "daskstraggle.methods",
    "NAG": "daskstraggle.methods",
    "SAG": "daskstraggle.methods",
    "SGD": "daskstraggle.methods",
    "Method": "daskstraggle.methods",
    "make_method": "daskstraggle.methods",
    "LeastSquares": "daskstraggle.problems",
    "Logistic": "daskstraggle.problems",
    "Problem": "daskstraggle.problems",
    "make_problem": "daskstraggle.problems",
    "DaskRuntime": "daskstraggle.runtime",
    "LocalRuntime": "daskstraggle.runtime",
    "SimRuntime": "daskstraggle.runtime",
    "StopRule": "daskstraggle.runtime",
    "Result": "daskstraggle.trace",
}

try:
    from daskstraggle._version import __version__
except ImportError:  # running from a source tree without a build
    __version__ = "0.0.0+unknown"

__all__ = [
    "DSAG",
    "GD",
    "NAG",
    "PCA",
    "SAG",
    "SGD",
    "ClusterConnectionError",
    "ConvergenceWarning",
    "CorruptDataError",
    "DaskRuntime",
    "DataNotFoundError",
    "DivergenceError",
    "GenotypeQC",
    "InputError",
    "InvalidDataError",
    "InvalidParameterError",
    "InvalidTypeError",
    "LatencyModel",
    "LeastSquares",
    "LinearRegression",
    "LoadBalancer",
    "LocalRuntime",
    "Logistic",
    "LogisticRegression",
    "Matrix",
    "Method",
    "MissingChunksError",
    "NonFiniteDataError",
    "OutputExistsError",
    "OutputNotWritableError",
    "Problem",
    "Result",
    "Ridge",
    "SimRuntime",
    "StopRule",
    "StraggleError",
    "Stragglers",
    "__version__",
    "fit_least_squares",
    "fit_logistic",
    "fit_pca",
    "genotype_pca",
    "latency",
    "make_method",
    "make_problem",
    "open_matrix",
    "parse_stragglers",
    "plot",
    "simulate",
    "solve",
]

#: Names loaded from :mod:`daskstraggle.estimators` on first use (they need scikit-learn).
_ESTIMATORS = ("LinearRegression", "LogisticRegression", "PCA", "Ridge")


def __getattr__(name: str) -> object:
    """Load a public name on first use: the API, the errors, the classes, the
    scikit-learn estimators and the plot module (each module when first asked for)."""
    import importlib

    if name in _LAZY:
        module, _, kind = _LAZY[name].partition("#")
        value = importlib.import_module(module) if kind else getattr(
            importlib.import_module(module), name)
        globals()[name] = value  # later look-ups are plain attribute reads
        return value
    if name in _ESTIMATORS:
        from daskstraggle import estimators

        return getattr(estimators, name)
    if name == "plot":  # the module; it imports matplotlib only when it draws
        return importlib.import_module("daskstraggle.plot")
    raise AttributeError(f"module 'daskstraggle' has no attribute {name!r}")


def __dir__() -> list[str]:
    """List the public names, the lazily loaded estimators included."""
    return sorted(set(globals()) | set(__all__))
