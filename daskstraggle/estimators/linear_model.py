"""Linear models on scikit-learn's contract: LinearRegression, Ridge, LogisticRegression."""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import ClassifierMixin, RegressorMixin
from sklearn.utils.multiclass import check_classification_targets, type_of_target
from sklearn.utils.validation import check_is_fitted, validate_data

from daskstraggle._validation import _real, check_nonnegative
from daskstraggle.api import fit_least_squares, fit_logistic
from daskstraggle.data import _passes
from daskstraggle.data.matrix import Matrix
from daskstraggle.errors import InvalidDataError
from daskstraggle.estimators._base import (
    _COMMON_DOC,
    _FITTED_DOC,
    _Estimator,
    _is_source,
    _keep_params,
)

__all__ = ["LinearRegression", "LogisticRegression", "Ridge"]

#: The linear models' solver parameters, in their docstrings.
_LINEAR_DOC = _COMMON_DOC.format(default='"nag"', auto='gradient descent', max_iter=1000,
                                 tol='1e-6', tol_doc='the gradient norm relative to the start')
#: The regressors' parameters after ``alpha``, and their attributes.
_REGRESSOR_DOC = f"""
    fit_intercept : bool, default=True
        Fit an intercept (not penalised).
    {_LINEAR_DOC.strip()}

    Attributes
    ----------
    coef_ : ndarray of shape (n_features,)
        Weights.
    intercept_ : float
        Intercept (0.0 when ``fit_intercept=False``).
    {_FITTED_DOC.strip()}
"""


class _LinearModel(_Estimator):
    """Predictions of a linear model, in memory or over a store's partitions."""

    def _decision(self, X: Any) -> np.ndarray:
        check_is_fitted(self)
        coef = np.ravel(self.coef_)
        intercept = float(np.ravel(self.intercept_)[0])
        if _is_source(X):
            return self._rows(X, _passes.linear_rows(coef, intercept))
        X = validate_data(self, X, dtype=np.float64, reset=False)
        return X @ coef + intercept

    def _fit_problem(self, matrix: Matrix, labels: Any, fit: Any,
                     offset: np.ndarray | None) -> tuple[np.ndarray, float]:
        """Run ``fit`` (``fit_logistic`` or ``fit_least_squares``) on the opened data; return
        the weights and intercept in the original coordinates (``b = b_c - offset @ w`` for
        in-memory data centred by ``offset``)."""
        _, extra = self._split_params()
        result = fit(matrix, np.asarray(labels, dtype=np.float64), **self._solve_kwargs(
            matrix, extra, fit, alpha=self._alpha(matrix.n_rows),
            fit_intercept=self.fit_intercept))
        self._store_result(result)
        coef = np.asarray(result.fitted["coef"], dtype=np.float64)
        intercept = float(result.fitted["intercept"])
        if offset is not None:
            intercept -= float(offset @ coef)
        return coef, intercept


class _Regressor(RegressorMixin, _LinearModel):
    # LinearRegression's parameters (Ridge adds alpha)
    def __init__(self, *, fit_intercept: bool = True, method: str = "nag",
                 method_params: dict[str, Any] | None = None, max_iter: int = 1000,
                 tol: float | None = 1e-6, random_state: Any = None, runtime: Any = None,
                 n_workers: int | None = None, client: Any = None, stragglers: Any = None,
                 solve_params: dict[str, Any] | None = None) -> None:
        _keep_params(self, locals())

    def fit(self, X: Any, y: Any = None) -> Any:
        """Fit the model (see the class docstring).

        Parameters
        ----------
        X : str, path, array-like, dask or xarray array, or Matrix
            Features, rows = samples: anything :func:`~daskstraggle.open_matrix` accepts.
        y : array-like or str
            Targets, or the name of the target array in the Zarr group of ``X``.

        Returns
        -------
        self : object
            The fitted estimator.
        """
        matrix, y, offset = self._open(X, y, supervised=True, center=self.fit_intercept)
        self.coef_, self.intercept_ = self._fit_problem(matrix, y, fit_least_squares, offset)
        return self

    def predict(self, X: Any) -> np.ndarray:
        """Predict targets, ``X @ coef_ + intercept_``.

        Parameters
        ----------
        X : str, path, array-like, dask or xarray array, or Matrix
            Samples; a store is read partition by partition (on ``client``'s workers when
            there is one).

        Returns
        -------
        y_pred : ndarray of shape (n_samples,)
            Predicted targets.
        """
        return self._decision(X)

    def _alpha(self, n_samples: int) -> float:
        """The L2 penalty of the problem (per sample) for ``n_samples`` rows: none here."""
        return 0.0


