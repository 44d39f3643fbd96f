"""Hardy-Weinberg equilibrium: the exact test of Wigginton, Cutler and Abecasis (2005).

For a biallelic variant with ``n`` called diploid genotypes, ``n_a`` copies of the rarer
allele and ``h`` heterozygotes observed, the test conditions on ``n`` and ``n_a``: under
equilibrium the number of heterozygotes ``k`` (of the parity of ``n_a``) has probability

    P(k) = n! / (n_AA! k! n_BB!) * 2^k * n_a! (2n - n_a)! / (2n)!

and the p-value is the total probability of the ``k`` at most as likely as the observed
``h`` (plink2's ``--hwe`` and ``--hardy``, without the mid-p adjustment). The probabilities
are built from the most likely ``k`` outwards by the ratio of neighbours, as in the paper,
so no factorial is formed.

Compiled with numba (imported on first use): runs on the workers, inside the counting pass
of quality control, once per distinct count triple.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["hwe_exact_p", "hwe_exact_p_counts", "hwe_exact_p_rows"]

#: Relative tolerance within which a probability counts as equal to the observed one
#: (plink's: ties of the recurrence's rounding count as at most as likely).
_TIES = 1e-7

#: The compiled test, built on first use (numba is imported only then).
_COMPILED: dict[str, Any] = {}


def _compiled() -> Any:
    """Return the numba-compiled loop over count triples (compiled once, cached on disk)."""
    if "p" not in _COMPILED:
        import numba

        @numba.njit(cache=True, nogil=True)
        def ratio_down(k, homr, homc):  # pragma: no cover - compiled
            """P(k - 2) / P(k): two heterozygotes fewer, one more of each homozygote."""
            return k * (k - 1) / (4.0 * (homr + 1) * (homc + 1))

        @numba.njit(cache=True, nogil=True)
        def one(h, a, b, ties):  # pragma: no cover - compiled
            n = h + a + b
            rare = 2 * min(a, b) + h
            if n == 0 or rare == 0:
                return 1.0
            mid = rare * (2 * n - rare) // (2 * n)  # the most likely count, of rare's parity
            if mid % 2 != rare % 2:
                mid += 1
            homr0 = (rare - mid) // 2
            homc0 = n - mid - homr0
            obs, homr, homc = 1.0, homr0, homc0  # P(h) / P(mid), walking from mid
            for k in range(mid, h, -2):
                obs *= ratio_down(k, homr, homc)
                homr, homc = homr + 1, homc + 1
            for k in range(mid, h, 2):
                obs *= 1.0 / ratio_down(k + 2, homr - 1, homc - 1)
                homr, homc = homr - 1, homc - 1
            limit = obs * (1.0 + ties)
            total = 1.0
            p = 1.0 if 1.0 <= limit else 0.0
            # outwards from mid; the terms fall ever faster (a log-concave law), so once one
            # is below 1e-17 of the observed, the rest add nothing in float64
            term, homr, homc = 1.0, homr0, homc0
            for k in range(mid, 1, -2):
                term *= ratio_down(k, homr, homc)
                homr, homc = homr + 1, homc + 1
                total += term
                if term <= limit:
                    p += term
                    if term < 1e-17 * obs or term == 0.0:
                        break
            term, homr, homc = 1.0, homr0, homc0
            for k in range(mid, rare - 1, 2):
                term *= 4.0 * homr * homc / ((k + 2.0) * (k + 1.0))
                homr, homc = homr - 1, homc - 1
                total += term
                if term <= limit:
                    p += term
                    if term < 1e-17 * obs or term == 0.0:
                        break
            return min(1.0, p / total)

        @numba.njit(cache=True, nogil=True)
        def p_values(het, hom_1, hom_2, ties):  # pragma: no cover - compiled
            out = np.ones(het.shape[0])
            for i in range(het.shape[0]):
                out[i] = one(het[i], hom_1[i], hom_2[i], ties)
            return out

        _COMPILED["p"] = p_values
    return _COMPILED["p"]


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
    count triple (compiled; variants share triples, as plink2 and sgkit exploit).

    The probabilities are built from the most likely heterozygote count outwards by the
    ratio of neighbours (Wigginton et al.), so no factorial is formed, and each side stops
    once its terms fall below ``1e-17`` of the observed count's (they fall ever faster,
    the law being log-concave): about ``sqrt(n_a)`` steps per distinct triple, not
    ``n_a``.

    Parameters
    ----------
    het, hom_1, hom_2 : ndarray of int of shape (n_variants,)
        Heterozygous and the two homozygous genotype counts (called genotypes only).

    Returns
    -------
    p : ndarray of shape (n_variants,)
        In (0, 1]; 1 where no genotype was called or the variant is monomorphic.
    """
    counts = np.stack([np.asarray(c, dtype=np.int64).ravel() for c in (het, hom_1, hom_2)],
                      axis=1)
    if not counts.size:
        return np.ones(0)
    unique, inverse = np.unique(counts, axis=0, return_inverse=True)
    p = _compiled()(np.ascontiguousarray(unique[:, 0]), np.ascontiguousarray(unique[:, 1]),
                    np.ascontiguousarray(unique[:, 2]), _TIES)
    return np.asarray(p[inverse.ravel()], dtype=np.float64)


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
    return hwe_exact_p_counts(np.count_nonzero(values == 1, axis=1),
                              np.count_nonzero(values == 0, axis=1),
                              np.count_nonzero(values == 2, axis=1))
