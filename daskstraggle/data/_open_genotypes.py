"""Opening genotypes that are not a VCF Zarr path: an xarray.Dataset, allele counts.

Used by :func:`~daskstraggle.data.matrix.open_matrix` (imported when called: this module
imports the matrix module).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from daskstraggle.data._zarr import open_node
from daskstraggle.data.genotypes import DatasetArrays, StoreArrays, VariantTable
from daskstraggle.data.matrix import (
    Matrix,
    _check_2d,
    _check_dense,
    _check_packable,
    _is_dask,
    _is_xarray,
    _parse_labels,
    _strings,
    _ZarrOptions,
)
from daskstraggle.data.sources import (
    GenotypeArraySource,
    GenotypeRowSource,
    GenotypeSource,
    ZarrSource,
)
from daskstraggle.errors import InvalidDataError, InvalidParameterError

__all__ = ["default_client", "open_counts", "open_dataset", "zarr_counts"]


def open_dataset(ds: Any, array: str | None, labels: Any, options: _ZarrOptions) -> Matrix:
    """Open an ``xarray.Dataset`` in VCF Zarr layout: a view of its store, else in memory."""
    from daskstraggle.data._dataset import store_view

    if array is not None:
        raise InvalidDataError(
            "The 'array' parameter of open_matrix names a member of a Zarr group; for an "
            f"xarray.Dataset pass the DataArray itself (ds[{array!r}])."
        )
    if "call_genotype" not in ds.variables:
        raise InvalidDataError(
            "open_matrix reads an xarray.Dataset in VCF Zarr layout (call_genotype "
            "(variants, samples, ploidy), variant_*, sample_id); this one has no "
            f"call_genotype (it holds {sorted(map(str, ds.data_vars))[:8]}). For another "
            "matrix pass its DataArray, e.g. ds['X']."
        )
    calls = ds["call_genotype"]
    if calls.dims != ("variants", "samples", "ploidy") or calls.dtype.kind not in "iu":
        raise InvalidDataError(
            "The Dataset's call_genotype must be an integer array with dims ('variants', "
            f"'samples', 'ploidy'), as in VCF Zarr; got dims {calls.dims} and dtype "
            f"{calls.dtype}."
        )
    _check_2d(calls.shape[:2], "Dataset's call_genotype")
    _check_packable(options, calls.shape[2], "the Dataset's call_genotype")
    view = store_view(ds)
    if view is not None:
        node = open_node(view.path)["call_genotype"]
        src: GenotypeRowSource = GenotypeSource(
            view.path, node, missing=options.missing, scaling=options.scaling,
            missing_chunks=options.missing_chunks, storage=options.storage,
            variant_index=view.variant_index, sample_index=view.sample_index)
        variants = VariantTable(StoreArrays(view.path), view.variant_index)
        attrs = {"path": view.path}
    else:
        data = calls.data if _is_dask(calls.data) else np.asarray(calls.values)
        src = GenotypeArraySource(data, missing=options.missing, scaling=options.scaling,
                                  storage=options.storage)
        variants, attrs = VariantTable(DatasetArrays(ds)), {}
    columns, groups = (_strings(ds[name].values) if name in ds.variables else None
                       for name in ("sample_id", "sample_population"))
    y = _parse_labels(labels, None, src.shape[0])
    return Matrix(src, src.chunk_bounds, labels=y, columns=columns, column_groups=groups,
                  dims=("variants", "samples"), attrs=attrs, variants=variants)


def open_counts(source: Any, array: str | None, labels: Any, rows_are_variants: bool,
                 options: _ZarrOptions) -> Matrix:
    """Open an in-memory 2-D array of allele counts (``genotype_dims`` given)."""
    if array is not None:
        raise InvalidDataError(
            "The 'array' parameter of open_matrix names a member of a Zarr group; "
            f"it cannot be used with an in-memory {type(source).__name__}."
        )
    _check_dense(source)
    data = source.data if _is_xarray(source) else source
    columns = None
    if _is_xarray(source):
        dims = tuple(map(str, source.dims))
        if set(dims) == {"variants", "samples"} and (dims[0] == "variants") != rows_are_variants:
            raise InvalidParameterError(
                f"The 'genotype_dims' parameter of open_matrix contradicts the DataArray's "
                f"dims {dims}; pass genotype_dims={dims}."
            )
        sample_dim = dims[1] if rows_are_variants else dims[0]
        if sample_dim in source.coords:
            columns = _strings(source.coords[sample_dim].values)
    if not _is_dask(data):
        data = np.asarray(data)
    if len(data.shape) != 2 or np.dtype(data.dtype).kind not in "iu":
        raise InvalidDataError(
            "genotype_dims applies to a 2-D integer array of allele counts; got "
            f"{type(source).__name__} of shape {tuple(data.shape)} and dtype {data.dtype}."
        )
    if not rows_are_variants:
        data = data.T
    _check_2d(tuple(data.shape), "array of allele counts")
    _check_packable(options, 2, "allele counts")
    src = GenotypeArraySource(data, ploidy=2, missing=options.missing, scaling=options.scaling,
                              storage=options.storage)
    y = _parse_labels(labels, None, src.shape[0])
    return Matrix(src, src.chunk_bounds, labels=y, columns=columns, dims=("variants", "samples"))


def zarr_counts(matrix: Matrix, rows_are_variants: bool, options: _ZarrOptions) -> Matrix:
    """A 2-D Zarr array of allele counts (``genotype_dims`` given), read through dask."""
    import dask.array as da

    source = matrix.source
    if not isinstance(source, ZarrSource):
        raise InvalidParameterError(
            "The 'genotype_dims' parameter of open_matrix applies to a 2-D array of allele "
            f"counts; this source is {matrix.kind}, whose orientation is known. Drop it."
        )
    node = open_node(source.path, source.storage_options)
    node = node if source.name is None else node[source.name]
    return open_counts(da.from_zarr(node), None, matrix.labels, rows_are_variants, options)


def default_client() -> Any:
    """The default Dask client, or None (no client, or distributed not running)."""
    try:
        from distributed import get_client

        return get_client()
    except ValueError:
        return None
