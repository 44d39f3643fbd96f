"""Linkage-disequilibrium pruning: plink2's ``--indep-pairwise`` with a variant-count window.

The pruning keeps a subset of variants in approximate linkage equilibrium. It has two parts:

1. **On the workers** (one task per row partition, in the same straggler-resilient passes as
   the rest of quality control): for every pair of variants of one contig at most
   ``window - 1`` rows apart, whether their squared correlation exceeds ``r2``. The
   correlation is that of the allele dosages over the samples called at *both* variants
   (pairwise-complete, as plink2), computed from integer counts, so the comparison
   ``cov² > r2 · var₁ · var₂`` is exact and gives plink2's answer on ties. Each partition
   returns a boolean band (its rows × the ``window - 1`` following rows) and its first and
   last ``window - 1`` rows; the pairs that cross a partition boundary are then computed on
   the client from those rows.
2. **On the client**, plink2's greedy scan over the band alone (no genotype is read again):
   per contig, windows of ``window`` variants advance by ``step``; in each window the
   variants new to it are taken from the last to the first, each compared with the
   variants before it in the window (nearest first) that are still kept; for a pair above
   the threshold the variant with the higher *major* allele frequency (the rarer minor
   allele is preferred) is dropped, the later one on a tie (within a relative 2⁻⁴⁴).
   Dropping the later variant ends its scan; dropping the earlier one goes on. A variant
   whose called dosages are all equal (or that has no call) is dropped first; a contig with
   a single variant keeps it (as plink2, which skips such contigs).

The kept set is plink2's ``.prune.in`` on the same data (checked against plink2 in
``pipelines/genotype_pca.py --sections ld``). Multi-allelic sites use the dosage of all
alternate alleles, where plink2 collapses to the major allele: keep biallelic sites
(``max_alleles=2``) to compare.

No dask here: the pass runs through :func:`daskstraggle._passes.map_partitions`.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from daskstraggle.errors import InvalidParameterError

__all__ = ["LDPrune", "band_exceeds", "ld_prune_keep", "parse_ld_prune", "prune_band"]

#: plink2's relative tolerance (``kSmallEpsilon``, 2^-44): on the threshold and on ties of
#: the major allele frequency.
_EPSILON = 2.0**-44

#: Rows per tile of the band's products (each tile is ``_TILE + window - 1`` rows wide).
_TILE = 256


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
        The scan order, plink2's ``--indep-order``: 2 is plink2's default since alpha 5
        (2023); 1 is PLINK 1.9's order (and plink2's default before alpha 5). They keep
        slightly different sets.
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
        parts: list[Any] = [value.window, value.step, value.r2]
        given = value.order
    elif isinstance(value, str):
        if re.search(r"kb\b", value, flags=re.IGNORECASE):
            raise _bad(value, "a window in kilobases is not supported; give it in variants")
        parts = re.split(r"\s*,\s*|\s+", value.strip())
        if "" in parts:
            raise _bad(value, "a field is empty; give each of WINDOW, STEP and R2")
        orders = [p for p in parts if p.lower().startswith("order=")]
        parts = [p for p in parts if p not in orders]
        given = orders[-1].split("=", 1)[1] if orders else 2
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
        raise _bad(value, "WINDOW and STEP are whole numbers, R2 a number, order 1 or 2"
                   ) from None
    return _checked(LDPrune(window, step, r2, chosen))


def _integer(value: Any) -> int:
    number = float(value)
    if not number.is_integer():
        raise ValueError(value)
    return int(number)


def _checked(ld: LDPrune) -> LDPrune:
    if ld.window < 2:
        raise _bad(ld, f"WINDOW is at least 2 variants (got {ld.window})")
    if not 1 <= ld.step <= ld.window:
        raise _bad(ld, f"STEP is in [1, WINDOW={ld.window}] (got {ld.step})")
    if not 0.0 <= ld.r2 < 1.0:
        raise _bad(ld, f"R2 is in [0, 1) (got {ld.r2:g})")
    if ld.order not in (1, 2):
        raise _bad(ld, f"the order (CLI: --ld-prune-order) is 1 or 2 (got {ld.order})")
    return ld


def _bad(value: object, fix: str) -> InvalidParameterError:
    return InvalidParameterError(
        f"The 'ld_prune' parameter of GenotypeQC (CLI: --ld-prune) must be WINDOW,STEP,R2 "
        f"as plink2's --indep-pairwise (e.g. '50,5,0.2'): {fix}. Got {value!r} instead."
    )


# ----------------------------------------------------------------------- the workers' band
def _products(rows: np.ndarray, cols: np.ndarray) -> tuple[np.ndarray, ...]:
    """For int8 dosages (negative: missing) ``rows`` (r × n) and ``cols`` (c × n): the
    pairwise-complete counts ``nm, s_row, s_col, q_row, q_col, dot`` (each r × c)."""
    # float32 products of integers are exact while each sum stays below 2^24: dosages of at
    # most 2 over up to 4 million samples (float64 beyond)
    dtype = np.float32 if rows.shape[1] <= 4_000_000 else np.float64

    def parts(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        called: np.ndarray = (x >= 0).astype(dtype)
        value: np.ndarray = np.where(x >= 0, x, 0).astype(dtype)
        return called, value, np.square(value)

    o1, g1, h1 = parts(rows)
    o2, g2, h2 = parts(cols)
    return (o1 @ o2.T, g1 @ o2.T, o1 @ g2.T, h1 @ o2.T, o1 @ h2.T, g1 @ g2.T)


def _exceeds(counts: tuple[np.ndarray, ...], threshold: float) -> np.ndarray:
    """plink2's test ``cov² > threshold · var₁ · var₂`` on exact integer counts."""
    nm, s1, s2, q1, q2, dot = (np.rint(c).astype(np.int64) for c in counts)
    cov = (dot * nm - s1 * s2).astype(np.float64)
    var1 = (q1 * nm - s1 * s1).astype(np.float64)
    var2 = (q2 * nm - s2 * s2).astype(np.float64)
    return cov * cov > threshold * var1 * var2


