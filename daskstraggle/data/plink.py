"""PLINK 1 binary filesets (``.bed`` + ``.bim`` + ``.fam``) as genotype matrices.

A ``.bed`` (https://www.cog-genomics.org/plink/1.9/formats#bed) is ``6c 1b 01`` (variant-major),
then per variant ``ceil(n_samples / 4)`` bytes of 2-bit codes, the first sample in the lowest
bits: ``00`` hom A1, ``01`` missing, ``10`` het, ``11`` hom A2. A dosage counts **A1** alleles
(plink2 writes ALT as A1).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from daskstraggle._packing import pack_dosages
from daskstraggle.data._matrix import Matrix
from daskstraggle.data._opening import file_matrix
from daskstraggle.data.sources import RowValues, StoredGenotypes, _transformed
from daskstraggle.errors import (
    CorruptDataError,
    DataNotFoundError,
    InvalidDataError,
    InvalidParameterError,
)

__all__ = ["BedSource", "BimArrays", "bed_rows", "check_unique_samples", "open_bed",
           "read_columns"]

#: The first two bytes of every .bed file, then the mode byte of a variant-major file.
MAGIC = b"\x6c\x1b"
VARIANT_MAJOR = 1
#: Variants per storage chunk at most; fewer when samples are many (about 16 M calls).
CHUNK_ROWS = 10_000
_CHUNK_CALLS = 2**24
#: .bed 2-bit code -> dosage (A1 count; -1 missing).
_BED_DOSAGE = np.array([2, -1, 1, 0], dtype=np.int8)
#: A .bed byte -> its four calls' dosages as one uint32 (four int8 in memory order, so a
#: gather writes four dosages at once).
_QUADS = np.ascontiguousarray(
    _BED_DOSAGE[(np.arange(256, dtype=np.uint8)[:, None] >> np.arange(0, 8, 2)) & 3]
).view(np.uint32).reshape(256)


def bed_rows(raw: np.ndarray, n_samples: int, *, missing: str, scaling: str,
             storage: str = "int8", columns: np.ndarray | None = None) -> RowValues:
    """Turn ``raw``, variant-major ``.bed`` rows (no header) of ``n_samples`` calls, into
    dosage rows at the samples ``columns`` (None: all), as ``genotype_rows`` does for VCF Zarr.

    A call's dosage is its number of A1 alleles; ``01`` is missing, stored as -1 (int8) or
    code 3 (``storage="packed"``, :mod:`daskstraggle._packing`). Fill, centre and scale are
    those of :func:`~daskstraggle.data.sources.genotype_rows` (ploidy 2) over the samples kept.
    One compiled pass (:func:`daskstraggle.data._decode.decode_bed`), else a byte table.
    """
    from daskstraggle.data._decode import decode_bed

    raw = np.asarray(raw, dtype=np.uint8)
    decoded = decode_bed(raw, n_samples, columns, storage=storage)
    if decoded is None:
        values, counted, sums = _numpy_rows(raw, n_samples, columns, storage)
        any_missing = bool((counted < (n_samples if columns is None else len(columns))).any())
    else:
        stored, counted, sums, any_missing = decoded
        values = np.asarray(stored)  # written: a storage was asked for
    rows = _transformed(values, counted, sums.astype(np.float64), any_missing,
                        ploidy=2, missing=missing, scaling=scaling)
    if storage == "packed":
        rows = replace(rows, packed_columns=n_samples if columns is None else len(columns))
    return rows


def _numpy_rows(raw: np.ndarray, n_samples: int, columns: np.ndarray | None,
                storage: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`bed_rows`' values and per-row counts without numba (a byte table)."""
    dosage = np.take(_QUADS, raw).view(np.int8)
    dosage = np.ascontiguousarray(dosage[:, :n_samples] if columns is None else dosage[:, columns])
    called = dosage >= 0
    values = pack_dosages(dosage) if storage == "packed" else dosage
    return (values, np.count_nonzero(called, axis=1),
            np.where(called, dosage, 0).sum(axis=1, dtype=np.int64))


