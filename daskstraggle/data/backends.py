"""The data source backends :func:`~daskstraggle.open_matrix` reads its inputs with.

``open_matrix`` opens ``source`` with the backend named, else the first in ``priority`` order
(ties by name) whose ``guess_can_open`` takes it. The built-in ones, and how another package
adds one: docs/architecture.md, "Adding a data source".
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from daskstraggle._registry import Registry
from daskstraggle.errors import InvalidParameterError

if TYPE_CHECKING:
    from daskstraggle.data._matrix import Matrix
    from daskstraggle.data._opening import OpenOptions

__all__ = ["OpenRequest", "SourceBackend", "get_source", "guess_source", "list_sources",
           "register_source"]


@dataclass(frozen=True, slots=True)
class OpenRequest:
    """What :func:`~daskstraggle.open_matrix` hands a backend, checked already.

    Attributes
    ----------
    array : str or None
        The member of a Zarr group to read (``open_matrix``'s ``array``).
    labels : object
        Per-row labels: an array, the name of a 1-D member of the group, or None.
    chunk_rows : int or None
        Rows per chunk for in-memory input (None: about 32 MiB per chunk).
    rows_are_variants : bool or None
        ``genotype_dims`` parsed: the input is a 2-D array of allele counts whose rows are
        variants (True) or samples (False); None: not allele counts.
    options : OpenOptions
        Genotype decoding (``missing``, ``scaling``, ``storage``) and ``missing_chunks``.
    storage_options : dict or None
        A URL's fsspec options as the user gave them (None: none given).
    """

    array: str | None
    labels: Any
    chunk_rows: int | None
    rows_are_variants: bool | None
    options: OpenOptions
    storage_options: dict[str, Any] | None


class SourceBackend(ABC):
    """A kind of input ``open_matrix`` can read.

    Attributes
    ----------
    name : str
        Registry name (hyphenated), e.g. ``"zarr"``; ``open_matrix(backend=name)``.
    description : str
        One line for listings.
    priority : int
        Order in which ``open_matrix`` asks the backends (lowest first).
    parameters : tuple of str
        The ``open_matrix`` options the backend reads besides ``source``, ``labels`` and
        ``n_partitions`` (which apply to every input), e.g. ``("array",
        "storage_options")``. ``array`` or ``storage_options`` given for a backend that
        does not read it is refused in one line.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    priority: ClassVar[int] = 50
    parameters: ClassVar[tuple[str, ...]] = ()

    @classmethod
    @abstractmethod
    def guess_can_open(cls, source: Any) -> bool:
        """Return whether this backend reads ``source``; cheap (no I/O but a suffix)."""

    @classmethod
    @abstractmethod
    def open(cls, source: Any, request: OpenRequest) -> Matrix:
        """Return the Matrix of ``source`` (metadata only), or raise one clear error."""


def _unknown_source(name: Any, names: list[str]) -> str:
    listed = ", ".join(repr(n) for n in names)
    return (f"The 'backend' parameter of open_matrix must be one of {listed} or None "
            f"(guess from the source). Got {name!r} instead.")


B = TypeVar("B", bound="type[SourceBackend]")

_REGISTRY: Registry[SourceBackend] = Registry("data source", group="daskstraggle.sources",
                                              unknown=_unknown_source)


def register_source(cls: B) -> B:
    """Register a :class:`SourceBackend` subclass under ``cls.name`` (class decorator)."""
    _REGISTRY.register(cls)
    return cls


def get_source(name: str) -> type[SourceBackend]:
    """Return the backend registered as ``name``.

    Raises
    ------
    InvalidParameterError
        For a name no backend is registered under (the message lists them).
    """
    return _REGISTRY.get(name)


def list_sources() -> list[str]:
    """Return the registered backends' names, in the order ``open_matrix`` asks them."""
    return [cls.name for cls in _ordered()]


def _ordered() -> list[type[SourceBackend]]:
    return sorted(_REGISTRY.classes(), key=lambda cls: (cls.priority, cls.name))


def guess_source(source: Any) -> type[SourceBackend]:
    """Return the first backend, in priority order, whose ``guess_can_open`` takes ``source``.

    The built-in ``array`` backend takes anything, so there is always one; it refuses what
    numpy cannot read when it opens it.
    """
    for cls in _ordered():
        if cls.guess_can_open(source):
            return cls
    raise InvalidParameterError(  # only if the array backend was unregistered
        f"No data source backend reads a {type(source).__name__}; the registered ones are "
        f"{list_sources()}."
    )


def _is_path(source: Any) -> bool:
    return isinstance(source, str | os.PathLike)


#: The ``open_matrix`` options of genotype decoding, read by every backend of genotypes.
_GENOTYPE_OPTIONS = ("genotype_dims", "missing", "genotype_scaling", "genotype_storage")


# --------------------------------------------------------------------------- built-in
@register_source
class MatrixBackend(SourceBackend):
    """A :class:`~daskstraggle.Matrix` already opened: kept, with ``labels`` added."""

    name = "matrix"
    description = "a daskstraggle Matrix (labels added if given)"
    priority = 0

    @classmethod
    def guess_can_open(cls, source: Any) -> bool:
        """Whether ``source`` is a Matrix."""
        from daskstraggle.data._matrix import Matrix

        return isinstance(source, Matrix)

    @classmethod
    def open(cls, source: Any, request: OpenRequest) -> Matrix:
        """Return ``source``, with ``request.labels`` when given."""
        from daskstraggle.data._opening import parse_labels

        if request.labels is None:
            return source
        return source.with_labels(parse_labels(request.labels, None, source.n_rows))


@register_source
class PlinkBackend(SourceBackend):
    """A PLINK 1 binary fileset (``.bed``, with ``.bim`` and ``.fam`` beside it)."""

    name = "plink"
    description = "a PLINK 1 .bed path (.bim and .fam beside it); rows = variants"
    priority = 10
    parameters = ("array", "storage_options", *_GENOTYPE_OPTIONS)
    #: The suffix of the paths it reads (any case), and the files read beside them.
    suffix = ".bed"
    companions: ClassVar[tuple[str, ...]] = (".bim", ".fam")

    @classmethod
    def guess_can_open(cls, source: Any) -> bool:
        """Whether ``source`` is a path or URL ending in :attr:`suffix`."""
        return _is_path(source) and os.fspath(source).lower().endswith(cls.suffix)

    @classmethod
    def open(cls, source: Any, request: OpenRequest) -> Matrix:
        """Open the fileset (local paths only; a URL is refused in one line)."""
        from daskstraggle.data._remote import parse_location

        location, remote = parse_location(os.fspath(source), request.storage_options)
        return cls._opener()(location, remote=remote, array=request.array,
                             labels=request.labels, genotype_dims=request.rows_are_variants,
                             options=request.options)

    @classmethod
    def _opener(cls) -> Callable[..., Matrix]:
        """The function that opens a fileset of this kind (its module loads when used)."""
        from daskstraggle.data import bgen, pgen, plink

        return {".bed": plink.open_bed, ".pgen": pgen.open_pgen,
                ".bgen": bgen.open_bgen}[cls.suffix]


@register_source
class PgenBackend(PlinkBackend):
    """A PLINK 2 fileset (``.pgen``, with ``.pvar`` and ``.psam`` beside it), read by pgenlib."""

    name = "pgen"
    description = "a PLINK 2 .pgen path (.pvar and .psam beside it; needs pgenlib); rows = variants"
    priority = 11
    suffix = ".pgen"
    companions = (".pvar", ".psam")


@register_source
class BgenBackend(PlinkBackend):
    """A BGEN file (``.bgen``; its ``.sample`` beside it when it stores no sample ids), read
    by cbgen: expected ALT counts for PCA, plink2's hard calls for quality control."""

    name = "bgen"
    description = ("a .bgen path (.sample beside it if the file has no sample ids; needs "
                   "cbgen); rows = variants, values = expected ALT counts")
    priority = 12
    suffix = ".bgen"
    companions = (".sample",)


@register_source
class DatasetBackend(SourceBackend):
    """An ``xarray.Dataset`` in VCF Zarr layout, read from its store when it is a view of one."""

    name = "vcf-dataset"
    description = "an xarray.Dataset in VCF Zarr layout (call_genotype, variant_*, sample_id)"
    priority = 20
    parameters = ("missing", "genotype_scaling", "missing_chunks", "genotype_storage")

    @classmethod
    def guess_can_open(cls, source: Any) -> bool:
        """Whether ``source`` is an ``xarray.Dataset``."""
        from daskstraggle.data._opening import is_dataset

        return is_dataset(source)

    @classmethod
    def open(cls, source: Any, request: OpenRequest) -> Matrix:
        """Open the Dataset's genotypes (see ``docs/genotype-pca.md``)."""
        from daskstraggle.data._opening import open_dataset

        return open_dataset(source, request.labels, request.options)


@register_source
class ZarrBackend(SourceBackend):
    """A Zarr v2 or v3 array or group, or a VCF Zarr store, at a local path or an fsspec URL."""

    name = "zarr"
    description = "a path or URL to a Zarr array or group, or a VCF Zarr store"
    priority = 90
    parameters = ("array", "storage_options", "missing_chunks", *_GENOTYPE_OPTIONS)

    @classmethod
    def guess_can_open(cls, source: Any) -> bool:
        """Whether ``source`` is a path or URL (any: the store is checked when opened)."""
        return _is_path(source)

    @classmethod
    def open(cls, source: Any, request: OpenRequest) -> Matrix:
        """Open the store; a URL's store is checked reachable first."""
        from dataclasses import replace

        from daskstraggle.data import _opening
        from daskstraggle.data._remote import check_remote_store, parse_location

        # a path is made absolute: workers may run in another working directory
        location, remote = parse_location(os.fspath(source), request.storage_options)
        if remote is not None:
            check_remote_store(location, remote, caller="open_matrix")
        options = replace(request.options, storage_options=remote)
        matrix = _opening.open_zarr(location, request.array, request.labels, options)
        if request.rows_are_variants is not None:
            matrix = _opening.zarr_counts(matrix, request.rows_are_variants, options)
        return matrix


@register_source
class ArrayBackend(SourceBackend):
    """An in-memory array: numpy, dask, an ``xarray.DataArray`` or anything numpy reads.

    With ``genotype_dims`` it is a 2-D array of allele counts (a genotype matrix).
    """

    name = "array"
    description = "numpy, dask, xarray.DataArray or any array-like (allele counts with " \
                  "genotype_dims)"
    priority = 100
    parameters = ("chunk_rows", *_GENOTYPE_OPTIONS)

    @classmethod
    def guess_can_open(cls, source: Any) -> bool:
        """Always: the last resort, which refuses what numpy cannot read when opening."""
        return True

    @classmethod
    def open(cls, source: Any, request: OpenRequest) -> Matrix:
        """Describe the array's rows (each partition's loader carries only its rows)."""
        from daskstraggle.data import _opening

        if request.rows_are_variants is not None:
            return _opening.open_counts(source, request.labels, request.rows_are_variants,
                                        request.options)
        return _opening.open_array(source, request.labels, request.chunk_rows)
