"""Linkage-disequilibrium pruning: plink2's ``--indep-pairwise`` with a variant-count window
(``docs/genotype-pca.md``, *LD pruning*); keeps plink2's ``.prune.in``, except that a
multi-allelic site uses the dosage of all ALT alleles where plink2 takes the major one."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from daskstraggle._numba import import_numba_module
from daskstraggle._resources import available_memory as _available_memory
from daskstraggle.errors import InvalidDataError, InvalidParameterError

__all__ = ["LDPrune", "bit_planes", "ld_prune_keep", "parse_ld_prune", "prune_band"]

#: plink2's relative tolerance (``kSmallEpsilon``, 2^-44): on the threshold and on ties of
#: the major allele frequency.
_EPSILON = 2.0**-44


@dataclass(frozen=True, slots=True)
class LDPrune:
    """plink2's ``--indep-pairwise WINDOW STEP R2``, with the window in variants.

    Parameters
    ----------
    window : int
        Variants per window, at least 2.
    step : int, default=1
        Variants the window moves on by, in [1, window].
    r2 : float
        Squared correlation above which one variant of a pair is dropped, in [0, 1).
    order : {2, 1}, default=2
        The scan order, plink2's ``--indep-order``: 2 is plink2's default, 1 PLINK 1.9's;
        they keep slightly different sets.
    """

    window: int
    step: int
    r2: float
    order: int = 2

    def __str__(self) -> str:
        text = f"{self.window},{self.step},{self.r2:g}"
        return text if self.order == 2 else f"{text},order={self.order}"


def parse_ld_prune(value: object, *, order: int | None = None) -> LDPrune | None:
    """Return ``value`` as an :class:`LDPrune` (None: none).

    Parameters
    ----------
    value : LDPrune, str, tuple or None
        An LDPrune; ``"WINDOW,STEP,R2"`` or ``"WINDOW,R2"`` (step 1; spaces also separate),
        optionally followed by ``",order=1"``; or a tuple ``(window, step, r2)`` or
        ``(window, r2)``.
    order : {1, 2} or None, default=None
        The scan order (see :class:`LDPrune`); None: the one ``value`` gives, else 2.

    Returns
    -------
    ld : LDPrune or None

    Raises
    ------
    InvalidParameterError
        One line naming ``ld_prune`` (CLI ``--ld-prune``) and the fix.
    """
    if value is None:
        return None
    if isinstance(value, LDPrune):
        parts, given = [value.window, value.step, value.r2], value.order
    elif isinstance(value, str):
        parts, given = _split_text(value)
    elif isinstance(value, (tuple, list)):
        parts, given = list(value), 2
    else:
        raise _bad(value, "give 'WINDOW,STEP,R2'")
    if len(parts) not in (2, 3):
        raise _bad(value, "give 'WINDOW,STEP,R2' or 'WINDOW,R2'")
    try:
        window = _integer(parts[0])
        step = _integer(parts[1]) if len(parts) == 3 else 1
        r2 = float(parts[-1])
        chosen = _integer(given if order is None else order)
    except (TypeError, ValueError):
        raise _bad(value, "WINDOW and STEP are whole numbers, R2 a number, order 1 or 2") from None
    ld = LDPrune(window, step, r2, chosen)
    for ok, fix in (
        (window >= 2, f"WINDOW is at least 2 variants (got {window})"),
        (1 <= step <= window, f"STEP is in [1, WINDOW={window}] (got {step})"),
        (0.0 <= r2 < 1.0, f"R2 is in [0, 1) (got {r2:g})"),
        (chosen in (1, 2), f"the order (CLI: --ld-prune-order) is 1 or 2 (got {chosen})"),
    ):
        if not ok:
            raise _bad(ld, fix)
    return ld


def _split_text(value: str) -> tuple[list[Any], Any]:
    """The fields of ``"WINDOW,STEP,R2[,order=N]"`` and the order it gives (else 2)."""
    if re.search(r"kb\b", value, flags=re.IGNORECASE):
        raise _bad(value, "a window in kilobases is not supported; give it in variants")
    parts = re.split(r"\s*,\s*|\s+", value.strip())
    if "" in parts:
        raise _bad(value, "a field is empty; give each of WINDOW, STEP and R2")
    orders = [p for p in parts if p.lower().startswith("order=")]
    given = orders[-1].split("=", 1)[1] if orders else 2
    return [p for p in parts if p not in orders], given


def _integer(value: Any) -> int:
    number = float(value)
    if not number.is_integer():
        raise ValueError(value)
    return int(number)


def _bad(value: object, fix: str) -> InvalidParameterError:
    return InvalidParameterError(
        f"The 'ld_prune' parameter of GenotypeQC (CLI: --ld-prune) must be WINDOW,STEP,R2 "
        f"as plink2's --indep-pairwise (e.g. '50,5,0.2'): {fix}. Got {value!r} instead."
    )


# ----------------------------------------------------------------------- the workers' band
#: The compiled kernels (:mod:`daskstraggle.data._numba_ld`), imported on first use.
_numba = partial(import_numba_module, "daskstraggle.data._numba_ld")


def _value_bits(top: int) -> int:
    """Value planes for dosages up to ``top``: 2 for 0-2 (the diploid kernel), else at
    least 3 (the general one)."""
    return 2 if top <= 2 else max(3, int(top).bit_length())


def _plane_words(n_samples: int) -> int:
    """Words per plane of a row of ``n_samples`` samples (whole vectors of 8 words)."""
    return -(-int(n_samples) // 512) * 8


def _integer_dosages(values: np.ndarray, ploidy: int) -> tuple[np.ndarray, int]:
    """int8 dosages (negative: missing) and the factor they were multiplied by: 1 for
    integer dosages; for fractional ones (a call of lower ploidy scaled to the array's),
    the smallest factor making them whole (r² does not change with it)."""
    if values.dtype == np.int8:
        return np.ascontiguousarray(values), 1
    if values.dtype.kind in "iu":
        if values.size and int(values.max()) > np.iinfo(np.int8).max:
            raise InvalidDataError(f"LD pruning takes dosages up to 127; got a dosage of "
                                   f"{int(values.max())}. Check the ploidy of the calls.")
        return values.astype(np.int8), 1
    called = values[values >= 0]
    for factor in range(1, np.iinfo(np.int8).max // max(int(ploidy), 1) + 1):
        scaled = called * factor
        if np.all(np.abs(scaled - np.rint(scaled)) < 1e-6):
            return np.where(values >= 0, np.rint(values * factor), -1).astype(np.int8), factor
    raise InvalidDataError(
        f"LD pruning takes dosages that are whole multiples of 1/k for some k up to "
        f"{np.iinfo(np.int8).max // max(int(ploidy), 1)} (ploidy {ploidy}); these are not. "
        "Prune on hard calls (integer dosages)."
    )


def bit_planes(values: np.ndarray, ploidy: int = 2) -> tuple[np.ndarray, int]:
    """Return the bit planes of dosage rows (see :mod:`daskstraggle.data._numba_ld`).

    Parameters
    ----------
    values : ndarray of shape (n_rows, n_samples)
        Dosages, negative where missing: int8, or float (fractional dosages).
    ploidy : int, default=2
        The largest dosage (bounds the factor that makes fractional dosages whole).

    Returns
    -------
    planes : ndarray of uint64 of shape (n_rows, 1 + bits, words)
        Plane 0: the called samples; plane ``1 + a``: bit ``a`` of the called dosages
        (times ``factor``); 64 samples per word, ``words`` a multiple of 8 (the padding is
        zero). ``bits`` is 2 for dosages 0-2, else at least 3.
    factor : int
        What the dosages were multiplied by to make them whole (1 for integer dosages).

    Raises
    ------
    InvalidDataError
        If the dosages are above 127, or fractions that no factor up to
        ``127 // ploidy`` makes whole.
    """
    codes, factor = _integer_dosages(np.asarray(values), ploidy)
    top = int(codes.max(initial=0))
    n_rows, n_samples = codes.shape
    planes = np.zeros((n_rows, 1 + _value_bits(top), _plane_words(n_samples)), dtype=np.uint64)
    if n_samples % 8:  # whole words of 8 dosages, the padding missing
        codes = np.concatenate([codes, np.full((n_rows, -n_samples % 8), -1, np.int8)], 1)
    _numba().bit_planes(codes.view(np.uint64), planes)
    return planes, factor


def _run_edges(contig: np.ndarray | None, n_rows: int) -> np.ndarray:
    """Where each run of equal ``contig`` values starts, then ``n_rows`` (None: one run)."""
    contig = np.zeros(n_rows) if contig is None else np.asarray(contig)
    return np.concatenate([[0], np.flatnonzero(contig[1:] != contig[:-1]) + 1, [n_rows]])


def _contig_codes(contig: np.ndarray | None, n_rows: int) -> np.ndarray:
    """Each row's contig as an int64 code (equal codes: equal contigs); zeros for None."""
    if contig is None:
        return np.zeros(n_rows, dtype=np.int64)
    return np.unique(np.asarray(contig), return_inverse=True)[1].astype(np.int64).ravel()


def _plane_band(planes: np.ndarray, codes: np.ndarray, window: int, r2: float) -> np.ndarray:
    """Which pairs of rows at most ``window - 1`` apart of one contig (equal int64 ``codes``)
    exceed ``r2``, ``cov² > R2 (1 + 2^-44) var₁ var₂`` as plink2 compares, over the samples
    called at both: ``band[i, d - 1]`` for rows ``i`` and ``i + d`` (False past the end)."""
    band = np.zeros((planes.shape[0], window - 1), dtype=bool)
    _numba().band(planes, codes, window - 1, r2 * (1.0 + _EPSILON), band)
    return band


def _row_stats(planes: np.ndarray, factor: int, ploidy: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row of bit planes: the major allele frequency over the called samples (NaN:
    none called) and whether the called dosages are all equal (or none is called)."""
    n_rows = planes.shape[0]
    called = np.empty(n_rows, dtype=np.int64)
    totals = np.empty(n_rows, dtype=np.int64)
    constant = np.empty(n_rows, dtype=bool)
    _numba().plane_counts(planes, called, totals, constant)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = totals / (called * (ploidy * factor))
    return np.maximum(p, 1.0 - p), constant


def ld_partition(values: np.ndarray, contig: np.ndarray | None, window: int, r2: float,
                 ploidy: int) -> dict[str, np.ndarray]:
    """The worker's part for one row partition (see the module docstring).

    Returns
    -------
    part : dict
        ``band`` (rows × ``window - 1``, pairs inside the partition), ``major`` and
        ``constant`` (per row, :func:`_row_stats`), ``head`` and ``tail`` (the bit planes
        of the first and last ``window - 1`` rows, for the pairs across partitions).
    """
    width = window - 1
    planes, factor = bit_planes(values, ploidy)
    n_rows = planes.shape[0]
    major, constant = _row_stats(planes, factor, ploidy)
    return {"band": _plane_band(planes, _contig_codes(contig, n_rows), window, r2),
            "major": major, "constant": constant, "head": planes[:width].copy(),
            "tail": planes[max(0, n_rows - width):].copy()}


def _cross_pairs(parts: list[dict[str, np.ndarray]], bounds: np.ndarray, band: np.ndarray,
                 contig: np.ndarray | None, window: int, r2: float) -> None:
    """Fill the entries of ``band`` for the pairs that cross a partition boundary: per
    boundary, the band of the ``window - 1`` rows either side, from the partitions' head
    and tail planes."""
    width = window - 1
    n_rows = int(bounds[-1])
    rows: dict[int, np.ndarray] = {}
    for p, part in enumerate(parts):
        a, b = int(bounds[p]), int(bounds[p + 1])
        rows.update((a + k, row) for k, row in enumerate(part["head"]))
        rows.update((b - len(part["tail"]) + k, row) for k, row in enumerate(part["tail"]))
    codes = _contig_codes(contig, n_rows)
    for cut in (int(c) for c in bounds[1:-1]):
        a, b = max(0, cut - width), min(n_rows, cut + width)
        near = _plane_band(_stacked([rows[i] for i in range(a, b)]), codes[a:b], window, r2)
        crossing = np.arange(a, cut)[:, None] + np.arange(1, window) >= cut
        band[a:cut][crossing] = near[:cut - a][crossing]


def _stacked(rows: list[np.ndarray]) -> np.ndarray:
    """Rows of bit planes as one array, with the most value planes any row has (the
    others padded with zero planes: partitions may differ)."""
    n_planes = max(row.shape[0] for row in rows)
    out = np.zeros((len(rows), n_planes, rows[0].shape[1]), dtype=np.uint64)
    for k, row in enumerate(rows):
        out[k, :row.shape[0]] = row
    return out


# ------------------------------------------------------------------------ the client's scan
def prune_band(band: np.ndarray, major: np.ndarray, constant: np.ndarray,
               contig: np.ndarray | None, window: int, step: int,
               order: int = 2) -> np.ndarray:
    """Return the variants plink2's ``--indep-pairwise`` keeps, from the band alone
    (each contig scanned by :func:`daskstraggle.data._numba_ld.scan_contig`).

    Parameters
    ----------
    band : ndarray of bool of shape (n_variants, window - 1)
        Which pairs of variants at most ``window - 1`` apart exceed the threshold
        (``band`` of :func:`ld_partition`, over all the variants).
    major : ndarray of shape (n_variants,)
        Major allele frequencies (the higher one is dropped from a pair).
    constant : ndarray of bool of shape (n_variants,)
        Variants with no variance (dropped first).
    contig : ndarray of shape (n_variants,) or None
        Each variant's contig, in runs (None: one contig).
    window, step : int
        The window and its step, in variants.
    order : {2, 1}, default=2
        The scan order, as :class:`LDPrune`.

    Returns
    -------
    keep : ndarray of bool of shape (n_variants,)
    """
    removed = np.zeros(band.shape[0], dtype=bool)
    band = np.ascontiguousarray(band, dtype=bool)
    major = np.ascontiguousarray(major, dtype=np.float64)
    scan = _numba().scan_contig
    for a, b in itertools.pairwise(_run_edges(contig, band.shape[0]).tolist()):
        if b - a > 1:  # plink2 skips a contig of one variant
            removed[a:b] |= constant[a:b]
            scan(band, major, removed, a, b, int(window), int(step), int(order), 1.0 + _EPSILON)
    return ~removed


def ld_prune_keep(matrix: Any, ld: LDPrune, *, client: Any = None) -> np.ndarray:
    """Return which rows of a genotype matrix LD pruning keeps (one pass on the workers).

    Parameters
    ----------
    matrix : Matrix
        A genotype matrix (rows = variants), after the other quality-control steps.
    ld : LDPrune
        The window, step and threshold.
    client : distributed.Client or None, default=None
        Run one task per partition there; None: in this process.

    Returns
    -------
    keep : ndarray of bool of shape (n_rows,)

    Raises
    ------
    InvalidParameterError
        If the window's pairs do not fit in the memory available.
    """
    from daskstraggle.data._passes import map_values

    source = matrix.source
    table = matrix.variants
    codes = table.get("variant_contig") if table is not None else None
    contig = None if codes is None else _contig_codes(np.asarray(codes), matrix.n_rows)
    if contig is not None and np.unique(contig).size == 1:
        contig = None
    bounds = np.asarray(matrix.bounds, dtype=np.int64)
    window = _fitting_window(ld, contig, bounds, matrix.n_columns, int(source.ploidy))

    def make(a: int, b: int) -> Any:
        return partial(ld_partition, contig=None if contig is None else contig[a:b],
                       window=window, r2=ld.r2, ploidy=int(source.ploidy))

    parts = map_values(matrix, make, client)
    band, major, constant = (np.concatenate([p[k] for p in parts])
                             for k in ("band", "major", "constant"))
    _cross_pairs(parts, bounds, band, contig, window, ld.r2)
    return prune_band(band, major, constant, contig, window, ld.step, ld.order)


def _pairs_memory(window: int, bounds: np.ndarray, row_bytes: int) -> int:
    """Bytes the client holds for a window: the band (one byte per pair), the partitions'
    head and tail planes, and the rows and band of one partition boundary."""
    width = window - 1
    edges = np.minimum(np.diff(bounds), 2 * width).sum(initial=0)
    return int(bounds[-1] * width + (edges + 2 * width) * row_bytes + 2 * width * width)


def _fitting_window(ld: LDPrune, contig: np.ndarray | None, bounds: np.ndarray,
                    n_samples: int, ploidy: int) -> int:
    """The window to compute with: ``ld.window``, at most the longest contig's variants
    (a window spanning a whole contig keeps the same variants, as in plink2), if the pairs
    it compares fit in free memory; else refused naming the largest window that fits."""
    n_rows = int(bounds[-1])
    longest = int(np.diff(_run_edges(contig, n_rows)).max(initial=2))
    window = max(2, min(ld.window, longest))
    row_bytes = (1 + _value_bits(ploidy)) * _plane_words(n_samples) * 8
    need = _pairs_memory(window, bounds, row_bytes)
    free = _available_memory()
    if need > free:
        low, high = 1, window  # _pairs_memory grows with the window: bisect
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (middle, high) if _pairs_memory(middle, bounds, row_bytes) <= free \
                else (low, middle)
        raise _bad(ld, f"a window of {window} variants (the longest contig has {longest}) "
                       f"over {n_rows} variants compares pairs that need about "
                       f"{need / 2**30:.3g} GiB, more than the {free / 2**30:.3g} GiB of "
                       f"memory free; give a WINDOW of at most {low} variants")
    return window

