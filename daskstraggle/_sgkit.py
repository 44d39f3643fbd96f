"""A genotype PCA as sgkit's ``pca`` returns it: the ``sample_pca_*`` variables.

sgkit (``sgkit.stats.pca``, read at sgkit 0.10) fits ``X = U S Vᵀ`` on the Patterson-scaled
genotypes with samples as rows; our fit has rows = variants, ``Z = Xᵀ``, so ``components``
are ``Uᵀ``, a variant pass gives ``V`` and the singular values are the same. The variables
and their sign convention (dask's ``svd_flip``) are defined in :func:`daskstraggle.genotype_pca`
and ``docs/genotype-pca.md``.
"""

from __future__ import annotations

import warnings

import numpy as np
import xarray as xr

from daskstraggle.errors import StraggleWarning

__all__ = ["SGKIT_PCA_VARIABLES", "merge_into", "pca_dataset"]

#: The variables of ``sgkit.pca(..., merge=False)``, in its order.
SGKIT_PCA_VARIABLES = ("sample_pca_projection", "sample_pca_component",
                       "sample_pca_explained_variance", "sample_pca_explained_variance_ratio",
                       "sample_pca_loading")


def pca_dataset(components: np.ndarray, singular_values: np.ndarray,
                explained_variance_ratio: np.ndarray, variant_axes: np.ndarray, *,
                sample_id: np.ndarray | None = None,
                variant_coords: dict[str, np.ndarray] | None = None) -> xr.Dataset:
    """Return sgkit's ``sample_pca_*`` variables (float64) of a genotype fit: the samples'
    unit eigenvectors ``components`` (k, n_samples), the variants' unit axes
    ``variant_axes`` ``Z V / s`` (n_variants, k), with the optional coordinates."""
    s = np.asarray(singular_values, dtype=np.float64)
    axes = np.asarray(variant_axes, dtype=np.float64)
    signs = np.where(axes.sum(axis=0) >= 0, 1.0, -1.0)  # dask's svd_flip (v-based)
    axes = axes * signs
    projection = np.asarray(components, dtype=np.float64).T * (s * signs)
    explained = projection.var(axis=0)  # ddof 0, as dask-ml's TruncatedSVD
    n_samples = projection.shape[0]
    ratio = np.asarray(explained_variance_ratio, dtype=np.float64)
    # sgkit's ratio is explained / X.var(axis=0).sum() = s^2 / |Z|_F^2 for centred variants
    full = np.divide(s**2, ratio, out=np.zeros_like(s), where=ratio > 0)
    total = float(full[ratio > 0][0]) / n_samples if (ratio > 0).any() else 0.0
    ratio = explained / total if total > 0 else np.zeros_like(explained)
    out = xr.Dataset({
        "sample_pca_projection": (("samples", "components"), projection),
        "sample_pca_component": (("variants", "components"), axes),
        "sample_pca_explained_variance": ("components", explained),
        "sample_pca_explained_variance_ratio": ("components", ratio),
        "sample_pca_loading": (("variants", "components"), axes * np.sqrt(explained)),
    })
    coords = {} if sample_id is None else {"sample_id": ("samples", np.asarray(sample_id))}
    coords |= {name: ("variants", np.asarray(values))
               for name, values in (variant_coords or {}).items()}
    return out.assign_coords(coords)


def _spread(out: xr.Dataset, dim: str, kept: np.ndarray | None) -> xr.Dataset:
    """``out``'s variables along ``dim`` at the input's entries, NaN where not ``kept``."""
    if kept is None or kept.all():
        return out
    index = np.full(kept.size, -1)
    index[np.flatnonzero(kept)] = np.arange(int(kept.sum()))
    mask = xr.DataArray(kept, dims=dim)
    return xr.Dataset({
        name: (var.isel({dim: np.maximum(index, 0)}).where(mask) if dim in var.dims else var)
        for name, var in out.data_vars.items()})


def merge_into(ds: xr.Dataset, out: xr.Dataset, kept: np.ndarray | None,
               samples_kept: np.ndarray | None = None) -> xr.Dataset:
    """Merge :func:`pca_dataset`'s ``out`` into the input ``ds`` as sgkit's ``merge=True``
    does: ``out``'s variables replace ``ds``'s of the same name (with a warning, as sgkit's
    ``MergeWarning``); ``ds``'s attrs are kept. Variants and samples quality control removed
    (False in ``kept``, ``samples_kept``; None: all kept) get NaN."""
    out = out.drop_vars(list(out.coords))
    for dim, mask in (("variants", kept), ("samples", samples_kept)):
        out = _spread(out, dim, mask)
    if clobbered := sorted(set(map(str, ds.data_vars)) & set(map(str, out.data_vars))):
        warnings.warn(f"The following variables in the input dataset will be replaced in the "
                      f"output: {', '.join(clobbered)}", StraggleWarning, stacklevel=3)
    merged = out.merge(ds, compat="override")
    return merged.assign_attrs({**ds.attrs, **out.attrs})
