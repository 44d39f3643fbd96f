"""scikit-learn estimators: ``PCA``, ``LogisticRegression``, ``LinearRegression``, ``Ridge``.

``fit`` opens the data (:func:`~daskstraggle.open_matrix`) and calls
:func:`~daskstraggle.fit_pca`, :func:`~daskstraggle.fit_logistic` or
:func:`~daskstraggle.fit_least_squares`; the whole :class:`~daskstraggle.Result` is
``result_`` and its trace ``trace_``. scikit-learn (>= 1.6) is optional
(``pip install 'daskstraggle[sklearn]'``): without it ``daskstraggle.PCA`` raises an
ImportError saying what to install.

Conventions
-----------
*Rows are samples* for a plain matrix, as in scikit-learn. The regularisation of our
problems is per sample (mean loss plus ``alpha/2 |w|^2``), so the scikit-learn
parameters are converted: ``Ridge(alpha)`` minimises ``|y - Xw - b|^2 + alpha |w|^2``,
i.e. our ``alpha / n_samples``; ``LogisticRegression(C)`` minimises
``C sum(loss) + |w|^2 / 2``, i.e. our ``1 / (C n_samples)``. Neither penalises the
intercept. The fits are iterative: they match scikit-learn to the solver's ``tol``.
In-memory arrays are centred before the fit when there is an intercept (an exact change
of variables that conditions the problem); stores are fitted as they are.

PCA of VCF Zarr genotypes has rows = variants and columns = samples (see :class:`PCA`).
Random starting points and step-size estimates are seeded by ``random_state`` (the name
scikit-learn's tools set; it is the ``rng`` of :func:`~daskstraggle.solve`).
"""

from __future__ import annotations

# the first import checks that scikit-learn is there (one ImportError line if not)
from daskstraggle.estimators._base import _Estimator  # noqa: F401
from daskstraggle.estimators.decomposition import PCA
from daskstraggle.estimators.linear_model import LinearRegression, LogisticRegression, Ridge

__all__ = ["PCA", "LinearRegression", "LogisticRegression", "Ridge"]
