"""Row sources: picklable descriptions of where a matrix's rows live.

``source.loader(start, stop)`` returns a small picklable callable that reads rows
``[start, stop)`` where it runs (on a worker) as raw values plus per-row transforms.
"""

from __future__ import annotations

import copy
import os
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Self

import numpy as np

from daskstraggle._packing import pack_dosages
from daskstraggle.data._decode import decode_calls
from daskstraggle.data._zarr import read_rows, read_selection
from daskstraggle.errors import InvalidDataError

__all__ = ["ArraySource", "DaskSource", "GenotypeArraySource", "GenotypeRowSource",
           "GenotypeSource", "RowSource", "RowValues", "StoredGenotypes", "ZarrSource"]


@dataclass(frozen=True, eq=False, slots=True)
class RowValues:
    """Rows read by a loader: stored values and the per-row transforms of
    :class:`daskstraggle.problems.Block` (``packed_columns``: ``values`` are 2-bit codes)."""

    values: np.ndarray
    fill: np.ndarray | None = None
    center: np.ndarray | None = None
    scale: np.ndarray | None = None
    packed_columns: int | None = None


class RowSource(ABC):
    """Where the rows of a 2-D matrix live.

    Attributes
    ----------
    shape : tuple of int
        ``(n_rows, n_columns)`` of the matrix the source presents.
    dtype : numpy.dtype
        dtype of the values a loader returns.
    chunk_bounds : ndarray of int
        Row boundaries of the storage chunks, from 0 to ``n_rows``; partitions are
        aligned to them where possible.
    kind : str
        ``"numpy"``, ``"dask"``, ``"zarr"``, ``"vcf-zarr"`` or ``"genotypes"`` (in
        memory).
    """

    shape: tuple[int, int]
    dtype: np.dtype
    chunk_bounds: np.ndarray
    kind: str

    @abstractmethod
    def loader(self, start: int, stop: int) -> Callable[[], RowValues]:
        """Return a picklable callable reading rows ``[start, stop)`` where it runs."""

    def describe(self) -> dict[str, Any]:
        """Return a JSON-serialisable description (for traces and reports)."""
        return {"kind": self.kind, "shape": list(self.shape), "dtype": str(self.dtype)}


def regular_bounds(n_rows: int, chunk_rows: int) -> np.ndarray:
    """Return row boundaries ``0, c, 2c, ..., n_rows`` for chunks of ``chunk_rows`` rows."""
    bounds = np.arange(0, n_rows, max(int(chunk_rows), 1), dtype=np.int64)
    return np.append(bounds, np.int64(n_rows))


def dask_bounds(array: Any) -> np.ndarray:
    """Return the row boundaries of a dask array's chunks, from 0 to ``n_rows``."""
    return np.concatenate([[0], np.cumsum(array.chunks[0])]).astype(np.int64)


# --------------------------------------------------------------------------- in memory
def _culled(rows: Any) -> Any:
    """Numpy rows as they are; dask rows as the culled graph of these rows alone."""
    if hasattr(rows, "__dask_graph__"):
        import dask

        (rows,) = dask.optimize(rows)
    return rows


def _computed(rows: Any) -> np.ndarray:
    """Rows :func:`_culled` made, computed by the synchronous scheduler where this runs."""
    if hasattr(rows, "__dask_graph__"):
        import dask

        (rows,) = dask.compute(rows, scheduler="sync")
    return np.asarray(rows)


@dataclass(frozen=True, eq=False, slots=True)
class _ValuesLoader:
    rows: Any  # numpy rows, or a culled dask array of them

    def __call__(self) -> RowValues:
        return RowValues(np.ascontiguousarray(_computed(self.rows)))


