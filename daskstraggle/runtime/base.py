"""The Runtime contract: an executor of the engine's instructions.

Subclasses implement four primitives, ``_load``, ``_map_reduce``, ``_submit`` and ``_next``;
:meth:`Runtime._execute` carries out each instruction with them.
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Self, TypeVar, cast, overload

import numpy as np

from daskstraggle._deprecation import moved_function
from daskstraggle._registry import Registry
from daskstraggle.data.matrix import Matrix
from daskstraggle.engine.engine import Engine
from daskstraggle.engine.events import (
    Abandon,
    AfterStep,
    Arrived,
    Await,
    Checked,
    CheckExact,
    Compute,
    Computed,
    Event,
    Freed,
    Instruction,
    Quiet,
    RecordEvent,
    Saved,
    Stepped,
    Submit,
    Summarise,
    Summarised,
    WakeAt,
    WriteCheckpoint,
)
from daskstraggle.engine.pool import Cancel, Deliver, Resend, SplitUnit, WorkerPool
from daskstraggle.engine.recorder import TraceRecorder
from daskstraggle.errors import StraggleError
from daskstraggle.methods.base import WorkResult, WorkUnit
from daskstraggle.problems.base import KernelResult, Problem, combine
from daskstraggle.problems.block import Block, MatrixStats
from daskstraggle.problems.held import payload_bytes

if TYPE_CHECKING:
    from daskstraggle.engine.coordinator import Coordinator
    from daskstraggle.latency.fit import Links

__all__ = ["Runtime", "RuntimeOptions", "fold", "fold_map", "get_runtime_class",
           "list_runtimes", "register_runtime", "run_unit", "stream_messages"]


# ----------------------------------------------------------------- worker-side task bodies
@overload
def run_unit(
    problem: Problem, iterate: np.ndarray, *blocks: Block, coefficients: None = None,
    rows: tuple[int, int] | None = None,
) -> tuple[KernelResult, float]: ...


@overload
def run_unit(
    problem: Problem, iterate: np.ndarray, *blocks: Block, coefficients: np.ndarray,
    rows: tuple[int, int] | None = None,
) -> tuple[tuple[KernelResult, ...], float]: ...


@overload
def run_unit(
    problem: Problem, iterate: np.ndarray, *blocks: Block,
    coefficients: np.ndarray | None = None, rows: tuple[int, int] | None = None,
) -> tuple[KernelResult | tuple[KernelResult, ...], float]: ...


def run_unit(
    problem: Problem,
    iterate: np.ndarray,
    *blocks: Block,
    coefficients: np.ndarray | None = None,
    rows: tuple[int, int] | None = None,
) -> tuple[KernelResult | tuple[KernelResult, ...], float]:
    """Sum the problem's kernel over ``blocks`` at ``iterate``; time it on the worker.

    With ``coefficients`` of shape (n_messages, len(blocks)) return one coded message
    per row instead, ``sum_p coefficients[j, p] * kernel(blocks[p])``. With ``rows =
    (a, b)`` only rows ``[a, b)`` of the blocks' concatenation are summed.
    """
    t0 = time.perf_counter()
    if rows is not None:
        blocks = select_rows(blocks, *rows)
    if coefficients is None:
        return problem.kernel_sum(blocks, iterate), time.perf_counter() - t0
    coef = np.asarray(coefficients, dtype=np.float64)
    # blocks with the same coefficient in every message are summed together, in one
    # buffer (Problem.kernel_sum): an uncoded unit is one such group, and a unit of many
    # partitions then holds one result, not one per partition
    groups: dict[bytes, list[int]] = {}
    for p in range(len(blocks)):
        groups.setdefault(coef[:, p].tobytes(), []).append(p)
    parts = [problem.kernel_sum([blocks[p] for p in group], iterate)
             for group in groups.values()]
    weights = coef[:, [group[0] for group in groups.values()]]
    messages = tuple(combine(parts, row) for row in weights)
    return messages, time.perf_counter() - t0


def stream_messages(unit: WorkUnit) -> list[tuple[tuple[int, ...], np.ndarray]]:
    """Split a streamed unit into its messages: (partitions, coefficients of shape (1, m))."""
    if unit.coefficients is None or unit.rows is not None:
        raise ValueError("a streamed work unit needs coefficients and no row range")
    coef = np.asarray(unit.coefficients, dtype=np.float64)
    out = []
    for positions, row in zip(unit.message_supports(), coef, strict=True):
        if not positions:
            raise ValueError("a streamed message must use at least one partition")
        out.append((tuple(unit.partitions[p] for p in positions), row[list(positions)][None, :]))
    return out


def select_rows(blocks: tuple[Block, ...], a: int, b: int) -> tuple[Block, ...]:
    """Return rows ``[a, b)`` of the concatenation of ``blocks`` as views of them."""
    total = sum(block.n_rows for block in blocks)
    if not 0 <= a < b <= total:
        raise ValueError(f"rows [{a}, {b}) are not a non-empty range of {total} rows")
    out, offset = [], 0
    for block in blocks:
        lo, hi = max(a - offset, 0), min(b - offset, block.n_rows)
        if lo < hi:
            out.append(block.slice(lo, hi))
        offset += block.n_rows
    return tuple(out)


def fold(results: Iterable[Any], combine: Callable[[Any, Any], Any] | None) -> Any:
    """Fold ``results`` in order with ``combine`` (default ``+``); at least one result."""
    return functools.reduce(combine or operator.add, results)


def fold_map(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    combine: Callable[[Any, Any], Any] | None,
    *blocks: Block,
) -> Any:
    """Apply ``fn(block, *args)`` to each block and fold with ``combine`` (default ``+``)."""
    return fold((fn(block, *args) for block in blocks), combine)


@dataclass(frozen=True, kw_only=True)
class RuntimeOptions:
    """What a fit function passes to the runtime it starts (see :meth:`Runtime.from_options`).

    Parameters
    ----------
    n_workers : int or None
        Workers to start (None: the ``daskstraggle.workers`` setting).
    client : distributed.Client or None
        A cluster to run on.
    scheduler : str or None
        A scheduler address to connect to.
    scheduler_file : path or None
        A scheduler file whose address to connect to.
    stragglers : Stragglers
        The parsed stragglers spec (latency model, throttle, simulated faults).
    seed : int or None
        Seed of the latency draws.
    min_workers : int or None
        Workers of an existing cluster to wait for.
    backup_after : float or None
        Seconds after which a slow unit gets a speculative backup.
    aggregation : {"flat", "tree"}
        Where the results of a round are summed: at the client, or on the workers.
    """

    n_workers: int | None = None
    client: Any = None
    scheduler: str | None = None
    scheduler_file: Any = None
    stragglers: Any = None
    seed: int | None = None
    min_workers: int | None = None
    backup_after: float | None = None
    aggregation: str = "flat"


def _unknown_runtime(name: Any, names: list[str]) -> str:
    listed = ", ".join(repr(n) for n in names)
    return (f"The 'runtime' parameter must be a Runtime, {listed} or None. Got {name!r} "
            "instead.")


R = TypeVar("R", bound="type[Runtime]")

_REGISTRY: Registry[Runtime] = Registry("runtime", group="daskstraggle.runtimes",
                                        unknown=_unknown_runtime)


def register_runtime(cls: R) -> R:
    """Register a Runtime subclass under ``cls.name`` (class decorator).

    Its declarations (:attr:`Runtime.in_process`, :attr:`Runtime.latency_kind`,
    :attr:`Runtime.backups`) are what the fit functions check their options against, and
    :meth:`Runtime.from_options` builds it; ``runtime=cls.name`` (CLI ``--runtime``) then
    selects it. Other packages register theirs under the ``daskstraggle.runtimes``
    entry-point group.
    """
    _REGISTRY.register(cls)
    return cls


def get_runtime_class(name: str) -> type[Runtime]:
    """Return the runtime class ``name``: :meth:`~daskstraggle._registry.Registry.get`."""
    return _REGISTRY.get(name)


def list_runtimes() -> list[str]:
    """Return the runtime names: :meth:`~daskstraggle._registry.Registry.names`."""
    return _REGISTRY.names()


class Runtime(ABC):
    """Abstract base of the runtimes: move data and time, decide nothing.

    Use as a context manager (or call :meth:`close`) so clusters it started are shut down.
    A runtime selected by name (``runtime="sim"``) is registered with
    :func:`register_runtime` and declares what the fit functions may ask of it.
    """

    #: Name recorded in traces, and under which the runtime is registered.
    name: str = "runtime"
    #: Its workers are shares of the rows in this process, not processes: no client or
    #: scheduler, no waiting for workers, up to ``api.MAX_IN_PROCESS_WORKERS`` of them.
    in_process: ClassVar[bool] = False
    #: What a stragglers spec does: ``"none"`` (refused: nothing to slow down),
    #: ``"simulated"`` (the latency model is the clock; the fault terms ``loss``,
    #: ``freeze``, ``join`` and ``retire`` apply) or ``"injected"`` (delays on real
    #: workers, and the throttle of their processes).
    latency_kind: ClassVar[Literal["none", "simulated", "injected"]] = "injected"
    #: Whether it sends speculative backups (``backup_after``).
    backups: ClassVar[bool] = False
    #: Its runs' backup setting, where it sends them: a unit unanswered this many times
    #: the median latency is computed again on another worker (None: no backups).
    backup_after: float | None = None
    #: Whether it can sum results on the workers (``aggregation="tree"``).
    aggregates: ClassVar[bool] = False
    #: Whether ``method="auto"`` measures its workers before choosing (a short probe and
    #: a simulation of the candidates, :mod:`daskstraggle.runtime.auto`); False: the rule
    #: on the data alone.
    measures_workers: ClassVar[bool] = False
    #: Run the load balancer's optimizer in a background thread (False: inline, for
    #: runtimes whose clock does not move while the coordinator computes).
    balance_in_background: bool = True
    #: Events (with the instructions each gave) the engine of each run keeps in
    #: ``runtime.engine.log`` for a replay (0: none; set it on an instance, e.g.
    #: ``engine.coordinator.LOG_SIZE``, to record a run that fails). The events hold the
    #: workers' results, so a long log of large results takes memory.
    stimulus_log: int = 0
    #: Bytes of results that reached the coordinator since the last trace row.
    _inbound: int = 0
    #: Rows of each partition of the run being driven, and their sum (at least 1; both set
    #: by the lifecycle).
    _partition_rows: list[int]
    _total_rows: int = 1
    #: The problem the units compute on (the last one submitted).
    _work: Any = None
    _engine: Engine | None = None
    #: Whether a run here printed the dashboard's address (it is printed once).
    _announced: bool = False
    #: The ``stimulus_id`` of the instruction being carried out: what the runtime observes
    #: while it does (the units it sends) is the engine's answer to that event.
    _cause: str = ""
    #: Numbers of the run's events (:meth:`_new_stimulus_id`).
    _stimulus_numbers: Iterator[int] = itertools.count(1)
    #: When the pool asked to be woken (its last :class:`~daskstraggle.engine.events.WakeAt`).
    _wake: float = math.inf

    @classmethod
    def from_options(cls, options: RuntimeOptions) -> Runtime:
        """Build the runtime a fit function asked for by name (checked beforehand against
        the declarations)."""
        raise NotImplementedError(f"the {cls.name!r} runtime cannot be built by name")

    @property
    def engine(self) -> Engine:
        """The engine of the run driven here (the last run's after it ended): its
        coordinator, its worker pool and, with :attr:`stimulus_log`, its log."""
        if self._engine is None:
            self._engine = Engine(log_size=self.stimulus_log)
        return self._engine

    @engine.setter
    def engine(self, engine: Engine) -> None:
        self._engine = engine

    @property
    def dashboard_link(self) -> str | None:
        """The address of the cluster's dashboard, None without one (in process)."""
        return None

    @property
    def coordinator(self) -> Coordinator | None:
        """The engine's coordinator (the last run's after it ended)."""
        return self.engine.coordinator

    @property
    def worker_pool(self) -> WorkerPool | None:
        """Which worker computes each worker index (the engine's pool), for runtimes
        whose workers may come and go; None in process."""
        return self.engine.pool

    @property
    @abstractmethod
    def n_workers(self) -> int:
        """Number of workers (worker indices ``0 .. n_workers - 1``)."""

    @property
    def worker_names(self) -> list[str]:
        """A name per worker index (Dask addresses for the Dask runtime)."""
        return [str(i) for i in range(self.n_workers)]

    def measure_links(self, nbytes: int) -> Links | None:
        """Measure the links with messages of ``nbytes`` bytes: each worker's to the
        coordinator (:func:`~daskstraggle.latency.fit.fit_link`) and between workers
        (:func:`~daskstraggle.latency.fit.fit_peers`); None when there are no links to
        weigh (in process) or they could not be measured."""
        return None

    @abstractmethod
    def _load(self, matrix: Matrix, placement: list[tuple[int, ...]]) -> MatrixStats:
        """Load every partition on the workers of ``placement``; return total statistics."""

    @abstractmethod
    def _map_reduce(
        self, fn: Callable[..., Any], *args: Any, combine: Callable[[Any, Any], Any] | None = None
    ) -> Any:
        """Fold ``fn(block, *args)`` over every partition once (one task per worker)."""

    @abstractmethod
    def _submit(self, unit: WorkUnit, problem: Problem, only: frozenset[int] | None = None
                ) -> None:
        """Start computing ``unit`` on its worker (``only``: just those messages of a
        streamed unit, when the worker pool sends it again)."""

    @abstractmethod
    def _next(self, timeout: float | None = None) -> WorkResult | None:
        """Return the next completed unit; wait at most ``timeout`` seconds (None: block).

        Returns None when nothing completed within ``timeout``.
        """

    def _clock(self) -> float:
        """Return the runtime's time in seconds (simulated for the simulated runtime)."""
        return time.perf_counter()

    def _validate(self) -> None:  # noqa: B027 - optional hook
        """Raise InvalidParameterError if the runtime's settings do not fit the cluster."""

    def _begin(self, placement: list[tuple[int, ...]], partition_rows: list[int]) -> None:  # noqa: B027
        """Prepare a run's event loop (e.g. install straggler injection)."""

    def _end(self) -> None:  # noqa: B027 - optional hook
        """Undo :meth:`_begin`; called even when the run fails or is interrupted."""

    def _lost(self, err: BaseException) -> StraggleError | None:
        """The one-line error to raise instead of ``err`` when ``err`` means the cluster
        is gone (e.g. the scheduler), else None: ``err`` propagates as it is. Called before
        the run's clean-up, which then does not wait on a cluster that is gone."""
        return None

    def _after_step(self) -> None:  # noqa: B027 - optional hook
        """Called after each ``method.step()`` (the simulated runtime charges update time)."""

    def _wrote(self, nbytes: int) -> None:  # noqa: B027 - optional hook
        """Called after the run's state (``nbytes``) was written: a checkpoint or a replica
        (the simulated runtime charges its bytes on the coordinator's link)."""

    def _on_row(self, row: int, recorder: TraceRecorder, final: bool = False) -> None:  # noqa: B027
        """Called after each trace row (and once with ``final=True`` at the end)."""

    def _run_attrs(self) -> dict[str, Any]:
        """Extra attributes recorded in the result (runtime specific)."""
        return {}

    def _unit_load(self, unit: WorkUnit) -> float:
        """Work a unit carries relative to an equal share (1.0 = ``n_rows / n_workers``)."""
        if unit.rows is not None:
            return self._load_of(unit.rows[1] - unit.rows[0])
        return self._rows_load(unit.partitions)

    def _rows_load(self, partitions: tuple[int, ...]) -> float:
        """Load (as :meth:`_unit_load`) of the full rows of ``partitions``."""
        return self._load_of(sum(self._partition_rows[p] for p in partitions))

    def _load_of(self, rows: int) -> float:
        """Load (as :meth:`_unit_load`) of ``rows`` rows."""
        return rows * self.n_workers / self._total_rows

    def _unload(self) -> None:  # noqa: B027 - optional hook
        """Release loaded partitions and pending work."""

    def _worker_count_note(self) -> str:
        """What to add to a method's refusal of :attr:`n_workers` (default: nothing)."""
        return ""

    def close(self) -> None:
        """Release resources (and clusters the runtime started)."""
        self._unload()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    #: Deprecated: the run's lifecycle moved out of the runtime
    #: (:func:`daskstraggle.api.run_on`; :func:`daskstraggle.solve` for the grouped face).
    run = moved_function("Runtime.run", "daskstraggle.api.run_on",
                         "run_on(runtime, method, problem, matrix, ...)")

    def _exact_pass(self, problem: Problem, iterate: np.ndarray) -> KernelResult:
        """Return the exact kernel sum over every partition at ``iterate`` (one pass)."""
        return self._map_reduce(_kernel_at, problem, iterate)

    @functools.singledispatchmethod
    def _execute(self, instruction: Instruction, work: Any, session: Any) -> Event | None:
        """Carry out one engine instruction of the rounds (or a :class:`Compute`) with the
        primitives, one handler per instruction type; ``work`` and ``session`` are the
        rounds' (None before them). Return the instruction's reply event, if any."""
        raise TypeError(f"unknown instruction {instruction!r}")

    @_execute.register(Submit)
    def _(self, instruction: Submit, work: Any, session: Any) -> None:
        self._cause = instruction.stimulus_id
        self._submit(instruction.unit, work)

    @_execute.register(Await)
    def _(self, instruction: Await, work: Any, session: Any) -> Event:
        pool = self.worker_pool
        if instruction.timeout is None and pool is not None and pool.idle:
            raise StraggleError(
                "The run waits for a result that no worker computes (no task in flight after "
                f"the worker pool's last decision, {pool.log[-1:]}); this is a daskstraggle "
                "bug: please report it with the run's log.")
        result = self._next(timeout=instruction.timeout)
        if result is None:
            return self._reply(Quiet)
        self._inbound += payload_bytes(result.result)
        return self._reply(Arrived, result=result)

    @_execute.register(CheckExact)
    def _(self, instruction: CheckExact, work: Any, session: Any) -> Event:
        return self._reply(Checked, result=self._exact_pass(instruction.problem,
                                                            instruction.iterate))

    @_execute.register(Summarise)
    def _(self, instruction: Summarise, work: Any, session: Any) -> Event:
        return self._reply(Summarised, summary=instruction.method.summary())

    @_execute.register(AfterStep)
    def _(self, instruction: AfterStep, work: Any, session: Any) -> Event:
        self._after_step()
        return self._reply(Stepped)

    @_execute.register(Abandon)
    def _(self, instruction: Abandon, work: Any, session: Any) -> Event:
        self._cause = instruction.stimulus_id
        return self._reply(Freed, workers=tuple(self._abandon(instruction.version)))

    @_execute.register(WriteCheckpoint)
    def _(self, instruction: WriteCheckpoint, work: Any, session: Any) -> Event:
        session.checkpoint.write(instruction.state, iteration=instruction.iteration)
        self._wrote(session.checkpoint.nbytes)
        return self._reply(Saved)

    @_execute.register(RecordEvent)
    def _(self, instruction: RecordEvent, work: Any, session: Any) -> None:
        session.recorder.add_event(instruction.event)

    @_execute.register(Compute)
    def _(self, instruction: Compute, work: Any, session: Any) -> Event:
        return self._reply(Computed, value=instruction.fn(self._map_reduce, *instruction.args))

    def _reply(self, kind: type[Event], **fields: Any) -> Event:
        """An event of type ``kind`` observed now, named by its lower-case type name."""
        return kind(time=self._clock(), stimulus_id=self._new_stimulus_id(kind.__name__.lower()),
                    **fields)

    def _new_stimulus_id(self, kind: str) -> str:
        """A new ``stimulus_id`` for an event observed here: ``kind`` and the next number
        of the run (``"arrived-17"``; numbered from 1 at each run's start, so a seeded
        simulation names its events the same each time)."""
        return f"{kind}-{next(self._stimulus_numbers)}"

    def _observe(self, kind: type[Event], stimulus_id: str | None = None,
                 **fields: Any) -> list[Instruction]:
        """Give the engine's worker pool an event of type ``kind`` observed now (``stimulus_id``:
        by default the instruction being carried out, :attr:`_cause`), carry out its
        instructions (:meth:`_carry`) and return its answers (:class:`Deliver`,
        :class:`SplitUnit`). Its wake-up time is taken first: the events its
        instructions cause are handled after it and may move it."""
        out = self.engine.handle_stimulus(kind(time=self._clock(), stimulus_id=(
            self._cause if stimulus_id is None else stimulus_id), **fields))
        if out and isinstance(out[-1], WakeAt):
            self._wake = cast(WakeAt, out.pop()).time
        answers: list[Instruction] = []
        for instruction in out:
            if isinstance(instruction, Deliver | SplitUnit):
                answers.append(instruction)
            else:
                self._cause = instruction.stimulus_id
                self._carry(instruction)
        return answers

    @functools.singledispatchmethod
    def _carry(self, instruction: Instruction) -> None:
        """Carry out one instruction of the worker pool, one handler per instruction type
        (runtimes with a pool register theirs; :meth:`_submit` takes the messages to send
        again, :meth:`_cancel` drops tasks)."""
        raise TypeError(f"unexpected pool instruction {instruction!r}")

    @_carry.register(Resend)
    def _(self, instruction: Resend) -> None:
        self._cancel(instruction.cancel)
        for unit, only in instruction.units:
            self._submit(unit, self._work, only)

    @_carry.register(Cancel)
    def _(self, instruction: Cancel) -> None:
        self._cancel(instruction.keys)

    def _cancel(self, keys: tuple[str, ...] | list[str]) -> None:
        """Drop the tasks ``keys`` (runtimes with a pool)."""
        raise NotImplementedError

    def _pool_attrs(self, losses: list[dict[str, Any]], backups: float | None
                    ) -> dict[str, Any]:
        """The run's attributes of the worker pool: ``worker_losses`` (``losses``, the moves
        carried out), ``worker_joins`` and, with ``backups`` (the ``backup_after`` setting),
        the backups sent."""
        pool = self.worker_pool
        attrs: dict[str, Any] = {"worker_losses": list(losses)} if losses else {}
        if pool is not None and pool.joins:
            attrs["worker_joins"] = [dict(join) for join in pool.joins]
        if backups is not None and pool is not None:
            attrs["backups"] = pool.n_backups
        return attrs

    def _cancel_pending(self) -> None:  # noqa: B027 - optional hook
        """Forget work still in flight when a run ends."""

    def _fetched_bytes(self) -> int:
        """Bytes of summed results fetched since the last call (tree aggregation)."""
        return 0

    def _abandon(self, version: int) -> list[int]:
        """Drop undelivered messages of streamed units older than ``version``.

        Returns the worker index of every unit abandoned (each frees its worker).
        """
        return []


def _kernel_at(block: Block, problem: Problem, iterate: np.ndarray) -> KernelResult:
    return problem.kernel(block, iterate)
