"""The opening code of the built-in backends, and what every backend shares
(:class:`OpenOptions`, :func:`parse_labels`, :func:`source_matrix`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from daskstraggle.data._matrix import Matrix
from daskstraggle.data._remote import is_url
from daskstraggle.data._zarr import (
    GroupArrays,
    check_chunks,
    describe,
    group_arrays,
    open_node,
    read,
)
from daskstraggle.data.genotypes import (
    DatasetArrays,
    StoreArrays,
    VariantTable,
    _is_xarray,
    _strings,
)
from daskstraggle.data.sources import (
    ArraySource,
    DaskSource,
    GenotypeArraySource,
    GenotypeRowSource,
    GenotypeSource,
    RowSource,
    ZarrSource,
)
from daskstraggle.errors import (
    CorruptDataError,
    DataNotFoundError,
    InvalidDataError,
    InvalidParameterError,
)

__all__ = ["OpenOptions", "default_client", "file_matrix", "is_dataset", "open_array",
           "open_counts", "open_dataset", "open_zarr", "parse_labels", "source_matrix",
           "zarr_counts"]

#: Default rows per chunk for in-memory inputs without chunking of their own.
DEFAULT_CHUNK_BYTES = 32 * 2**20


@dataclass(frozen=True, slots=True)
class OpenOptions:
    """How :func:`~daskstraggle.data.matrix.open_matrix` reads its input, checked already:
    genotype decoding (``missing``, ``genotype_scaling``, ``genotype_storage``), Zarr's
    ``missing_chunks``, a URL's fsspec ``storage_options`` (None for a path)."""

    missing: str
    scaling: str
    missing_chunks: str
    storage: str = "int8"
    storage_options: dict[str, Any] | None = None


def parse_labels(
    labels: Any, group: GroupArrays | None, n_rows: int, missing_chunks: str = "error"
) -> np.ndarray | None:
    """Return ``labels`` as float64 of shape ``(n_rows,)``, or None.

    ``labels`` is an array-like (numpy, dask, xarray), or the name of a 1-D member of the
    Zarr ``group`` (read on the client, its chunks checked as ``missing_chunks`` says):
    DataNotFoundError if the group has none, InvalidDataError if a name is given without a
    group or the labels are not 1-D finite numbers, one per row.
    """
    if labels is None:
        return None
    if isinstance(labels, str):
        if group is None:
            raise InvalidDataError(
                f"labels={labels!r} names an array of a Zarr group, but the matrix is not "
                "read from a Zarr group; pass the labels as an array instead."
            )
        if labels not in group:
            raise DataNotFoundError(
                f"Labels array {labels!r} not found in the Zarr group; it holds "
                f"{group.summary()}."
            )
        labels = _read_whole(group, labels, missing_chunks)
    if _is_xarray(labels):
        labels = labels.data
    if _is_dask(labels):
        labels = labels.compute()
    y = np.asarray(labels)
    if y.ndim == 2 and 1 in y.shape:
        y = y.reshape(-1)
    if y.ndim != 1 or y.shape[0] != n_rows:
        raise InvalidDataError(
            f"The labels must be 1-D with one value per row ({n_rows}); got shape {y.shape}."
        )
    if y.dtype.kind not in "fiub":
        raise InvalidDataError(f"The labels must be numbers; got dtype {y.dtype}.")
    y = y.astype(np.float64)
    if not np.isfinite(y).all():
        raise InvalidDataError(
            f"The labels contain NaN or infinite values (first at row "
            f"{int(np.flatnonzero(~np.isfinite(y))[0])}); remove or fix them."
        )
    return y


def source_matrix(src: RowSource, labels: Any, group: GroupArrays | None = None,
                  missing_chunks: str = "error", **fields: Any) -> Matrix:
    """The Matrix of ``src`` partitioned as its chunks, ``labels`` read by :func:`parse_labels`."""
    return Matrix(src, src.chunk_bounds, labels=parse_labels(labels, group, src.shape[0],
                                                             missing_chunks), **fields)


def file_matrix(source: GenotypeRowSource, path: str, samples: np.ndarray, labels: Any,
                variants: Any) -> Matrix:
    """The Matrix of a genotype file at ``path`` (rows = variants, columns = ``samples``);
    ``variants`` reads its :class:`~daskstraggle.data.genotypes.VariantTable`."""
    return source_matrix(source, labels, columns=samples, dims=("variants", "samples"),
                         attrs={"path": path}, variants=VariantTable(variants))


