"""Shared parameters and plumbing of the scikit-learn estimators (not public)."""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from typing import Any

import numpy as np

try:
    from sklearn.base import BaseEstimator, is_regressor
    from sklearn.utils.validation import validate_data
except ImportError as err:  # pragma: no cover - depends on the environment
    raise ImportError(
        "daskstraggle's scikit-learn estimators (PCA, LogisticRegression, LinearRegression, "
        "Ridge) need scikit-learn >= 1.6: pip install 'daskstraggle[sklearn]'. The rest of "
        "daskstraggle (fit_pca, fit_logistic, fit_least_squares, the CLI) works without it."
    ) from err

from daskstraggle._validation import check_mapping, check_rng
from daskstraggle.data import _passes
from daskstraggle.data.matrix import Matrix, open_matrix
from daskstraggle.errors import InvalidParameterError
from daskstraggle.runtime.choice import choose_runtime
from daskstraggle.trace import Result

__all__: list[str] = []

#: Keys of ``solve_params`` that say how to open the data (the rest go to the fit function).
_OPEN_KEYS = ("array", "missing_chunks", "storage_options", "n_partitions", "genotype_dims")
#: Parameters the estimators set themselves; ``solve_params`` may not repeat them.
_OWN_KEYS = ("method", "method_params", "max_iter", "tol", "rng", "runtime", "n_workers",
             "client", "stragglers", "labels")


def _keep_params(estimator: Any, params: dict[str, Any]) -> None:
    """Store an estimator's constructor arguments (its ``__init__``'s ``locals()``) as
    attributes of the same names, unchanged: scikit-learn's contract, validation at
    ``fit``."""
    for name, value in params.items():
        if name != "self":
            setattr(estimator, name, value)


def _is_source(X: Any) -> bool:
    """Whether ``X`` is opened by :func:`open_matrix` as it is (not validated in memory)."""
    if isinstance(X, str | os.PathLike | Matrix):
        return True
    return type(X).__module__.split(".")[0] in ("dask", "xarray")