class LinearRegression(_Regressor):
    __doc__ = f"""Ordinary least squares, solved by a straggler-aware iterative method.

    Minimises ``|y - X w - b|^2 / (2 n)``: :class:`Ridge` with ``alpha=0``. Unlike
    scikit-learn's direct solver it is iterative, so it matches
    ``sklearn.linear_model.LinearRegression`` to ``tol`` (1e-10 gives 1e-8 or better
    on well-conditioned data).

    Parameters
    ----------
    {_REGRESSOR_DOC.strip()}

    See Also
    --------
    Ridge : With an L2 penalty.
    daskstraggle.fit_least_squares : The function behind ``fit``.

    Examples
    --------
    >>> import numpy as np
    >>> from daskstraggle import LinearRegression
    >>> X = np.random.default_rng(0).normal(size=(200, 3))
    >>> y = X @ [1.0, 2.0, 3.0] + 4.0
    >>> model = LinearRegression(tol=1e-10, runtime="local").fit(X, y)
    >>> model.coef_.round(6), round(model.intercept_, 6)
    (array([1., 2., 3.]), 4.0)
    """


class Ridge(_Regressor):
    __doc__ = f"""Least squares with an L2 penalty, scikit-learn's ``Ridge`` objective.

    Minimises ``|y - X w - b|^2 + alpha |w|^2``, which is our
    :class:`~daskstraggle.problems.LeastSquares` (mean loss ``|r|^2 / (2 n)`` plus
    ``alpha' / 2 |w|^2``) with ``alpha' = alpha / n_samples``. The intercept is not
    penalised, as in scikit-learn.

    Parameters
    ----------
    alpha : float, default=1.0
        L2 penalty, as in ``sklearn.linear_model.Ridge``.
    {_REGRESSOR_DOC.strip()}

    See Also
    --------
    LinearRegression : Without the penalty.

    Examples
    --------
    >>> import numpy as np
    >>> from daskstraggle import Ridge
    >>> X = np.random.default_rng(0).normal(size=(200, 3))
    >>> y = X @ [1.0, 2.0, 3.0]
    >>> model = Ridge(alpha=10.0, runtime="local").fit(X, y)
    >>> round(model.score(X, y), 3)
    0.997
    """

    def __init__(self, alpha: float = 1.0, *, fit_intercept: bool = True, method: str = "nag",
                 method_params: dict[str, Any] | None = None, max_iter: int = 1000,
                 tol: float | None = 1e-6, random_state: Any = None, runtime: Any = None,
                 n_workers: int | None = None, client: Any = None, stragglers: Any = None,
                 solve_params: dict[str, Any] | None = None) -> None:
        _keep_params(self, locals())

    def _alpha(self, n_samples: int) -> float:
        return check_nonnegative(self.alpha, name="alpha", caller="Ridge") / n_samples