def band_exceeds(values: np.ndarray, contig: np.ndarray | None, window: int,
                 r2: float) -> np.ndarray:
    """Return which pairs of rows at most ``window - 1`` apart exceed ``r2``.

    Parameters
    ----------
    values : ndarray of int8 of shape (n_rows, n_samples)
        Dosages, negative where missing.
    contig : ndarray of shape (n_rows,) or None
        Each row's contig: pairs across contigs never exceed. None: one contig.
    window : int
        The window, in rows.
    r2 : float
        The threshold R2; a pair exceeds it when ``cov² > R2 (1 + 2^-44) var₁ var₂``, as
        plink2 compares.

    Returns
    -------
    band : ndarray of bool of shape (n_rows, window - 1)
        ``band[i, d - 1]``: rows ``i`` and ``i + d`` exceed (False past the last row).
    """
    n = values.shape[0]
    width = window - 1
    band = np.zeros((n, width), dtype=bool)
    threshold = r2 * (1.0 + _EPSILON)
    for a in range(0, n, _TILE):
        b = min(a + _TILE, n)
        end = min(b + width, n)
        over = _exceeds(_products(values[a:b], values[a + 1:end]), threshold)
        for d in range(1, width + 1):
            # row i (tile-local) against column i + d - 1 of the block that starts at a + 1
            rows = np.arange(b - a)
            cols = rows + d - 1
            ok = cols < end - a - 1
            band[a + rows[ok], d - 1] = over[rows[ok], cols[ok]]
    if contig is not None:
        contig = np.asarray(contig)
        for d in range(1, min(width, n - 1) + 1):
            band[: n - d, d - 1] &= contig[: n - d] == contig[d:]
    return band


