"""In-process runtime with zero latency: methods tested and run without a cluster."""

from __future__ import annotations

import itertools
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from typing import Any, ClassVar, Literal

from threadpoolctl import ThreadpoolController

from daskstraggle._validation import check_int
from daskstraggle.data.matrix import Matrix
from daskstraggle.methods.base import WorkResult, WorkUnit
from daskstraggle.problems.base import Problem
from daskstraggle.problems.block import Block, MatrixStats, block_stats
from daskstraggle.runtime.base import (
    Runtime,
    RuntimeOptions,
    fold,
    register_runtime,
    run_unit,
    stream_messages,
)

__all__ = ["LocalRuntime"]


def _cores() -> int:
    """Return the number of cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


#: A run whose logical workers each hold fewer bytes than this computes its units and
#: passes inline, in the driving thread: a thread hand-off costs tens of microseconds on a
#: quiet machine and milliseconds on a busy one, more than a kernel over a few MiB.
_INLINE_BYTES = 1 << 22

_controller: list[ThreadpoolController] = []


@contextmanager
def _one_blas_thread() -> Iterator[None]:
    """Limit the BLAS libraries to one thread each while the block is run.

    Several threads that each run a multi-threaded BLAS call oversubscribe the cores, and
    OpenBLAS threads spin while they wait, so each thread's BLAS calls run on one thread
    while the runtime's own threads use the cores. The limit is process-wide; it is set
    and lifted from the driving thread only, while none of the runtime's threads is
    inside a BLAS call.
    """
    if not _controller:
        _controller.append(ThreadpoolController())
    limited = _controller[0].limit(limits=1, user_api="blas")
    try:
        yield
    finally:
        limited.restore_original_limits()


def _ordered_map(fn: Callable[[Any], Any], items: Iterable[Any], *,
                 per_core: int = 1) -> Iterator[Any]:
    """Yield ``fn(item)`` in the order of ``items``, computed in ``per_core`` threads per core.

    The kernels, zarr's codecs, the genotype decoder and the Gram tiles' ``syrk`` release
    the GIL; BLAS runs one thread per thread meanwhile (:func:`_one_blas_thread`). At most
    one result per thread waits to be consumed (a pass of d x d Gram matrices holds a few,
    not one per partition). An error is raised for the first failing item in order, and
    the items not yet started are not run.
    """
    items = list(items)
    threads = min(len(items), per_core * _cores())
    if threads <= 1:
        yield from map(fn, items)
        return
    pool = ThreadPoolExecutor(threads, thread_name_prefix="daskstraggle-local")
    try:
        with _one_blas_thread():
            pending: deque[Future[Any]] = deque()
            for item in items:
                if len(pending) == threads:
                    yield pending.popleft().result()
                pending.append(pool.submit(fn, item))
            while pending:
                yield pending.popleft().result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


@register_runtime
class LocalRuntime(Runtime):
    """Run methods in this process, one logical worker per placement row.

    Results arrive in the order units were submitted and take no time beyond the kernel
    computation itself. Partitions are loaded with the same loaders the Dask runtime
    sends to workers, so data checks (NaN, shape) behave identically. Loading, the passes
    over every partition (statistics, exact passes) and the work units of the loop run in
    one thread per core, with one BLAS thread each; passes are folded in partition order
    and units delivered in submission order, so every result is the sequential one bit for
    bit. When every logical worker holds less than 4 MiB, the units and passes run inline
    instead (threads would cost more than they save).

    Parameters
    ----------
    n_workers : int or None, default=None
        Number of logical workers; None: the ``daskstraggle.workers`` setting (4,
        :mod:`daskstraggle.config`).

    Examples
    --------
    >>> import numpy as np
    >>> from daskstraggle import open_matrix
    >>> from daskstraggle.api import run_on
    >>> from daskstraggle.methods import GD
    >>> from daskstraggle.problems import PCA
    >>> X = np.random.default_rng(0).normal(size=(200, 5))
    >>> with LocalRuntime(n_workers=2) as rt:
    ...     res = run_on(rt, GD(), PCA(n_components=2), open_matrix(X), rng=0)
    >>> res.fitted["components"].shape
    (2, 5)
    """

    name = "local"
    in_process = True
    latency_kind: ClassVar[Literal["none", "simulated", "injected"]] = "none"

    @classmethod
    def from_options(cls, options: RuntimeOptions) -> LocalRuntime:
        """``LocalRuntime(n_workers)``."""
        return cls(n_workers=options.n_workers)

    def __init__(self, n_workers: int | None = None) -> None:
        if n_workers is None:
            from daskstraggle import config  # dask.config: not imported with the package

            n_workers = config.workers()
        self._n_workers = check_int(n_workers,
                                    name="n_workers", caller="LocalRuntime", low=1)
        self._blocks: list[dict[int, Block]] = []
        self._partitions: dict[int, Block] = {}
        self._queue: deque[WorkResult] = deque()
        self._computing: deque[Future[list[WorkResult]]] = deque()
        self._pool: ThreadPoolExecutor | None = None
        self._limits = ExitStack()
        self._inline = False

    @property
    def n_workers(self) -> int:
        """Number of logical workers."""
        return self._n_workers

    def _load(self, matrix: Matrix, placement: list[tuple[int, ...]]) -> MatrixStats:
        def load(group: tuple[int, int]) -> list[tuple[Block, MatrixStats]]:
            return [(block, block_stats(block)) for block in matrix.load_partitions(*group)]

        # partitions inside one storage chunk are read together (Matrix.read_groups); two
        # loads per core: a read waiting on zarr's event-loop thread leaves its core
        # to a decode (measured: 40 partitions of 10^4 x 10^3 calls, 0.93-1.10 s with one
        # thread per core, 0.84-0.88 s with two)
        loaded: dict[int, Block] = {}

        def blocks_and_stats() -> Iterator[MatrixStats]:
            # the statistics are folded as they arrive, not kept per partition (a wide
            # matrix's column statistics are megabytes per partition)
            for group in _ordered_map(load, matrix.read_groups(), per_core=2):
                for block, stats in group:
                    loaded[len(loaded)] = block
                    yield stats

        total = fold(blocks_and_stats(), None)
        self._blocks = [{p: loaded[p] for p in parts} for parts in placement]
        self._partitions = loaded
        held = (sum(block.nbytes for block in blocks.values()) for blocks in self._blocks)
        self._inline = _cores() <= 1 or max(held, default=0) < _INLINE_BYTES
        return total

    def _map_reduce(
        self, fn: Callable[..., Any], *args: Any, combine: Callable[[Any, Any], Any] | None = None
    ) -> Any:
        # each partition once, even when a coded placement stores replicas
        blocks = self._partitions.values()
        if self._inline:
            return fold((fn(block, *args) for block in blocks), combine)
        return fold(_ordered_map(lambda block: fn(block, *args), blocks), combine)

    def _submit(self, unit: WorkUnit, problem: Problem, only: frozenset[int] | None = None
                ) -> None:
        if self._inline:
            self._queue.extend(self._compute_unit(unit, problem))
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(_cores(), thread_name_prefix="daskstraggle-local")
        if not self._computing:
            self._limits.enter_context(_one_blas_thread())
        self._computing.append(self._pool.submit(self._compute_unit, unit, problem))

    def _compute_unit(self, unit: WorkUnit, problem: Problem) -> list[WorkResult]:
        """Compute one unit: its result, or each message of a streamed unit."""
        if unit.stream:
            computed = self._compute_stream(unit, problem)
            elapsed = list(itertools.accumulate(seconds for _, _, seconds in computed))
            return [WorkResult(unit, message, seconds, latency=elapsed[j], message=j,
                               final=j == len(computed) - 1)
                    for j, (_, message, seconds) in enumerate(computed)]
        held = self._blocks[unit.worker_index]
        result, duration = run_unit(problem, unit.iterate, *(held[p] for p in unit.partitions),
                                    coefficients=unit.coefficients, rows=unit.rows)
        return [WorkResult(unit, result, duration, latency=duration)]

    def _collect(self, *, every: bool) -> None:
        """Queue the oldest computing unit's results (every unit's with ``every``), in
        submission order; lift the BLAS limit once none is computing."""
        try:
            while self._computing and (every or not self._queue):
                self._queue.extend(self._computing.popleft().result())
        finally:
            if not self._computing:
                self._limits.close()

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
        self._collect(every=True)
        dropped = [r for r in self._queue if r.unit.stream and r.unit.version < version]
        if dropped:
            self._queue = deque(r for r in self._queue
                                if not (r.unit.stream and r.unit.version < version))
        return [r.unit.worker_index for r in dropped if r.final]

    def _next(self, timeout: float | None = None) -> WorkResult | None:
        self._collect(every=False)
        return self._queue.popleft() if self._queue else None

    def _cancel_pending(self) -> None:
        for future in self._computing:
            future.cancel()
        for future in self._computing:  # the started ones finish; their errors do not matter
            if not future.cancelled():
                future.exception()
        self._computing.clear()
        self._limits.close()
        self._queue.clear()

    def _unload(self) -> None:
        self._cancel_pending()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self._blocks = []
        self._partitions = {}
