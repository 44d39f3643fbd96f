"""The gradient cache of SAG and DSAG: one result per sample range, the freshest wins.

Each entry holds the kernel sum over a set of row ranges (global row indices) computed at
some iterate version; entries never overlap. A result overlapping an entry of the same or
a newer version is *superseded* and discarded (``docs/algorithms.md``, "SAG / DSAG");
otherwise every overlapping entry is evicted whole and the result inserted.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from daskstraggle.problems.base import KernelResult

__all__ = ["CacheEntry", "GradientCache", "Ranges", "normalize_ranges"]

Ranges = tuple[tuple[int, int], ...]


def normalize_ranges(ranges: Iterable[Sequence[int]]) -> Ranges:
    """Return sorted, merged, non-empty ``(start, stop)`` row ranges.

    Raises
    ------
    ValueError
        If a range has ``start > stop`` or a negative start.

    Examples
    --------
    >>> normalize_ranges([(5, 8), (0, 2), (2, 3), (4, 4)])
    ((0, 3), (5, 8))
    """
    pairs = sorted((int(a), int(b)) for a, b in ranges)
    out: list[list[int]] = []
    for a, b in pairs:
        if a < 0 or b < a:
            raise ValueError(f"invalid row range ({a}, {b})")
        if a == b:
            continue
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return tuple((a, b) for a, b in out)


def _overlap(x: Ranges, y: Ranges) -> bool:
    i = j = 0
    while i < len(x) and j < len(y):
        if x[i][0] < y[j][1] and y[j][0] < x[i][1]:
            return True
        if x[i][1] <= y[j][1]:
            i += 1
        else:
            j += 1
    return False


def _size(ranges: Ranges) -> int:
    return sum(b - a for a, b in ranges)


@dataclass(frozen=True, slots=True)
class CacheEntry:
    """One cached result: the kernel sum over ``ranges`` at iterate ``version``."""

    ranges: Ranges
    version: int
    result: KernelResult
    worker_index: int = -1

    @property
    def n_rows(self) -> int:
        """Rows the entry covers."""
        return _size(self.ranges)


class GradientCache:
    """Freshest kernel results per row range, with their coverage of ``n_rows`` rows.

    Parameters
    ----------
    n_rows : int
        Rows of the whole matrix (the coverage denominator).

    Examples
    --------
    >>> import numpy as np
    >>> from daskstraggle.problems.base import KernelResult
    >>> r = lambda v: KernelResult(np.array([v]), np.array([0.0]), 1)
    >>> cache = GradientCache(10)
    >>> cache.insert([(0, 5)], 0, r(1.0)), cache.insert([(5, 10)], 0, r(2.0))
    (True, True)
    >>> cache.insert([(3, 7)], 1, r(4.0))  # evicts both: rows 0-3 and 7-10 become holes
    True
    >>> cache.covered, float(cache.total().gradient[0])
    (4, 4.0)
    >>> cache.insert([(0, 5)], 0, r(1.0))  # overlaps a newer entry: superseded
    False
    """

    def __init__(self, n_rows: int) -> None:
        if int(n_rows) < 1:
            raise ValueError(f"n_rows must be >= 1, got {n_rows}")
        self.n_rows = int(n_rows)
        self._entries: list[CacheEntry] = []
        self._covered = 0
        self.n_inserted = 0
        self.n_superseded = 0
        self.n_evicted = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[CacheEntry]:
        return iter(sorted(self._entries, key=lambda e: e.ranges))

    @property
    def covered(self) -> int:
        """Rows covered by some entry."""
        return self._covered

    @property
    def coverage(self) -> float:
        """Covered fraction of the rows, ``xi`` in the DSAG paper."""
        return self._covered / self.n_rows

    def superseded(self, ranges: Iterable[Sequence[int]], version: int) -> bool:
        """True if an overlapping entry is at least as fresh as ``version``."""
        key = normalize_ranges(ranges)
        return any(e.version >= version and _overlap(e.ranges, key) for e in self._entries)

    def insert(self, ranges: Iterable[Sequence[int]], version: int, result: KernelResult,
               worker_index: int = -1) -> bool:
        """Insert a result unless superseded; evict what it overlaps. Return True if kept."""
        key = normalize_ranges(ranges)
        if not key:
            raise ValueError("a cache entry needs at least one non-empty row range")
        if key[-1][1] > self.n_rows:
            raise ValueError(f"row range {key[-1]} is outside the {self.n_rows} rows")
        overlapping = [e for e in self._entries if _overlap(e.ranges, key)]
        if any(e.version >= version for e in overlapping):
            self.n_superseded += 1
            return False
        self._evict(overlapping)
        entry = CacheEntry(key, int(version), result, int(worker_index))
        self._entries.append(entry)
        self._covered += entry.n_rows
        self.n_inserted += 1
        return True

    def evict_outside(self, keep: Iterable[Ranges]) -> int:
        """Evict every entry whose ranges are not exactly one of ``keep`` (subpartition
        boundaries changed); return how many."""
        wanted = {normalize_ranges(r) for r in keep}
        return self._evict([e for e in self._entries if e.ranges not in wanted])

    def _evict(self, entries: list[CacheEntry]) -> int:
        for e in entries:
            self._entries.remove(e)
            self._covered -= e.n_rows
        self.n_evicted += len(entries)
        return len(entries)

    def total(self) -> KernelResult | None:
        """Sum of the entries' results in row order (None when empty)."""
        results = [e.result for e in self]
        return sum(results[1:], results[0]) if results else None

    def versions(self) -> list[int]:
        """Versions of the entries in row order."""
        return [e.version for e in self]