# -------------------------------------------------------------- Datasets, allele counts
def open_dataset(ds: Any, labels: Any, options: OpenOptions) -> Matrix:
    """Open an ``xarray.Dataset`` in VCF Zarr layout: a view of its store, else in memory."""
    from daskstraggle.data._dataset import store_view

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
        src: GenotypeRowSource = _genotype_source(
            view.path, open_node(view.path)["call_genotype"], options,
            variant_index=view.variant_index, sample_index=view.sample_index)
        variants = VariantTable(StoreArrays(view.path), view.variant_index)
        attrs = {"path": view.path}
    else:
        data = calls.data if _is_dask(calls.data) else np.asarray(calls.values)
        src = GenotypeArraySource(data, missing=options.missing, scaling=options.scaling,
                                  storage=options.storage)
        variants, attrs = VariantTable(DatasetArrays(ds)), {}
    columns, groups = (_strings(ds[name].values).astype(str) if name in ds.variables else None
                       for name in ("sample_id", "sample_population"))
    return source_matrix(src, labels, columns=columns, column_groups=groups,
                         dims=("variants", "samples"), attrs=attrs, variants=variants)


def open_counts(source: Any, labels: Any, rows_are_variants: bool,
                options: OpenOptions) -> Matrix:
    """Open an in-memory 2-D array of allele counts (``genotype_dims`` given)."""
    data, dims = _unwrap(source)
    if (dims is not None and set(dims) == {"variants", "samples"}
            and (dims[0] == "variants") != rows_are_variants):
        raise InvalidParameterError(
            f"The 'genotype_dims' parameter of open_matrix contradicts the DataArray's "
            f"dims {dims}; pass genotype_dims={dims}."
        )
    if len(data.shape) != 2 or np.dtype(data.dtype).kind not in "iu":
        raise InvalidDataError(
            "genotype_dims applies to a 2-D integer array of allele counts; got "
            f"{type(source).__name__} of shape {tuple(data.shape)} and dtype {data.dtype}."
        )
    columns = None  # the sample dim's coordinate: dims[1] if rows are variants, else dims[0]
    if dims is not None and (sample_dim := dims[int(rows_are_variants)]) in source.coords:
        columns = _strings(source.coords[sample_dim].values).astype(str)
    if not rows_are_variants:
        data = data.T
    _check_2d(tuple(data.shape), "array of allele counts")
    _check_packable(options, 2, "allele counts")
    src = GenotypeArraySource(data, ploidy=2, missing=options.missing, scaling=options.scaling,
                              storage=options.storage)
    return source_matrix(src, labels, columns=columns, dims=("variants", "samples"))


def zarr_counts(matrix: Matrix, rows_are_variants: bool, options: OpenOptions) -> Matrix:
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
    return open_counts(da.from_zarr(node), matrix.labels, rows_are_variants, options)


def default_client() -> Any:
    """The default Dask client, or None (no client, or distributed not running)."""
    try:
        from distributed import get_client

        return get_client()
    except ValueError:
        return None


# ------------------------------------------------------------------------------- arrays
def open_array(source: Any, labels: Any, chunk_rows: int | None) -> Matrix:
    """Open an in-memory input (numpy, dask, xarray)."""
    data, dims = _unwrap(source)
    names, columns = ("sample", "feature"), None
    if dims is not None:
        _check_2d(source.shape, f"xarray.DataArray {source.name!r}")
        names = (dims[0], dims[1])
        if dims[1] in source.coords:
            columns = np.asarray(source.coords[dims[1]].values)
    if _is_dask(data):
        _check_known_chunks(data)
        _check_2d(data.shape, "dask array")
        src: RowSource = DaskSource(data)
    else:
        src = _array_source(data, chunk_rows)
    return source_matrix(src, labels, columns=columns, dims=names)


def _unwrap(source: Any) -> tuple[Any, tuple[str, ...] | None]:
    """The dask or numpy array of ``source`` and its xarray dims (None if not a DataArray),
    refusing sparse input and what numpy cannot read."""
    _check_dense(source)
    dims = tuple(map(str, source.dims)) if _is_xarray(source) else None
    data = source if dims is None else source.data
    _check_dense(data)
    if _is_dask(data):
        return data, dims
    try:
        values = np.asarray(data)
    except Exception as err:  # anything numpy cannot turn into an array
        raise _unreadable(source) from err
    if values.ndim == 0 and values.dtype == object:  # an object numpy does not see into
        raise _unreadable(source)
    return values, dims


