"""The :class:`Matrix`: a 2-D matrix described as row partitions that workers load
(metadata only; re-exported by :mod:`daskstraggle.data.matrix`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from daskstraggle._block import Block
from daskstraggle._validation import check_int
from daskstraggle.data.sources import GenotypeRowSource, RowSource, RowValues
from daskstraggle.errors import CorruptDataError, InvalidDataError, NonFiniteDataError

if TYPE_CHECKING:
    from daskstraggle.data.genotypes import VariantTable

__all__ = ["Matrix", "PartitionLoader", "partition_bounds"]


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
            raise InvalidDataError(f"Only genotype matrices select columns; this is {self.kind}.")
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