class ArraySource(RowSource):
    """Rows of an in-memory numpy array; each loader carries only its own rows."""

    kind = "numpy"

    def __init__(self, array: Any, *, chunk_rows: int) -> None:
        self.array = array
        self.shape = (int(array.shape[0]), int(array.shape[1]))
        self.dtype = np.dtype(array.dtype)
        self.chunk_bounds = regular_bounds(self.shape[0], chunk_rows)

    def loader(self, start: int, stop: int) -> Callable[[], RowValues]:
        """Return a loader carrying rows ``[start, stop)`` (a dask array's: their graph)."""
        return _ValuesLoader(_culled(self.array[start:stop]))


class DaskSource(ArraySource):
    """Rows of a dask array: each loader carries the culled graph of its rows only and
    computes it with the synchronous scheduler inside the load task, so a partition (and
    each replica) never shares keys with the user's graph."""

    kind = "dask"

    def __init__(self, array: Any) -> None:
        super().__init__(array, chunk_rows=1)
        self.chunk_bounds = dask_bounds(array)


# --------------------------------------------------------------------------- zarr
@dataclass(frozen=True, eq=False, slots=True)
class _Part:
    """The loader of a stored source: ``source._read(start, stop, rows)`` where it runs.

    ``source`` is the copy :func:`_carried` makes; ``rows`` are the store rows of
    ``[start, stop)`` (None: those rows).
    """

    source: Any
    start: int
    stop: int
    rows: np.ndarray | None = None

    def __call__(self) -> RowValues:
        return self.source._read(self.start, self.stop, self.rows)


def _carried(source: Any, **cut: Any) -> Any:
    """A copy of ``source`` for a loader to carry: ``cut`` set, its chunk bounds dropped."""
    out = copy.copy(source)
    out.chunk_bounds = out.chunk_bounds[:0]
    for name, value in cut.items():
        setattr(out, name, value)
    return out


def _zarr_values(source: ZarrSource | GenotypeSource, start: int, stop: int,
                 rows: np.ndarray | None = None, columns: np.ndarray | None = None) -> Any:
    """Rows ``[start, stop)`` (store rows ``rows`` and columns ``columns``, None: those and
    all) of the source's array, read where this runs, refusing absent or undecodable chunks."""
    where: dict[str, Any] = {"missing_chunks": source.missing_chunks,
                             "storage_options": source.storage_options}
    if rows is None and columns is None:
        return np.asarray(read_rows(source.path, source.name, start, stop, **where))
    rows = np.arange(start, stop) if rows is None else rows
    return read_selection(source.path, source.name, rows, columns, **where)


class ZarrSource(RowSource):
    """Rows of a 2-D Zarr array (v2 or v3) at a local path, or an fsspec URL opened with
    ``storage_options`` (which travel with each loader: every worker opens the store).

    Each loader checks, where it runs, that every chunk of its rows exists (unless
    ``missing_chunks="fill"``); decoding errors are one ``CorruptDataError`` line.
    """

    kind = "zarr"

    def __init__(
        self,
        path: str | os.PathLike[str],
        name: str | None,
        array: Any,
        *,
        missing_chunks: str = "error",
        storage_options: dict[str, Any] | None = None,
    ) -> None:
        self.path = os.fspath(path)
        self.name = name
        self.missing_chunks = missing_chunks
        self.storage_options = storage_options
        self.shape = (int(array.shape[0]), int(array.shape[1]))
        self.dtype = np.dtype(array.dtype)
        self.chunk_bounds = regular_bounds(self.shape[0], int(array.chunks[0]))

    def loader(self, start: int, stop: int) -> Callable[[], RowValues]:
        """Return a loader that opens the store and reads rows ``[start, stop)``."""
        return _Part(_carried(self), start, stop)

    def _read(self, start: int, stop: int, rows: None) -> RowValues:
        return RowValues(np.ascontiguousarray(_zarr_values(self, start, stop)))

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "path": self.path, "array": self.name,
                "missing_chunks": self.missing_chunks}


# --------------------------------------------------------------------------- VCF Zarr
GENOTYPE_SCALINGS = ("patterson", "none")
MISSING_POLICIES = ("mean", "zero")
#: How a worker holds genotype dosages: one int8 per call, or 2-bit codes (4 per byte).
GENOTYPE_STORAGES = ("int8", "packed")