def _array_source(values: np.ndarray, chunk_rows: int | None) -> ArraySource:
    _check_2d(values.shape, "array")
    if values.dtype.kind not in "fiub":
        raise InvalidDataError(
            f"The matrix must hold numbers; got dtype {values.dtype}. Convert it first."
        )
    if chunk_rows is None:
        row_bytes = max(1, values.shape[1] * values.dtype.itemsize)
        chunk_rows = max(1, min(values.shape[0], DEFAULT_CHUNK_BYTES // row_bytes))
    return ArraySource(values, chunk_rows=chunk_rows)


def _unreadable(source: Any) -> InvalidDataError:
    return InvalidDataError(
        f"open_matrix cannot read a {type(source).__name__}; pass a Zarr path, a "
        "numpy array, a dask array or an xarray.DataArray."
    )


def _check_dense(data: Any) -> None:
    """Refuse sparse matrices (scipy.sparse, pydata sparse), which numpy sees as 0-D."""
    module = type(data).__module__
    if module.startswith(("scipy.sparse", "sparse")):
        raise InvalidDataError(
            f"The 'source' parameter of open_matrix must be a dense array; got a sparse "
            f"{type(data).__name__} of shape {tuple(data.shape)}. Densify it "
            "(X.toarray() if it fits in memory) or write it to a Zarr array first."
        )


# -------------------------------------------------------------------------- Zarr stores
def open_zarr(path: str, array: str | None, labels: Any, options: OpenOptions) -> Matrix:
    """Open the store at ``path``: an absolute local path, or a URL (checked already)."""
    import zarr

    if not is_url(path) and not Path(path).exists():
        raise DataNotFoundError(
            f"No Zarr store at {path!r}: the path does not exist. Check the data "
            "path (the 'source' parameter; CLI: the SOURCE argument)."
        )
    if not is_url(path) and Path(path).is_file():
        raise DataNotFoundError(_not_a_store(path))
    try:
        node = open_node(path, options.storage_options)
    except CorruptDataError:
        raise
    except Exception as err:  # zarr raises several unrelated types for unreadable stores
        raise DataNotFoundError(
            f"{path!r} is not a readable Zarr array or group ({type(err).__name__}: {err})."
        ) from err
    group = None
    name = None
    if isinstance(node, zarr.Group):
        group = group_arrays(node, path)
        name = _choose_array(group, array)
        node = group[name]
    elif array is not None:
        raise DataNotFoundError(
            f"{path!r} is a Zarr array, not a group, so it has no member {array!r}; "
            "drop the 'array' parameter."
        )
    columns = groups = variants = None
    dims = ("sample", "feature")
    if name == "call_genotype":
        assert group is not None  # call_genotype is only chosen from a group
        src: RowSource = _genotype_source(path, node, options)
        dims = ("variants", "samples")
        columns, groups = (_strings(_read_whole(group, n, options.missing_chunks)).astype(str)
                           if n in group else None for n in ("sample_id", "sample_population"))
        variants = VariantTable(StoreArrays(path, options.storage_options))
    else:
        _check_2d(node.shape, f"Zarr array {path!r}" + (f"/{name}" if name else ""))
        if np.dtype(node.dtype).kind not in "fiub":
            raise InvalidDataError(
                f"The matrix must hold numbers; {path!r} has dtype {node.dtype}."
            )
        src = ZarrSource(path, name, node, missing_chunks=options.missing_chunks,
                         storage_options=options.storage_options)
    return source_matrix(src, labels, group, options.missing_chunks, columns=columns,
                         column_groups=groups, dims=dims, attrs={"path": path},
                         variants=variants)


def _not_a_store(path: str) -> str:
    """Why the file at ``path`` is not read (a Zarr store is a folder), by its first bytes:
    a BGEN or VCF file says how to convert it."""
    import gzip

    with open(path, "rb") as f:
        head = text = f.read(64)
    if head[:2] == b"\x1f\x8b":  # gzip or BGZF (a .vcf.gz, a .bcf)
        try:
            with gzip.open(path, "rb") as f:
                text = f.read(64)
        except (OSError, EOFError):
            text = b""
    if head[16:20] == b"bgen":
        return (f"{path!r} is a BGEN file without the .bgen suffix: name it NAME.bgen, or "
                "pass backend='bgen' to open_matrix (needs cbgen: pip install "
                "'daskstraggle[bgen]').")
    if text.startswith((b"##fileformat=VCF", b"BCF")):
        return (f"{path!r} is a VCF or BCF file, which is read as VCF Zarr: convert it with "
                f"vcf2zarr convert {path} OUT.vcz (bio2zarr, pip install "
                "'daskstraggle[genomics]') and pass OUT.vcz.")
    return (f"{path!r} is not a readable Zarr array or group: it is a file, and a Zarr "
            "store is a folder. Pass a Zarr array or group, a VCF Zarr store, a PLINK .bed or "
            "a PLINK 2 .pgen (the 'source' parameter; CLI: the SOURCE argument).")


def _check_packable(options: OpenOptions, ploidy: int, what: str) -> None:
    if options.storage == "packed" and ploidy > 2:
        raise InvalidParameterError(
            "The 'genotype_storage' parameter of open_matrix must be 'int8' for genotypes "
            f"of ploidy {ploidy} ({what}): 'packed' holds dosages 0-2 in 2 bits (ploidy 1 or "
            "2). Got 'packed' instead (CLI: drop --packed-genotypes)."
        )


def _choose_array(group: GroupArrays, array: str | None) -> str:
    """Return the member holding the matrix: ``array``, or the default one."""
    if array is None:
        array = _default_array(group)
    if array not in group:
        raise DataNotFoundError(
            f"Array {array!r} not found in the Zarr group {group.path!r}; it holds "
            f"{group.summary()}. Pass one of these as 'array' (CLI: --array)."
        )
    return array


def _default_array(group: GroupArrays) -> str:
    """``call_genotype``, a 2-D ``X``, the only 2-D array, or ``X`` whatever its shape."""
    if "call_genotype" in group:
        return "call_genotype"
    if "X" in group and "X" in group.arrays and len(group.arrays["X"].shape) == 2:
        return "X"  # "X" in group opens it by name if the store cannot be listed
    two_d = [m for m, node in group.arrays.items() if len(node.shape) == 2]
    if len(two_d) == 1:
        return two_d[0]
    if "X" in group.corrupt:
        return "X"  # opening it reports its unreadable metadata
    if "X" in group.arrays:
        raise InvalidDataError(
            f"The Zarr group {group.path!r} holds no 2-D matrix: its array 'X' has shape "
            f"{tuple(group.arrays['X'].shape)}. Write X as (rows, columns) (one feature: "
            "shape (n_rows, 1)), or name a 2-D array with the 'array' parameter "
            "(CLI: --array NAME)."
        )
    unreadable = f" ({sorted(group.corrupt)} cannot be read)" if group.corrupt else ""
    raise InvalidDataError(
        f"The Zarr group {group.path!r} holds {group.summary()}{unreadable}; name "
        "the matrix with the 'array' parameter (CLI: --array NAME)."
    )


def _genotype_source(path: str, node: Any, options: OpenOptions, **view: Any) -> GenotypeSource:
    if len(node.shape) != 3 or np.dtype(node.dtype).kind not in "iu":
        raise InvalidDataError(
            f"{path!r}/call_genotype must be an integer array of shape "
            f"(variants, samples, ploidy) as written by bio2zarr; got shape {node.shape} "
            f"and dtype {node.dtype}."
        )
    _check_2d(node.shape[:2], f"{path}/call_genotype")
    _check_packable(options, node.shape[2], repr(path))
    return GenotypeSource(path, node, missing=options.missing, scaling=options.scaling,
                          missing_chunks=options.missing_chunks, storage=options.storage,
                          storage_options=options.storage_options, **view)


def _read_whole(group: GroupArrays, name: str, missing_chunks: str) -> np.ndarray:
    """Read a (small) member on the client, refusing absent or undecodable chunks."""
    node = group[name]
    what = describe(group.path, name)
    if node.ndim > 0:
        check_chunks(node, 0, node.shape[0], what=what, missing_chunks=missing_chunks)
    return np.asarray(read(node, ..., what=what))


def _check_known_chunks(data: Any) -> None:
    """Refuse a dask array whose chunk sizes are unknown (NaN), e.g. after boolean indexing:
    computing them computes the selection, the caller's choice, so the error says how."""
    unknown = [axis for axis, sizes in enumerate(data.chunks)
               if any(math.isnan(size) for size in sizes)]
    if unknown:
        which = " and ".join(("rows", "columns")[axis] if axis < 2 else f"axis {axis}"
                             for axis in unknown)
        shape = "(" + ", ".join("nan" if math.isnan(n) else str(n) for n in data.shape) + ")"
        raise InvalidDataError(
            f"The dask array has unknown chunk sizes along its {which} (shape {shape}), as "
            "after boolean indexing such as x[x[:, 0] > 0]; call x = x.compute_chunk_sizes() "
            "first (it computes the selection once) and pass that."
        )


def _check_2d(shape: tuple[int, ...], what: str) -> None:
    if len(shape) != 2:
        raise InvalidDataError(
            f"The matrix must be 2-D (rows = samples, columns = features); the {what} has "
            f"shape {tuple(shape)}. Pass a 2-D array (with a Zarr group, name it with 'array', "
            "CLI: --array)."
        )
    if shape[0] == 0 or shape[1] == 0:
        raise InvalidDataError(
            f"The matrix is empty: the {what} has shape {tuple(shape)}. Pass data with at "
            "least one row and one column."
        )


def is_dataset(obj: Any) -> bool:
    return type(obj).__module__.startswith("xarray") and hasattr(obj, "data_vars")


def _is_dask(obj: Any) -> bool:
    return hasattr(obj, "__dask_graph__") and hasattr(obj, "chunks")
