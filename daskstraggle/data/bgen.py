"""BGEN files (``.bgen``, v1.1-v1.3) as genotype matrices, read by cbgen (the ``bgen`` extra).

Layout 1, or layout 2 compressed with zlib or zstd; biallelic variants, ploidy 1 or 2. The
first allele is REF (plink2's ``--bgen FILE ref-first``). ``calls="dosage"`` (PCA) gives the
expected ALT count ``P(het) + 2 P(hom alt)`` (a haploid call counts double; float64, or int8
where a partition's are all whole); ``"hard"`` plink2's hard calls (the nearest whole count
within :data:`HARD_CALL_THRESHOLD`, else missing), which quality control and
``storage="packed"`` use. Sample ids come from the file, else from the Oxford ``.sample``
beside it (``ID_2``). The file is indexed here, not by cbgen, whose index crashes the process
on a truncated file.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import struct
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from daskstraggle.data._matrix import Matrix
from daskstraggle.data._opening import OpenOptions, file_matrix
from daskstraggle.data.plink import (
    BedSource,
    BimArrays,
    check_unchanged,
    check_unique_samples,
    contig_codes,
    fileset_files,
    why_not_a_file,
)
from daskstraggle.data.sources import RowValues, called_rows
from daskstraggle.errors import (
    CorruptDataError,
    DataNotFoundError,
    InvalidDataError,
    InvalidParameterError,
)

__all__ = ["CALLS", "HARD_CALL_THRESHOLD", "BgenHeader", "BgenSource", "bgen_dosages",
           "hard_calls", "open_bgen", "read_header", "read_index", "read_sample_block",
           "read_sample_file"]

#: plink2's default ``--hard-call-threshold``: a call is hard when its expected count is
#: within this of a whole number.
HARD_CALL_THRESHOLD = 0.1
#: The values a BGEN source gives: expected counts, or plink2's hard calls.
CALLS = ("dosage", "hard")
#: Header flags (the BGEN specification): compression in bits 0-1, layout in bits 2-5,
#: sample identifiers stored in bit 31.
_COMPRESSIONS = {0: "none", 1: "zlib", 2: "zstd"}
_REWRITE = "Write it again (plink2 --bgen FILE ref-first --export bgen-1.2 --out NEW)."


def _cbgen() -> Any:
    """The cbgen module (the import error names the extra to install)."""
    try:
        return importlib.import_module("cbgen")
    except ImportError:
        raise ImportError(
            "Reading a BGEN file needs cbgen: pip install 'daskstraggle[bgen]' (or pip "
            "install cbgen), or convert it with plink2 --bgen FILE ref-first --make-pgen."
        ) from None


@contextlib.contextmanager
def _captured_stderr() -> Iterator[list[str]]:
    """Collect what C code (cbgen) prints on file descriptor 2 into the yielded list."""
    said: list[str] = []
    with tempfile.TemporaryFile(mode="w+b") as sink:
        saved = os.dup(2)
        os.dup2(sink.fileno(), 2)
        try:
            yield said
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            text = sink.read().decode(errors="replace")
            said.append(" ".join(line.removeprefix("ERROR: ").strip()
                                 for line in text.splitlines() if line.strip()))


# ------------------------------------------------------------------------------ the header
@dataclass(frozen=True, slots=True)
class BgenHeader:
    """What the first bytes of a ``.bgen`` say (checked by :func:`read_header`).

    ``start`` is the byte where the sample identifier block (if ``has_samples``) or else
    the first variant begins; ``first`` is where the first variant begins.
    """

    n_variants: int
    n_samples: int
    layout: int
    compression: str
    has_samples: bool
    size: int
    start: int
    first: int


def read_header(path: str) -> BgenHeader:
    """Read and check a ``.bgen``'s header block; InvalidDataError if the file is shorter
    than its header, has no BGEN magic, a layout other than 1 or 2 or a compression other
    than none, zlib or zstd, is layout 2 uncompressed (cbgen misreads those), or holds no
    variant or no sample."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(24)
        if len(head) < 24:
            raise InvalidDataError(
                f"{path!r} has {size} bytes, fewer than a BGEN header's 24: it is empty or "
                f"truncated. {_REWRITE}"
            )
        first, length, n_variants, n_samples, magic = struct.unpack("<IIII4s", head[:20])
        if magic not in (b"bgen", b"\0\0\0\0") or not 20 <= length <= first:
            raise InvalidDataError(
                f"{path!r} is not a BGEN file: its header (bytes 4-24) has no 'bgen' magic "
                f"number or a header length ({length}) the first variant offset ({first}) "
                f"cannot hold. {_REWRITE}"
            )
        f.seek(length)
        (flags,) = struct.unpack("<I", f.read(4).ljust(4, b"\0"))
    compression, layout = flags & 3, (flags >> 2) & 15
    if layout not in (1, 2) or compression not in _COMPRESSIONS:
        raise InvalidDataError(
            f"{path!r} has an unsupported BGEN layout {layout} / compression {compression} "
            "(header flags); BGEN files have layout 1 or 2 and compression 0 (none), 1 "
            f"(zlib) or 2 (zstd). {_REWRITE}"
        )
    if layout == 2 and compression == 0:
        raise InvalidDataError(
            f"{path!r} is an uncompressed layout-2 BGEN file, which cbgen cannot read; "
            "write it compressed (plink2 --bgen FILE ref-first --export bgen-1.2 --out NEW, "
            "zlib by default)."
        )
    if size < first + 4 or n_variants == 0 or n_samples == 0:
        what = ("is truncated: it ends before its first variant" if size < first + 4
                else f"holds {n_variants} variants x {n_samples} samples")
        raise InvalidDataError(f"{path!r} {what}. {_REWRITE}")
    return BgenHeader(n_variants, n_samples, layout, _COMPRESSIONS[compression],
                      bool(flags >> 31), size, 4 + length, 4 + first)


