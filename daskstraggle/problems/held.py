"""Kernel results (:class:`KernelResult`), their weighted sums (:func:`combine`), and sums
held on the workers: symbolic arithmetic, one message when read.

With ``aggregation="tree"`` on a Dask runtime a worker's result stays on the worker and
the method receives a :class:`HeldResult`: adding, scaling and :func:`combine` build a
weighted sum of such *leaves* (merged by identity) without moving data. Reading
``gradient`` or ``values`` asks the runtime's :class:`Reducer` to sum the leaves on the
workers and fetch the one sum, kept for later reads. Pickling a held result pickles its
value. Pure: a leaf's handle is opaque here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

__all__ = ["HeldResult", "KernelResult", "Leaf", "Reducer", "combine", "payload_bytes"]


@dataclass(frozen=True, slots=True)
class KernelResult:
    """Sum over a set of rows of the gradient-like quantity and the objective terms.

    Parameters
    ----------
    gradient : ndarray
        Shape of the iterate. For PCA ``X_c^T X_c V`` over the rows; for regression the
        sum of per-sample loss gradients divided by the global number of samples.
    values : ndarray of shape (n_values,)
        Objective terms summed over the rows (per-component captured variance for PCA,
        the mean-loss contribution for regression).
    n_rows : int
        Number of rows summed.
    """

    gradient: np.ndarray
    values: np.ndarray
    n_rows: int

    def __add__(self, other: KernelResult) -> KernelResult:
        """Add the results of two disjoint row sets (a held sum adds itself: see
        :mod:`daskstraggle.problems.held`)."""
        if not isinstance(other, KernelResult):
            return NotImplemented
        return KernelResult(
            gradient=self.gradient + other.gradient,
            values=self.values + other.values,
            n_rows=self.n_rows + other.n_rows,
        )

    def scaled(self, weight: float) -> KernelResult:
        """Return the result multiplied by ``weight`` (coding coefficients, 1/coverage)."""
        return KernelResult(self.gradient * weight, self.values * weight, self.n_rows)


def combine(results: list[KernelResult], weights: Any) -> KernelResult:
    """Return ``sum_k weights[k] * results[k]`` in float64 (``n_rows`` weighted, rounded);
    held if some results are held (summed where they are when read)."""
    if any(isinstance(r, HeldResult) for r in results):
        return combine_held(results, weights)  # type: ignore[return-value]
    pairs = list(zip(weights, results, strict=True))
    gradient = sum(float(w) * r.gradient for w, r in pairs)
    values = sum(float(w) * r.values for w, r in pairs)
    n_rows = sum(float(w) * r.n_rows for w, r in pairs)
    return KernelResult(np.asarray(gradient, dtype=np.float64),
                        np.asarray(values, dtype=np.float64), round(n_rows))


class Reducer(Protocol):
    """What a runtime that holds results provides: the weighted sum of leaves."""

    def reduce(self, terms: list[tuple[float, Leaf]]) -> tuple[np.ndarray, np.ndarray]:
        """Return ``sum weight * leaf`` as ``(gradient, values)``, computed where the
        leaves are (``terms`` lists each leaf once, in the order the sum was built)."""
        ...


class Leaf:
    """One kernel sum held by a worker (compared by identity).

    Parameters
    ----------
    handle : object
        The runtime's reference to the data (a Dask future), opaque here.
    n_rows : int
        Rows the sum covers.
    reducer : Reducer
        The runtime that can sum it with others and fetch the result.
    message : int or None, default=None
        Which message of a coded unit's result it is (None: the plain sum).
    """

    __slots__ = ("handle", "message", "n_rows", "reducer")

    def __init__(self, handle: Any, n_rows: int, reducer: Reducer, *,
                 message: int | None = None) -> None:
        self.handle = handle
        self.n_rows = int(n_rows)
        self.reducer = reducer
        self.message = message

    def __repr__(self) -> str:
        return f"Leaf({self.handle!r}, n_rows={self.n_rows}, message={self.message})"


class HeldResult:
    """A weighted sum of held kernel sums, plus a local part; duck-types ``KernelResult``.

    Build one with :meth:`of` (a single leaf); ``+``, :meth:`scaled` and ``combine`` give
    new ones. ``gradient`` and ``values`` are read from the workers once.

    Parameters
    ----------
    terms : dict of Leaf to float
        Weight of each leaf.
    n_rows : int
        Rows the sum counts (follows ``KernelResult``'s rules: ``+`` adds them,
        ``scaled`` keeps them).
    local : KernelResult or None, default=None
        A part already in this process (a local result added to held ones).
    """

    __slots__ = ("_local", "_terms", "_value", "n_rows")

    def __init__(self, terms: dict[Leaf, float], n_rows: int, local: Any = None) -> None:
        self._terms = terms
        self.n_rows = int(n_rows)
        self._local = local
        self._value: Any = None

    @classmethod
    def of(cls, leaf: Leaf) -> HeldResult:
        """Return the held result of one leaf (weight 1)."""
        return cls({leaf: 1.0}, leaf.n_rows)

    @property
    def leaves(self) -> list[Leaf]:
        """The leaves the sum still uses (nonzero weight), in the order added."""
        return [leaf for leaf, weight in self._terms.items() if weight != 0.0]

    def materialize(self) -> Any:
        """Return the sum as a ``KernelResult`` (summed on the workers the first time)."""
        if self._value is None:
            terms = [(weight, leaf) for leaf, weight in self._terms.items() if weight != 0.0]
            parts = [terms[0][1].reducer.reduce(terms)] if terms else []
            if self._local is not None:
                parts.append((self._local.gradient, self._local.values))
            if not parts:
                raise ValueError("a held result with no leaves and no local part is empty")
            gradient, values = (np.asarray(sum(c[1:], c[0]), dtype=np.float64)
                                for c in zip(*parts, strict=True))
            value = KernelResult(gradient, values, self.n_rows)
            # from now on a local sum: the workers may free the leaves' data
            self._value, self._terms, self._local = value, {}, value
        return self._value

    @property
    def gradient(self) -> np.ndarray:
        """The summed gradient (read from the workers on first use)."""
        return np.asarray(self.materialize().gradient)

    @property
    def values(self) -> np.ndarray:
        """The summed objective terms (read from the workers on first use)."""
        return np.asarray(self.materialize().values)

    def _merged(self, other: Any, weight: float, n_rows: int) -> HeldResult:
        terms, part = dict(self._terms), other
        if isinstance(other, HeldResult):
            for leaf, w in other._terms.items():
                terms[leaf] = terms.get(leaf, 0.0) + weight * w
            part = other._local
        if part is not None and weight != 1.0:
            part = part.scaled(weight)
        if part is not None and self._local is not None:
            part = self._local + part
        return HeldResult(terms, n_rows, self._local if part is None else part)

    def __add__(self, other: Any) -> HeldResult:
        """Sum with another held or local kernel sum (no data moves)."""
        if isinstance(other, int | float) and other == 0:
            return self
        return self._merged(other, 1.0, self.n_rows + int(other.n_rows))

    __radd__ = __add__

    def scaled(self, weight: float) -> HeldResult:
        """Return the sum multiplied by ``weight`` (``n_rows`` kept, as ``KernelResult``)."""
        w = float(weight)
        local = None if self._local is None else self._local.scaled(w)
        return HeldResult({leaf: w * v for leaf, v in self._terms.items()}, self.n_rows, local)

    def __reduce__(self) -> tuple[Any, ...]:
        # a checkpoint or a replica holds the value, never a reference to a worker's data
        value = self.materialize()
        return (type(value), (value.gradient, value.values, value.n_rows))

    def __repr__(self) -> str:
        state = "read" if self._value is not None else "held"
        return f"HeldResult({len(self.leaves)} leaves, n_rows={self.n_rows}, {state})"


def combine_held(results: list[Any], weights: Any) -> HeldResult:
    """``sum_k weights[k] * results[k]`` when some results are held (see ``combine``)."""
    assert results, "combine needs at least one result"
    total = HeldResult({}, 0)
    n_rows = 0.0
    for weight, result in zip(weights, results, strict=True):
        n_rows += float(weight) * result.n_rows
        total = total._merged(result, float(weight), 0)
    total.n_rows = round(n_rows)
    return total


def payload_bytes(result: Any) -> int:
    """Bytes a result brings to the coordinator: a held leaf's are 0 (only its size and
    timing travel), a local ``KernelResult``'s its gradient and values; tuples add up."""
    if isinstance(result, tuple):
        return sum(payload_bytes(r) for r in result)
    if isinstance(result, HeldResult):
        return 0
    return int(np.asarray(result.gradient).nbytes + np.asarray(result.values).nbytes)