def _stored(rows: RowValues, storage: str) -> RowValues:
    """The rows as a worker holds them: int8 dosages, or 2-bit codes (``"packed"``)."""
    if storage != "packed":
        return rows
    return replace(rows, values=pack_dosages(rows.values),
                   packed_columns=int(rows.values.shape[1]))


#: Allele index that pads a call of lower ploidy than the array (VCF Zarr, e.g. chrX in males).
PADDING = -2


def genotype_rows(calls: np.ndarray, *, missing: str, scaling: str) -> RowValues:
    """Turn genotype calls (variants, samples, ploidy) into dosage rows.

    The dosage of a call is its number of non-reference alleles (allele index > 0), scaled
    to the array's ploidy ``P`` when the call has fewer alleles: an allele index of -2
    pads a call of lower ploidy (a haploid call on chrX of a male in a diploid array), so a
    call with ``m`` real alleles has dosage ``alt * P / m`` (haploid calls in a diploid
    array count 0 or 2, as PLINK counts haploid X). A call with an allele index of -1 (or
    any negative index other than -2), or with only padding, is missing and stored as -1;
    its value comes from the row's ``fill``: the mean dosage of the variant over its
    non-missing calls (``missing="mean"``, the usual imputation) or 0
    (``missing="zero"``). With ``scaling="patterson"`` each variant is centred at its mean
    dosage and divided by ``sqrt(p (1 - p))``, ``p = mean / P`` (Patterson et al. 2006);
    monomorphic variants get scale 0 and so contribute nothing.

    Parameters
    ----------
    calls : ndarray of shape (n_variants, n_samples, ploidy)
        Integer allele indices as in VCF Zarr ``call_genotype``.
    missing : {"mean", "zero"}
        Imputation of missing calls.
    scaling : {"patterson", "none"}
        Per-variant standardisation.

    Returns
    -------
    rows : RowValues
        Dosages (-1 where missing) with per-row fill/centre/scale: int8, or float64 when a
        call of lower ploidy scales to a fraction (``P / m`` not an integer, e.g. a
        diploid call in a triploid array).
    """
    ploidy = calls.shape[2]
    decoded = decode_calls(calls)  # numba, one pass; None: numpy below
    if decoded is not None:
        dosage, counted, sums, any_missing = decoded
        return _transformed(dosage, counted, sums.astype(np.float64), any_missing,
                            ploidy=ploidy, missing=missing, scaling=scaling)
    # one allele slot at a time, in int8 (numpy reduces a short last axis slowly)
    shape = calls.shape[:2]
    alt, n_alleles = np.zeros(shape, dtype=np.int8), np.zeros(shape, dtype=np.int8)
    bad = np.zeros(shape, dtype=bool)
    for j in range(ploidy):
        slot = calls[:, :, j]
        real = slot != PADDING
        n_alleles += real
        alt += slot > 0
        bad |= (slot < 0) & real
    is_missing = bad | (n_alleles == 0)
    dosage = np.where(is_missing, -1, _dosage(alt, n_alleles, ploidy, is_missing))
    return called_rows(dosage, missing=missing, scaling=scaling, storage="int8", ploidy=ploidy)


def called_rows(values: np.ndarray, *, missing: str, scaling: str, storage: str,
                ploidy: int = 2) -> RowValues:
    """Rows of dosages (-1 missing; int8 or float; diploid unless ``ploidy``) as a worker
    holds them, with the fill, centre and scale of :func:`genotype_rows`."""
    called = values >= 0
    sums = np.where(called, values, 0).sum(axis=1, dtype=np.float64)
    rows = _transformed(values, np.count_nonzero(called, axis=1), sums, bool((~called).any()),
                        ploidy=ploidy, missing=missing, scaling=scaling)
    return _stored(rows, storage)


