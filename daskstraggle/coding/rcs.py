"""Random circularly shifted (RCS) codes for partial recovery, and an incremental decoder.

The age-based coded computation paper (Ozfatura et al., GLOBECOM 2020; notes in
``docs/algorithms.md``) gives worker ``i`` of ``N = K`` the blocks ``(i + c_r) mod K`` for
``L`` distinct random shifts ``c_r`` (every block on ``L`` workers), in that order, and a
degree vector ``d`` (``sum(d) = L``) groups the list into codewords sent as soon as
computed: the first ``d_1`` blocks summed, then the next ``d_2``, ... A block is recovered
once the codewords received so far isolate it. Here a block is one row partition's kernel
sum.
"""

from __future__ import annotations

import numbers
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

import numpy as np

from daskstraggle.coding.base import CodeAssignment, CodingScheme, Received, register_scheme
from daskstraggle.errors import InvalidParameterError

__all__ = ["RCS", "IncrementalDecoder", "default_degrees", "rcs_codewords"]

#: The paper's degree vector; :func:`default_degrees` keeps the prefix that fits.
PAPER_DEGREES = (1, 2, 3)


def default_degrees(n_workers: int) -> tuple[int, ...]:
    """Return the longest prefix of ``(1, 2, 3)`` whose sum is at most ``n_workers``.

    Each worker stores ``sum(degrees)`` of the ``K = N`` partitions, so the degrees must
    sum to at most the number of workers: 1 worker gets ``(1,)``, 2 get ``(1,)``, 3 to 5
    get ``(1, 2)`` and 6 or more the paper's ``(1, 2, 3)``.

    Examples
    --------
    >>> [default_degrees(n) for n in (1, 2, 3, 5, 6, 100)]
    [(1,), (1,), (1, 2), (1, 2), (1, 2, 3), (1, 2, 3)]
    """
    degrees: tuple[int, ...] = ()
    for d in PAPER_DEGREES:
        if sum(degrees) + d > max(int(n_workers), 1):
            break
        degrees += (d,)
    return degrees or (1,)


def rcs_codewords(order: Sequence[int], degrees: Sequence[int]) -> list[tuple[int, ...]]:
    """Group an ordered list of blocks into consecutive codewords of the given degrees.

    Examples
    --------
    >>> rcs_codewords([4, 0, 2, 3, 1, 5], (1, 2, 3))
    [(4,), (0, 2), (3, 1, 5)]
    """
    out, start = [], 0
    for d in degrees:
        out.append(tuple(int(b) for b in order[start:start + d]))
        start += d
    return out


#: Label type of the messages an :class:`IncrementalDecoder` combines.
Label = TypeVar("Label", bound=Hashable)


