"""A small BGEN v1.2 writer (layout 2) for the tests: files made here, never downloaded.

Written from the format's specification (https://www.well.ox.ac.uk/~gav/bgen_format/): a
header block (first-variant offset, header length, counts, the magic ``bgen``, flags), an
optional sample identifier block, then one block per variant (ids, chromosome, position,
alleles) followed by its genotype probabilities, each call's probabilities but the last
stored as ``bits``-bit integers packed least significant bit first, the block compressed
with zlib (or stored as it is). Biallelic variants only, ploidy 1 or 2 per sample.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

__all__ = ["hard_call_probabilities", "write_bgen"]

#: Header flag bits: compression (bits 0-1), layout (bits 2-5), sample ids present (bit 31).
_COMPRESSION = {"none": 0, "zlib": 1}
_LAYOUT_SHIFT = 2
_SAMPLE_IDS = 1 << 31


def hard_call_probabilities(dosages: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return the genotype probabilities of hard calls and their missing mask.

    Parameters
    ----------
    dosages : ndarray of int of shape (n_variants, n_samples)
        Copies of the second allele (0, 1, 2); negative: missing.

    Returns
    -------
    probabilities : ndarray of float of shape (n_variants, n_samples, 3)
        One-hot over 0, 1 and 2 copies of the second allele (zero where missing).
    missing : ndarray of bool of shape (n_variants, n_samples)
    """
    dosages = np.asarray(dosages)
    missing = dosages < 0
    probabilities = (np.where(missing, -1, dosages)[..., None] == np.arange(3)).astype(float)
    return probabilities, missing


def _quantised(probabilities: np.ndarray, bits: int) -> np.ndarray:
    """Integers of ``bits`` bits, summing to ``2**bits - 1`` along the last axis (largest
    remainders rounded up), as the specification recommends."""
    top = (1 << bits) - 1
    scaled = np.clip(probabilities, 0.0, 1.0) * top
    low = np.floor(scaled).astype(np.int64)
    short = top - low.sum(axis=-1)
    order = np.argsort(-(scaled - low), axis=-1, kind="stable")
    rank = np.argsort(order, axis=-1, kind="stable")
    return low + (rank < short[..., None])


def _packed(values: np.ndarray, bits: int) -> bytes:
    """``values`` as one bit stream of ``bits`` bits each, least significant bit first."""
    flat = values.reshape(-1).astype(np.uint64)
    stream = ((flat[:, None] >> np.arange(bits, dtype=np.uint64)) & np.uint64(1)).astype(np.uint8)
    return np.packbits(stream.reshape(-1), bitorder="little").tobytes()


def _genotype_block(probabilities: np.ndarray, ploidy: np.ndarray, missing: np.ndarray, *,
                    phased: bool, bits: int) -> bytes:
    """The uncompressed probability data of one variant (layout 2)."""
    n_samples = len(ploidy)
    head = struct.pack("<IHBB", n_samples, 2, int(ploidy.min()), int(ploidy.max()))
    flags = (ploidy | np.where(missing, 0x80, 0)).astype(np.uint8).tobytes()
    stored: list[np.ndarray] = []
    for sample in range(n_samples):
        p = np.where(missing[sample], 0.0, probabilities[sample])
        if phased:  # per haplotype P(first allele); p holds P(second allele) per haplotype
            q = _quantised(np.stack([1 - p[: ploidy[sample]], p[: ploidy[sample]]], axis=-1),
                           bits)
            stored.append(np.where(missing[sample], 0, q[:, 0]))
        else:  # P(0, 1, ... copies of the second allele), all but the last
            q = _quantised(p[: ploidy[sample] + 1], bits)
            stored.append(np.where(missing[sample], 0, q[:-1]))
    data = _packed(np.concatenate(stored), bits)
    return head + flags + struct.pack("<BB", int(phased), bits) + data


def _layout1_block(probabilities: np.ndarray, missing: np.ndarray) -> bytes:
    """The uncompressed probability data of one variant in layout 1 (BGEN v1.1): three
    uint16 per sample, probability times 32768, all zero for a missing call."""
    values = np.rint(np.clip(probabilities[:, :3], 0, 1) * 32768).astype("<u2")
    values[missing] = 0
    return values.tobytes()