def _transformed(dosage: np.ndarray, counted: np.ndarray, sums: np.ndarray,
                 any_missing: bool, *, ploidy: int, missing: str, scaling: str) -> RowValues:
    """Rows of ``dosage`` (-1 missing) with fill, centre and scale from the per-variant
    counts and dosage sums."""
    mean = np.divide(sums, counted, out=np.zeros(len(sums)), where=counted > 0)
    fill = None
    if any_missing:
        fill = mean.copy() if missing == "mean" else np.zeros_like(mean)
    center = scale = None
    if scaling == "patterson":
        p = mean / ploidy
        var = p * (1.0 - p)
        center = mean
        scale = np.divide(1.0, np.sqrt(var), out=np.zeros_like(var), where=var > 1e-12)
    return RowValues(dosage, fill=fill, center=center, scale=scale)


def _dosage(alt: np.ndarray, n_alleles: np.ndarray, ploidy: int,
            is_missing: np.ndarray) -> np.ndarray:
    """Return ``alt * ploidy / n_alleles`` per call: int8 when every value is an integer."""
    partial = (n_alleles < ploidy) & ~is_missing
    if not partial.any():
        return alt.astype(np.int8)
    scaled = alt.astype(np.int32) * ploidy  # int8 would overflow above ploidy 11
    alleles = np.maximum(n_alleles, 1)
    if not (scaled[partial] % alleles[partial]).any():
        return np.where(partial, scaled // alleles, alt).astype(np.int8)
    return np.where(partial, scaled / alleles, alt).astype(np.float64)



class GenotypeRowSource(RowSource):
    """Base of the sources whose rows are variants' dosages (standardised by the loader):
    ``missing``, ``scaling`` and ``storage`` as :func:`genotype_rows` and
    :class:`GenotypeSource` say, ``ploidy`` the alleles per call (the largest dosage)."""

    missing: str
    scaling: str
    storage: str
    ploidy: int

    @abstractmethod
    def select(self, rows: np.ndarray) -> GenotypeRowSource:
        """Return the source of rows ``rows`` (indices into this source's rows)."""

    @abstractmethod
    def select_columns(self, columns: np.ndarray) -> GenotypeRowSource:
        """Return the source of samples ``columns`` (indices into this source's samples);
        each row's fill, centre and scale are then those of these samples."""

    def count_source(self) -> GenotypeRowSource:
        """Return this source with raw int8 dosages (no scaling, not packed), for counting."""
        out = copy.copy(self)
        out.scaling, out.storage = "none", "int8"
        return out

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "missing": self.missing, "scaling": self.scaling,
                "ploidy": self.ploidy, "storage": self.storage}


def selection_bounds(index: np.ndarray, chunk_rows: int) -> np.ndarray:
    """Row boundaries where the store chunk of ``index`` (store rows, in order) changes."""
    chunk = np.asarray(index, dtype=np.int64) // max(int(chunk_rows), 1)
    inner = np.flatnonzero(np.diff(chunk) != 0) + 1
    return np.concatenate([[0], inner, [len(chunk)]]).astype(np.int64)


