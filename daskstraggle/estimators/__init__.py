"""scikit-learn estimators: ``PCA``, ``LogisticRegression``, ``LinearRegression``, ``Ridge``.

``fit`` opens the data (:func:`~daskstraggle.open_matrix`; rows are samples, except for VCF
Zarr genotypes, see :class:`PCA`) and calls :func:`~daskstraggle.fit_pca`,
:func:`~daskstraggle.fit_logistic` or :func:`~daskstraggle.fit_least_squares`; the whole
:class:`~daskstraggle.Result` is ``result_``. The fits are iterative: they match scikit-learn to
the solver's ``tol``. In-memory arrays are centred before the fit when there is an intercept
(an exact change of variables that conditions the problem); stores are fitted as they are.
scikit-learn (>= 1.6) is optional: without it these names raise an ImportError saying what
to install.
"""

from __future__ import annotations

# the first import checks that scikit-learn is there (one ImportError line if not)
from daskstraggle.estimators._base import _Estimator  # noqa: F401
from daskstraggle.estimators.decomposition import PCA
from daskstraggle.estimators.linear_model import LinearRegression, LogisticRegression, Ridge

__all__ = ["PCA", "LinearRegression", "LogisticRegression", "Ridge"]
