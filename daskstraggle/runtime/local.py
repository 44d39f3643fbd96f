"""In-process runtime with zero latency: methods tested and run without a cluster."""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from daskstraggle._validation import check_int
from daskstraggle.data.matrix import Matrix
from daskstraggle.methods.base import WorkResult, WorkUnit
from daskstraggle.problems.base import Problem
from daskstraggle.problems.block import Block, MatrixStats, block_stats
from daskstraggle.runtime.base import Runtime, fold_map, run_unit, stream_messages

__all__ = ["LocalRuntime"]


def _cores() -> int:
    """Return the number of cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class LocalRuntime(Runtime):
    """Run methods in this process, one logical worker per placement row.

    Results arrive in the order units were submitted and take no time beyond the kernel
    computation itself. Partitions are loaded with the same loaders the Dask runtime
    sends to workers, so data checks (NaN, shape) behave identically; they are read in
    parallel threads, one per core.

    Parameters
    ----------
    n_workers : int, default=4
        Number of logical workers.

    Examples
    --------
    >>> import numpy as np
    >>> from daskstraggle import open_matrix
    >>> from daskstraggle.methods import GD
    >>> from daskstraggle.problems import PCA
    >>> X = np.random.default_rng(0).normal(size=(200, 5))
    >>> with LocalRuntime(n_workers=2) as rt:
    ...     res = rt.run(GD(), PCA(n_components=2), open_matrix(X), rng=0)
    >>> res.fitted["components"].shape
    (2, 5)
    """

    name = "local"

    def __init__(self, n_workers: int = 4) -> None:
        self._n_workers = check_int(n_workers, name="n_workers", caller="LocalRuntime", low=1)
        self._blocks: list[dict[int, Block]] = []
        self._partitions: dict[int, Block] = {}
        self._queue: deque[WorkResult] = deque()

    @property
    def n_workers(self) -> int:
        """Number of logical workers."""
        return self._n_workers

    def _load(self, matrix: Matrix, placement: list[tuple[int, ...]]) -> MatrixStats:
        # read, decode and summarise the partitions on the machine's cores: zarr's codecs,
        # the genotype decoder and numpy release the GIL. The statistics are folded in
        # partition order, as the sequential fold would.
        def load(partition: int) -> tuple[Block, MatrixStats]:
            block = matrix.loader(partition)()
            return block, block_stats(block)

        n = matrix.n_partitions
        threads = min(n, _cores())
        if threads > 1:
            pool = ThreadPoolExecutor(threads, thread_name_prefix="daskstraggle-load")
            try:
                results = list(pool.map(load, range(n)))
            finally:  # a failed partition: do not read the rest
                pool.shutdown(wait=True, cancel_futures=True)
        else:
            results = [load(p) for p in range(n)]
        loaded = {p: block for p, (block, _) in enumerate(results)}
        self._blocks = [{p: loaded[p] for p in parts} for parts in placement]
        self._partitions = loaded
        stats = results[0][1]
        for _, more in results[1:]:
            stats = stats + more
        return stats

    def _map_reduce(
        self, fn: Callable[..., Any], *args: Any, combine: Callable[[Any, Any], Any] | None = None
    ) -> Any:
        # each partition once, even when a coded placement stores replicas
        return fold_map(fn, args, combine, *self._partitions.values())

    def _submit(self, unit: WorkUnit, problem: Problem) -> None:
        held = self._blocks[unit.worker_index]
        if unit.stream:
            elapsed = 0.0
            computed = self._compute_stream(unit, problem)
            for j, (_, message, duration) in enumerate(computed):
                elapsed += duration
                self._queue.append(WorkResult(unit, message, duration, latency=elapsed,
                                              message=j, final=j == len(computed) - 1))
            return
        result, duration = run_unit(problem, unit.iterate, *(held[p] for p in unit.partitions),
                                    coefficients=unit.coefficients, rows=unit.rows)
        self._queue.append(WorkResult(unit, result, duration, latency=duration))

    def _compute_stream(self, unit: WorkUnit, problem: Problem) -> list[tuple[Any, Any, float]]:
        """Compute each message of a streamed unit: (partitions, message, seconds) in order."""
        held = self._blocks[unit.worker_index]
        out = []
        for parts, coef in stream_messages(unit):
            (message,), seconds = run_unit(problem, unit.iterate, *(held[p] for p in parts),
                                           coefficients=coef)
            out.append((parts, message, seconds))
        return out

    def _abandon(self, version: int) -> list[int]:
        dropped = [r for r in self._queue if r.unit.stream and r.unit.version < version]
        if dropped:
            self._queue = deque(r for r in self._queue
                                if not (r.unit.stream and r.unit.version < version))
        return [r.unit.worker_index for r in dropped if r.final]

    def _next(self, timeout: float | None = None) -> WorkResult | None:
        return self._queue.popleft() if self._queue else None

    def _cancel_pending(self) -> None:
        self._queue.clear()

    def _unload(self) -> None:
        self._blocks = []
        self._partitions = {}
        self._queue.clear()