class LogisticRegression(ClassifierMixin, _LinearModel):
    __doc__ = f"""Binary L2-regularised logistic regression, scikit-learn's objective.

    Minimises ``C sum_i log(1 + exp(-s_i (x_i w + b))) + |w|^2 / 2`` with ``s_i = +1``
    for ``classes_[1]`` and ``-1`` for ``classes_[0]``: our
    :class:`~daskstraggle.problems.Logistic` (mean loss plus ``alpha/2 |w|^2``) with
    ``alpha = 1 / (C n_samples)``. The intercept is not penalised (as scikit-learn's
    lbfgs solver). Labels may be any two values (sorted into ``classes_``).

    Parameters
    ----------
    C : float, default=1.0
        Inverse regularisation strength, as in ``sklearn.linear_model.LogisticRegression``;
        ``numpy.inf``: no penalty.
    fit_intercept : bool, default=True
        Fit an intercept.
    {_LINEAR_DOC.strip()}

    Attributes
    ----------
    classes_ : ndarray of shape (2,)
        The two labels; ``classes_[1]`` is the positive class.
    coef_ : ndarray of shape (1, n_features)
        Weights (scikit-learn's shape for a binary problem).
    intercept_ : ndarray of shape (1,)
        Intercept.
    {_FITTED_DOC.strip()}

    Examples
    --------
    >>> import numpy as np
    >>> from daskstraggle import LogisticRegression
    >>> X = np.random.default_rng(0).normal(size=(300, 2))
    >>> y = np.where(X[:, 0] + X[:, 1] > 0, "yes", "no")
    >>> model = LogisticRegression(C=1.0, runtime="local").fit(X, y)
    >>> model.classes_
    array(['no', 'yes'], dtype='<U3')
    >>> model.predict([[2.0, 2.0], [-2.0, -2.0]])
    array(['yes', 'no'], dtype='<U3')
    """

    def __init__(self, C: float = 1.0, *, fit_intercept: bool = True, method: str = "nag",
                 method_params: dict[str, Any] | None = None, max_iter: int = 1000,
                 tol: float | None = 1e-6, random_state: Any = None, runtime: Any = None,
                 n_workers: int | None = None, client: Any = None, stragglers: Any = None,
                 solve_params: dict[str, Any] | None = None) -> None:
        _keep_params(self, locals())

    def __sklearn_tags__(self) -> Any:
        """Binary only: scikit-learn's checks then use two-class data."""
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False
        return tags

    def _alpha(self, n_samples: int) -> float:
        C = _real(self.C, lambda x: x > 0, "C", "LogisticRegression",
                  "a float > 0 (numpy.inf: no penalty)")
        return 0.0 if np.isinf(C) else 1.0 / (C * n_samples)

    def fit(self, X: Any, y: Any = None) -> LogisticRegression:
        """Fit the model on two classes, as :meth:`Ridge.fit` fits targets: ``y`` holds two
        distinct labels (or names the label array in the Zarr group of ``X``). Returns
        ``self``.

        Raises
        ------
        InvalidDataError
            If ``y`` does not take exactly two values ("Only binary classification is
            supported."; a ValueError, as scikit-learn raises).
        """
        matrix, y, offset = self._open(X, y, supervised=True, center=self.fit_intercept)
        y = np.asarray(y)
        check_classification_targets(y)
        kind = type_of_target(y, input_name="y")
        if kind != "binary":
            raise InvalidDataError(
                "Only binary classification is supported. The type of the target is "
                f"{kind}: y has {len(np.unique(y))} classes (fit one model per class for "
                "more)."
            )
        classes = np.unique(y)
        if len(classes) != 2:
            raise InvalidDataError(
                f"LogisticRegression needs 2 classes in y; got {len(classes)} class(es): "
                f"{classes.tolist()}."
            )
        self.classes_ = classes
        signs = np.where(y == classes[1], 1.0, -1.0)
        coef, intercept = self._fit_problem(matrix, signs, fit_logistic, offset)
        self.coef_ = coef[None, :]
        self.intercept_ = np.array([intercept])
        return self

    def decision_function(self, X: Any) -> np.ndarray:
        """Return ``X @ coef_.T + intercept_``: positive for ``classes_[1]``.

        Parameters
        ----------
        X : str, path, array-like, dask or xarray array, or Matrix
            Samples.

        Returns
        -------
        scores : ndarray of shape (n_samples,)
            Log-odds of ``classes_[1]``.
        """
        return self._decision(X)

    def predict_proba(self, X: Any) -> np.ndarray:
        """Return the probabilities of both classes for the samples ``X`` (as
        :meth:`decision_function` takes them).

        Returns
        -------
        proba : ndarray of shape (n_samples, 2)
            Columns in the order of ``classes_``.
        """
        from scipy.special import expit

        p = expit(self._decision(X))
        return np.column_stack([1.0 - p, p])

    def predict_log_proba(self, X: Any) -> np.ndarray:
        """Return the logarithms of :meth:`predict_proba`, computed without rounding a
        probability to 0 first."""
        from scipy.special import log_expit

        d = self._decision(X)
        return np.column_stack([log_expit(-d), log_expit(d)])

    def predict(self, X: Any) -> np.ndarray:
        """Predict the class of each sample of ``X`` (as :meth:`decision_function` takes
        them): ``classes_[1]`` where the decision function is positive, else ``classes_[0]``.
        """
        check_is_fitted(self)
        return self.classes_[(self._decision(X) > 0).astype(int)]
