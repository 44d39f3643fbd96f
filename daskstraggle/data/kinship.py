"""KING-robust kinship and plink2's ``--king-cutoff``: drop one sample of each related pair.

Over the variants called in both samples, with ``hethet`` (both heterozygous), ``ibs0``
(opposite homozygotes), ``het_hom`` and ``hom_het`` (one heterozygous, the other not),

    φ = 1/2 − (4 · ibs0 + het_hom + hom_het) / (4 · (hethet + min(het_hom, hom_het)))

(Manichaikul et al. 2010, plink2's form; see ``docs/genotype-pca.md``, *Relatedness*).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from daskstraggle._numba import import_numba_module
from daskstraggle.errors import InvalidParameterError

__all__ = ["STRIP_PAIRS", "RelatedPairs", "check_king_cutoff", "king_bits", "king_keep",
           "king_prune", "king_related"]

#: Pairs of samples whose kinships are held at once (a strip of rows of the pair matrix):
#: 9 bytes each (the float64 kinship and whether it is above the cutoff).
STRIP_PAIRS = 2**21

#: One parallel kernel at a time (numba's workqueue threading layer takes no more).
_lock = threading.Lock()


@dataclass(frozen=True, kw_only=True, slots=True)
class RelatedPairs:
    """The pairs of samples whose kinship is above the cutoff.

    Parameters
    ----------
    pairs : ndarray of int64 of shape (n_pairs, 2)
        Sample indices ``(i, j)``, ``i < j``, in row-major order.
    kinship : ndarray of float64 of shape (n_pairs,)
        Their KING-robust kinships.
    """

    pairs: np.ndarray
    kinship: np.ndarray


def check_king_cutoff(value: object) -> float | None:
    """Return the cutoff as a float (None: none).

    Raises
    ------
    InvalidParameterError
        If it is not a number in (0, 0.5] (one line naming ``king_cutoff`` and
        ``--king-cutoff``).
    """
    if value is None:
        return None
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    number = float(value) if ok else float("nan")  # type: ignore[arg-type]
    if not 0.0 < number <= 0.5:
        raise InvalidParameterError(
            "The 'king_cutoff' parameter of GenotypeQC (CLI: --king-cutoff) must be a "
            "kinship in (0, 0.5] (0.0884 removes second-degree relatives and closer, "
            f"0.177 first-degree, 0.354 duplicates). Got {value!r} instead."
        )
    return number


#: The compiled kernels (:mod:`daskstraggle.data._numba_king`), imported on first use.
_kernels = partial(import_numba_module, "daskstraggle.data._numba_king")


def king_bits(values: np.ndarray) -> np.ndarray:
    """Return the sample-major bit planes of diploid dosages.

    Parameters
    ----------
    values : ndarray of int of shape (n_variants, n_samples)
        Dosages 0, 1, 2; negative where missing.

    Returns
    -------
    bits : ndarray of uint64 of shape (n_samples, 2, ceil(n_variants / 64))
        Bit ``v % 64`` of word ``v // 64`` is set in plane 0 when variant ``v``'s call is
        homozygous (0 or 2) and in plane 1 when it carries the alternate allele (1 or 2);
        a missing call, and the padding after the last variant, set neither.
    """
    values = np.ascontiguousarray(values, dtype=np.int8)
    n_variants, n_samples = values.shape
    bits = np.empty((n_samples, 2, -(-n_variants // 64)), dtype=np.uint64)
    _kernels().sample_bits(values, bits)
    return bits


def king_related(bits: np.ndarray, cutoff: float, *,
                 max_pairs: int | None = None) -> RelatedPairs:
    """Return the pairs of samples whose KING-robust kinship is above ``cutoff``.

    Parameters
    ----------
    bits : ndarray of uint64 of shape (n_samples, 2, n_words)
        Bit planes from :func:`king_bits` (joined along the last axis for several
        partitions of variants).
    cutoff : float
        Pairs with a kinship above it are kept (a pair with no heterozygous call to
        compare has none, and is never kept).
    max_pairs : int or None, default=None
        Kinships held at once (one row of the pair matrix at least, 9 bytes each); None:
        :data:`STRIP_PAIRS`.

    Returns
    -------
    related : RelatedPairs
    """
    limit = STRIP_PAIRS if max_pairs is None else int(max_pairs)
    bits = np.ascontiguousarray(bits)
    kernels = _kernels()
    found, kinships = [np.empty((0, 2), dtype=np.int64)], [np.empty(0)]
    start, n_samples = 0, bits.shape[0]
    while start < n_samples:  # strips of rows of the upper triangle, ~limit pairs each
        stop = min(start + max(1, limit // (n_samples - start)), n_samples)
        kinship = np.full((stop - start, bits.shape[0] - start), np.nan)
        with _lock:
            kernels.pair_kinship(bits, start, stop, kinship)
        rows, columns = np.nonzero(kinship > cutoff)  # only j > i has a kinship
        found.append(np.stack([rows + start, columns + start], axis=1).astype(np.int64))
        kinships.append(kinship[rows, columns])
        start = stop
    return RelatedPairs(pairs=np.concatenate(found), kinship=np.concatenate(kinships))


def king_prune(n_samples: int, pairs: np.ndarray) -> np.ndarray:
    """Return which samples plink2's ``--king-cutoff`` keeps, given the related pairs:
    while a pair remains, remove the partner of the first sample with exactly one related
    sample, else the first sample of most related samples.

    Parameters
    ----------
    n_samples : int
        Samples in all.
    pairs : ndarray of int of shape (n_pairs, 2)
        The related pairs, each once, ``i != j``.

    Returns
    -------
    keep : ndarray of bool of shape (n_samples,)
    """
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    ends = np.concatenate([pairs[:, 0], pairs[:, 1]])
    partners = np.concatenate([pairs[:, 1], pairs[:, 0]])[np.argsort(ends, kind="stable")]
    degree = np.bincount(ends, minlength=n_samples)
    first = np.concatenate([[0], np.cumsum(degree)])  # partners[first[s]:first[s + 1]]
    keep = np.ones(n_samples, dtype=bool)
    while degree.any():
        ones = np.flatnonzero(degree == 1)
        if ones.size:
            mine = partners[first[ones[0]]:first[ones[0] + 1]]
            drop = int(mine[keep[mine]][0])  # its one partner still kept
        else:
            drop = int(np.argmax(degree))  # the first of the most related
        mine = partners[first[drop]:first[drop + 1]]
        degree[mine[keep[mine]]] -= 1
        degree[drop] = 0
        keep[drop] = False
    return keep


def king_keep(matrix: Any, cutoff: float, *,
              client: Any = None) -> tuple[np.ndarray, RelatedPairs]:
    """Return the samples ``--king-cutoff`` keeps and the related pairs (one pass).

    Parameters
    ----------
    matrix : Matrix
        A diploid genotype matrix (rows = variants), after the variant filters.
    cutoff : float
        Samples of a pair with kinship above it are related.
    client : distributed.Client or None, default=None
        Build the bit planes with one task per partition there; None: in this process.
        The pairs are counted in this process, on all its cores.

    Returns
    -------
    keep : ndarray of bool of shape (n_samples,)
    related : RelatedPairs
        The pairs above the cutoff, before pruning.

    Raises
    ------
    InvalidParameterError
        If the calls are not diploid.
    """
    from daskstraggle.data._passes import map_values

    source = matrix.source
    if source.ploidy != 2:
        raise InvalidParameterError(
            "The 'king_cutoff' parameter (CLI: --king-cutoff) compares diploid genotypes; "
            f"these calls have ploidy {source.ploidy}. Drop it."
        )
    parts = map_values(matrix, lambda a, b: king_bits, client)
    bits = np.concatenate(parts, axis=2)
    del parts
    related = king_related(bits, cutoff)
    return king_prune(bits.shape[0], related.pairs), related