def _text(value: str, width: str = "H") -> bytes:
    raw = value.encode()
    return struct.pack("<" + width, len(raw)) + raw


def write_bgen(path: str | Path, probabilities: np.ndarray, *,
               missing: np.ndarray | None = None, ploidy: np.ndarray | None = None,
               phased: bool = False, bits: int = 8, compression: str = "zlib",
               samples: Sequence[str] | None = None, sample_block: bool = True,
               variant_ids: Sequence[str] | None = None, rsids: Sequence[str] | None = None,
               chromosomes: Sequence[str] | None = None, positions: Sequence[int] | None = None,
               alleles: Sequence[tuple[str, str]] | None = None, layout: int = 2) -> Path:
    """Write a BGEN file of biallelic variants: v1.2 (layout 2), or v1.1 (layout 1).

    Parameters
    ----------
    path : str or Path
        The ``.bgen`` to write.
    probabilities : ndarray of float of shape (n_variants, n_samples, 3) or (..., 2)
        Unphased: P(0, 1, 2 copies of the second allele) (haploid samples: the first two).
        Phased (``phased=True``): per haplotype, P(it carries the second allele).
    missing : ndarray of bool of shape (n_variants, n_samples) or None, default=None
        Calls flagged missing.
    ploidy : ndarray of int of shape (n_samples,) or None, default=None
        1 or 2 per sample (None: all 2).
    phased : bool, default=False
    bits : int, default=8
        Bits per stored probability (1-32).
    compression : {"zlib", "none"}, default="zlib"
    samples : sequence of str or None, default=None
        Sample ids (None: ``s0``, ``s1``, ...).
    sample_block : bool, default=True
        Store the sample ids in the file (else only a ``.sample`` file can name them).
    variant_ids, rsids, chromosomes, positions, alleles : sequences or None
        Per variant (None: ``v0``..., ``rs0``..., ``"1"``, 1..., ``("A", "G")``).
    layout : {2, 1}, default=2
        Layout 1 stores diploid unphased probabilities in 16 bits (``ploidy``, ``phased``
        and ``bits`` do not apply).

    Returns
    -------
    path : Path
    """
    probabilities = np.asarray(probabilities, dtype=float)
    n_variants, n_samples = probabilities.shape[:2]
    missing = np.zeros((n_variants, n_samples), bool) if missing is None else np.asarray(missing)
    ploidy = np.full(n_samples, 2) if ploidy is None else np.asarray(ploidy)
    names = [f"s{i}" for i in range(n_samples)] if samples is None else list(samples)
    flags = (_COMPRESSION[compression] | (layout << _LAYOUT_SHIFT)
             | (_SAMPLE_IDS if sample_block else 0))
    header = struct.pack("<III4sI", 20, n_variants, n_samples, b"bgen", flags)
    block = b""
    if sample_block:
        ids = b"".join(_text(s) for s in names)
        block = struct.pack("<II", 8 + len(ids), n_samples) + ids
    out = [struct.pack("<I", len(header) + len(block)), header, block]
    for v in range(n_variants):
        first, second = ("A", "G") if alleles is None else alleles[v]
        out += [struct.pack("<I", n_samples) if layout == 1 else b"",
                _text(f"v{v}" if variant_ids is None else variant_ids[v]),
                _text(f"rs{v}" if rsids is None else rsids[v]),
                _text("1" if chromosomes is None else chromosomes[v]),
                struct.pack("<I", v + 1 if positions is None else positions[v]),
                struct.pack("<H", 2) if layout == 2 else b"",
                _text(first, "I"), _text(second, "I")]
        if layout == 1:
            data = _layout1_block(probabilities[v], missing[v])
            out.append(struct.pack("<I", len(packed := zlib.compress(data))) + packed
                       if compression == "zlib" else data)
            continue
        data = _genotype_block(probabilities[v], ploidy, missing[v], phased=phased, bits=bits)
        if compression == "zlib":
            packed = zlib.compress(data)
            out.append(struct.pack("<II", len(packed) + 4, len(data)) + packed)
        else:
            out.append(struct.pack("<I", len(data)) + data)
    path = Path(path)
    path.write_bytes(b"".join(out))
    return path