class StoredGenotypes(GenotypeRowSource):
    """Base of the genotype sources read from a store or file of ``store_shape`` (variants,
    samples) in chunks of ``chunk_rows`` variants, viewed at ``variant_index`` and
    ``sample_index`` (store rows and columns, None: all)."""

    path: str
    storage: str
    store_shape: tuple[int, int]
    chunk_rows: int
    variant_index: np.ndarray | None
    sample_index: np.ndarray | None

    def __init__(self, path: str | os.PathLike[str], store_shape: tuple[int, int], *,
                 chunk_rows: int, ploidy: int, missing: str, scaling: str, storage: str,
                 variant_index: np.ndarray | None, sample_index: np.ndarray | None) -> None:
        self.path = os.fspath(path)
        self.store_shape = (int(store_shape[0]), int(store_shape[1]))
        self.chunk_rows, self.ploidy = int(chunk_rows), int(ploidy)
        self.missing, self.scaling, self.storage = missing, scaling, storage
        self.dtype = np.dtype(np.int8)
        self._set_selection(variant_index, sample_index)

    def _set_selection(self, variants: np.ndarray | None, samples: np.ndarray | None) -> None:
        self.variant_index = None if variants is None else np.asarray(variants, dtype=np.int64)
        self.sample_index = None if samples is None else np.asarray(samples, dtype=np.int64)
        n_rows, n_columns = self.store_shape
        if self.variant_index is None:
            self.chunk_bounds = regular_bounds(n_rows, self.chunk_rows)
        else:
            n_rows = len(self.variant_index)
            self.chunk_bounds = selection_bounds(self.variant_index, self.chunk_rows)
        if self.sample_index is not None:
            n_columns = len(self.sample_index)
        self.shape = (n_rows, n_columns)

    def store_rows(self, rows: np.ndarray | None = None) -> np.ndarray:
        """Return the store's variant indices of this source's rows (all, or ``rows``)."""
        index = (np.arange(self.store_shape[0]) if self.variant_index is None
                 else self.variant_index)
        return index if rows is None else index[np.asarray(rows, dtype=np.int64)]

    def select(self, rows: np.ndarray) -> Self:
        """Return the source of rows ``rows`` (indices into this source's rows, in the order
        wanted): the same store at those variants."""
        out = copy.copy(self)
        out._set_selection(self.store_rows(rows), self.sample_index)
        return out

    def select_columns(self, columns: np.ndarray) -> Self:
        """Return the source of samples ``columns`` (indices into this source's samples)."""
        columns = np.asarray(columns, dtype=np.int64)
        index = np.arange(self.store_shape[1]) if self.sample_index is None else self.sample_index
        out = copy.copy(self)
        out._set_selection(self.variant_index, index[columns])
        return out

    #: Per-variant arrays of the store that a loader carries for its own rows only.
    _per_variant: tuple[str, ...] = ()

    def loader(self, start: int, stop: int) -> Callable[[], RowValues]:
        """Return a picklable loader reading variants ``[start, stop)`` where it runs: it
        carries their store indices, not the whole selection."""
        rows = None if self.variant_index is None else self.variant_index[start:stop]
        at = slice(start, stop) if rows is None else rows
        cut = {name: getattr(self, name)[at] for name in self._per_variant}
        return _Part(_carried(self, variant_index=None, **cut), start, stop, rows)

    def describe(self) -> dict[str, Any]:
        out = {**super().describe(), "path": self.path}
        if self.variant_index is not None or self.sample_index is not None:
            out["store_shape"] = list(self.store_shape)  # a view: the selected shape differs
        return out


class GenotypeSource(StoredGenotypes):
    """Dosage rows (one per variant, :func:`genotype_rows`) from a VCF Zarr store's
    ``call_genotype``.

    With ``storage="packed"`` a worker holds 2-bit codes, four calls per byte (ploidy 1 or 2
    only, which the caller checks). ``variant_index`` and ``sample_index`` select a view of
    the store: each loader reads only the chunks holding its selected calls, and the
    statistics are those of the selected samples.
    """

    kind = "vcf-zarr"

    def __init__(
        self,
        path: str | os.PathLike[str],
        array: Any,
        *,
        name: str = "call_genotype",
        missing: str = "mean",
        scaling: str = "patterson",
        missing_chunks: str = "error",
        storage: str = "int8",
        storage_options: dict[str, Any] | None = None,
        variant_index: np.ndarray | None = None,
        sample_index: np.ndarray | None = None,
    ) -> None:
        self.storage_options = storage_options
        self.name = name
        self.missing_chunks = missing_chunks
        super().__init__(path, array.shape[:2], chunk_rows=array.chunks[0],
                         ploidy=array.shape[2], missing=missing, scaling=scaling,
                         storage=storage, variant_index=variant_index,
                         sample_index=sample_index)

    def _read(self, start: int, stop: int, rows: np.ndarray | None) -> RowValues:
        calls = _zarr_values(self, start, stop, rows, self.sample_index)
        return _stored(genotype_rows(calls, missing=self.missing, scaling=self.scaling),
                       self.storage)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "array": self.name, "missing_chunks": self.missing_chunks}