def _row_stats(values: np.ndarray, ploidy: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row: the major allele frequency over the called samples (NaN: none called) and
    whether the called dosages are all equal (or none is called)."""
    called = values >= 0
    n = np.count_nonzero(called, axis=1)
    total = np.where(called, values, 0).sum(axis=1, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = total / (n * ploidy)
    low = np.where(called, values, np.iinfo(np.int8).max).min(axis=1)
    high = np.where(called, values, -1).max(axis=1)
    return np.maximum(p, 1.0 - p), (n == 0) | (low == high)


def ld_partition(values: np.ndarray, contig: np.ndarray | None, window: int, r2: float,
                 ploidy: int) -> dict[str, np.ndarray]:
    """The worker's part for one row partition (see the module docstring).

    Returns
    -------
    part : dict
        ``band`` (rows × ``window - 1``, pairs inside the partition), ``major`` and
        ``constant`` (per row, :func:`_row_stats`), ``head`` and ``tail`` (the first and
        last ``window - 1`` rows, for the pairs across partitions).
    """
    width = window - 1
    major, constant = _row_stats(values, ploidy)
    return {"band": band_exceeds(values, contig, window, r2), "major": major,
            "constant": constant, "head": values[:width].copy(),
            "tail": values[-width:].copy() if values.shape[0] else values[:0].copy()}


def _cross_pairs(parts: list[dict[str, np.ndarray]], bounds: np.ndarray, band: np.ndarray,
                 contig: np.ndarray | None, window: int, r2: float) -> None:
    """Fill the entries of ``band`` for the pairs that cross a partition boundary, from
    the partitions' head and tail rows."""
    width = window - 1
    threshold = r2 * (1.0 + _EPSILON)
    rows: dict[int, np.ndarray] = {}
    for p, part in enumerate(parts):
        a, b = int(bounds[p]), int(bounds[p + 1])
        for k, row in enumerate(part["head"]):
            rows[a + k] = row
        for k, row in enumerate(part["tail"]):
            rows[b - len(part["tail"]) + k] = row
    for p in range(len(parts) - 1):
        cut = int(bounds[p + 1])
        left = [i for i in range(max(0, cut - width), cut)]
        right = [j for j in range(cut, min(cut + width, int(bounds[-1])))]
        if not left or not right:
            continue
        over = _exceeds(_products(np.stack([rows[i] for i in left]),
                                  np.stack([rows[j] for j in right])), threshold)
        for x, i in enumerate(left):
            for y, j in enumerate(right):
                d = j - i
                if d <= width and (contig is None or contig[i] == contig[j]):
                    band[i, d - 1] = over[x, y]


# ------------------------------------------------------------------------ the client's scan
def prune_band(band: np.ndarray, major: np.ndarray, constant: np.ndarray,
               contig: np.ndarray | None, window: int, step: int,
               order: int = 2) -> np.ndarray:
    """Return the variants plink2's ``--indep-pairwise`` keeps, from the band alone.

    Parameters
    ----------
    band : ndarray of bool of shape (n_variants, window - 1)
        :func:`band_exceeds` over all the variants.
    major : ndarray of shape (n_variants,)
        Major allele frequencies (the higher one is dropped from a pair).
    constant : ndarray of bool of shape (n_variants,)
        Variants with no variance (dropped first).
    contig : ndarray of shape (n_variants,) or None
        Each variant's contig, in runs (None: one contig).
    window, step : int
        The window and its step, in variants.
    order : {2, 1}, default=2
        plink2's scan order (``--indep-order``): 2, its default since alpha 5 (2023); 1,
        PLINK 1.x's and plink2's before.

    Returns
    -------
    keep : ndarray of bool of shape (n_variants,)
    """
    n = band.shape[0]
    removed = np.zeros(n, dtype=bool)
    if contig is None:
        runs = [(0, n)]
    else:
        cuts = np.flatnonzero(np.asarray(contig)[1:] != np.asarray(contig)[:-1]) + 1
        edges = np.concatenate([[0], cuts, [n]])
        runs = [(int(a), int(b)) for a, b in itertools.pairwise(edges)]
    for a, b in runs:
        if b - a > 1:  # plink2 skips a contig of one variant
            removed[a:b] |= constant[a:b]
            _scan_contig(band, major, removed, a, b, window, step, order)
    return ~removed


def _scan_contig(band: np.ndarray, major: np.ndarray, removed: np.ndarray, first: int,
                 end: int, window: int, step: int, order: int = 2) -> None:
    """plink2's scan (``order`` 2, or 1: PLINK 1.x's) over the variants ``[first, end)`` of
    one contig, windows of ``window`` variants moving on by ``step``."""
    scan = _scan_backwards if order == 2 else _scan_forwards
    start, stop = first, min(first + window, end)
    members: list[int] = []
    unchecked: dict[int, int] = {}
    loaded, split = first, 0
    while True:
        members.extend(range(loaded, stop))
        unchecked.update((v, v + 1) for v in range(loaded, stop))
        loaded = stop
        scan(band, major, removed, members, split, stop, unchecked)
        if stop == end:
            return
        start += step
        stop = min(start + window, end)
        members = [v for v in members if not removed[v] and v >= start]
        split = len(members)


def _drop_second(major: np.ndarray, first: int, second: int) -> bool:
    """Whether ``second`` (not ``first``) is dropped from a pair in LD: the one with the
    higher major allele frequency, ``second`` on a tie."""
    return bool(major[first] <= major[second] * (1.0 + _EPSILON))


def _scan_backwards(band: np.ndarray, major: np.ndarray, removed: np.ndarray,
                    members: list[int], split: int, stop: int,
                    unchecked: dict[int, int]) -> None:
    """plink2's default order (``--indep-order 2``, alpha 5 and later): the window's new
    variants from the last, each against the kept variants before it, nearest first."""
    for pos in range(len(members) - 1, max(split, 1) - 1, -1):
        second = members[pos]
        for earlier in range(pos - 1, -1, -1):
            other = members[earlier]
            if removed[other] or not band[other, second - other - 1]:
                continue
            if _drop_second(major, other, second):
                removed[second] = True
                break
            removed[other] = True


def _scan_forwards(band: np.ndarray, major: np.ndarray, removed: np.ndarray,
                   members: list[int], split: int, stop: int,
                   unchecked: dict[int, int]) -> None:
    """PLINK 1.x's order (``--indep-order 1``; plink2's default before alpha 5): each kept
    variant from the first against the kept variants after it it has not yet been compared
    with, until a pass over the window drops nothing more."""
    while True:
        before = int(removed[members].sum()) if members else 0
        for pos, first in enumerate(members):
            if removed[first] or unchecked[first] == stop:
                continue
            later = [q for q in range(pos + 1, len(members))
                     if not removed[members[q]] and members[q] >= unchecked[first]]
            unchecked[first] = stop
            for q in later:
                second = members[q]
                if not band[first, second - first - 1]:
                    continue
                if not _drop_second(major, first, second):
                    removed[first] = True
                else:
                    removed[second] = True
                    rest = [r for r in range(q + 1, len(members)) if not removed[members[r]]]
                    unchecked[first] = members[rest[0]] if rest else stop
                break
        if (int(removed[members].sum()) if members else 0) == before:
            return


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
    """
    from dataclasses import replace
    from functools import partial

    from daskstraggle._passes import map_partitions

    source = matrix.source
    raw = replace(matrix, source=source.count_source())
    table = matrix.variants
    codes = table.get("variant_contig") if table is not None else None
    contig = None if codes is None else np.asarray(codes)
    if contig is not None and np.unique(contig).size == 1:
        contig = None

    window = _fitting_window(ld, contig, matrix.n_rows)

    def make(a: int, b: int) -> Any:
        return partial(_ld_task, contig=None if contig is None else contig[a:b],
                       window=window, r2=ld.r2, ploidy=int(source.ploidy))

    parts = map_partitions(raw, make, client)
    band = np.concatenate([p["band"] for p in parts])
    bounds = np.asarray(matrix.bounds, dtype=np.int64)
    _cross_pairs(parts, bounds, band, contig, window, ld.r2)
    major = np.concatenate([p["major"] for p in parts])
    constant = np.concatenate([p["constant"] for p in parts])
    return prune_band(band, major, constant, contig, window, ld.step, ld.order)


def _fitting_window(ld: LDPrune, contig: np.ndarray | None, n_rows: int) -> int:
    """The window to compute with: ``ld.window``, at most the longest contig's variants
    (a window that spans a whole contig keeps the same variants, as in plink2), if the
    pairs it compares fit in the memory this machine has free; else refused.

    Raises
    ------
    InvalidParameterError
        If the band of pairs (one byte per pair, on the client) and a task's products
        need more memory than is available, naming the largest window that fits.
    """
    cuts = (np.array([], dtype=np.int64) if contig is None
            else np.flatnonzero(contig[1:] != contig[:-1]) + 1)
    longest = int(np.diff(np.concatenate([[0], cuts, [n_rows]])).max(initial=2))
    window = max(2, min(ld.window, longest))
    # the band (1 byte per pair) and a tile's products (about 100 bytes per entry)
    need = n_rows * (window - 1) + 100 * _TILE * (_TILE + window)
    free = _available_memory()
    if need > free:
        fits = max(0, (free - 100 * _TILE * _TILE + n_rows) // (n_rows + 100 * _TILE))
        raise _bad(ld, f"a window of {window} variants (the longest contig has {longest}) "
                       f"over {n_rows} variants compares pairs that need about "
                       f"{need / 2**30:.3g} GiB, more than the {free / 2**30:.3g} GiB of "
                       f"memory free; give a WINDOW of at most {fits} variants")
    return window


def _available_memory() -> int:
    """Bytes of memory this machine has available (psutil)."""
    import psutil

    return int(psutil.virtual_memory().available)


def _ld_task(block: Any, *, contig: np.ndarray | None, window: int, r2: float,
             ploidy: int) -> dict[str, np.ndarray]:
    """The task body: :func:`ld_partition` on a block's raw dosages."""
    return ld_partition(np.asarray(block.values), contig, window, r2, ploidy)
