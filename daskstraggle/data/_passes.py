"""One pass over a matrix's row partitions, for the estimators' predict and transform.

Each pass applies a small function to every partition's :class:`~daskstraggle.problems.Block`
(as its loader reads it) and returns the per-partition results in row order. With a Dask
client the partitions are read and reduced on the workers (one task per partition, results
of a few columns per row travel back); without one they are read in this process, one
partition at a time, so at most one partition is in memory.
"""

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
    "project_rows",
    "sample_scores",
    "sum_partitions",
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
    this process (None)."""
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


def sum_partitions(matrix: Matrix, func: Callable[[Block], tuple[np.ndarray, ...]],
                   client: Any = None) -> tuple[np.ndarray, ...]:
    """Return the sum over the row partitions of ``func(block)`` (a tuple of arrays).

    With a client, one task per partition; the client adds each result as it arrives and
    releases it, so at most a few partitions' results are held at once (the rest wait on
    the workers). Without one, the partitions are read and added here one at a time.
    ``func`` is picklable and returns arrays of the same shapes for every partition.

    Raises
    ------
    StraggleError
        If no partition finishes within ``timeouts.stall`` seconds.
    """
    loaders = [matrix.loader(p) for p in range(matrix.n_partitions)]
    total: list[np.ndarray] | None = None

    def add(part: tuple[np.ndarray, ...]) -> None:
        nonlocal total
        total = ([np.array(a, dtype=np.float64) for a in part] if total is None
                 else [t + a for t, a in zip(total, part, strict=True)])

    if client is None:
        for loader in loaders:
            add(_apply(loader, func))
    else:
        futures = client.map(_apply, loaders, [func] * len(loaders), pure=False)
        try:
            with client.as_current():
                for future in _as_completed_progressing(futures):
                    add(future.result())
                    future.release()
        finally:
            client.cancel(futures)
    assert total is not None
    return tuple(total)


def _as_completed_progressing(futures: list[Any]) -> Any:
    """Yield the futures as they finish, while some finishes at least every
    ``timeouts.stall`` seconds (as :func:`_wait_progressing`)."""
    from distributed import wait

    from daskstraggle import config

    bound = config.seconds("timeouts.stall")
    remaining = list(futures)
    while remaining:
        try:
            done, not_done = wait(remaining, timeout=bound, return_when="FIRST_COMPLETED")
        except TimeoutError:
            raise StraggleError(
                f"No partition of the pass finished within {bound:g} s "
                f"({len(remaining)} of {len(futures)} left): a worker may be frozen. Check "
                "the workers and run again."
            ) from None
        yield from done
        remaining = list(not_done)


def _wait_progressing(futures: list[Any]) -> None:
    """Wait for every future while some finishes at least every ``timeouts.stall``
    seconds (:mod:`daskstraggle.config`, 300 s by default).

    The tasks are not pinned, so the scheduler reruns a lost worker's elsewhere; a
    frozen worker holds its task forever, which this bounds with one line.
    """
    for _ in _as_completed_progressing(futures):
        pass


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
