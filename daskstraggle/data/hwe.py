"""Hardy-Weinberg equilibrium: the exact test of Wigginton, Cutler and Abecasis (2005).

For a biallelic variant with ``n`` called diploid genotypes, ``n_a`` copies of the rarer
allele and ``h`` heterozygotes observed, the test conditions on ``n`` and ``n_a``: under
equilibrium the number of heterozygotes ``k`` (of the parity of ``n_a``) has probability

    P(k) = n! / (n_AA! k! n_BB!) * 2^k * n_a! (2n - n_a)! / (2n)!

and the p-value is the total probability of the ``k`` at most as likely as the observed
``h`` (plink2's ``--hwe`` and ``--hardy``, without the mid-p adjustment).
"""

from __future__ import annotations

import numpy as np

from daskstraggle._numba import import_numba_module

__all__ = ["hwe_exact_p", "hwe_exact_p_counts"]

#: Relative tolerance within which a probability counts as equal to the observed one
#: (plink's: ties of the recurrence's rounding count as at most as likely).
_TIES = 1e-7


def hwe_exact_p(het: int, hom_1: int, hom_2: int) -> float:
    """Return the exact two-sided HWE p-value of one variant's genotype counts.

    Parameters
    ----------
    het, hom_1, hom_2 : int
        Heterozygous and the two homozygous genotype counts (called genotypes only).

    Returns
    -------
    p : float
        In (0, 1]; 1 for a variant with no called genotype or a monomorphic one.

    Examples
    --------
    >>> round(hwe_exact_p(57, 14, 50), 4)
    0.8423
    >>> hwe_exact_p(0, 10, 10) < 1e-5      # no heterozygote at p = 0.5
    True
    """
    return float(hwe_exact_p_counts(np.array([het]), np.array([hom_1]), np.array([hom_2]))[0])


def hwe_exact_p_counts(het: np.ndarray, hom_1: np.ndarray, hom_2: np.ndarray) -> np.ndarray:
    """Return the exact HWE p-value of each variant's genotype counts, once per distinct
    count triple (compiled with numba, imported on first use).

    The probabilities are built from the most likely heterozygote count outwards by the
    ratio of neighbours (Wigginton et al.), so no factorial is formed; each side stops once
    its terms fall below ``1e-17`` of the observed count's (about ``sqrt(n_a)`` steps).

    Parameters
    ----------
    het, hom_1, hom_2 : ndarray of int of shape (n_variants,)
        Heterozygous and the two homozygous genotype counts (called genotypes only).

    Returns
    -------
    p : ndarray of shape (n_variants,)
        In (0, 1]; 1 where no genotype was called or the variant is monomorphic.
    """
    counts = np.stack([np.asarray(c, dtype=np.int64).ravel() for c in (het, hom_1, hom_2)], axis=1)
    if not counts.size:
        return np.ones(0)
    unique, inverse = _distinct_rows(counts)
    p_values = import_numba_module("daskstraggle.data._numba_hwe").p_values
    p = p_values(*(np.ascontiguousarray(unique[:, j]) for j in range(3)), _TIES)
    return np.asarray(p[inverse.ravel()], dtype=np.float64)


def _distinct_rows(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of non-negative ``counts`` (n, 3) and each row's index among them
    (one int64 key per row when each count is below 2^21: a faster 1-D ``np.unique``)."""
    top = int(counts.max()) + 1
    if top < 2**21:
        keys = (counts[:, 0] * top + counts[:, 1]) * top + counts[:, 2]
        _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        return counts[first], inverse
    return np.unique(counts, axis=0, return_inverse=True)