class _Estimator(BaseEstimator):
    """Shared parameters and plumbing of the four estimators (not public)."""

    client: Any  # set by the estimators' __init__

    def __sklearn_clone__(self) -> Any:
        """Clone the parameters, sharing ``client`` (a handle ``clone`` must not copy)."""
        client = self.client
        if client is None:
            return super().__sklearn_clone__()
        self.client = None
        try:
            new = super().__sklearn_clone__()
        finally:
            self.client = client
        new.client = client
        return new

    def _caller(self) -> str:
        return type(self).__name__

    def _split_params(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """Return the keyword arguments of ``open_matrix`` and of the fit function."""
        extra = check_mapping(self.solve_params, name="solve_params", caller=self._caller())
        taken = sorted(set(extra) & set(_OWN_KEYS))
        if taken:
            raise InvalidParameterError(
                f"The 'solve_params' parameter of {self._caller()} must not set {taken}: they "
                "are parameters of the estimator itself."
            )
        open_kw = {k: extra.pop(k) for k in _OPEN_KEYS if k in extra}
        return open_kw, extra

    def _solve_kwargs(self, matrix: Matrix, extra: dict[str, Any], fit: Callable[..., Any],
                      **own: Any) -> dict[str, Any]:
        """Return the keyword arguments of ``fit`` (``fit_pca``, ...): ``solve_params``
        (``extra``; refused where ``fit`` does not take them or the estimator sets them),
        ``own`` (the values the estimator derives) and the estimator's parameters."""
        own_keys = {*own, *self.get_params(deep=False), *_OWN_KEYS, *_OPEN_KEYS}
        taken = sorted(set(extra) & own_keys)
        takes = [name for name, p in inspect.signature(fit).parameters.items()
                 if p.kind is p.KEYWORD_ONLY and name not in own_keys]
        unknown = sorted(set(extra) - set(takes))
        if taken or unknown:
            raise InvalidParameterError(
                f"The 'solve_params' parameter of {self._caller()} must hold only keyword "
                f"arguments of {fit.__name__} that the estimator does not set itself: {takes}, "
                f"or of open_matrix: {list(_OPEN_KEYS)}. Got {taken or unknown} instead"
                + (" (parameters of the estimator: set them on it)." if taken else ".")
            )
        n_workers = self.n_workers
        if n_workers is None and self.runtime in ("local", "sim"):
            n_workers = min(4, matrix.n_rows)  # in process: never more workers than rows
        check_rng(self.random_state, caller=self._caller(), name="random_state", hint="")
        passed = {k: getattr(self, k) for k in ("method", "method_params", "max_iter", "tol",
                                                 "runtime", "client", "stragglers")}
        return {**extra, **own, **passed, "rng": self.random_state, "n_workers": n_workers}

    def _open(self, X: Any, y: Any = None, *, supervised: bool = False, center: bool = False
              ) -> tuple[Matrix, Any, np.ndarray | None]:
        """Open ``X``; return the matrix, ``y`` (read from the store's group when it names
        an array) and the column means subtracted from an in-memory array with ``center``
        (None otherwise; in-memory arrays are validated as scikit-learn does)."""
        open_kw, _ = self._split_params()
        offset = None
        if _is_source(X) or open_kw.get("genotype_dims") is not None:
            matrix = open_matrix(X, **open_kw)
            if supervised and isinstance(y, str):
                y = open_matrix(X, labels=y, **open_kw).labels
            self.n_features_in_ = matrix.n_columns
            if hasattr(self, "feature_names_in_"):
                del self.feature_names_in_
        else:
            if supervised:
                X, y = validate_data(self, X, y, dtype=np.float64, ensure_min_samples=2,
                                     y_numeric=is_regressor(self))
            else:
                X = validate_data(self, X, dtype=np.float64, ensure_min_samples=2)
            if center:
                offset = X.mean(axis=0)
                X = X - offset
            matrix = open_matrix(X, n_partitions=open_kw.get("n_partitions"))
        if supervised and y is None:
            raise ValueError(
                f"{self._caller()} requires y to be passed, but the target y is None."
            )
        return matrix, y, offset

    def _store_result(self, result: Result) -> None:
        self.result_ = result
        self.trace_ = result.trace
        self.n_iter_ = int(result.n_iter)
        self.converged_ = bool(result.converged)

    def _pass_client(self) -> Any:
        """The client a pass over the data besides the fit runs on (None: this process),
        chosen as the fit functions choose it."""
        scheduler = (self.solve_params or {}).get("scheduler")
        if scheduler is not None:
            return self.client
        return choose_runtime(self.runtime, client=self.client, n_workers=self.n_workers).client

    def _rows(self, X: Any, make_func: Any) -> np.ndarray:
        """Apply a per-partition function to the rows of a source; concatenate the results."""
        open_kw, _ = self._split_params()
        matrix = open_matrix(X, **open_kw)
        if matrix.n_columns != self.n_features_in_:
            raise ValueError(
                f"X has {matrix.n_columns} features, but {self._caller()} is expecting "
                f"{self.n_features_in_} features as input."
            )
        return np.concatenate(_passes.map_partitions(matrix, make_func, self._pass_client()))


_COMMON_DOC = """
    method : str, default={default}
        The method of :func:`~daskstraggle.solve` (``"gd"``, ``"nag"``, ``"sgd"``,
        ``"sag"``, ``"dsag"``, ``"coded"``, ...; ``"auto"``: {auto}).
    method_params : dict or None, default=None
        The method's parameters, e.g. ``{{"n_wait": 3, "subpartitions": 2}}`` for
        ``"dsag"`` or ``{{"scheme": "bcc", "stragglers_tolerated": 1}}`` for coded methods.
    max_iter : int, default={max_iter}
        Maximum number of iterations.
    tol : float or None, default={tol}
        Stopping tolerance on the problem's optimality measure ({tol_doc}).
    random_state : int, Generator or None, default=None
        Seed of the starting point and step-size estimate (``rng`` of ``solve``).
    runtime : {{"dask", "local", "sim"}}, Runtime or None, default=None
        ``"local"`` runs in this process; ``"dask"`` on ``client``, the active client, or
        a LocalCluster started for each fit. None: as :func:`~daskstraggle.fit_pca`'s
        ``runtime`` (a ``fit`` on small data without a client starts no cluster).
    n_workers : int or None, default=None
        Workers of the LocalCluster, or logical workers of the in-process runtimes (None:
        4, at most one per row).
    client : distributed.Client or None, default=None
        Cluster to run on.
    stragglers : str or None, default=None
        Slow workers down on purpose, e.g. ``"slowdown(workers=1, factor=4)"``.
    solve_params : dict or None, default=None
        Other keyword arguments of the fit functions (:func:`~daskstraggle.fit_pca`, ...:
        ``step_size``, ``time_budget``, ``scheduler``, ``reference``, ``progress``,
        ``checkpoint``, ...) and of :func:`~daskstraggle.open_matrix` (``array``,
        ``missing_chunks``, ``storage_options``, ``n_partitions``, ``genotype_dims``).
"""

_FITTED_DOC = """
    n_features_in_ : int
        Number of columns of the training matrix.
    feature_names_in_ : ndarray of str
        Column names, for a DataFrame with string column names.
    n_iter_ : int
        Iterations run.
    converged_ : bool
        Whether the run met ``tol`` (else a ``ConvergenceWarning`` was issued).
    trace_ : xarray.Dataset
        The per-iteration trace (``result_.trace``).
    result_ : Result
        The whole result of the fit.
"""
