"""PLINK 2 filesets (``.pgen`` with ``.pvar`` and ``.psam``) as genotype matrices, read by
pgenlib (the ``genomics`` extra): dosage = non-reference alleles of the hard calls. A
``.pvar.zst`` is not read.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from daskstraggle.data._matrix import Matrix
from daskstraggle.data._opening import file_matrix
from daskstraggle.data.plink import (
    BedSource,
    BimArrays,
    check_unique_samples,
    contig_codes,
    count_lines,
    fileset_files,
)
from daskstraggle.data.sources import RowValues, called_rows
from daskstraggle.errors import CorruptDataError, InvalidDataError

__all__ = ["PgenSource", "open_pgen", "pgen_rows", "read_psam", "read_pvar"]


def _reader(path: str) -> Any:
    """A pgenlib reader of ``path`` (the import error names the extra to install)."""
    try:
        import pgenlib
    except ImportError:
        raise ImportError(
            "Reading a PLINK 2 .pgen needs pgenlib: pip install 'daskstraggle[genomics]' "
            "(or pip install pgenlib), or convert it with plink2 --pfile P --make-bed."
        ) from None
    return pgenlib.PgenReader(os.fsencode(path))


def pgen_rows(ref_counts: np.ndarray, *, missing: str, scaling: str,
              storage: str = "int8") -> RowValues:
    """Turn rows of REF counts (pgenlib's ``allele_idx=0``; -9 missing) into dosage rows, as
    :func:`daskstraggle.data.plink.bed_rows` does."""
    dosage = np.where(ref_counts >= 0, 2 - ref_counts, -1).astype(np.int8)
    return called_rows(dosage, missing=missing, scaling=scaling, storage=storage)


class PgenSource(BedSource):
    """Dosage rows (one per variant) from a PLINK 2 ``.pgen`` file, read by pgenlib; the
    parameters of :class:`~daskstraggle.data.plink.BedSource`, the dosages of :func:`pgen_rows`."""

    kind = "plink-pgen"

    def _read(self, start: int, stop: int, rows: np.ndarray | None) -> RowValues:
        columns, n_variants, n_samples = self.sample_index, self.n_variants, self.n_samples
        reader = _reader(self.path)
        try:
            if (reader.get_variant_ct(), reader.get_raw_sample_ct()) != (n_variants,
                                                                       n_samples):
                raise CorruptDataError(
                    f"{self.path!r} holds {reader.get_variant_ct()} variants x "
                    f"{reader.get_raw_sample_ct()} samples, not the {n_variants} x "
                    f"{n_samples} it had when opened; the file changed. Open it again."
                )
            if columns is not None:
                reader.change_sample_subset(np.sort(columns).astype(np.uint32))
            raw = np.empty((stop - start, n_samples if columns is None else len(columns)),
                           dtype=np.int8)
            if rows is None:
                reader.read_range(start, stop, raw, allele_idx=0)
            else:
                reader.read_list(np.asarray(rows, dtype=np.uint32), raw, allele_idx=0)
        except RuntimeError as err:  # a record damaged (or rewritten) since it was opened
            raise CorruptDataError(
                f"pgenlib cannot read rows {start}-{stop} of {self.path!r} "
                f"({_pgenlib_text(err)}): the file is damaged or changed since it was "
                "opened. Write it again (plink2 --make-pgen)."
            ) from None
        finally:
            reader.close()
        if columns is not None:  # pgenlib returns the subset in file order
            raw = np.ascontiguousarray(raw[:, np.argsort(np.argsort(columns))])
        return pgen_rows(raw, missing=self.missing, scaling=self.scaling, storage=self.storage)


# ------------------------------------------------------------------------ .pvar and .psam
def _header_and_rows(path: str) -> tuple[list[str], list[list[str]]]:
    """The column names (the ``#`` header line; ``##`` lines skipped) and the rows."""
    header: list[str] = []
    rows: list[list[str]] = []
    with open(path) as f:
        for line in f:
            if line.startswith("##") or not line.strip():
                continue
            if line.startswith("#") and not rows:
                header = line[1:].split()
                continue
            rows.append(line.split())
    return header, rows


def read_pvar(path: str) -> dict[str, np.ndarray]:
    """Return a ``.pvar``'s ``contig_id`` (in the file's order), ``variant_contig``,
    ``variant_position``, ``variant_id`` and ``variant_allele`` (REF then ALTs, padded with
    ""); InvalidDataError if a column it needs is missing or a position is not an integer."""
    header, rows = _header_and_rows(path)
    column = _pvar_columns(path, header, rows)
    try:
        position = np.array([int(r[column["POS"]]) for r in rows], dtype=np.int64)
    except ValueError as err:
        raise InvalidDataError(f"The POS column of {path!r} must hold integers: {err}.") from err
    contig_id, codes = contig_codes(np.array([r[column["CHROM"]] for r in rows]))
    alleles = [[r[column["REF"]], *r[column["ALT"]].split(",")] for r in rows]
    width = max((len(a) for a in alleles), default=2)
    table = np.array([a + [""] * (width - len(a)) for a in alleles], dtype=str)
    table[table == "."] = ""
    return {"contig_id": contig_id, "variant_contig": codes, "variant_position": position,
            "variant_id": np.array([r[column["ID"]] for r in rows]), "variant_allele": table}


def _pvar_columns(path: str, header: list[str], rows: list[list[str]]) -> dict[str, int]:
    """The index of each column :func:`read_pvar` needs, after checking every row has them."""
    names = header or ["CHROM", "ID", "CM", "POS", "ALT", "REF"]  # a headerless .bim layout
    need = ("CHROM", "POS", "ID", "REF", "ALT")
    absent = [n for n in need if n not in names]
    short = next((n for n, r in enumerate(rows, start=1) if len(r) < len(names)), None)
    if absent or short is not None:
        problem = (f"it lacks the columns {absent}" if absent else
                   f"its variant {short} has fewer columns than the {len(names)} of "
                   + ("its header" if header else "a headerless .pvar (a .bim's layout)"))
        raise InvalidDataError(
            f"{path!r} is not a .pvar plink2 reads: {problem}. Write it with plink2 "
            "--make-pgen."
        )
    return {n: names.index(n) for n in need}


def read_psam(path: str, fileset: str | None = None) -> np.ndarray:
    """Return a ``.psam``'s sample ids (its ``IID`` column; a headerless one is a .fam);
    InvalidDataError, naming ``fileset`` (the ``.pgen``), if a sample (``FID``, ``IID`` and
    ``SID``, those the file has) is listed twice."""
    header, rows = _header_and_rows(path)
    names = header or ["FID", "IID"]
    columns = [names.index(n) for n in ("FID", "IID", "SID") if n in names] or [0]
    if any(len(r) <= max(columns) for r in rows):
        raise InvalidDataError(
            f"{path!r} is not a .psam plink2 reads: a line has fewer columns than its "
            f"header {names}. Write it with plink2 --make-pgen."
        )
    check_unique_samples([" ".join(r[c] for c in columns) for r in rows], path, fileset)
    index = names.index("IID") if "IID" in names else 0
    return np.array([r[index] for r in rows])


def _pgenlib_text(err: RuntimeError) -> str:
    """pgenlib's error message, on one line."""
    detail = err.args[0] if err.args else err
    text = detail.decode(errors="replace") if isinstance(detail, bytes) else str(detail)
    return " ".join(text.split())


def _pgen_shape(path: str) -> tuple[int, int]:
    """The ``.pgen``'s variants and samples, read by pgenlib, which also reads its last
    variant: a truncated file fails there, before any work, rather than on a worker."""
    try:
        reader = _reader(path)
    except RuntimeError as err:
        raise InvalidDataError(
            f"pgenlib cannot read {path!r}: {_pgenlib_text(err)} Write it again "
            "(plink2 --make-pgen)."
        ) from None
    try:
        n_variants, n_raw = reader.get_variant_ct(), reader.get_raw_sample_ct()
        if n_variants and n_raw:
            reader.read(n_variants - 1, np.empty(n_raw, dtype=np.int8))
    except RuntimeError as err:
        raise InvalidDataError(
            f"{path!r} is truncated or damaged: pgenlib cannot read its last variant "
            f"({_pgenlib_text(err)}). Write it again (plink2 --make-pgen)."
        ) from None
    finally:
        reader.close()
    return n_variants, n_raw


def open_pgen(path: str, *, remote: dict[str, Any] | None, array: str | None, labels: Any,
              genotype_dims: bool | None, options: Any) -> Matrix:
    """Open a PLINK 2 fileset as :func:`~daskstraggle.data.plink.open_bed` opens a PLINK 1
    one (the ``.pvar`` and ``.psam`` share the ``.pgen``'s prefix; ``variants`` are read from
    the ``.pvar`` when first needed).

    Raises
    ------
    InvalidParameterError, DataNotFoundError
        As :func:`~daskstraggle.data.plink.open_bed`.
    InvalidDataError
        If pgenlib cannot read the ``.pgen`` (its header, or its last variant: a truncated
        file), its counts disagree with the ``.psam`` or the ``.pvar``, or the ``.psam``
        lists a sample twice.
    ImportError
        Without pgenlib.
    """
    pvar, psam = fileset_files(path, remote, array, genotype_dims, kind="PLINK 2 .pgen",
                               companions=(".pvar", ".psam"))
    n_variants, n_raw = _pgen_shape(path)
    samples = read_psam(psam, path)
    if len(samples) != n_raw or n_variants == 0 or n_raw == 0:
        raise InvalidDataError(
            f"{path!r} holds {n_variants} variants x {n_raw} samples but its .psam lists "
            f"{len(samples)} samples; the .psam is not this .pgen's, or one is empty. "
            "Write the fileset again (plink2 --make-pgen)."
        )
    n_listed = count_lines(pvar, b"#\n\r")
    if n_listed != n_variants:
        raise InvalidDataError(
            f"{path!r} holds {n_variants} variants but its .pvar lists {n_listed}; the .pvar "
            "is not this .pgen's, or is truncated. Write the fileset again (plink2 "
            "--make-pgen)."
        )
    source = PgenSource(path, n_variants, n_raw, missing=options.missing,
                        scaling=options.scaling, storage=options.storage)
    return file_matrix(source, path, samples, labels, BimArrays(pvar, read_pvar))
