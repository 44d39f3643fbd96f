"""PCA on scikit-learn's contract, for plain matrices and for VCF Zarr genotypes."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
from sklearn.base import ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils.validation import check_array, check_is_fitted, validate_data

from daskstraggle._validation import check_int
from daskstraggle.api import fit_pca
from daskstraggle.data import _passes
from daskstraggle.data.genotypes import (
    check_not_allele_counts,
    filter_variants,
    matrix_after_run,
    parse_qc,
)
from daskstraggle.data.matrix import Matrix, open_matrix
from daskstraggle.errors import InvalidDataError
from daskstraggle.estimators._base import (
    _COMMON_DOC,
    _FITTED_DOC,
    _Estimator,
    _is_source,
    _keep_params,
)

__all__ = ["PCA"]


class PCA(ClassNamePrefixFeaturesOutMixin, TransformerMixin, _Estimator):
    __doc__ = f"""Principal component analysis with a straggler-aware method.

    **A plain matrix** (numpy, dask, xarray, a Zarr array): rows are samples and the
    fitted attributes are scikit-learn's, ``transform(X) = (X - mean_) @ components_.T``.
    Each component's largest-magnitude entry is positive (as scikit-learn's ``svd_flip``
    with ``u_based_decision=False``), so the components equal scikit-learn's, signs
    included (to rounding with ``"gram"``; to ``tol`` with iterative methods).

    **VCF Zarr genotypes** (Patterson-scaled, see :func:`~daskstraggle.open_matrix`): rows
    are variants and columns are samples, so ``components_`` (k, n_samples) are the
    samples' eigenvectors, ``n_features_in_`` is the number of samples and ``mean_`` is
    zero. The fit keeps each variant's centre and scale and the variant loadings
    ``U = Z V / s``; ``transform(store)`` projects the **samples** of a store holding the
    fit's variants (found by contig, position and alleles, ``variant_keys_``; a missing
    call counts 0): ``Z_new^T U``, for the training store ``components_.T *
    singular_values_`` (what ``fit_transform`` returns without another pass).
    ``inverse_transform`` is refused. ``qc`` chooses the variants; ``variant_mask_``
    records which the fit used. A 2-D integer DataArray or dask array that looks like
    allele counts is refused unless ``solve_params`` gives ``genotype_dims``.
    :func:`~daskstraggle.genotype_pca` returns the same fit in sgkit's variables.

    Parameters
    ----------
    n_components : int or None, default=None
        Number of components ``k``. None: every component with variance, ``min(n_rows - 1,
        n_columns)`` (``min(n_rows, n_columns)`` for genotypes); pass an int for large data.
    oversample : int or None, default=None
        Extra columns carried by iterative methods (see :func:`~daskstraggle.fit_pca`).
    min_eigengap : float or None, default=None
        Relative eigengap that separates two components (see
        :func:`~daskstraggle.fit_pca`); ``determined_`` names what each component is.
    qc : GenotypeQC, dict or None, default=None
        Genotypes only: the variants used (``min_maf``, ``max_missing``, ``pass_only``,
        ``region``; see :class:`~daskstraggle.GenotypeQC`).
    {_COMMON_DOC.format(default='"auto"', max_iter=100,
                        auto='"gram", exact in one round, up to 4096 columns, else "block"',
                        tol='1e-6',
                        tol_doc="every component's relative eigen-residual").strip()}

    Attributes
    ----------
    components_ : ndarray of shape (n_components, n_features)
        Principal axes (for genotypes: the samples' eigenvectors).
    explained_variance_ : ndarray of shape (n_components,)
        Eigenvalues over ``n_rows - 1``.
    explained_variance_ratio_ : ndarray of shape (n_components,)
        Share of the total variance.
    singular_values_ : ndarray of shape (n_components,)
        Singular values of the centred (or standardised) matrix.
    mean_ : ndarray of shape (n_features,)
        Column means subtracted (zeros for genotypes).
    n_components_ : int
        Number of components.
    determined_ : list of str or None
        What each component's fit determines: ``"vector"``, ``"subspace i-j"`` or
        ``"variance"`` (see :attr:`daskstraggle.Result.determined`); None when no round of
        the fit was judged exactly.
    n_samples_ : int
        Number of rows of the training matrix (variants, for genotypes).
    noise_variance_ : float
        Mean variance of the components left out, as scikit-learn's (0 when none).
    genotypes_ : bool
        Whether the fit was on genotypes (rows = variants, columns = samples).
    variant_mean_, variant_scale_ : ndarray of shape (n_variants,)
        Genotypes only: each variant's centre and scale in the fit.
    variant_loadings_ : ndarray of shape (n_variants, n_components)
        Genotypes only: ``U``, the variants' loadings (unit-norm columns).
    variant_mask_ : ndarray of bool of shape (n_input_variants,)
        Genotypes only: the input's variants the fit used (all, without ``qc``).
    variant_keys_ : ndarray of str of shape (n_variants,) or None
        Genotypes only: ``contig:position:alleles`` of each variant used (None for
        in-memory allele counts, which have no variant metadata).
    {_FITTED_DOC.strip()}

    See Also
    --------
    daskstraggle.fit_pca : The function behind ``fit``.

    Examples
    --------
    >>> import numpy as np
    >>> from daskstraggle import PCA
    >>> X = np.random.default_rng(0).normal(size=(300, 6)) * [5, 3, 1, 1, 1, 1]
    >>> pca = PCA(n_components=2, runtime="local").fit(X)
    >>> pca.explained_variance_ratio_.round(2)
    array([0.67, 0.23])
    >>> pca.transform(X[:2]).shape
    (2, 2)
    """

    def __init__(self, n_components: int | None = None, *, oversample: int | None = None,
                 min_eigengap: float | None = None, qc: Any = None, method: str = "auto",
                 method_params: dict[str, Any] | None = None,
                 max_iter: int = 100, tol: float | None = 1e-6, random_state: Any = None,
                 runtime: Any = None, n_workers: int | None = None, client: Any = None,
                 stragglers: Any = None, solve_params: dict[str, Any] | None = None) -> None:
        _keep_params(self, locals())

    @property
    def _n_features_out(self) -> int:
        """Number of output columns of ``transform`` (names ``pca0``, ``pca1``, ...)."""
        return int(self.n_components_)

    def _resolve_components(self, matrix: Matrix) -> int:
        if self.n_components is not None:
            return check_int(self.n_components, name="n_components", caller="PCA", low=1)
        rows = matrix.n_rows if matrix.rows_standardized else matrix.n_rows - 1
        return max(1, min(rows, matrix.n_columns))

    def fit(self, X: Any, y: Any = None) -> PCA:
        """Fit the components.

        Parameters
        ----------
        X : str, path, array-like, dask or xarray array, xarray.Dataset, or Matrix
            Anything :func:`~daskstraggle.open_matrix` accepts; a VCF Zarr store or a
            Dataset in its layout gives genotype PCA (see the class docstring).
        y : None
            Ignored.

        Returns
        -------
        self : PCA
            The fitted estimator.
        """
        qc = parse_qc(self.qc, caller="PCA")
        oriented = self._split_params()[0].get("genotype_dims") is not None
        if _is_source(X) and not oriented:
            check_not_allele_counts(X, caller="PCA")
        matrix, _, _ = self._open(X)
        if not oriented:
            check_not_allele_counts(matrix, caller="PCA")  # a 2-D integer Zarr array
        matrix = filter_variants(matrix, qc, client=self._pass_client())
        k = self._resolve_components(matrix)
        _, extra = self._split_params()
        result = fit_pca(matrix, k, **self._solve_kwargs(
            matrix, extra, fit_pca, oversample=self.oversample, min_eigengap=self.min_eigengap))
        matrix = matrix_after_run(matrix, result)
        self._store_result(result)
        for name in ("components", "explained_variance", "explained_variance_ratio",
                     "singular_values", "mean"):
            setattr(self, f"{name}_", np.asarray(result.fitted[name], dtype=np.float64))
        self.n_components_ = k
        self.determined_ = result.determined
        self.n_samples_ = matrix.n_rows
        self.genotypes_ = bool(matrix.rows_standardized)
        ratio = float(self.explained_variance_ratio_.sum())
        total = float(self.explained_variance_.sum()) / ratio if ratio > 0 else 0.0
        rank = min(matrix.n_rows if self.genotypes_ else matrix.n_rows - 1, matrix.n_columns)
        left = min(matrix.n_rows, matrix.n_columns) - k
        self.noise_variance_ = (max(total - float(self.explained_variance_.sum()), 0.0)
                                / left if left > 0 and k < rank else 0.0)
        for name in ("variant_mean_", "variant_scale_", "variant_loadings_", "variant_mask_",
                     "variant_keys_"):
            if hasattr(self, name):
                delattr(self, name)
        if self.genotypes_:
            self._fit_variants(matrix)
        return self

    def _fit_variants(self, matrix: Matrix) -> None:
        """One pass: each variant's centre, scale and loading ``U = Z V / s``."""
        parts = _passes.map_partitions(matrix, _passes.variant_pass(self.components_.T),
                                       self._pass_client())
        self.variant_mean_ = np.concatenate([p[0] for p in parts])
        self.variant_scale_ = np.concatenate([p[1] for p in parts])
        s = self.singular_values_
        ZV = np.concatenate([p[2] for p in parts])
        self.variant_loadings_ = np.divide(ZV, s, out=np.zeros_like(ZV), where=s > 0)
        report = matrix.attrs.get("qc")
        self.variant_mask_ = (np.ones(matrix.n_rows, dtype=bool) if report is None
                              else report.kept.copy())
        self.variant_keys_ = None if matrix.variants is None else matrix.variants.keys()

    def transform(self, X: Any) -> np.ndarray:
        """Project ``X`` onto the components.

        Parameters
        ----------
        X : str, path, array-like, dask or xarray array, xarray.Dataset, or Matrix
            Rows to project (a plain-matrix fit), or a VCF Zarr store or Dataset holding
            the fit's variants whose samples to project (a genotype fit).

        Returns
        -------
        X_new : ndarray of shape (n_samples, n_components)
            ``(X - mean_) @ components_.T``; for genotypes the samples' scores.

        Raises
        ------
        InvalidDataError
            For a genotype fit: if ``X`` is not a VCF Zarr store or Dataset
            (Patterson-scaled) holding each of the fit's variants once.
        """
        check_is_fitted(self)
        if self.genotypes_:
            return self._transform_genotypes(X)
        if _is_source(X):
            return self._rows(X, _passes.project_rows(self.mean_, self.components_))
        X = validate_data(self, X, dtype=np.float64, reset=False)
        return (X - self.mean_) @ self.components_.T

    def _transform_genotypes(self, X: Any) -> np.ndarray:
        open_kw, _ = self._split_params()
        opens = _is_source(X) or open_kw.get("genotype_dims") is not None
        matrix = open_matrix(X, **open_kw) if opens else None
        if matrix is None or not matrix.rows_standardized:
            raise InvalidDataError(
                "This PCA was fitted on genotypes (rows = variants, columns = samples): "
                "transform projects the samples of a VCF Zarr store or Dataset (or a "
                "Patterson-scaled Matrix) holding the fit's variants; got "
                f"{type(X).__name__}. The training samples' scores are "
                "components_.T * singular_values_."
            )
        matrix = self._fit_variants_of(matrix)
        make = _passes.sample_scores(self.variant_mean_, self.variant_scale_,
                                     self.variant_loadings_)
        return np.sum(_passes.map_partitions(matrix, make, self._pass_client()), axis=0)

    def _fit_variants_of(self, matrix: Matrix) -> Matrix:
        """The rows of ``matrix`` holding the fit's variants, in the fit's order."""
        n_variants = len(self.variant_mean_)
        keys = None if matrix.variants is None else matrix.variants.keys()
        if self.variant_keys_ is None or keys is None:
            if matrix.n_rows != n_variants:
                raise InvalidDataError(
                    f"The data has {matrix.n_rows} variants but this PCA was fitted on "
                    f"{n_variants}: without variant positions (in-memory allele counts) "
                    "projecting samples needs the same variants in the same order."
                )
            return matrix
        if np.array_equal(keys, self.variant_keys_):
            return matrix
        rows = {key: row for row, key in enumerate(keys)}
        missing = [key for key in self.variant_keys_ if key not in rows]
        counts = Counter(keys[np.isin(keys, self.variant_keys_)].tolist())
        repeated = sorted(key for key, n in counts.items() if n > 1)
        if missing or repeated:
            what = (f"{len(missing)} of the fit's {n_variants} variants are not in it "
                    f"(first: {missing[0]})" if missing else
                    f"{len(repeated)} of the fit's variants repeat in it (first: {repeated[0]})")
            raise InvalidDataError(
                f"Cannot project these samples: {what}. The fit's variants are found by "
                "contig, position and alleles (variant_keys_); use data with each of them "
                "once, e.g. the same VCF Zarr variants."
            )
        return matrix.select_rows(np.array([rows[key] for key in self.variant_keys_]))

    def fit_transform(self, X: Any, y: Any = None) -> np.ndarray:
        """Fit and return the projection of the training data.

        Parameters
        ----------
        X : str, path, array-like, dask or xarray array, or Matrix
            Training data (see :meth:`fit`).
        y : None
            Ignored.

        Returns
        -------
        X_new : ndarray of shape (n_samples, n_components)
            ``transform(X)``; for genotypes ``components_.T * singular_values_``, the
            training samples' scores (no further pass).
        """
        self.fit(X)
        if self.genotypes_:
            return self.components_.T * self.singular_values_
        return self.transform(X)

    def inverse_transform(self, X: Any) -> np.ndarray:
        """Map scores back to the original space, ``X @ components_ + mean_``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_components)
            Scores.

        Returns
        -------
        X_original : ndarray of shape (n_samples, n_features)
            The rows' projection onto the components' span, in the original space.

        Raises
        ------
        InvalidDataError
            For a genotype fit (its scores are samples, its rows variants).
        """
        check_is_fitted(self)
        if self.genotypes_:
            raise InvalidDataError(
                "inverse_transform is not defined for a genotype PCA (scores are samples, "
                "rows are variants); variant_loadings_ @ diag(singular_values_) @ "
                "components_ is the rank-k approximation of the standardised genotypes."
            )
        X = check_array(X, dtype=np.float64)
        if X.shape[1] != self.n_components_:
            raise ValueError(
                f"X has {X.shape[1]} columns, but PCA has {self.n_components_} components."
            )
        return X @ self.components_ + self.mean_