class _Truncated(Exception):
    """A block runs past the end of the file."""


def _exact(f: Any, n: int) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise _Truncated
    return bytes(data)


def _text(f: Any, width: int) -> bytes:
    (n,) = struct.unpack("<H" if width == 2 else "<I", _exact(f, width))
    return _exact(f, n)


def read_sample_block(path: str, header: BgenHeader) -> np.ndarray:
    """Return the sample ids a ``.bgen`` stores; InvalidDataError if the block is cut short,
    counts other samples than the header, or overlaps the first variant."""
    with open(path, "rb") as f:
        f.seek(header.start)
        try:
            length, n = struct.unpack("<II", _exact(f, 8))
            ids = [_text(f, 2) for _ in range(n)]
        except _Truncated:
            length, n, ids = -1, -1, []
        if n != header.n_samples or f.tell() != header.start + length or \
                f.tell() > header.first:
            raise InvalidDataError(
                f"The sample identifier block of {path!r} is damaged: it does not hold the "
                f"{header.n_samples} sample ids of the header within its stated length. "
                f"{_REWRITE}"
            )
    return np.array([i.decode(errors="replace") for i in ids])


def read_index(path: str, header: BgenHeader) -> dict[str, Any]:
    """Return every variant's identifying data and where its probabilities start (each
    genotype block skipped by its stated length, so a truncated file is refused here, in one
    InvalidDataError line): ``offset`` (uint64: each variant's genotype block, what cbgen
    reads), ``varid``, ``rsid``, ``chromosome`` (str), ``position`` (int64) and ``alleles``
    (a list of tuples of str)."""
    names: dict[str, list[Any]] = {k: [] for k in ("offset", "varid", "rsid", "chromosome",
                                                    "position", "alleles")}
    layout1 = header.layout == 1
    plain = 6 * header.n_samples if header.compression == "none" else None  # layout 1 only
    with open(path, "rb", buffering=1 << 16) as f:
        f.seek(header.first)
        try:
            for _ in range(header.n_variants):
                if layout1:
                    _exact(f, 4)  # the number of samples, again
                ids = [_text(f, 2).decode(errors="replace") for _ in range(3)]
                position, n_alleles = struct.unpack("<IH", _exact(f, 6)) if not layout1 \
                    else (*struct.unpack("<I", _exact(f, 4)), 2)
                alleles = tuple(_text(f, 4).decode(errors="replace") for _ in range(n_alleles))
                offset = f.tell()
                length = plain if plain is not None else 4 + struct.unpack("<I", _exact(f, 4))[0]
                if offset + length > header.size:
                    raise _Truncated
                f.seek(offset + length)
                for name, value in zip(names, (offset, *ids, position, alleles), strict=True):
                    names[name].append(value)
        except _Truncated:
            raise InvalidDataError(
                f"{path!r} is truncated or damaged: variant {len(names['offset']) + 1} of "
                f"{header.n_variants} runs past the end of the file ({header.size} bytes). "
                f"{_REWRITE}"
            ) from None
    dtypes = {"offset": np.uint64, "position": np.int64}
    return {name: values if name == "alleles" else np.array(values, dtype=dtypes.get(name))
            for name, values in names.items()}


