"""``open_matrix``: any supported input -> a row-partitioned :class:`Matrix`.

Rows are samples (genotype *sites* for genomics PCA, examples for regression); columns
are features (individuals for genomics PCA). A Matrix is metadata only: shape, dtype, row
partition boundaries, a picklable source that workers read their rows from, optional labels
and column metadata. Nothing is loaded until a runtime asks a worker to load a partition.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from daskstraggle._validation import check_choice, check_int
from daskstraggle.data._remote import is_url
from daskstraggle.data._zarr import (
    MISSING_CHUNKS,
    GroupArrays,
    check_chunks,
    describe,
    group_arrays,
    open_node,
    read,
)
from daskstraggle.data.genotypes import (
    StoreArrays,
    VariantTable,
    filter_variants,
    parse_genotype_dims,
    parse_qc,
)
from daskstraggle.data.sources import (
    GENOTYPE_SCALINGS,
    GENOTYPE_STORAGES,
    MISSING_POLICIES,
    ArraySource,
    DaskSource,
    GenotypeRowSource,
    GenotypeSource,
    RowSource,
    RowValues,
    ZarrSource,
)
from daskstraggle.errors import (
    CorruptDataError,
    DataNotFoundError,
    InvalidDataError,
    InvalidParameterError,
    NonFiniteDataError,
)
from daskstraggle.problems.block import Block

__all__ = ["Matrix", "open_matrix", "partition_bounds"]

#: Default rows per chunk for in-memory inputs without chunking of their own.
DEFAULT_CHUNK_BYTES = 32 * 2**20


@dataclass(frozen=True, eq=False, slots=True)
class PartitionLoader:
    """Picklable task body that loads one partition on a worker into a :class:`Block`.

    Raises :class:`~daskstraggle.errors.NonFiniteDataError` naming the partition when
    floating-point rows hold NaN or infinity, and re-raises a source's
    :class:`~daskstraggle.errors.CorruptDataError` (absent or undecodable chunks) with the
    partition named.
    """

    read: Callable[[], RowValues]
    partition: int
    start: int
    stop: int
    y: np.ndarray | None

    def __call__(self) -> Block:
        """Read the rows and return them as a Block."""
        try:
            rows = self.read()
        except CorruptDataError as err:
            raise type(err)(f"Partition {self.partition} (rows {self.start}-{self.stop}): {err}"
                            ) from err
        values = rows.values
        if values.shape[0] != self.stop - self.start:
            raise InvalidDataError(
                f"Partition {self.partition} (rows {self.start}-{self.stop}) read "
                f"{values.shape[0]} rows; the store changed while it was open."
            )
        if values.dtype.kind == "f" and not np.isfinite(values).all():
            bad = int(np.flatnonzero(~np.isfinite(values).all(axis=1))[0]) + self.start
            raise NonFiniteDataError(
                f"Partition {self.partition} (rows {self.start}-{self.stop}) contains NaN or "
                f"infinite values (first at row {bad}). Remove or impute them before fitting."
            )
        return Block(
            values=values,
            start=self.start,
            y=self.y,
            fill=rows.fill,
            center=rows.center,
            scale=rows.scale,
            packed_columns=rows.packed_columns,
        )


@dataclass(frozen=True, eq=False, slots=True)
class Matrix:
    """A 2-D matrix split into row partitions, readable by workers.

    Build one with :func:`open_matrix`.

    Attributes
    ----------
    source : RowSource
        Where the rows live.
    bounds : ndarray of int of shape (n_partitions + 1,)
        Row partition boundaries, from 0 to ``n_rows``.
    labels : ndarray of shape (n_rows,) or None
        Per-row labels or targets (float64).
    columns : ndarray of shape (n_columns,) or None
        Column names (sample ids for genotypes, feature names for DataFrames/xarray).
    column_groups : ndarray of shape (n_columns,) or None
        A group per column (population of each sample for simulated genotypes).
    dims : tuple of str
        Names of the row and column dimensions (from xarray input, or defaults).
    attrs : dict
        ``path`` of a store; ``qc``, the :class:`~daskstraggle.data.genotypes.QCReport`
        of a genotype matrix whose variants were filtered.
    variants : VariantTable or None
        Genotypes from a VCF Zarr store or Dataset: its per-variant arrays
        (``variant_position``, ...) at the matrix's rows.
    """

    source: RowSource
    bounds: np.ndarray
    labels: np.ndarray | None = None
    columns: np.ndarray | None = None
    column_groups: np.ndarray | None = None
    dims: tuple[str, str] = ("sample", "feature")
    attrs: dict[str, Any] = field(default_factory=dict)
    variants: VariantTable | None = None

    @property
    def shape(self) -> tuple[int, int]:
        """``(n_rows, n_columns)``."""
        return self.source.shape

    @property
    def n_rows(self) -> int:
        """Number of rows (samples)."""
        return self.shape[0]

    @property
    def n_columns(self) -> int:
        """Number of columns (features)."""
        return self.shape[1]

    @property
    def dtype(self) -> np.dtype:
        """dtype of the stored values (int8 for genotype dosages)."""
        return self.source.dtype

    @property
    def row_nbytes(self) -> int:
        """Bytes a worker holds per row: the stored values (2-bit codes for packed
        genotypes; the source's dtype otherwise, float64 for a ``.bgen``'s expected counts)
        and, for genotypes, the row's fill, centre and scale (float64)."""
        if isinstance(self.source, GenotypeRowSource):
            values = (-(-self.n_columns // 4) if self.source.storage == "packed"
                      else self.n_columns * self.dtype.itemsize)
            return values + 24
        return self.n_columns * self.dtype.itemsize

    @property
    def kind(self) -> str:
        """Kind of input: numpy, dask, zarr, vcf-zarr, plink-bed or genotypes (in memory)."""
        return self.source.kind

    @property
    def n_partitions(self) -> int:
        """Number of row partitions."""
        return len(self.bounds) - 1

    @property
    def rows_standardized(self) -> bool:
        """Whether each row is centred by the loader (Patterson-scaled genotypes)."""
        return (isinstance(self.source, GenotypeRowSource)
                and self.source.scaling == "patterson")

    @property
    def genotypes(self) -> bool:
        """Whether rows are variants and columns samples (dosages decoded by the loader)."""
        return isinstance(self.source, GenotypeRowSource)

    def partition_rows(self) -> np.ndarray:
        """Return the number of rows of each partition."""
        return np.diff(self.bounds)

    def loader(self, partition: int) -> PartitionLoader:
        """Return the picklable callable that loads ``partition`` where it runs."""
        a, b = int(self.bounds[partition]), int(self.bounds[partition + 1])
        y = None if self.labels is None else self.labels[a:b]
        return PartitionLoader(self.source.loader(a, b), partition, a, b, y)

    def read_groups(self) -> list[tuple[int, int]]:
        """Return runs ``(first, last)`` of consecutive partitions that one read can load.

        Partitions that lie inside one storage chunk share a read, so a chunk is read and
        decoded once, not once per partition (1000 simulated workers over four chunks:
        four reads); a partition that spans chunks is a run of its own.
        """
        chunks = np.asarray(self.source.chunk_bounds)
        starts, stops = self.bounds[:-1], self.bounds[1:]
        first_chunk = np.searchsorted(chunks, starts, side="right") - 1
        last_chunk = np.searchsorted(chunks, np.maximum(stops - 1, starts), side="right") - 1
        groups: list[tuple[int, int]] = []
        chunk_of_group: list[int] = []  # the chunk a run lies in, -1 for a spanning one
        for p in range(self.n_partitions):
            chunk = int(first_chunk[p]) if first_chunk[p] == last_chunk[p] else -1
            if groups and chunk >= 0 and chunk_of_group[-1] == chunk:
                groups[-1] = (groups[-1][0], p + 1)
            else:
                groups.append((p, p + 1))
                chunk_of_group.append(chunk)
        return groups

    def load_partitions(self, first: int, last: int) -> list[Block]:
        """Load partitions ``first`` to ``last - 1`` with one read (in this process).

        The blocks share the read's arrays. A read that fails is repeated partition by
        partition, so the error names the partition, as :meth:`loader`'s do.
        """
        if last - first == 1:
            return [self.loader(first)()]
        a, b = int(self.bounds[first]), int(self.bounds[last])
        y = None if self.labels is None else self.labels[a:b]
        try:
            whole = PartitionLoader(self.source.loader(a, b), first, a, b, y)()
        except (CorruptDataError, InvalidDataError):
            return [self.loader(p)() for p in range(first, last)]
        return [whole.slice(int(self.bounds[p]) - a, int(self.bounds[p + 1]) - a)
                for p in range(first, last)]

    def repartition(self, n_partitions: int) -> Matrix:
        """Return the matrix split into ``n_partitions`` row partitions.

        Boundaries fall on storage chunk boundaries when there are at least as many
        chunks as partitions; otherwise rows are split evenly.
        """
        n = check_int(
            n_partitions, name="n_partitions", caller="Matrix.repartition", low=1, high=self.n_rows,
            remedy="Use at most one partition per row.",
        )
        return replace(self, bounds=partition_bounds(self.source.chunk_bounds, n))

    def select_rows(self, rows: np.ndarray) -> Matrix:
        """Return the genotype matrix of rows ``rows`` (variants; nothing is copied).

        The source reads the same store (or array) at the selected rows; partitions
        follow its chunks, as many as before at most.
        """
        if not isinstance(self.source, GenotypeRowSource):
            raise InvalidDataError(f"Only genotype matrices select rows; this is {self.kind}.")
        rows = np.asarray(rows, dtype=np.int64)
        source = self.source.select(rows)
        bounds = source.chunk_bounds
        aligned = np.array_equal(self.bounds, self.source.chunk_bounds)
        if not aligned and len(rows) and self.n_partitions < len(bounds) - 1:
            bounds = partition_bounds(bounds, min(self.n_partitions, len(rows)))
        return replace(
            self, source=source, bounds=bounds,
            labels=None if self.labels is None else self.labels[rows],
            variants=None if self.variants is None else self.variants.select(rows),
        )

    def select_columns(self, columns: np.ndarray) -> Matrix:
        """Return the genotype matrix of samples ``columns`` (nothing is copied).

        Each variant's fill, centre and scale are then those of these samples; rows and
        partitions are unchanged.
        """
        if not isinstance(self.source, GenotypeRowSource):
            raise InvalidDataError(
                f"Only genotype matrices select columns; this is {self.kind}.")
        columns = np.asarray(columns, dtype=np.int64)
        return replace(
            self, source=self.source.select_columns(columns),
            columns=None if self.columns is None else self.columns[columns],
            column_groups=None if self.column_groups is None else self.column_groups[columns],
        )

    def with_labels(self, labels: np.ndarray | None) -> Matrix:
        """Return the matrix with other labels (already validated, float64)."""
        return replace(self, labels=labels)

    def __repr__(self) -> str:
        """A few lines, xarray style: shape, dtype, partitions, source, labels, columns."""
        info = self.source.describe()
        rows, cols = self.dims
        sizes = self.partition_rows()
        low, high = int(sizes.min()), int(sizes.max())
        span = f"{low}" if low == high else f"{low}-{high}"
        where = info.get("path", f"in memory ({self.kind})")
        if info.get("array"):
            where += f", array {info['array']!r}"
        if "store_shape" in info:
            where += f", a view of its {info['store_shape'][0]} x {info['store_shape'][1]}"
        extra = [f"{k}={info[k]!r}" for k in ("missing", "scaling") if k in info]
        lines = [
            f"<daskstraggle.Matrix ({rows}: {self.n_rows}, {cols}: {self.n_columns})> "
            f"{self.dtype}, {self.kind}",
            f"partitions:  {self.n_partitions} of {span} rows",
            f"source:      {where}" + (f" ({', '.join(extra)})" if extra else ""),
            "labels:      " + ("none" if self.labels is None
                               else f"{self.labels.dtype} ({self.labels.shape[0]},)"),
        ]
        if self.columns is not None:
            lines.append(f"columns:     {self._preview(self.columns)}")
        if self.column_groups is not None:
            lines.append(f"groups:      {self._preview(np.unique(self.column_groups))}")
        return "\n".join(lines)

    @staticmethod
    def _preview(values: np.ndarray, n: int = 3) -> str:
        """``'a', 'b', 'c', ... (k)``: the first ``n`` values and the count."""
        shown = ", ".join(repr(str(v)) for v in values[:n])
        return shown + (f", ... ({len(values)})" if len(values) > n else f" ({len(values)})")

    def describe(self) -> dict[str, Any]:
        """Return a JSON-serialisable description (for traces and reports)."""
        out = {
            **self.source.describe(),
            "n_partitions": self.n_partitions,
            "has_labels": self.labels is not None,
            "dims": list(self.dims),
        }
        if "qc" in self.attrs:
            out["qc"] = self.attrs["qc"].to_dict()
        return out


def partition_bounds(chunk_bounds: np.ndarray, n_partitions: int) -> np.ndarray:
    """Return ``n_partitions + 1`` row boundaries, aligned to chunks where possible.

    Parameters
    ----------
    chunk_bounds : ndarray of int
        Storage chunk boundaries from 0 to ``n_rows``.
    n_partitions : int
        Number of partitions wanted (at most ``n_rows``).

    Returns
    -------
    bounds : ndarray of int of shape (n_partitions + 1,)
        Strictly increasing, from 0 to ``n_rows``. With at least ``n_partitions`` chunks
        every boundary is a chunk boundary (the one nearest an even split of rows).
    """
    chunk_bounds = np.asarray(chunk_bounds, dtype=np.int64)
    n_rows = int(chunk_bounds[-1])
    even = np.linspace(0, n_rows, n_partitions + 1)
    if len(chunk_bounds) - 1 >= n_partitions:
        bounds = [0]
        for k in range(1, n_partitions):
            # nearest chunk boundary past the previous one, leaving enough chunks for the rest
            lo = np.searchsorted(chunk_bounds, bounds[-1], side="right")
            hi = len(chunk_bounds) - 1 - (n_partitions - k)
            candidates = chunk_bounds[lo : hi + 1]
            bounds.append(int(candidates[np.argmin(np.abs(candidates - even[k]))]))
        bounds.append(n_rows)
        return np.asarray(bounds, dtype=np.int64)
    return np.round(even).astype(np.int64)


# ---------------------------------------------------------------------------- open_matrix
def open_matrix(
    source: Any,
    *,
    array: str | None = None,
    labels: Any = None,
    n_partitions: int | None = None,
    chunk_rows: int | None = None,
    missing: str = "mean",
    genotype_scaling: str = "patterson",
    missing_chunks: str = "error",
    genotype_storage: str = "int8",
    storage_options: dict[str, Any] | None = None,
    genotype_dims: tuple[str, str] | None = None,
    qc: Any = None,
    client: Any = None,
    backend: str | None = None,
) -> Matrix:
    """Describe a 2-D matrix as row partitions that Dask workers can load.

    Parameters
    ----------
    source : str, path, numpy.ndarray, dask.array.Array, xarray.DataArray, xarray.Dataset or Matrix
        A path or fsspec URL (``s3://``, ``gs://``, ``https://``, ``memory://``,
        ``file://``; see ``docs/remote-stores.md``) to a Zarr v2 or v3 array, or to a
        group with ``array`` naming the member; a VCF Zarr store (a group with
        ``call_genotype``, as written by bio2zarr or sgkit); an ``xarray.Dataset`` in VCF
        Zarr layout (``call_genotype``, ``variant_*``, ``sample_id``), also a view made
        with ``ds.sel``, ``ds.isel`` or a boolean variant mask (see
        ``docs/genotype-pca.md``); a PLINK 1 ``.bed`` with its ``.bim`` and ``.fam``
        beside it (local paths; dosage = A1 count); or an in-memory array. Rows are
        samples (variants for genotypes).
    array : str or None, default=None
        Member of a Zarr group to use. None: the store itself if it is an array,
        ``call_genotype`` if it is a VCF Zarr store, ``"X"`` when the group has one, or
        the only 2-D array of the group.
    labels : str, array-like or None, default=None
        Per-row labels or targets: an array of length ``n_rows``, or the name of a 1-D
        array in the same Zarr group (e.g. ``"y"``).
    n_partitions : int or None, default=None
        Number of row partitions; None keeps one partition per storage chunk. Runtimes
        repartition to suit their workers when this is None.
    chunk_rows : int or None, default=None
        Rows per chunk for in-memory numpy input (None: about 32 MiB per chunk).
    missing : {"mean", "zero"}, default="mean"
        VCF Zarr only: how missing calls (-1) are imputed: the variant's mean dosage over
        its non-missing calls, or 0.
    genotype_scaling : {"patterson", "none"}, default="patterson"
        VCF Zarr only: centre each variant at its mean dosage and scale it by
        ``1 / sqrt(p (1 - p))`` (Patterson et al. 2006), or use raw dosages.
    missing_chunks : {"error", "fill"}, default="error"
        Zarr only: what to do with a chunk absent from the store (of the matrix, of
        ``call_genotype``, of the labels or of the sample ids). ``"error"`` refuses it:
        each worker checks the chunks of the partition it loads (the client checks the
        labels and sample ids). ``"fill"`` reads it as the array's fill value, as zarr
        does, for stores written with ``write_empty_chunks=False``.
    genotype_storage : {"int8", "packed"}, default="int8"
        Genotypes only: how workers hold the dosages. ``"packed"`` stores 2-bit codes, four
        calls per byte as in PLINK's .bed (a quarter of the memory of int8), read directly
        by the fused kernels; it needs ploidy 1 or 2 (dosages 0-2).
    storage_options : dict or None, default=None
        URLs only: options of the fsspec file system, e.g. ``{"endpoint_url":
        "http://127.0.0.1:9000"}`` or ``{"anon": True}`` for s3fs. They travel with each
        partition's load task: every worker opens the store itself from the URL and these
        options, so give credentials through the workers' environment where you can.
    genotype_dims : tuple of str or None, default=None
        A 2-D integer array (numpy, dask, xarray, a Zarr array) of alternate allele counts
        per call (0-2, negative: missing), e.g. sgkit's ``call_alternate_allele_count``:
        ``("variants", "samples")`` if rows are variants, ``("samples", "variants")`` if
        rows are samples. It then becomes a genotype matrix (rows = variants, diploid,
        Patterson-scaled as a VCF Zarr store). None: a plain matrix.
    qc : GenotypeQC, dict or None, default=None
        Genotypes only: keep the variants passing these quality-control steps
        (``min_maf``, ``max_missing``, ``pass_only``, ``region``; see
        :class:`~daskstraggle.data.genotypes.GenotypeQC`). MAF and missingness need one
        counting pass over the genotypes, run here on ``client``.
    client : distributed.Client or None, default=None
        Where the counting pass of ``qc`` runs: its workers, else the default client's,
        else this process (one partition at a time).
    backend : str or None, default=None
        The data source backend that reads ``source`` (see
        :mod:`daskstraggle.data.backends`: ``"matrix"``, ``"plink"``, ``"vcf-dataset"``,
        ``"zarr"``, ``"array"`` and those other packages register). None: the first, in
        priority order, whose ``guess_can_open`` accepts ``source``.

    Returns
    -------
    matrix : Matrix
        Metadata only; no rows are read (except by the counting pass of ``qc``).

    Raises
    ------
    DataNotFoundError
        If the path does not exist, is not a Zarr store, or ``array`` is not in it; or a
        URL's store cannot be reached or read (connection, credentials).
    InvalidDataError
        If the matrix is not 2-D (not 3-D integer genotypes for VCF Zarr), is empty, is
        sparse, is a dask array with unknown chunk sizes (after boolean indexing: the
        message says to call ``compute_chunk_sizes()``; nothing is computed here), or the
        labels have the wrong length or are not finite.
    CorruptDataError
        If the metadata of the store or of an array it needs cannot be read, or a chunk of
        the labels or sample ids cannot be decoded (:class:`MissingChunksError` if absent).
        Chunks of the matrix are checked when a worker loads its partition, which raises
        the same errors naming the partition.
    InvalidParameterError
        If ``n_partitions``, ``chunk_rows``, ``missing``, ``genotype_scaling``,
        ``missing_chunks``, ``genotype_storage``, ``genotype_dims`` or ``qc`` is invalid,
        or ``genotype_storage`` is ``"packed"`` for genotypes of ploidy above 2; or a
        URL's protocol has no fsspec implementation installed (the message names the
        package), or ``storage_options`` is given for a local path or refused by the file
        system; or a ``qc`` step needs an array the data lacks.
    InvalidDataError
        Also if no variant passes ``qc``, or an ``xarray.Dataset`` is not in VCF Zarr
        layout.

    Examples
    --------
    >>> import numpy as np
    >>> from daskstraggle import open_matrix
    >>> m = open_matrix(np.ones((100, 3)), n_partitions=4)
    >>> m.shape, m.n_partitions
    ((100, 3), 4)
    """
    from daskstraggle.data import _open_genotypes as _genotypes
    from daskstraggle.data.backends import (
        OpenRequest,
        get_source,
        guess_source,
        list_sources,
    )

    caller = "open_matrix"
    check_choice(missing, name="missing", caller=caller, choices=MISSING_POLICIES)
    check_choice(genotype_scaling, name="genotype_scaling", caller=caller,
                 choices=GENOTYPE_SCALINGS)
    check_choice(missing_chunks, name="missing_chunks", caller=caller, choices=MISSING_CHUNKS)
    check_choice(genotype_storage, name="genotype_storage", caller=caller,
                 choices=GENOTYPE_STORAGES)
    if chunk_rows is not None:
        check_int(chunk_rows, name="chunk_rows", caller=caller, low=1)
    reader = guess_source(source) if backend is None else get_source(backend)
    if backend is not None and not reader.guess_can_open(source):
        raise InvalidParameterError(
            f"The 'backend' parameter of {caller} names {reader.name!r}, which does not read a "
            f"{type(source).__name__} ({reader.description}). Drop it to let open_matrix "
            f"choose, or name one of {list_sources()}."
        )
    if storage_options is not None and "storage_options" not in reader.parameters:
        raise InvalidParameterError(
            f"The 'storage_options' parameter of {caller} applies to a store given by URL; "
            f"the source is a {type(source).__name__}. Drop it (CLI: --storage-option)."
        )
    qc = parse_qc(qc, caller=caller)
    rows_are_variants = (None if genotype_dims is None
                         else parse_genotype_dims(genotype_dims, caller=caller))
    options = _ZarrOptions(missing, genotype_scaling, missing_chunks, genotype_storage)
    matrix = reader.open(source, OpenRequest(array, labels, chunk_rows, rows_are_variants,
                                             options, storage_options))
    if genotype_storage != "int8" and not matrix.genotypes:
        raise InvalidParameterError(
            f"The 'genotype_storage' parameter of {caller} applies to genotypes (VCF Zarr, "
            "PLINK, genotype_dims=...); this matrix holds plain numbers. Drop it (CLI: drop "
            "--packed-genotypes)."
        )
    if qc is not None:
        matrix = filter_variants(matrix, qc, client=client if client is not None
                                 else _genotypes.default_client())
    if n_partitions is not None:
        check_int(n_partitions, name="n_partitions", caller=caller, low=1, high=matrix.n_rows,
                  remedy="Use at most one partition per row.")
        matrix = matrix.repartition(n_partitions)
    return matrix


def is_plink_path(source: Any) -> bool:
    """Whether ``source`` is a path or URL that a genotype file backend reads (the
    registered :class:`~daskstraggle.data.backends.PlinkBackend` kinds: ``.bed``, ``.pgen``,
    ``.bgen``), so there is no Dataset to merge results into."""
    from daskstraggle.data.backends import PlinkBackend, get_source, list_sources

    return any(issubclass(cls, PlinkBackend) and cls.guess_can_open(source)
               for cls in map(get_source, list_sources()))


def _open(source: Any, array: str | None, labels: Any, chunk_rows: int | None) -> Matrix:
    """Open an in-memory input (numpy, dask, xarray)."""
    if array is not None:
        raise InvalidDataError(
            "The 'array' parameter of open_matrix names a member of a Zarr group; "
            f"it cannot be used with an in-memory {type(source).__name__}."
        )
    _check_dense(source)
    dims = ("sample", "feature")
    columns = None
    data = source
    if _is_xarray(source):
        _check_2d(source.shape, f"xarray.DataArray {source.name!r}")
        dims = (str(source.dims[0]), str(source.dims[1]))
        if dims[1] in source.coords:
            columns = np.asarray(source.coords[dims[1]].values)
        data = source.data
        _check_dense(data)
    if _is_dask(data):
        _check_known_chunks(data)
        _check_2d(data.shape, "dask array")
        src: RowSource = DaskSource(data)
    else:
        src = _array_source(source, data, chunk_rows)
    y = _parse_labels(labels, None, src.shape[0])
    return Matrix(src, src.chunk_bounds, labels=y, columns=columns, dims=dims)


def _array_source(source: Any, data: Any, chunk_rows: int | None) -> ArraySource:
    try:
        values = np.asarray(data)
    except Exception as err:  # anything numpy cannot turn into an array
        raise _unreadable(source) from err
    if values.ndim == 0 and values.dtype == object:  # an object numpy does not see into
        raise _unreadable(source)
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


@dataclass(frozen=True, slots=True)
class _ZarrOptions:
    missing: str
    scaling: str
    missing_chunks: str
    storage: str = "int8"
    storage_options: dict[str, Any] | None = None  # a URL's fsspec options; None: a path


def _open_zarr(path: str, array: str | None, labels: Any, options: _ZarrOptions) -> Matrix:
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
    columns = groups = None
    dims = ("sample", "feature")
    if name == "call_genotype":
        assert group is not None  # call_genotype is only chosen from a group
        src: RowSource = _genotype_source(path, node, options)
        dims = ("variants", "samples")
        columns = _sample_strings(group, "sample_id", options.missing_chunks)
        groups = _sample_strings(group, "sample_population", options.missing_chunks)
    else:
        _check_2d(node.shape, f"Zarr array {path!r}" + (f"/{name}" if name else ""))
        if np.dtype(node.dtype).kind not in "fiub":
            raise InvalidDataError(
                f"The matrix must hold numbers; {path!r} has dtype {node.dtype}."
            )
        src = ZarrSource(path, name, node, missing_chunks=options.missing_chunks,
                         storage_options=options.storage_options)
    y = _parse_labels(labels, group, src.shape[0], options.missing_chunks)
    variants = None
    if isinstance(src, GenotypeSource):
        variants = VariantTable(StoreArrays(path, options.storage_options))
    return Matrix(
        src, src.chunk_bounds, labels=y, columns=columns, column_groups=groups, dims=dims,
        attrs={"path": path}, variants=variants,
    )


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


def _check_packable(options: _ZarrOptions, ploidy: int, what: str) -> None:
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


def _genotype_source(path: str, node: Any, options: _ZarrOptions) -> GenotypeSource:
    if len(node.shape) != 3 or np.dtype(node.dtype).kind not in "iu":
        raise InvalidDataError(
            f"{path!r}/call_genotype must be an integer array of shape "
            f"(variants, samples, ploidy) as written by bio2zarr; got shape {node.shape} "
            f"and dtype {node.dtype}."
        )
    _check_2d(node.shape[:2], f"{path}/call_genotype")
    _check_packable(options, node.shape[2], repr(path))
    return GenotypeSource(path, node, name="call_genotype", missing=options.missing,
                          scaling=options.scaling, missing_chunks=options.missing_chunks,
                          storage=options.storage, storage_options=options.storage_options)


def _sample_strings(group: GroupArrays, name: str, missing_chunks: str) -> np.ndarray | None:
    if name not in group:
        return None
    return _strings(_read_whole(group, name, missing_chunks))


def _read_whole(group: GroupArrays, name: str, missing_chunks: str) -> np.ndarray:
    """Read a (small) member on the client, refusing absent or undecodable chunks."""
    node = group[name]
    what = describe(group.path, name)
    if node.ndim > 0:
        check_chunks(node, 0, node.shape[0], what=what, missing_chunks=missing_chunks)
    return np.asarray(read(node, ..., what=what))


def _check_known_chunks(data: Any) -> None:
    """Refuse a dask array whose chunk sizes are unknown (NaN), e.g. after boolean indexing.

    Computing them would compute the selection, on the client, before any check of the
    other arguments: that is the caller's choice, so the error says how.
    """
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


def _parse_labels(
    labels: Any, group: GroupArrays | None, n_rows: int, missing_chunks: str = "error"
) -> np.ndarray | None:
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


def _strings(values: Any) -> np.ndarray:
    """Return fixed-width str values (numpy StringDType and object arrays included)."""
    return np.array([str(v) for v in np.asarray(values, dtype=object).ravel()])


def _is_xarray(obj: Any) -> bool:
    return type(obj).__module__.startswith("xarray") and hasattr(obj, "dims")


def _is_dataset(obj: Any) -> bool:
    return type(obj).__module__.startswith("xarray") and hasattr(obj, "data_vars")


def _is_dask(obj: Any) -> bool:
    return hasattr(obj, "__dask_graph__") and hasattr(obj, "chunks")
