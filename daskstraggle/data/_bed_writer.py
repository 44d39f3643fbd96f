"""Write a diploid VCF Zarr store's calls as a PLINK 1 binary fileset (.bed/.bim/.fam), as
plink2 ``--make-bed`` writes it (A1 = ALT)."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from daskstraggle.data._contigs import chrom_code
from daskstraggle.data.genotypes import _strings
from daskstraggle.data.plink import _BED_DOSAGE, MAGIC, VARIANT_MAJOR
from daskstraggle.data.sources import genotype_rows

__all__ = ["unique_variant_ids", "write_bed"]

#: Dosage + 1 (-1 missing, 0, 1, 2 ALT alleles) -> .bed 2-bit code: the inverse of the
#: reader's code -> dosage table (01, 11, 10, 00).
_CODES = np.argsort(_BED_DOSAGE + 1).astype(np.uint8)


def _encode(dosages: np.ndarray) -> np.ndarray:
    """int8 dosages (variants, samples; -1 missing) -> .bed rows of ceil(samples / 4) bytes."""
    n_rows, n_samples = dosages.shape
    codes = np.zeros((n_rows, -(-n_samples // 4) * 4), dtype=np.uint8)
    codes[:, :n_samples] = _CODES[dosages.astype(np.int16) + 1]
    quads = codes.reshape(n_rows, -1, 4)
    return quads[..., 0] | quads[..., 1] << 2 | quads[..., 2] << 4 | quads[..., 3] << 6


def write_bed(store: str | os.PathLike[str], prefix: Path, *, family: np.ndarray | None = None,
              rename: dict[str, str] | None = None, chunk_rows: int = 10_000) -> None:
    """Write the calls of the diploid VCF Zarr ``store`` as ``prefix``.bed/.bim/.fam.

    The store has ``call_genotype`` of ploidy 2, ``sample_id``, ``variant_position``,
    ``variant_contig``, ``contig_id`` and ``variant_allele``. Contigs are written as plink2
    writes them (``chr22`` as ``22``, ``chrM`` as ``MT``:
    :func:`~daskstraggle.data._contigs.chrom_code`), in the ``.bim`` and in the ids.
    ``family`` gives the ``.fam``'s family id per sample (None: the sample id); ``rename``
    writes alleles under another name (plink reads an allele ``"0"`` as missing);
    ``chunk_rows`` variants are encoded at a time.
    """
    import zarr

    group: Any = zarr.open_group(os.fspath(store), mode="r")  # members: Array | Group
    calls = group["call_genotype"]
    n_variants = calls.shape[0]
    with open(prefix.with_suffix(".bed"), "wb") as f:
        f.write(MAGIC + bytes([VARIANT_MAJOR]))
        for a in range(0, n_variants, chunk_rows):
            rows = genotype_rows(np.asarray(calls[a:a + chunk_rows]), missing="zero",
                                 scaling="none")
            f.write(_encode(np.asarray(rows.values, dtype=np.int8)).tobytes())
    contigs = np.array([chrom_code(c) for c in _strings(group["contig_id"][:])],
                       dtype=object)[group["variant_contig"][:]]  # as plink2 writes them
    alleles = _strings(group["variant_allele"][:])
    if rename:
        alleles = np.vectorize(lambda a: rename.get(a, a), otypes=[object])(alleles)
    given = _strings(group["variant_id"][:]) if "variant_id" in group else None
    alt = [a or "0" for a in alleles[:, 1]]  # "0": plink's missing allele
    positions = np.asarray(group["variant_position"][:])
    ids = unique_variant_ids(contigs, positions, alleles[:, 0], alt, given)
    lines = (f"{c}\t{i}\t0\t{p}\t{a1}\t{a2}\n" for c, i, p, a1, a2 in
             zip(contigs, ids, positions, alt, alleles[:, 0], strict=True))
    prefix.with_suffix(".bim").write_text("".join(lines))
    samples = _strings(group["sample_id"][:])
    family = samples if family is None else _strings(family)
    prefix.with_suffix(".fam").write_text(
        "".join(f"{f} {s} 0 0 0 -9\n" for f, s in zip(family, samples, strict=True)))


def unique_variant_ids(contigs: Any, positions: Any, ref: Any, alt: Any,
                       given: Any = None) -> list[str]:
    """Return one unique id per variant, as plink2 needs them (``--indep-pairwise``).

    A variant keeps its given id when it has one (not ``"."`` or empty) and no other
    variant has it; otherwise its id is ``CHROM:POS:REF:ALT`` (plink2's ``@:#:$r:$a``),
    and a repeat of an id gets ``:2``, ``:3``, ... in file order, skipping any id taken.
    For plink2's ids pass the contigs as plink2 writes them
    (:func:`~daskstraggle.data._contigs.chrom_code`: ``22``, not ``chr22``).

    Parameters
    ----------
    contigs, positions, ref, alt : sequence
        Per variant: contig (as plink2 writes it), position, reference and alternate allele.
    given : sequence of str or None, default=None
        The store's ``variant_id`` (None: none).

    Returns
    -------
    ids : list of str

    Examples
    --------
    >>> unique_variant_ids(["1", "1", "1"], [5, 5, 9], ["A", "A", "C"], ["G", "G", "T"],
    ...                    [".", ".", "rs1"])
    ['1:5:A:G', '1:5:A:G:2', 'rs1']
    """
    n = len(positions)
    names = [str(v) for v in given] if given is not None else ["."] * n
    repeated = {name for name, k in Counter(names).items() if k > 1}
    wanted = [name if name not in (".", "") and name not in repeated else
              f"{contigs[i]}:{positions[i]}:{ref[i]}:{alt[i]}" for i, name in enumerate(names)]
    singles = {name for name, k in Counter(wanted).items() if k == 1}
    taken: set[str] = set()
    out = []
    for name in wanted:
        # the first of a repeated name keeps it, the others get :2, :3, ..., never an id
        # that another variant has as its own
        candidate, k = name, 1
        while candidate in taken or (candidate != name and candidate in singles):
            k += 1
            candidate = f"{name}:{k}"
        taken.add(candidate)
        out.append(candidate)
    return out

