"""Hardy-Weinberg equilibrium: the exact test of Wigginton, Cutler and Abecasis (2005).

For a biallelic variant with ``n`` called diploid genotypes, ``n_a`` copies of the rarer
allele and ``h`` heterozygotes observed, the test conditions on ``n`` and ``n_a``: under
equilibrium the number of heterozygotes ``k`` (of the parity of ``n_a``) has probability

    P(k) = n! / (n_AA! k! n_BB!) * 2^k * n_a! (2n - n_a)! / (2n)!

and the p-value is the total probability of the ``k`` at most as likely as the observed
``h`` (plink2's ``--hwe`` and ``--hardy``, without the mid-p adjustment). The probabilities
are built from the most likely ``k`` outwards by the ratio of neighbours, as in the paper,
so no factorial is formed.

Pure numpy: runs on the workers, inside the counting pass of quality control.
"""

from __future__ import annotations

import numpy as np

__all__ = ["hwe_exact_p", "hwe_exact_p_rows"]

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
    het, hom_1, hom_2 = int(het), int(hom_1), int(hom_2)
    rare_hom = min(hom_1, hom_2)
    n = het + hom_1 + hom_2
    rare = 2 * rare_hom + het
    if n == 0 or rare == 0:
        return 1.0
    # the most likely heterozygote count, of the parity of ``rare``
    mid = rare * (2 * n - rare) // (2 * n)
    if mid % 2 != rare % 2:
        mid += 1
    probs = np.zeros(rare + 1)
    probs[mid] = 1.0
    homr, homc = (rare - mid) // 2, n - mid - (rare - mid) // 2
    for k in range(mid, 1, -2):  # fewer heterozygotes: two more homozygotes each step
        probs[k - 2] = probs[k] * k * (k - 1) / (4.0 * (homr + 1) * (homc + 1))
        homr, homc = homr + 1, homc + 1
    homr, homc = (rare - mid) // 2, n - mid - (rare - mid) // 2
    for k in range(mid, rare - 1, 2):  # more heterozygotes
        probs[k + 2] = probs[k] * 4.0 * homr * homc / ((k + 2.0) * (k + 1.0))
        homr, homc = homr - 1, homc - 1
    probs /= probs.sum()
    observed = probs[het]
    return float(min(1.0, probs[probs <= observed * (1.0 + _TIES)].sum()))


def hwe_exact_p_rows(dosages: np.ndarray) -> np.ndarray:
    """Return the exact HWE p-value of each row of diploid dosages (-1: missing).

    Parameters
    ----------
    dosages : ndarray of int of shape (n_variants, n_samples)
        Alternate allele counts 0, 1, 2 per call; negative for a missing call.

    Returns
    -------
    p : ndarray of shape (n_variants,)
    """
    values = np.asarray(dosages)
    het = np.count_nonzero(values == 1, axis=1)
    hom_ref = np.count_nonzero(values == 0, axis=1)
    hom_alt = np.count_nonzero(values == 2, axis=1)
    return np.array([hwe_exact_p(h, a, b) for h, a, b in zip(het, hom_ref, hom_alt,
                                                             strict=True)])
