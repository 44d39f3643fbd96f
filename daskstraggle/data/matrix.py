"""``open_matrix``: any supported input -> a row-partitioned :class:`Matrix`, read by the
backends of :mod:`daskstraggle.data.backends`."""

from __future__ import annotations

from typing import Any

from daskstraggle._validation import check_choice, check_int
from daskstraggle.data._matrix import Matrix, PartitionLoader, partition_bounds
from daskstraggle.data._opening import OpenOptions, default_client
from daskstraggle.data._zarr import MISSING_CHUNKS
from daskstraggle.data.backends import (
    OpenRequest,
    PlinkBackend,
    get_source,
    guess_source,
    list_sources,
)
from daskstraggle.data.genotypes import filter_variants, parse_genotype_dims, parse_qc
from daskstraggle.data.sources import GENOTYPE_SCALINGS, GENOTYPE_STORAGES, MISSING_POLICIES
from daskstraggle.errors import InvalidParameterError

__all__ = ["Matrix", "PartitionLoader", "open_matrix", "partition_bounds"]


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
        message says to call ``compute_chunk_sizes()``; nothing is computed here), the
        labels have the wrong length or are not finite, an ``xarray.Dataset`` is not in
        VCF Zarr layout, or no variant passes ``qc``.
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

    Examples
    --------
    >>> import numpy as np
    >>> from daskstraggle import open_matrix
    >>> m = open_matrix(np.ones((100, 3)), n_partitions=4)
    >>> m.shape, m.n_partitions
    ((100, 3), 4)
    """
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
    for name, value, what, flag in (
            ("array", array, "names a member of a Zarr group", "--array"),
            ("storage_options", storage_options, "applies to a store given by URL",
             "--storage-option")):
        if value is not None and name not in reader.parameters:
            raise InvalidParameterError(
                f"The {name!r} parameter of {caller} {what}; the source is a "
                f"{type(source).__name__}. Drop it (CLI: {flag})."
            )
    qc = parse_qc(qc, caller=caller)
    rows_are_variants = (None if genotype_dims is None
                         else parse_genotype_dims(genotype_dims, caller=caller))
    options = OpenOptions(missing, genotype_scaling, missing_chunks, genotype_storage)
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
                                 else default_client())
    if n_partitions is not None:
        check_int(n_partitions, name="n_partitions", caller=caller, low=1, high=matrix.n_rows,
                  remedy="Use at most one partition per row.")
        matrix = matrix.repartition(n_partitions)
    return matrix


def is_plink_path(source: Any) -> bool:
    """Whether ``source`` is a path or URL that a genotype file backend reads (the
    registered :class:`~daskstraggle.data.backends.PlinkBackend` kinds: ``.bed``, ``.pgen``,
    ``.bgen``), so there is no Dataset to merge results into."""
    return any(issubclass(cls, PlinkBackend) and cls.guess_can_open(source)
               for cls in map(get_source, list_sources()))
