"""KING-robust kinship and plink2's ``--king-cutoff``: drop one sample of each related pair.

The KING-robust kinship of samples ``i`` and ``j`` (Manichaikul et al. 2010, in plink2's
form) counts, over the variants called in both,

- ``hethet``: both heterozygous,
- ``ibs0``: opposite homozygotes (``0`` and ``2``),
- ``het_hom[i, j]``: ``i`` heterozygous and ``j`` homozygous,

and is

    φ = 1/2 − (4 · ibs0 + het_hom[i, j] + het_hom[j, i])
              / (4 · (hethet + min(het_hom[i, j], het_hom[j, i])))

(0.5 for a duplicate, 0.25 for parent and child or full siblings, 0.125 for second degree;
plink2's usual cutoff 0.0884 = 2^-3.5 removes second degree and closer).

The counts are samples × samples sums over variants of products of indicator matrices
(``H`` heterozygous, ``A`` homozygous reference, ``B`` homozygous alternate, one row per
variant): ``hethet = HᵀH``, ``ibs0 = AᵀB + BᵀA``, ``het_hom = Hᵀ(A + B)``. So they are
computed like the Gram matrix of a genotype PCA: each worker sums its partition's rows
(float32 products, exact while a count stays below 2²⁴ variants) and the client adds the
partitions' sums as they arrive. The memory is three samples × samples float32 matrices per
task and on the client (12 N² bytes: 48 MB at N = 2000, 1.2 GB at N = 10 000).

The pruning is plink2's: in the graph whose edges are the pairs with φ > cutoff, while an
edge remains, remove the partner of the first sample (in column order) that has exactly one
related sample if there is such a sample, else the first sample of most related samples.

No dask here: the pass runs through :func:`daskstraggle._passes.sum_partitions`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from daskstraggle.errors import InvalidParameterError

__all__ = ["check_king_cutoff", "king_counts", "king_keep", "king_kinship", "king_prune"]


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


def king_counts(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return one partition's ``hethet``, ``ibs0`` and ``het_hom`` (samples × samples).

    Parameters
    ----------
    values : ndarray of int8 of shape (n_variants, n_samples)
        Diploid dosages, negative where missing.

    Returns
    -------
    hethet, ibs0, het_hom : ndarray of float32 of shape (n_samples, n_samples)
        Exact counts while below 2^24; ``ibs0`` is symmetric, ``het_hom[i, j]`` counts
        ``i`` heterozygous and ``j`` homozygous.
    """
    het = (values == 1).astype(np.float32)
    ref = (values == 0).astype(np.float32)
    alt = (values == 2).astype(np.float32)
    opposite = ref.T @ alt
    return het.T @ het, opposite + opposite.T, het.T @ (ref + alt)


def king_kinship(hethet: np.ndarray, ibs0: np.ndarray, het_hom: np.ndarray) -> np.ndarray:
    """Return the KING-robust kinship matrix from summed counts (NaN where a pair has no
    heterozygous call to compare; the diagonal is 0.5)."""
    hethet, ibs0, het_hom = (np.rint(c).astype(np.int64) for c in (hethet, ibs0, het_hom))
    other = het_hom.T
    denominator = 4 * (hethet + np.minimum(het_hom, other))
    with np.errstate(divide="ignore", invalid="ignore"):
        phi = 0.5 - (4 * ibs0 + het_hom + other) / denominator.astype(np.float64)
    phi[denominator == 0] = np.nan
    np.fill_diagonal(phi, 0.5)
    return phi


def king_prune(related: np.ndarray) -> np.ndarray:
    """Return which samples plink2's ``--king-cutoff`` keeps, given the related pairs.

    Parameters
    ----------
    related : ndarray of bool of shape (n_samples, n_samples)
        Symmetric, False on the diagonal: the pairs above the cutoff.

    Returns
    -------
    keep : ndarray of bool of shape (n_samples,)
    """
    related = related.copy()
    np.fill_diagonal(related, False)
    degree = related.sum(axis=1)
    keep = np.ones(related.shape[0], dtype=bool)
    while degree.any():
        ones = np.flatnonzero(degree == 1)
        if ones.size:
            drop = int(np.flatnonzero(related[ones[0]])[0])
        else:
            drop = int(np.argmax(degree))  # the first of the most related
        partners = np.flatnonzero(related[drop])
        related[drop, partners] = related[partners, drop] = False
        degree[partners] -= 1
        degree[drop] = 0
        keep[drop] = False
    return keep


def king_keep(matrix: Any, cutoff: float, *, client: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """Return the samples ``--king-cutoff`` keeps and the kinship matrix (one pass).

    Parameters
    ----------
    matrix : Matrix
        A diploid genotype matrix (rows = variants), after the variant filters.
    cutoff : float
        Samples of a pair with kinship above it are related.
    client : distributed.Client or None, default=None
        Run one task per partition there; None: in this process.

    Returns
    -------
    keep : ndarray of bool of shape (n_samples,)
    kinship : ndarray of shape (n_samples, n_samples)
    """
    from dataclasses import replace

    from daskstraggle._passes import sum_partitions

    source = matrix.source
    if source.ploidy != 2:
        raise InvalidParameterError(
            "The 'king_cutoff' parameter (CLI: --king-cutoff) compares diploid genotypes; "
            f"these calls have ploidy {source.ploidy}. Drop it."
        )
    raw = replace(matrix, source=source.count_source())
    hethet, ibs0, het_hom = sum_partitions(raw, _king_task, client)
    kinship = king_kinship(hethet, ibs0, het_hom)
    related = np.nan_to_num(kinship, nan=-np.inf) > cutoff
    np.fill_diagonal(related, False)
    return king_prune(related), kinship


def _king_task(block: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The task body: :func:`king_counts` on a block's raw dosages."""
    return king_counts(np.asarray(block.values))
