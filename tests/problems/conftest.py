"""Pure helpers for the problem tests: blocks from dense arrays and a local map-reduce.

The helpers are plain functions; fixtures of the same names hand them to the tests
(factory fixtures), so test modules never import this file.
"""

from __future__ import annotations

import functools
import itertools
import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

from daskstraggle.problems import Block, MatrixStats, block_stats

SEEDS = [0, 1]


class LocalMapReduce:
    """Fold ``fn(block, *args)`` over a list of blocks; count the passes made."""

    def __init__(self, blocks: Sequence[Block]) -> None:
        self.blocks = list(blocks)
        self.calls = 0

    def __call__(
        self,
        fn: Callable[..., Any],
        *args: Any,
        combine: Callable[[Any, Any], Any] | None = None,
    ) -> Any:
        self.calls += 1
        join = combine or operator.add
        return functools.reduce(join, (fn(block, *args) for block in self.blocks))


def local_map_reduce(blocks: Sequence[Block]) -> LocalMapReduce:
    """Return a MapReduce over ``blocks`` in this process (``.calls`` counts passes)."""
    return LocalMapReduce(blocks)


def uneven_bounds(n_rows: int, n_parts: int, rng: np.random.Generator) -> list[int]:
    """Return ``n_parts + 1`` increasing row bounds from 0 to ``n_rows``, uneven sizes."""
    cuts = np.sort(rng.choice(np.arange(1, n_rows), size=n_parts - 1, replace=False))
    return [0, *cuts.tolist(), n_rows]


def split_blocks(
    X: np.ndarray, y: np.ndarray | None = None, bounds: Sequence[int] | None = None
) -> list[Block]:
    """Return float blocks holding rows ``[bounds[i], bounds[i+1])`` of ``X`` (and ``y``)."""
    if bounds is None:
        bounds = [0, X.shape[0]]
    return [
        Block(X[a:b], start=a, y=None if y is None else y[a:b])
        for a, b in itertools.pairwise(bounds)
    ]


def total_stats(blocks: Sequence[Block]) -> MatrixStats:
    """Return the summed statistics of the blocks (as the runtimes compute them)."""
    return functools.reduce(operator.add, (block_stats(b) for b in blocks))


