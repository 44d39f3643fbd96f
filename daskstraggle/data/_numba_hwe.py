"""Numba body of the exact HWE test (imported lazily by :mod:`.hwe`, never directly)."""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

_JIT: dict[str, Any] = {"cache": True, "nogil": True}


@numba.njit(**_JIT)
def ratio_down(k, homr, homc):
    """P(k - 2) / P(k): two heterozygotes fewer, one more of each homozygote."""
    return k * (k - 1) / (4.0 * (homr + 1) * (homc + 1))


@numba.njit(**_JIT)
def one(h, a, b, ties):
    """The p-value of one triple (see :func:`daskstraggle.data.hwe.hwe_exact_p_counts`)."""
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
    # outwards from mid, down then up; the terms fall ever faster (a log-concave law), so
    # once one is below 1e-17 of the observed, the rest add nothing in float64
    for step in (-2, 2):
        term, homr, homc = 1.0, homr0, homc0
        for k in range(mid, 1 if step < 0 else rare - 1, step):
            if step < 0:
                term *= ratio_down(k, homr, homc)
            else:
                term *= 4.0 * homr * homc / ((k + 2.0) * (k + 1.0))
            homr, homc = homr - step // 2, homc - step // 2
            total += term
            if term <= limit:
                p += term
                if term < 1e-17 * obs or term == 0.0:
                    break
    return min(1.0, p / total)


@numba.njit(**_JIT)
def p_values(het, hom_1, hom_2, ties):
    """The p-value of each triple."""
    out = np.ones(het.shape[0])
    for i in range(het.shape[0]):
        out[i] = one(het[i], hom_1[i], hom_2[i], ties)
    return out