# ------------------------------------------------------------------------------ dosages
def bgen_dosages(probability: np.ndarray, ploidy: np.ndarray, missing: np.ndarray, *,
                 phased: bool) -> np.ndarray:
    """Return one biallelic variant's expected ALT counts (float64, scaled to ploidy 2: a
    haploid call counts double; NaN missing) from cbgen's ``probability`` (unphased:
    P(0, 1, ... copies of the second allele); phased: P(first allele), P(second allele) per
    haplotype; NaN past a sample's ploidy and at missing calls), each sample's ``ploidy``
    (1 or 2; 0 missing) and its ``missing`` flags."""
    p = np.nan_to_num(np.asarray(probability))  # NaN past a sample's ploidy counts 0
    if phased:
        alt = p[:, 1::2].sum(axis=1, dtype=np.float64)
    else:
        alt = (p @ np.arange(p.shape[1], dtype=p.dtype)).astype(np.float64)
    ploidy = np.asarray(ploidy)
    dosage = alt if ploidy.min(initial=2) == 2 else alt * (2.0 / np.maximum(ploidy, 1))
    dosage[np.asarray(missing, dtype=bool) | (ploidy == 0)] = np.nan
    return dosage


def hard_calls(dosage: np.ndarray, threshold: float = HARD_CALL_THRESHOLD) -> np.ndarray:
    """Return plink2's hard calls (``--hard-call-threshold``) of expected counts (NaN
    missing): the nearest whole count as int8, -1 where missing or farther than
    ``threshold`` (plink2's ``0.5 * sum |x_i - round(x_i)|`` over both alleles' counts,
    which for two alleles is ``|dosage - round(dosage)|``)."""
    nearest = np.rint(dosage)
    hard = np.abs(dosage - nearest) <= threshold + 1e-9  # NaN compares False: missing
    return np.where(hard, nearest, -1).astype(np.int8)


# ------------------------------------------------------------------------------ the source
def _variant_dosages(reader: Any, offset: int, layout: int, path: str) -> np.ndarray:
    """One variant's expected ALT counts (NaN missing), read by cbgen at ``offset``."""
    if layout == 1:  # diploid and unphased, missing calls NaN; cbgen's read_genotype
        # crashes on layout 1 (reading ploidy it does not have), its probabilities do not
        probability = reader.read_probability(offset, precision=32)
        missing = np.isnan(probability).all(axis=1)
        return bgen_dosages(probability, np.full(len(missing), 2), missing, phased=False)
    genotype = reader.read_genotype(offset, precision=32)
    if genotype.ploidy.max(initial=0) > 2:
        raise InvalidDataError(
            f"{path!r} has a call of ploidy {int(genotype.ploidy.max())} (variant at byte "
            f"{offset}); BGEN input reads ploidy 1 or 2."
        )
    return bgen_dosages(genotype.probability, genotype.ploidy, genotype.missing,
                        phased=bool(genotype.phased))


