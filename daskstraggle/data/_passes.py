"""One pass over a matrix's row partitions: a small function of each partition's
:class:`~daskstraggle.problems.Block`, results in row order; one task per partition on a
Dask client's workers, else read here one partition at a time."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from daskstraggle._block import Block
from daskstraggle.errors import StraggleError

if TYPE_CHECKING:
    from daskstraggle.data._matrix import Matrix

__all__ = [
    "linear_rows",
    "map_partitions",
    "map_values",
    "project_rows",
    "sample_scores",
    "variant_pass",
]


def _apply(loader: Callable[[], Block], func: Callable[[Block], Any]) -> Any:
    """Load a partition and apply ``func`` to it (the task body on a worker)."""
    return func(loader())


def map_partitions(
    matrix: Matrix, make_func: Callable[[int, int], Callable[[Block], Any]], client: Any = None
) -> list[Any]:
    """Return ``make_func(a, b)(block)`` (a picklable function of the block) for every row
    partition ``[a, b)``, in order: one task per partition on ``client``'s workers, or in
    this process (None).

    Raises
    ------
    StraggleError
        If no partition finishes within ``timeouts.stall`` seconds
        (:mod:`daskstraggle.config`, 300 s by default): the tasks are not pinned, so a lost
        worker's rerun elsewhere, but a frozen worker would hold its task forever.
    """
    bounds = [int(b) for b in matrix.bounds]
    loaders = [matrix.loader(p) for p in range(matrix.n_partitions)]
    funcs = [make_func(a, b) for a, b in itertools.pairwise(bounds)]
    if client is None:
        return [_apply(loader, func) for loader, func in zip(loaders, funcs, strict=True)]
    futures = client.map(_apply, loaders, funcs, pure=False)
    try:
        with client.as_current():  # distributed.wait uses the current client: this one
            _wait_progressing(futures)
        return list(client.gather(futures))
    finally:
        client.cancel(futures)


def _on_values(block: Block, func: Callable[[np.ndarray], Any]) -> Any:
    """``func`` of a block's values (the task body of :func:`map_values`)."""
    return func(np.asarray(block.values))


def map_values(matrix: Any, make_func: Callable[[int, int], Callable[[np.ndarray], Any]],
               client: Any = None) -> list[Any]:
    """:func:`map_partitions` of a genotype matrix's raw dosages (its source's
    ``count_source()``: negative where missing, not centred): ``make_func(a, b)(values)``."""
    raw = dataclasses.replace(matrix, source=matrix.source.count_source())
    return map_partitions(raw, lambda a, b: partial(_on_values, func=make_func(a, b)), client)


def _wait_progressing(futures: list[Any]) -> None:
    """Wait for every future while some finishes at least every ``timeouts.stall`` s."""
    from distributed import wait

    from daskstraggle import config

    bound = config.seconds("timeouts.stall")
    remaining = list(futures)
    while remaining:
        try:
            remaining = list(wait(remaining, timeout=bound, return_when="FIRST_COMPLETED")[1])
        except TimeoutError:
            raise StraggleError(
                f"No partition of the pass finished within {bound:g} s "
                f"({len(remaining)} of {len(futures)} left): a worker may be frozen. Check "
                "the workers and run again."
            ) from None


def _affine(block: Block, matrix: np.ndarray, before: np.ndarray | None = None,
            after: float = 0.0) -> np.ndarray:
    """``(X - before) @ matrix + after`` over a block's rows, a tile at a time."""
    out = np.empty((block.n_rows, *matrix.shape[1:]))
    for a, b, tile in block.tiles():
        out[a:b] = (tile if before is None else tile - before) @ matrix + after
    return out


def project_rows(mean: np.ndarray, components: np.ndarray) -> Callable[[int, int], Any]:
    """``make_func`` of :func:`map_partitions` for ``(X - mean) @ components.T`` per row."""
    return lambda a, b: partial(_affine, matrix=components.T, before=mean)


def linear_rows(coef: np.ndarray, intercept: float) -> Callable[[int, int], Any]:
    """``make_func`` of :func:`map_partitions` for ``X @ coef + intercept`` per row."""
    return lambda a, b: partial(_affine, matrix=coef, after=intercept)


def _variant(block: Block, V: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = block.n_rows
    center = np.zeros(n) if block.center is None else np.asarray(block.center, np.float64)
    scale = np.ones(n) if block.scale is None else np.asarray(block.scale, np.float64)
    return center, scale, _affine(block, V)


def variant_pass(V: np.ndarray) -> Callable[[int, int], Any]:
    """``make_func`` returning each row's centre, scale and ``Z @ V`` (standardised rows)."""
    return lambda a, b: partial(_variant, V=V)


def _scores(block: Block, center: np.ndarray, scale: np.ndarray,
            loadings: np.ndarray) -> np.ndarray:
    fill = None if block.fill is None else center  # a missing call contributes 0
    block = dataclasses.replace(block, fill=fill, center=center, scale=scale)
    out = np.zeros((block.n_features, loadings.shape[1]))
    for a, b, tile in block.tiles():
        out += tile.T @ loadings[a:b]
    return out


def sample_scores(center: np.ndarray, scale: np.ndarray,
                  loadings: np.ndarray) -> Callable[[int, int], Any]:
    """``make_func`` summing ``Z_b^T U_b`` over partitions, with the fit's centres and scales.

    Each partition's rows are standardised with the given per-row ``center`` and ``scale``
    (missing entries filled with the centre, so they contribute 0) instead of the store's
    own; only that partition's slice of the arrays travels with its task.
    """
    return lambda a, b: partial(_scores, center=center[a:b], scale=scale[a:b],
                                loadings=loadings[a:b])