# --------------------------------------------------------------------------- in memory
def dosage_rows(dosages: np.ndarray, *, ploidy: int, missing: str, scaling: str) -> RowValues:
    """Turn alternate allele counts per call (variants, samples; sgkit's
    ``call_alternate_allele_count``, negative: missing) into int8 dosage rows, as
    :func:`genotype_rows`; InvalidDataError for a count above ``ploidy``."""
    counts = np.asarray(dosages)
    if counts.size and int(counts.max()) > ploidy:
        raise InvalidDataError(
            f"The allele counts go up to {int(counts.max())}; counts of ploidy {ploidy} "
            f"are 0-{ploidy} (negative: missing). Pass alternate allele counts per call."
        )
    return called_rows(np.where(counts < 0, -1, counts).astype(np.int8), missing=missing,
                       scaling=scaling, storage="int8", ploidy=ploidy)


@dataclass(frozen=True, eq=False, slots=True)
class _ArrayGenotypeLoader:
    rows: Any  # numpy rows, or a culled dask array of them
    source: GenotypeArraySource  # the decoding, with no array

    def __call__(self) -> RowValues:
        values, src = _computed(self.rows), self.source
        if src.calls:
            rows = genotype_rows(values, missing=src.missing, scaling=src.scaling)
        else:
            rows = dosage_rows(values, ploidy=src.ploidy, missing=src.missing,
                               scaling=src.scaling)
        return _stored(rows, src.storage)


class GenotypeArraySource(GenotypeRowSource):
    """Dosage rows from in-memory genotypes, calls (variants, samples, ploidy) or counts,
    decoded as :class:`GenotypeSource` does; a loader carries its rows (or their graph)."""

    kind = "genotypes"

    def __init__(self, array: Any, *, ploidy: int | None = None, missing: str = "mean",
                 scaling: str = "patterson", storage: str = "int8") -> None:
        self.array = array
        self.calls = len(array.shape) == 3
        self.ploidy = int(array.shape[2]) if self.calls else int(ploidy or 2)
        self.missing = missing
        self.scaling = scaling
        self.storage = storage
        self.shape = (int(array.shape[0]), int(array.shape[1]))
        self.dtype = np.dtype(np.int8)
        if hasattr(array, "chunks") and hasattr(array, "__dask_graph__"):
            self.chunk_bounds = dask_bounds(array)
        else:
            rows = max(1, (32 * 2**20) // max(1, int(np.prod(array.shape[1:]))))
            self.chunk_bounds = regular_bounds(self.shape[0], rows)

    def select(self, rows: np.ndarray) -> GenotypeArraySource:
        """Return the source of rows ``rows`` (a lazy selection of a dask array)."""
        return self._of(self.array[np.asarray(rows, dtype=np.int64)])

    def select_columns(self, columns: np.ndarray) -> GenotypeArraySource:
        """Return the source of samples ``columns`` (a lazy selection of a dask array)."""
        return self._of(self.array[:, np.asarray(columns, dtype=np.int64)])

    def _of(self, array: Any) -> GenotypeArraySource:
        return GenotypeArraySource(array, ploidy=self.ploidy, missing=self.missing,
                                   scaling=self.scaling, storage=self.storage)

    def loader(self, start: int, stop: int) -> Callable[[], RowValues]:
        """Return a loader carrying rows ``[start, stop)`` (or their culled graph)."""
        return _ArrayGenotypeLoader(_culled(self.array[start:stop]), _carried(self, array=None))

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "calls": "calls" if self.calls else "allele counts"}