class BgenSource(BedSource):
    """Rows of expected ALT counts (one per variant) from a ``.bgen`` file, read by cbgen at
    ``offsets`` (each variant's genotype block, :func:`read_index`); ``size`` is the file's
    bytes when opened, ``layout`` its BGEN layout, ``calls`` expected counts (``"dosage"``) or
    plink2's hard calls (``"hard"``, also held by ``storage="packed"``); otherwise as
    :class:`~daskstraggle.data.plink.BedSource`.
    """

    kind = "bgen"
    calls: str
    _per_variant = ("offsets",)

    def __init__(self, path: str | os.PathLike[str], offsets: np.ndarray, n_samples: int, *,
                 size: int, layout: int = 2, calls: str = "dosage", missing: str = "mean",
                 scaling: str = "patterson", storage: str = "int8",
                 variant_index: np.ndarray | None = None,
                 sample_index: np.ndarray | None = None) -> None:
        self.offsets = np.asarray(offsets, dtype=np.uint64)
        self.size = int(size)
        self.layout = int(layout)
        self.calls = calls
        super().__init__(path, len(self.offsets), n_samples, missing=missing, scaling=scaling,
                         storage=storage, variant_index=variant_index,
                         sample_index=sample_index)
        if calls == "dosage" and storage != "packed":
            self.dtype = np.dtype(np.float64)  # int8 where a partition's counts are whole

    def count_source(self) -> BgenSource:
        """Return this source with plink2's hard calls as raw int8 (no scaling, not packed),
        which quality control counts."""
        out = super().count_source()
        assert isinstance(out, BgenSource)
        out.calls, out.dtype = "hard", np.dtype(np.int8)
        return out

    def _read(self, start: int, stop: int, rows: np.ndarray | None) -> RowValues:
        """Rows of the copy a loader carries (its ``offsets`` those of the rows), -1 missing."""
        check_unchanged(self.path, self.size)
        values = self._values()
        if self.sample_index is not None:
            values = np.ascontiguousarray(values[:, self.sample_index])
        return called_rows(values, missing=self.missing, scaling=self.scaling,
                           storage=self.storage)

    def _values(self) -> np.ndarray:
        """The rows' values, -1 missing, one variant at a time: hard calls (int8), or
        expected counts, held as int8 until a count that is not whole turns them float64."""
        hard = self.calls == "hard" or self.storage == "packed"
        reader = _cbgen().bgen_file(self.path)
        try:
            values = np.empty((len(self.offsets), reader.nsamples), dtype=np.int8)
            for i, offset in enumerate(self.offsets):
                dosage = _variant_dosages(reader, int(offset), self.layout, self.path)
                row = hard_calls(dosage) if hard else np.nan_to_num(dosage, nan=-1.0)
                if values.dtype == np.int8 and not hard and not np.array_equal(row,
                                                                              np.rint(row)):
                    values = values.astype(np.float64)
                values[i] = row
        except RuntimeError as err:
            raise CorruptDataError(
                f"cbgen cannot read the variants of {self.path!r} from byte "
                f"{int(self.offsets[0])} ({err}): the file is damaged or changed since it "
                "was opened. Open it again."
            ) from None
        finally:
            reader.close()
        return values

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "calls": self.calls}


# ------------------------------------------------------------------------- samples, variants
def read_sample_file(path: str, bgen: str | None = None) -> np.ndarray:
    """Return the ``ID_2`` column of an Oxford ``.sample`` file (a line of column names, a
    line of types ``0 0 0 ...``, one line per sample); InvalidDataError, naming ``bgen``, if
    the two header lines are not there, a line has fewer than two columns, or a sample
    (``ID_1`` and ``ID_2``) is listed twice."""
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = [line.split() for line in f if line.strip()]
    if len(lines) < 2 or len(lines[0]) < 2 or lines[1][:1] != ["0"]:
        raise InvalidDataError(
            f"{path!r} is not an Oxford .sample file: it must start with a line of column "
            "names (ID_1 ID_2 missing ...) and a line of types (0 0 0 ...). Write it with "
            "plink2 --export bgen-1.2 (which writes the .sample beside the .bgen)."
        )
    short = next((n for n, r in enumerate(lines[2:], start=3) if len(r) < 2), None)
    if short is not None:
        raise InvalidDataError(
            f"Line {short} of {path!r} has fewer than 2 columns (ID_1 ID_2); fix or rewrite "
            "the .sample file."
        )
    check_unique_samples([f"{r[0]} {r[1]}" for r in lines[2:]], path, bgen)
    return np.array([r[1] for r in lines[2:]])


def _samples(path: str, header: BgenHeader, sample_file: str | os.PathLike[str] | None
             ) -> np.ndarray:
    """The sample ids: ``sample_file``, else the file's own, else the ``.sample`` beside it."""
    if sample_file is None and header.has_samples:
        samples = read_sample_block(path, header)
        check_unique_samples(list(samples), path)
        return samples
    given = sample_file is not None
    name = os.fspath(sample_file) if sample_file is not None else path[:-5] + ".sample"
    why = why_not_a_file(name)
    if why is not None:
        raise DataNotFoundError(
            f"The .sample file {name!r} of {path!r} {why}." if given else
            f"The BGEN file {path!r} stores no sample ids and its .sample file {name!r} "
            f"{why}; put the .sample beside it with the same prefix."
        )
    samples = read_sample_file(name, path)
    if len(samples) != header.n_samples:
        raise InvalidDataError(
            f"{path!r} holds {header.n_samples} samples but its .sample file {name!r} lists "
            f"{len(samples)}; the .sample is not this .bgen's."
        )
    return samples