# ---------------------------------------------------------------------------- the source
class BedSource(StoredGenotypes):
    """Dosage rows (one per variant) from a PLINK 1 ``.bed`` file (:func:`bed_rows`) of
    ``n_variants`` x ``n_samples``; each loader reads its rows' bytes where it runs (the
    workers must see the client's files). The other parameters: as
    :class:`~daskstraggle.data.sources.GenotypeSource`.
    """

    kind = "plink-bed"

    def __init__(self, path: str | os.PathLike[str], n_variants: int, n_samples: int, *,
                 missing: str = "mean", scaling: str = "patterson", storage: str = "int8",
                 variant_index: np.ndarray | None = None,
                 sample_index: np.ndarray | None = None) -> None:
        self.n_variants, self.n_samples = int(n_variants), int(n_samples)
        super().__init__(path, (self.n_variants, self.n_samples), ploidy=2,
                         chunk_rows=max(1, min(CHUNK_ROWS, _CHUNK_CALLS // self.n_samples)),
                         missing=missing, scaling=scaling, storage=storage,
                         variant_index=variant_index, sample_index=sample_index)

    def _read(self, start: int, stop: int, rows: np.ndarray | None) -> RowValues:
        n_variants, n_samples = self.n_variants, self.n_samples
        width = -(-n_samples // 4)
        check_unchanged(self.path, 3 + n_variants * width)
        if rows is None:
            raw = np.empty((stop - start, width), dtype=np.uint8)
            with open(self.path, "rb") as f:
                f.seek(3 + start * width)
                f.readinto(raw.data.cast("B"))
        else:
            mapped = np.memmap(self.path, dtype=np.uint8, mode="r", offset=3,
                               shape=(n_variants, width))
            raw = np.array(mapped[rows])
            del mapped
        return bed_rows(raw, n_samples, missing=self.missing, scaling=self.scaling,
                        storage=self.storage, columns=self.sample_index)


# ---------------------------------------------------------------------------- .bim and .fam
def count_lines(path: str, skip: bytes = b"") -> int:
    """The lines of a text file (a last one without newline counts) whose first byte is not
    one of ``skip`` (``b"#\\n\\r"``: the records, neither blank nor a ``#`` header)."""
    count, previous = 0, b"\n"
    with open(path, "rb") as f:
        while block := f.read(2**24):
            data = np.frombuffer(previous + block, dtype=np.uint8)
            first = data[np.flatnonzero(data[:-1] == ord("\n")) + 1]  # each line's first byte
            count += int(np.count_nonzero(~np.isin(first, list(skip))))
            previous = block[-1:]
    return count


def read_columns(path: str, count: int) -> np.ndarray:
    """Return the first ``count`` columns of a whitespace-separated text file (a ``.fam``,
    a ``.bim``) as str, shape (n_lines, count); InvalidDataError if a line has fewer."""
    values = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, start=1):
            fields = line.split()
            if len(fields) < count:
                raise InvalidDataError(
                    f"Line {number} of {path!r} has {len(fields)} columns; a PLINK "
                    f"{os.path.splitext(path)[1]} file has at least {count}. Fix or "
                    "rewrite the fileset (plink --make-bed)."
                )
            values.append(fields[:count])
    return np.array(values, dtype=str).reshape(len(values), count)


def check_unique_samples(ids: list[str], path: str, fileset: str | None = None) -> None:
    """Refuse (InvalidDataError) a sample id listed twice in ``ids`` (one per sample of
    ``path``, ``FID IID`` where the file has family ids), as plink2 does, naming the first
    one repeated, ``path`` and the ``fileset`` (``.bed``, ``.pgen``) it belongs to."""
    seen: dict[str, int] = {}
    for line, sample in enumerate(ids, start=1):
        first = seen.setdefault(sample, line)
        if first != line:
            where = f"{path!r}" if fileset is None else f"{path!r}, of {fileset!r},"
            raise InvalidDataError(
                f"{where} lists the sample {sample!r} twice (samples {first} and {line}); "
                "plink2 refuses duplicate sample ids, and the results could not tell them "
                "apart. Give each sample its own id (plink2 --update-ids, or edit the file)."
            )


def check_unchanged(path: str, size: int) -> None:
    """Refuse, where a loader runs, a file whose size is not ``size``, the one it had when
    opened (:class:`~daskstraggle.errors.CorruptDataError`)."""
    now = os.path.getsize(path)
    if now != size:
        raise CorruptDataError(
            f"{path!r} has {now} bytes, not the {size} it had when opened; the file "
            "changed. Open it again."
        )


def why_not_a_file(path: str) -> str | None:
    """Why ``path`` is not a file (it is a folder, or does not exist), None if it is."""
    if os.path.isfile(path):
        return None
    return "is a folder, not a file" if os.path.isdir(path) else "does not exist"


def fileset_files(path: str, remote: dict[str, Any] | None, array: str | None,
                  genotype_dims: bool | None, *, kind: str,
                  companions: tuple[str, ...] = ()) -> list[str]:
    """Check a genotype file's opening and return its companions' paths.

    Refuses (InvalidParameterError) a URL (``remote`` not None), ``array`` and
    ``genotype_dims`` (a genotype file has no members and its orientation is known); refuses
    (DataNotFoundError) a ``path`` that is not a file and a missing companion: the file of
    each suffix of ``companions`` beside it, with the same prefix (and the suffix in the case
    of ``path``'s, else lower case). ``kind`` names the format, e.g. ``"PLINK .bed"``.
    """
    stem, suffix = os.path.splitext(path)
    problem = (
        f"'source' parameter of open_matrix is a URL; {suffix} files are read from local "
        "(or shared) paths only. Copy the fileset there first" if remote is not None else
        f"'array' parameter of open_matrix names a member of a Zarr group; a {suffix} has "
        "none. Drop it (CLI: --array)" if array is not None else
        f"'genotype_dims' parameter of open_matrix applies to arrays of allele counts; a "
        f"{suffix} is variants x samples already. Drop it" if genotype_dims is not None
        else None
    )
    if problem is not None:
        raise InvalidParameterError(f"The {problem} ({path!r}).")
    state = why_not_a_file(path)
    if state is not None:
        raise DataNotFoundError(
            f"No {kind} file at {path!r}: the path {state}. Check the data path (the "
            "'source' parameter; CLI: the SOURCE argument)."
        )
    found = []
    for companion in companions:
        names = [stem + companion.upper()] * suffix.isupper() + [stem + companion]
        name = next((n for n in names if why_not_a_file(n) is None), names[0])
        state = why_not_a_file(name)
        if state is not None:
            zst = "; a .zst is not read: decompress it" if os.path.isfile(name + ".zst") else ""
            raise DataNotFoundError(
                f"The {kind} fileset {path!r} has no {companion} file ({name!r} {state}{zst});"
                f" a {suffix} needs its {' and '.join(companions)} beside it with the same "
                "prefix."
            )
        found.append(name)
    return found


class BimArrays:
    """``reader`` of a :class:`~daskstraggle.data.genotypes.VariantTable` over a ``.bim``
    (or, with ``read(path)`` returning the arrays by name, another format's file).

    Read on the client when first asked, in the layout of VCF Zarr: ``contig_id`` and
    ``variant_contig`` (column 1), ``variant_id`` (column 2), ``variant_position``
    (column 4), ``variant_allele`` (columns 6 then 5: A2 then the counted A1, as REF then
    ALT). A ``.bim`` has no FILTER (``variant_filter`` is absent).
    """

    def __init__(self, path: str,
                 read: Callable[[str], dict[str, np.ndarray]] | None = None) -> None:
        self.path = path
        self._read = _read_bim if read is None else read
        self._arrays: dict[str, np.ndarray] | None = None

    def __call__(self, name: str, index: np.ndarray | None) -> np.ndarray | None:
        """Return array ``name`` (rows ``index``, or all when None), or None if absent."""
        if self._arrays is None:
            self._arrays = self._read(self.path)
        values = self._arrays.get(name)
        if values is None or index is None or name == "contig_id":
            return values
        return values[np.asarray(index, dtype=np.int64)]


def _read_bim(path: str) -> dict[str, np.ndarray]:
    import pandas as pd

    try:
        table = pd.read_csv(path, sep=r"\s+", header=None, dtype=str, keep_default_na=False,
                            engine="c")
    except (ValueError, pd.errors.ParserError) as err:
        raise InvalidDataError(
            f"{path!r} is not a PLINK .bim file (6 whitespace-separated columns: "
            f"chromosome, id, cM, position, A1, A2): {err}"
        ) from err
    if table.shape[1] != 6:
        raise InvalidDataError(
            f"{path!r} has {table.shape[1]} columns; a PLINK .bim has 6 (chromosome, id, "
            "cM, position, A1, A2). Rewrite the fileset with plink --make-bed."
        )
    try:
        position = table[3].to_numpy().astype(np.int64)
    except ValueError as err:
        raise InvalidDataError(
            f"Column 4 (position) of {path!r} must hold integers: {err}."
        ) from err
    contig_id, variant_contig = contig_codes(table[0].to_numpy().astype(str))
    return {"contig_id": contig_id, "variant_contig": variant_contig,
            "variant_id": table[1].to_numpy().astype(str), "variant_position": position,
            "variant_allele": table[[5, 4]].to_numpy().astype(str)}


def contig_codes(names: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return ``contig_id`` (each contig once, in the order of the file, as bio2zarr lists
    them) and ``variant_contig`` (each variant's index into it) from per-variant names."""
    contigs, first, codes = np.unique(names, return_index=True, return_inverse=True)
    order = np.argsort(first)
    rank = np.empty(len(contigs), dtype=np.int64)
    rank[order] = np.arange(len(contigs))
    return contigs[order], rank[codes].astype(np.int64)


# ---------------------------------------------------------------------------- open_bed
def open_bed(path: str, *, remote: dict[str, Any] | None, array: str | None, labels: Any,
             genotype_dims: bool | None, options: Any) -> Matrix:
    """Open a PLINK 1 binary fileset as a genotype matrix (rows = variants).

    Only metadata is read here (the ``.bed`` header and size, the ``.bim``'s lines counted,
    the ``.fam``'s sample ids); every check runs before any cluster work.

    Parameters
    ----------
    path : str
        The absolute path of the ``.bed`` file; the ``.bim`` and ``.fam`` share its prefix.
    remote, array, genotype_dims
        ``open_matrix``'s (refused, :func:`fileset_files`): a URL's fsspec options (None
        for a path), a group member, the parsed ``genotype_dims``.
    labels : array-like or None
        Per-variant labels (rarely useful), as for ``open_matrix``.
    options : daskstraggle.data._opening.OpenOptions
        ``missing``, ``scaling`` and ``storage`` of ``open_matrix``.

    Returns
    -------
    matrix : Matrix
        Rows = variants, columns = samples (``columns`` the ``.fam`` sample ids),
        ``variants`` the ``.bim``'s ids, contigs, positions and alleles.

    Raises
    ------
    InvalidParameterError, DataNotFoundError
        As :func:`fileset_files`.
    InvalidDataError
        If the ``.bed`` is empty, has no PLINK 1 magic, is sample-major, or its size is not
        ``3 + n_variants * ceil(n_samples / 4)``; or the ``.bim`` or ``.fam`` is empty, or
        the ``.fam`` lists a sample (FID and IID) twice.
    """
    bim, fam = fileset_files(path, remote, array, genotype_dims, kind="PLINK .bed",
                             companions=(".bim", ".fam"))
    _check_header(path)
    n_variants = count_lines(bim)
    ids = read_columns(fam, 2)
    samples = ids[:, 1]
    check_unique_samples([f"{f} {i}" for f, i in ids], fam, path)
    for what, file, n in (("variants", bim, n_variants), ("samples", fam, len(samples))):
        if n == 0:
            raise InvalidDataError(
                f"{file!r} is empty: the fileset {path!r} has no {what}. Write it again "
                "(plink --make-bed) from data with at least one variant and one sample."
            )
    _check_size(path, n_variants, len(samples))
    source = BedSource(path, n_variants, len(samples), missing=options.missing,
                       scaling=options.scaling, storage=options.storage)
    return file_matrix(source, path, samples, labels, BimArrays(bim))


def _check_header(path: str) -> None:
    with open(path, "rb") as f:
        head = f.read(3)
    if not head:
        raise InvalidDataError(
            f"{path!r} is empty (0 bytes), not a PLINK 1 .bed file; it was not written to "
            "the end. Write the fileset again (plink --make-bed)."
        )
    if head[:2] != MAGIC:
        raise InvalidDataError(
            f"{path!r} is not a PLINK 1 .bed file: it starts with bytes "
            f"{head[:2].hex(' ')} instead of 6c 1b. Write it with plink "
            "--make-bed (a PLINK 2 .pgen converts with plink2 --pfile P --make-bed --out P)."
        )
    if head[2:3] != bytes([VARIANT_MAJOR]):
        mode = head[2:3].hex() or "missing"
        what = ("sample-major (mode byte 00, written by PLINK before 1.0)" if mode == "00"
                else f"of unknown mode (byte {mode}; 01 is variant-major)")
        raise InvalidDataError(
            f"{path!r} is {what}; only variant-major .bed files are read. Rewrite it with "
            "plink --bfile PREFIX --make-bed --out NEWPREFIX."
        )


def _check_size(path: str, n_variants: int, n_samples: int) -> None:
    expected = 3 + n_variants * (-(-n_samples // 4))
    size = os.path.getsize(path)
    if size != expected:
        raise InvalidDataError(
            f"{path!r} has {size} bytes, but {n_variants} variants (lines of the .bim) x "
            f"{n_samples} samples (lines of the .fam) need 3 + {n_variants} x "
            f"ceil({n_samples} / 4) = {expected}; the .bim or .fam is not this .bed's, or "
            "the .bed is truncated. Write the fileset again (plink --make-bed)."
        )
