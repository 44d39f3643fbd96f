"""daskstraggle: straggler-resilient iterative learning on Dask.

PCA, logistic regression and least squares over Zarr-chunked matrices whose row
partitions are pinned to Dask workers; methods are pure policies driven by a Dask
runtime, an in-process one, or a simulated clock with a latency model.

The top level holds what a user starts from (``__all__``), each loaded on first use;
everything else lives in its subpackage. The names it served before keep working for a
release, with a ``DeprecationWarning`` saying where they went.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time they load on first use
    from daskstraggle import latency, plot
    from daskstraggle.api import fit_least_squares, fit_logistic, fit_pca, genotype_pca, solve
    from daskstraggle.data import Matrix, open_matrix
    from daskstraggle.data.genotypes import GenotypeQC
    from daskstraggle.estimators import PCA, LinearRegression, LogisticRegression, Ridge
    from daskstraggle.methods import DSAG, GD, NAG
    from daskstraggle.runtime import StopRule
    from daskstraggle.trace import Result

#: Public names and the module each is loaded from on first use (PEP 562): importing the
#: package loads neither dask, xarray nor numba, so the console script can catch a Ctrl-C
#: during those imports (``daskstraggle._entry``). ``module#module`` names a submodule.
_LAZY = {name: module for module, names in {
    "daskstraggle.latency#module": ("latency",),
    "daskstraggle.plot#module": ("plot",),  # it imports matplotlib only when it draws
    "daskstraggle.api": ("fit_least_squares", "fit_logistic", "fit_pca", "genotype_pca", "solve"),
    "daskstraggle.data": ("Matrix", "open_matrix"),
    "daskstraggle.data.genotypes": ("GenotypeQC",),
    "daskstraggle.estimators": ("LinearRegression", "LogisticRegression", "PCA", "Ridge"),
    "daskstraggle.methods": ("DSAG", "GD", "NAG"),
    "daskstraggle.runtime": ("StopRule",),
    "daskstraggle.trace": ("Result",),
}.items() for name in names}

#: Names the top level served until the public API was made small (issue 27), and the
#: module to import them from now: they still work, with a DeprecationWarning naming it.
_MOVED = {name: module for module, names in {
    "daskstraggle.balance": ("LoadBalancer",),
    "daskstraggle.errors": ("ClusterConnectionError", "ConvergenceWarning", "CorruptDataError",
                            "DataNotFoundError", "DivergenceError", "InputError",
                            "InvalidDataError", "InvalidParameterError", "InvalidTypeError",
                            "MissingChunksError", "NonFiniteDataError", "OutputExistsError",
                            "OutputNotWritableError", "StraggleError"),
    "daskstraggle.latency": ("LatencyModel", "Stragglers", "parse_stragglers", "simulate"),
    "daskstraggle.methods": ("SAG", "SGD", "Method", "make_method"),
    "daskstraggle.problems": ("LeastSquares", "Logistic", "Problem", "make_problem"),
    "daskstraggle.runtime": ("DaskRuntime", "LocalRuntime", "SimRuntime"),
}.items() for name in names}

try:
    from daskstraggle._version import __version__
except ImportError:  # running from a source tree without a build
    __version__ = "0.0.0+unknown"

__all__ = ["DSAG", "GD", "NAG", "PCA", "GenotypeQC", "LinearRegression", "LogisticRegression",
           "Matrix", "Result", "Ridge", "StopRule", "__version__", "fit_least_squares",
           "fit_logistic", "fit_pca", "genotype_pca", "latency", "open_matrix", "plot", "solve"]

def __getattr__(name: str) -> object:
    """Load a public name on first use (a moved one with a DeprecationWarning)."""
    import importlib

    if name in _LAZY:
        module, _, kind = _LAZY[name].partition("#")
        value = importlib.import_module(module) if kind else getattr(
            importlib.import_module(module), name)
        globals()[name] = value  # later look-ups are plain attribute reads
        return value
    if name in _MOVED:
        import warnings

        warnings.warn(
            f"daskstraggle.{name} moved: import it from {_MOVED[name]} (from {_MOVED[name]} "
            f"import {name}); the top-level name goes in a later release.",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(_MOVED[name]), name)
    raise AttributeError(f"module 'daskstraggle' has no attribute {name!r}")


def __dir__() -> list[str]:
    """List the public names, the lazily loaded estimators included."""
    return sorted(set(globals()) | set(__all__))