class IncrementalDecoder(Generic[Label]):
    """Row-reduce 0/1 (or real) codewords as they arrive; report isolated blocks.

    Keeps the received codewords in reduced row echelon form with the combination of
    messages each row stands for; block ``k`` is recovered when a row equals ``e_k``
    (``g_k = sum_m weights[m] * message_m``). Unlike peeling, this also isolates blocks
    only several codewords together reveal (``a + b``, ``b + c``, ``a + c``).

    Parameters
    ----------
    n_blocks : int
        Number of blocks ``K``.
    tol : float, default=1e-9
        Entries below this magnitude are zero.

    Examples
    --------
    >>> dec = IncrementalDecoder(3)
    >>> dec.add("x", [0, 1])
    []
    >>> dec.add("y", [1])
    [0, 1]
    >>> dec.weights(0)
    {'x': 1.0, 'y': -1.0}
    """

    def __init__(self, n_blocks: int, *, tol: float = 1e-9) -> None:
        self.n_blocks = int(n_blocks)
        self.tol = float(tol)
        self._labels: list[Label] = []
        self._rows: list[np.ndarray] = []  # reduced rows over blocks
        self._combos: list[np.ndarray] = []  # same rows as combinations of messages
        self._pivots: list[int] = []
        self._recovered: dict[int, int] = {}  # block -> index of its unit row

    @property
    def recovered(self) -> frozenset[int]:
        """Blocks isolated so far."""
        return frozenset(self._recovered)

    @property
    def n_received(self) -> int:
        """Number of codewords added."""
        return len(self._labels)

    def add(self, label: Label, blocks: Iterable[int],
            coefficients: Iterable[float] | None = None) -> list[int]:
        """Add a received codeword ``sum_b coefficients[b] * g_b``; return newly recovered blocks.

        Parameters
        ----------
        label : hashable
            Name of the message (e.g. ``(worker, iteration, codeword)``), used in
            :meth:`weights`.
        blocks : iterable of int
            Blocks the codeword sums over.
        coefficients : iterable of float or None, default=None
            Their coefficients (None: all 1).
        """
        blocks = [int(b) for b in blocks]
        if any(not 0 <= b < self.n_blocks for b in blocks):
            raise ValueError(f"codeword blocks {blocks} outside [0, {self.n_blocks})")
        row = np.zeros(self.n_blocks)
        coef = np.ones(len(blocks)) if coefficients is None else np.asarray(
            list(coefficients), dtype=np.float64)
        np.add.at(row, blocks, coef)
        m = len(self._labels)
        self._labels.append(label)
        for combo in self._combos:
            combo.resize(m + 1, refcheck=False)
        combo = np.zeros(m + 1)
        combo[m] = 1.0
        for idx, (r, p) in enumerate(zip(self._rows, self._pivots, strict=True)):
            if abs(row[p]) > self.tol:  # reduce against the existing pivots
                factor = row[p]
                row -= factor * r
                combo -= factor * self._combos[idx]
        row[np.abs(row) <= self.tol] = 0.0
        nonzero = np.flatnonzero(row)
        if nonzero.size == 0:
            return []
        pivot = int(nonzero[np.argmax(np.abs(row[nonzero]))])
        scale = row[pivot]
        row /= scale
        combo /= scale
        for idx, r in enumerate(self._rows):  # eliminate the new pivot elsewhere
            if abs(r[pivot]) > self.tol:
                factor = r[pivot]
                r -= factor * row
                r[np.abs(r) <= self.tol] = 0.0
                self._combos[idx] -= factor * combo
        self._rows.append(row)
        self._combos.append(combo)
        self._pivots.append(pivot)
        new = []
        for idx, (r, p) in enumerate(zip(self._rows, self._pivots, strict=True)):
            if p not in self._recovered and np.count_nonzero(r) == 1:
                self._recovered[p] = idx
                new.append(p)
        return sorted(new)

    def sum_weights(self, blocks: Iterable[int]) -> dict[Label, float]:
        """Return ``{label: weight}`` with ``sum_k g_k = sum weight * message`` over ``blocks``."""
        total: dict[Label, float] = {}
        for k in blocks:
            for label, w in self.weights(k).items():
                total[label] = total.get(label, 0.0) + w
        return {label: w for label, w in total.items() if abs(w) > 1e-12}

    def weights(self, block: int) -> dict[Label, float]:
        """Return ``{label: weight}`` with ``g_block = sum weight * message`` (recovered blocks)."""
        if block not in self._recovered:
            raise KeyError(f"block {block} is not recovered")
        combo = self._combos[self._recovered[block]]
        return {self._labels[m]: float(c) for m, c in enumerate(combo) if abs(c) > self.tol}


def _check_degrees(degrees: Any) -> tuple[int, ...]:
    ok = isinstance(degrees, (list, tuple)) and len(degrees) > 0 and all(
        isinstance(d, numbers.Integral) and not isinstance(d, bool) and int(d) >= 1
        for d in degrees)
    if not ok:
        raise InvalidParameterError(
            "The 'degrees' parameter of RCS must be a non-empty sequence of ints >= 1 "
            f"(e.g. degrees=(1, 2, 3); CLI: --degrees 1,2,3). Got {degrees!r} instead."
        )
    return tuple(int(d) for d in degrees)


