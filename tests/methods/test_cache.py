"""The SAG/DSAG gradient cache: hand-worked insert, supersede and evict cases."""

from __future__ import annotations

import numpy as np
import pytest

from daskstraggle.methods.cache import GradientCache, normalize_ranges
from daskstraggle.problems.base import KernelResult


def r(value: float, n_rows: int = 1) -> KernelResult:
    return KernelResult(np.array([value]), np.array([value]), n_rows)


def total(cache: GradientCache) -> float:
    t = cache.total()
    return float("nan") if t is None else float(t.gradient[0])


def test_same_range_is_an_in_place_update():
    cache = GradientCache(10)
    assert cache.insert([(0, 5)], 0, r(1.0))
    assert cache.insert([(0, 5)], 1, r(3.0))  # SAG: newer result for the same rows
    assert len(cache) == 1 and total(cache) == 3.0 and cache.covered == 5
    assert cache.coverage == 0.5
    assert cache.n_evicted == 1


def test_a_result_overlapping_an_as_fresh_entry_is_discarded():
    cache = GradientCache(10)
    cache.insert([(0, 6)], 2, r(1.0))
    assert not cache.insert([(4, 8)], 1, r(5.0))  # older than the overlapping entry
    assert not cache.insert([(4, 8)], 2, r(5.0))  # as fresh: a replica or a retry
    assert cache.superseded([(5, 9)], 2) and not cache.superseded([(6, 9)], 2)
    assert total(cache) == 1.0 and cache.n_superseded == 2
    # a non-overlapping older result is kept: staleness alone is no reason to drop
    assert cache.insert([(6, 10)], 0, r(2.0))
    assert total(cache) == 3.0 and cache.covered == 10


def test_a_newer_partial_overlap_evicts_whole_entries_and_leaves_holes():
    cache = GradientCache(12)
    cache.insert([(0, 4)], 0, r(1.0))
    cache.insert([(4, 8)], 0, r(2.0))
    cache.insert([(8, 12)], 0, r(4.0))
    assert cache.covered == 12
    # new boundaries: [3, 9) overlaps all three -> all evicted, rows 0-3 and 9-12 uncovered
    assert cache.insert([(3, 9)], 1, r(10.0))
    assert cache.covered == 6 and total(cache) == 10.0 and len(cache) == 1
    assert cache.n_evicted == 3
    # re-covering the holes with the new boundaries
    cache.insert([(0, 3)], 1, r(0.5))
    cache.insert([(9, 12)], 1, r(0.25))
    assert cache.covered == 12 and total(cache) == 10.75
    assert cache.versions() == [1, 1, 1]


def test_multi_range_entries_and_evict_outside():
    cache = GradientCache(10)
    cache.insert([(0, 2), (6, 8)], 0, r(1.0))  # a worker holding two partitions
    assert cache.insert([(2, 6)], 0, r(2.0))  # fits between: no overlap
    assert not cache.insert([(7, 9)], 0, r(9.0))
    assert cache.covered == 8
    assert cache.evict_outside([((2, 6),)]) == 1
    assert cache.covered == 4 and total(cache) == 2.0


def test_ranges_are_normalised_and_checked():
    assert normalize_ranges([(3, 5), (0, 3), (7, 7)]) == ((0, 5),)
    with pytest.raises(ValueError, match="invalid row range"):
        normalize_ranges([(5, 3)])
    cache = GradientCache(4)
    with pytest.raises(ValueError, match="outside"):
        cache.insert([(2, 6)], 0, r(1.0))
    with pytest.raises(ValueError, match="non-empty"):
        cache.insert([(2, 2)], 0, r(1.0))
    with pytest.raises(ValueError, match="n_rows"):
        GradientCache(0)