def _check_readable(source: BgenSource) -> None:
    """Read the last variant with the source's loader: a file cbgen cannot decode fails here,
    before any work (cbgen's own report, printed by its C code, goes into the message)."""
    with _captured_stderr() as said:
        try:
            source.loader(source.shape[0] - 1, source.shape[0])()
            return
        except CorruptDataError:
            pass
    raise InvalidDataError(
        f"{source.path!r} is damaged: cbgen cannot read its last variant "
        f"({said[0] or 'no detail'}). {_REWRITE}"
    )


def _variant_arrays(index: dict[str, Any]) -> dict[str, np.ndarray]:
    """The variants' arrays in VCF Zarr's names, from the index :func:`read_index` returns."""
    contig_id, codes = contig_codes(index["chromosome"])
    rsid, varid = index["rsid"], index["varid"]
    return {"contig_id": contig_id, "variant_contig": codes,
            "variant_position": index["position"],
            "variant_id": np.where(rsid != "", rsid, varid),
            "variant_allele": np.array(index["alleles"], dtype=str)}


# ------------------------------------------------------------------------------ open_bgen
def open_bgen(path: str | os.PathLike[str], *, remote: dict[str, Any] | None = None,
              array: str | None = None, labels: Any = None,
              genotype_dims: bool | None = None, options: Any = None, calls: str = "dosage",
              sample_file: str | os.PathLike[str] | None = None) -> Matrix:
    """Open a ``.bgen`` file as a genotype matrix (rows = variants).

    The header, sample ids, variant blocks and the last variant's probabilities are read
    here, so a truncated or damaged file is refused before any cluster work.

    Parameters
    ----------
    path : str or path
        The ``.bgen`` (made absolute: workers may run in another folder).
    remote, array, labels, genotype_dims
        As :func:`daskstraggle.data.plink.open_bed`.
    options : daskstraggle.data._opening.OpenOptions or None, default=None
        ``missing``, ``scaling`` and ``storage`` of ``open_matrix`` (None: mean, Patterson,
        int8).
    calls : {"dosage", "hard"}, default="dosage"
        Expected ALT counts, or plink2's hard calls (see the module docstring).
    sample_file : str, path or None, default=None
        An Oxford ``.sample`` file naming the samples (None: the file's own ids, else the
        ``.sample`` beside it).

    Returns
    -------
    matrix : Matrix
        Rows = variants, columns = samples, ``variants`` the file's contigs, positions,
        ids and alleles (REF first).

    Raises
    ------
    InvalidParameterError
        For a URL, ``array``, ``genotype_dims`` or an unknown ``calls``.
    DataNotFoundError
        If the ``.bgen`` does not exist (or is a folder), or it stores no sample ids and
        has no ``.sample`` beside it.
    InvalidDataError
        If the file is not BGEN, is truncated or damaged, has an unsupported layout or
        compression, a variant with more than two alleles, or its ``.sample`` lists another
        number of samples or a sample twice.
    ImportError
        Without cbgen.
    """
    path = os.path.abspath(os.fspath(path))  # workers may run in another folder
    options = options if options is not None else OpenOptions("mean", "patterson", "error")
    if calls not in CALLS:
        raise InvalidParameterError(
            f"The 'calls' parameter of open_bgen must be one of {CALLS}. Got {calls!r} "
            f"instead ({path!r})."
        )
    fileset_files(path, remote, array, genotype_dims, kind="BGEN .bgen")
    header = read_header(path)
    samples = _samples(path, header, sample_file)
    index = read_index(path, header)
    many = [n for n, alleles in enumerate(index["alleles"]) if len(alleles) != 2]
    if many:
        raise InvalidDataError(
            f"{path!r} has {len(many)} variant(s) without exactly two alleles (first: "
            f"{index['rsid'][many[0]]!r}, {len(index['alleles'][many[0]])} alleles); BGEN "
            "input reads biallelic variants. Drop them (plink2 --bgen FILE ref-first "
            "--max-alleles 2 --export bgen-1.2 --out NEW)."
        )
    source = BgenSource(path, index["offset"], header.n_samples, size=header.size,
                        layout=header.layout, calls=calls,
                        missing=options.missing, scaling=options.scaling,
                        storage=options.storage)
    _check_readable(source)
    return file_matrix(source, path, samples, labels,
                       BimArrays(path, lambda _: _variant_arrays(index)))