def _rcs_decoder(assignment: CodeAssignment, received: frozenset[Received]) -> dict | None:
    """Weights of the full sum once every block is isolated (static order), else None."""
    dec: IncrementalDecoder[Received] = IncrementalDecoder(assignment.n_partitions)
    for i, j in sorted(received):
        parts = assignment.placement[i]
        coef = assignment.coefficients[i][j]
        support = np.flatnonzero(coef)
        dec.add((i, j), [parts[p] for p in support], coef[support])
    if len(dec.recovered) < assignment.n_partitions:
        return None
    return dec.sum_weights(range(assignment.n_partitions))


@register_scheme
@dataclass(frozen=True, kw_only=True, slots=True)
class RCS(CodingScheme):
    """Random circularly shifted code: ``L = sum(degrees)`` blocks per worker, ``K = N``.

    The placement and codewords of the module docstring; ``decode`` returns the weights
    of the full sum once every block is isolated (in this static order;
    :class:`~daskstraggle.methods.PartialRecovery` reorders the lists each iteration).

    Parameters
    ----------
    degrees : sequence of int, default=(1, 2, 3)
        Codeword degrees; their sum ``L`` is the number of blocks each worker stores
        (at most the number of workers).

    References
    ----------
    .. [1] E. Ozfatura, B. Buyukates, D. Gündüz, S. Ulukus, "Age-Based Coded Computation
       for Bias Reduction in Distributed Learning", IEEE GLOBECOM 2020.

    Examples
    --------
    >>> a = RCS(degrees=(1, 2)).assign(5, rng=0)
    >>> [len(p) for p in a.placement], a.coefficients[0].tolist()
    ([3, 3, 3, 3, 3], [[1.0, 0.0, 0.0], [0.0, 1.0, 1.0]])
    >>> sorted(sum((list(p) for p in a.placement), [])) == sorted(list(range(5)) * 3)
    True
    """

    name: ClassVar[str] = "rcs"

    degrees: tuple[int, ...] = (1, 2, 3)

    def __post_init__(self) -> None:
        object.__setattr__(self, "degrees", _check_degrees(self.degrees))

    @property
    def n_stored(self) -> int:
        """Blocks each worker stores, ``L = sum(degrees)``."""
        return int(sum(self.degrees))

    def check_n_workers(self, n_workers: int) -> None:
        """Refuse ``sum(degrees)`` above the number of workers."""
        if self.n_stored > n_workers:
            fit = default_degrees(n_workers)
            raise InvalidParameterError(
                f"The 'degrees' parameter of RCS sums to {self.n_stored}, the blocks each "
                f"worker stores, but there are only {n_workers} workers (= blocks); use "
                f"degrees summing to at most {n_workers}, e.g. degrees={fit} (CLI: "
                f"--degrees {','.join(map(str, fit))})."
            )

    def partition_count(self, n_workers: int, n_rows: int | None = None) -> int:
        """Return ``K = n_workers``."""
        return int(n_workers)

    def coefficient_rows(self, n_stored: int | None = None) -> np.ndarray:
        """Return the ``(len(degrees), L)`` 0/1 matrix grouping a list into codewords."""
        L = self.n_stored if n_stored is None else n_stored
        coef = np.zeros((len(self.degrees), L))
        for j, word in enumerate(rcs_codewords(range(L), self.degrees)):
            coef[j, list(word)] = 1.0
        return coef

    def _assign(self, n_workers: int, rng: np.random.Generator) -> CodeAssignment:
        shifts = rng.choice(n_workers, size=self.n_stored, replace=False)
        placement = tuple(
            tuple(int((i + c) % n_workers) for c in shifts) for i in range(n_workers)
        )
        coef = self.coefficient_rows()
        info = {
            "shifts": [int(c) for c in shifts],
            "replication": self.n_stored,
            "communication_load": len(self.degrees),
            "covers": True,
        }
        return self._make(n_workers, placement, (coef.copy() for _ in range(n_workers)), info,
                          _rcs_decoder)
