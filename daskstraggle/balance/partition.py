"""Subpartitions of a worker's rows and their alignment after a repartition (DSAG Alg. 2).

Worker ``i`` splits its ``n_i`` consecutive rows into ``p_i`` subpartitions, one per task,
in turn (DSAG paper §VI-C). Subpartition ``k`` (1-based, as in the paper) holds rows
``floor((k - 1) n / p) + 1 .. floor(k n / p)`` (1-based, inclusive). When ``p_i`` changes,
:func:`align` picks the next subpartition so that its first row is the first row of some
old one; the worker's rows never move, only task boundaries change.
"""

from __future__ import annotations

import numpy as np

from daskstraggle._validation import check_int

__all__ = ["align", "align_next", "part_start", "part_stop", "part_trans", "subpartition_bounds"]


def _check(n: int, p: int, caller: str, name: str = "p") -> tuple[int, int]:
    n = check_int(n, name="n", caller=caller, low=1)
    p = check_int(p, name=name, caller=caller, low=1, high=n,
                  remedy="A worker's rows cannot be split into more subpartitions than rows.")
    return n, p


def _check_k(n: int, p: int, k: int, caller: str) -> tuple[int, int, int]:
    n, p = _check(n, p, caller)
    return n, p, check_int(k, name="k", caller=caller, low=1, high=p)


def part_start(n: int, p: int, k: int) -> int:
    """Return the first row (1-based) of subpartition ``k`` of ``n`` rows split ``p`` ways.

    Parameters
    ----------
    n : int
        Rows of the worker (>= 1).
    p : int
        Number of subpartitions, in ``[1, n]``.
    k : int
        Subpartition index, 1-based, in ``[1, p]``.

    Returns
    -------
    row : int
        ``floor((k - 1) n / p) + 1``.

    Examples
    --------
    >>> [part_start(10, 3, k) for k in (1, 2, 3)]
    [1, 4, 7]
    """
    n, p, k = _check_k(n, p, k, "part_start")
    return (k - 1) * n // p + 1


def part_stop(n: int, p: int, k: int) -> int:
    """Return the last row (1-based, inclusive) of subpartition ``k``; see :func:`part_start`.

    Examples
    --------
    >>> [part_stop(10, 3, k) for k in (1, 2, 3)]
    [3, 6, 10]
    """
    n, p, k = _check_k(n, p, k, "part_stop")
    return k * n // p


def part_trans(n: int, p: int, p_new: int, k: int) -> int:
    """Return the subpartition, out of ``p_new``, holding the first row of subpartition ``k``.

    ``ceil(part_start(n, p, k) p_new / n)`` (DSAG paper §VI-C).

    Examples
    --------
    >>> part_trans(10, 2, 3, 2)  # row 6 lies in [4, 5, 6]
    2
    """
    start = part_start(n, p, k)
    _, p_new = _check(n, p_new, "part_trans", name="p_new")
    return -(-start * p_new // n)


def align(n: int, p: int, p_new: int, k: int) -> int:
    """Algorithm 2 of the DSAG paper: the next subpartition after changing ``p`` to ``p_new``.

    Parameters
    ----------
    n : int
        Rows of the worker.
    p : int
        Current number of subpartitions.
    p_new : int
        New number of subpartitions.
    k : int
        The subpartition (1-based, out of ``p``) processed last.

    Returns
    -------
    k_new : int
        The subpartition (1-based, out of ``p_new``) to process next: the one after ``k``
        (cyclically) if its first row starts some new subpartition, else the nearest
        earlier new subpartition whose first row starts an old one. Subpartition 1 always
        qualifies, so the search ends.

    Notes
    -----
    The paper's loop compares a candidate's first row with the old subpartition of the
    previous pass, so it can step to ``k' = 0`` (``n = 7``, ``p = 6 -> 2``, ``k = 1``) or
    walk back past an aligned candidate. Here each candidate ``k'`` is compared with the
    old subpartition holding its own first row: the result is the last aligned ``k' <=``
    line 2's, the paper's answer in Example 3 and whenever line 2's candidate is aligned.

    Examples
    --------
    The paper's Example 3: 10 rows, ``p = 2 -> 3`` after processing rows 1-5; the next
    task covers rows 1-3 (aligned with the old [1, 5]), not rows 4-6.

    >>> align(10, 2, 3, 1)
    1
    >>> align(10, 2, 4, 2), align(10, 2, 4, 1)  # rows 6.. start new subpartition 3
    (1, 3)
    """
    n, p = _check(n, p, "align")
    _, p_new = _check(n, p_new, "align", name="p_new")
    k = check_int(k, name="k", caller="align", low=1, high=p)
    k = k % p + 1  # line 1: the next old subpartition
    k_new = part_trans(n, p, p_new, k)  # line 2: the new one holding its first row
    while True:  # lines 3-6 (see Notes)
        k = part_trans(n, p_new, p, k_new)
        if part_start(n, p_new, k_new) == part_start(n, p, k):
            return k_new
        k_new -= 1


def align_next(n: int, p: int, p_new: int, next_index: int) -> int:
    """0-based form of :func:`align` for a cyclic counter that holds the *next* index.

    Parameters
    ----------
    n, p, p_new : int
        As in :func:`align`.
    next_index : int
        0-based index (out of ``p``) of the subpartition that would be processed next.

    Returns
    -------
    next_new : int
        0-based index (out of ``p_new``) of the subpartition to process next.

    Examples
    --------
    >>> align_next(10, 2, 3, 1)  # after rows 1-5 (index 0), next was index 1 (rows 6-10)
    0
    """
    n, p = _check(n, p, "align_next")
    i = check_int(next_index, name="next_index", caller="align_next", low=0, high=p - 1)
    last = (i - 1) % p + 1  # 1-based index of the subpartition processed last
    return align(n, p, p_new, last) - 1


def subpartition_bounds(n_rows: int, n_sub: int) -> np.ndarray:
    """Return the ``n_sub + 1`` 0-based boundaries ``floor(k n / p)`` of the subpartitions:
    subpartition ``k`` (0-based) is rows ``[bounds[k], bounds[k + 1])``.

    Examples
    --------
    >>> subpartition_bounds(10, 3).tolist()
    [0, 3, 6, 10]
    """
    n, p = _check(n_rows, n_sub, "subpartition_bounds", name="n_sub")
    return np.array([k * n // p for k in range(p + 1)], dtype=int)