def genotype_rows(
    rng: np.random.Generator, n_rows: int, n_features: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Return int8 dosages with -1 missing, per-row fill/center/scale, and the dense rows.

    The transform is Patterson-like: missing calls take the row's mean dosage, rows are
    centred by it and scaled by ``1/sqrt(2 p (1 - p))`` with ``p`` the allele frequency.
    """
    freq = rng.uniform(0.1, 0.9, size=(n_rows, 1))
    dosage = rng.binomial(2, freq, size=(n_rows, n_features)).astype(np.int8)
    missing = rng.random(dosage.shape) < 0.1
    missing[:, 0] = False  # every row keeps at least one call
    dosage[missing] = -1
    observed = np.where(missing, np.nan, dosage.astype(np.float64))
    mean = np.nanmean(observed, axis=1)
    p = np.clip(mean / 2, 0.05, 0.95)
    scale = 1.0 / np.sqrt(2 * p * (1 - p))
    dense = (np.where(missing, mean[:, None], dosage) - mean[:, None]) * scale[:, None]
    return dosage, mean, mean.copy(), scale, dense


def mixed_blocks(
    rng: np.random.Generator,
    n_features: int,
    labels: Callable[[np.ndarray], np.ndarray] | None = None,
) -> tuple[list[Block], np.ndarray, np.ndarray | None]:
    """Return blocks of every storage kind and the dense float64 matrix they represent.

    Partitions, in row order: int8 genotype dosages with missing entries and
    fill/center/scale; float32 rows; an empty block; one single-row float64 block; and
    uneven float64 blocks. ``labels(X)`` (if given) computes the labels of all rows.
    """
    dosage, fill, center, scale, dense_g = genotype_rows(rng, 23, n_features)
    f32 = (rng.normal(size=(17, n_features)) + 0.5).astype(np.float32)
    f64 = rng.normal(size=(60, n_features)) * np.linspace(0.5, 2.0, n_features) + 1.0
    X = np.vstack([dense_g, f32.astype(np.float64), f64])
    y = None if labels is None else np.asarray(labels(X), dtype=np.float64)

    def ys(a: int, b: int) -> np.ndarray | None:
        return None if y is None else y[a:b]

    n_g, n_32 = dosage.shape[0], f32.shape[0]
    blocks = [
        Block(dosage, start=0, y=ys(0, n_g), fill=fill, center=center, scale=scale),
        Block(f32, start=n_g, y=ys(n_g, n_g + n_32)),
        Block(np.zeros((0, n_features)), start=n_g + n_32, y=ys(n_g + n_32, n_g + n_32)),
    ]
    start = n_g + n_32
    for a, b in zip([0, 1, 20, 41], [1, 20, 41, 60], strict=True):
        blocks.append(Block(f64[a:b], start=start + a, y=ys(start + a, start + b)))
    return blocks, X, y


@pytest.fixture(params=[False, True], ids=["cache-tiles", "7-row-tiles"])
def small_tiles(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Run the test with the default tiles and with 7-row tiles (many tiles per block)."""
    if request.param:
        monkeypatch.setattr(Block, "tile_rows", lambda self, tile_bytes=0: 7)
    return bool(request.param)


@pytest.fixture(params=SEEDS)
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    """A seeded generator (each test runs for every seed in ``SEEDS``)."""
    return np.random.default_rng(request.param)


def low_rank_plus_noise(
    rng: np.random.Generator, n_rows: int = 400, n_features: int = 12, rank: int = 3
) -> np.ndarray:
    """Return a low-rank matrix plus small noise, with non-zero column means."""
    left = rng.normal(size=(n_rows, rank)) * np.geomspace(10.0, 3.0, rank)
    X = left @ rng.normal(size=(rank, n_features)) + 0.3 * rng.normal(size=(n_rows, n_features))
    return X + rng.normal(size=n_features) * 2.0


# ------------------------------------------------------------------ factory fixtures
@pytest.fixture(name="local_map_reduce")
def _local_map_reduce_fixture() -> Callable[[Sequence[Block]], LocalMapReduce]:
    """Factory: ``local_map_reduce(blocks)`` returns a MapReduce over the blocks."""
    return local_map_reduce


@pytest.fixture(name="split_blocks")
def _split_blocks_fixture() -> Callable[..., list[Block]]:
    """Factory: ``split_blocks(X, y=None, bounds=None)`` returns float blocks."""
    return split_blocks


@pytest.fixture(name="uneven_bounds")
def _uneven_bounds_fixture() -> Callable[..., list[int]]:
    """Factory: ``uneven_bounds(n_rows, n_parts, rng)`` returns uneven row bounds."""
    return uneven_bounds


@pytest.fixture(name="total_stats")
def _total_stats_fixture() -> Callable[[Sequence[Block]], MatrixStats]:
    """Factory: ``total_stats(blocks)`` returns the summed block statistics."""
    return total_stats


@pytest.fixture(name="mixed_blocks")
def _mixed_blocks_fixture() -> Callable[..., tuple[list[Block], np.ndarray, Any]]:
    """Factory: ``mixed_blocks(rng, n_features, labels=None)``, every storage kind."""
    return mixed_blocks


@pytest.fixture(name="genotype_rows")
def _genotype_rows_fixture() -> Callable[..., tuple[np.ndarray, ...]]:
    """Factory: ``genotype_rows(rng, n_rows, n_features)``, int8 dosages and transforms."""
    return genotype_rows


@pytest.fixture(name="low_rank_plus_noise")
def _low_rank_plus_noise_fixture() -> Callable[..., np.ndarray]:
    """Factory: ``low_rank_plus_noise(rng, n_rows=400, n_features=12, rank=3)``."""
    return low_rank_plus_noise
