"""The Runtime contract and the driving loop every runtime shares.

A runtime places partitions on workers, loads them, and moves work units and results;
all decisions come from the engine (:mod:`daskstraggle.engine.coordinator`) and
the Method. Subclasses implement four primitives: ``_load`` (load the placed partitions,
return their statistics),
``_map_reduce`` (fold a function over every partition), ``_submit`` (send a unit) and
``_next`` (block until some unit completes).
"""

from __future__ import annotations

import functools
import logging
import sys
import time
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Self, TypeVar, cast, overload

import numpy as np

from daskstraggle._registry import Registry
from daskstraggle._validation import check_bool
from daskstraggle.data.matrix import Matrix
from daskstraggle.engine.convergence import ConvergenceMonitor
from daskstraggle.engine.coordinator import Coordinator
from daskstraggle.engine.events import (
    Abandon,
    AfterStep,
    Arrived,
    Await,
    Begin,
    Checked,
    CheckExact,
    Event,
    Finish,
    Freed,
    Instruction,
    Quiet,
    RecordEvent,
    RecordRow,
    Saved,
    Stepped,
    Submit,
    WriteCheckpoint,
)
from daskstraggle.engine.session import RunSession, resumed_session
from daskstraggle.engine.stop import StopRule
from daskstraggle.errors import (
    ConvergenceWarning,
    InvalidParameterError,
    NoCallError,
)
from daskstraggle.methods.base import (
    Method,
    RoundSummary,
    WorkResult,
    WorkUnit,
    check_oversampling,
)
from daskstraggle.problems.base import KernelResult, Problem, Reference, combine
from daskstraggle.problems.block import Block, MatrixStats
from daskstraggle.problems.held import payload_bytes
from daskstraggle.runtime.checkpoint import (
    Checkpointer,
    resume_state,
    run_settings,
)
from daskstraggle.trace import Result, TraceRecorder

if TYPE_CHECKING:
    from daskstraggle.methods.sgd import SGD

__all__ = ["Runtime", "RuntimeOptions", "fold", "fold_map", "get_runtime_class",
           "list_runtimes", "register_runtime", "run_unit", "stream_messages"]

logger = logging.getLogger(__name__)


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
    join = combine or (lambda a, b: a + b)
    results = iter(results)
    total = next(results)
    for result in results:
        total = join(total, result)
    return total


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
    #: ``runtime.coordinator.log`` for a replay (0: none; set it on an instance, e.g.
    #: ``engine.coordinator.LOG_SIZE``, to record a run that fails). The events hold the
    #: workers' results, so a long log of large results takes memory.
    stimulus_log: int = 0
    #: Bytes of results that reached the coordinator since the last trace row.
    _inbound: int = 0

    @classmethod
    def from_options(cls, options: RuntimeOptions) -> Runtime:
        """Build the runtime a fit function asked for by name (checked beforehand against
        the declarations)."""
        raise NotImplementedError(f"the {cls.name!r} runtime cannot be built by name")

    @property
    @abstractmethod
    def n_workers(self) -> int:
        """Number of workers (worker indices ``0 .. n_workers - 1``)."""

    @property
    def worker_names(self) -> list[str]:
        """A name per worker index (Dask addresses for the Dask runtime)."""
        return [str(i) for i in range(self.n_workers)]

    @abstractmethod
    def _load(self, matrix: Matrix, placement: list[tuple[int, ...]]) -> MatrixStats:
        """Load every partition on the workers of ``placement``; return total statistics."""

    @abstractmethod
    def _map_reduce(
        self, fn: Callable[..., Any], *args: Any, combine: Callable[[Any, Any], Any] | None = None
    ) -> Any:
        """Fold ``fn(block, *args)`` over every partition once (one task per worker)."""

    @abstractmethod
    def _submit(self, unit: WorkUnit, problem: Problem) -> None:
        """Start computing ``unit`` on its worker."""

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

    def _after_step(self) -> None:  # noqa: B027 - optional hook
        """Called after each ``method.step()`` (the simulated runtime charges update time)."""

    def _on_row(self, row: int, recorder: TraceRecorder, final: bool = False) -> None:  # noqa: B027
        """Called after each trace row (and once with ``final=True`` at the end)."""

    def _run_attrs(self) -> dict[str, Any]:
        """Extra attributes recorded in the result (runtime specific)."""
        return {}

    def _unit_load(self, unit: WorkUnit) -> float:
        """Work a unit carries relative to an equal share (1.0 = ``n_rows / n_workers``)."""
        if unit.rows is not None:
            rows = unit.rows[1] - unit.rows[0]
            return rows * self.n_workers / max(sum(self._partition_rows), 1)
        return self._rows_load(unit.partitions)

    def _rows_load(self, partitions: tuple[int, ...]) -> float:
        """Load (as :meth:`_unit_load`) of the full rows of ``partitions``."""
        rows = sum(self._partition_rows[p] for p in partitions)
        return rows * self.n_workers / max(sum(self._partition_rows), 1)

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

    # --------------------------------------------------------------------------- run
    def run(
        self,
        method: Method,
        problem: Problem,
        matrix: Matrix,
        *,
        stop: StopRule | None = None,
        step_size: float | None = None,
        reference: bool = False,
        rng: int | np.random.Generator | None = None,
        progress: bool = False,
        record_iterates: bool = False,
        checkpoint: Checkpointer | None = None,
        resume: dict[str, Any] | None = None,
    ) -> Result:
        """Solve ``problem`` on ``matrix`` with ``method``.

        Parameters
        ----------
        method : Method
            The policy (e.g. ``GD()``).
        problem : Problem
            Unbound problem (e.g. ``PCA(n_components=3)``); bound here to the data.
        matrix : Matrix
            The data; repartitioned to one partition per worker when it has fewer
            partitions than workers.
        stop : StopRule or None, default=None
            When to stop (None: ``StopRule()``).
        step_size : float or None, default=None
            None: the problem's default (1 for PCA, ``1/L`` from a power-iteration
            estimate of the smoothness for regression) times the method's
            ``step_factor``: 1 for GD and coded GD; for SGD, SAG and DSAG 0.9 with PCA
            and ``min(1, 2 / p)`` with regression (``p`` the largest subpartition
            count, doubled with ``balance``); one over the workers for ``async``.
        reference : bool, default=False
            Also compute the exact optimum with an independent solver and record the gap.
        rng : int, Generator or None, default=None
            Seeds the starting iterate and the step-size estimate.
        progress : bool, default=False
            Show a progress bar (iteration, objective, elapsed) on stderr.
        record_iterates : bool, default=False
            Keep every round's point and, after the run (outside its timing), evaluate
            the exact objective there with a pass over all partitions: the trace gains
            ``exact_objective`` (and ``exact_gap`` with ``reference``). Stochastic
            methods record no per-round objective otherwise; time-to-accuracy curves
            need this.
        checkpoint : Checkpointer, Replica or None, default=None
            Write the run's state to ``checkpoint.path`` at round boundaries, atomically
            (see :mod:`daskstraggle.runtime.checkpoint`), or publish it to the scheduler
            when the iterate would drift past the replica's bound
            (:mod:`daskstraggle.runtime.replica`); the engine decides when from
            ``checkpoint.schedule``.
        resume : dict or None, default=None
            A checkpoint's state (:func:`~daskstraggle.runtime.checkpoint.load_checkpoint`):
            carry on from it instead of starting afresh. The method, problem, workers and
            data must be those of the run that wrote it (checked: the data through its
            statistics after loading); the stop rule may differ (e.g. a larger
            ``max_iter``). Exact methods then produce the same iterates as a run that was
            never interrupted.

        Returns
        -------
        result : Result

        Raises
        ------
        InvalidParameterError
            If the method cannot solve the problem, a parameter does not fit the data, or
            ``resume`` comes from another run.
        InvalidDataError
            If the labels do not fit the problem; NonFiniteDataError if a partition holds
            NaN or infinity (raised by the worker that loaded it).
        DivergenceError
            If the run diverged: non-finite values, an exploding objective, a final
            objective above the start, or a PCA step size of 2 or more (see
            :mod:`daskstraggle.engine.convergence`).

        Warns
        -----
        ConvergenceWarning
            If the stop rule has ``tol`` or ``gap_tol`` and the run ended without meeting
            it (``result.converged`` is False).

        Notes
        -----
        Before the loop one exact pass at the starting point gives the scale of the
        optimality measure and the starting objective; after it, one exact pass at the
        returned point gives every fitted value, the objective and ``optimality``.
        """
        stop = stop or StopRule()
        rng = np.random.default_rng(rng)
        if problem.needs_labels and matrix.labels is None:
            raise InvalidParameterError(
                f"The {problem.name} problem needs labels: pass labels=... (CLI: --labels)."
            )
        method.check_problem(problem)
        check_oversampling(method, problem)
        try:
            method.check_n_workers(self.n_workers)
        except InvalidParameterError as err:
            raise InvalidParameterError(f"{err}{self._worker_count_note()}") from None
        method.check_shape(matrix.n_rows, matrix.n_columns)
        if step_size is not None:
            problem.check_step_size(step_size)
        record_iterates = check_bool(record_iterates, name="record_iterates", caller="run")
        self._validate()
        matrix = self._fit_partitions(method, matrix)
        placement = method.placement(matrix.n_partitions, self.n_workers)
        settings = run_settings(method=method, problem=problem, n_workers=self.n_workers,
                                matrix=matrix.describe())
        if resume is not None:
            resume_state(resume, settings=settings, placement=placement, max_iter=stop.max_iter)
        t_load = time.perf_counter()
        stats = self._load(matrix, placement)
        load_duration = time.perf_counter() - t_load
        refuse_no_calls(stats, matrix)
        if resume is None:
            session = self._new_session(method, problem, stats, placement, settings,
                                        stop=stop, step_size=step_size,
                                        reference=reference, rng=rng,
                                        record_iterates=record_iterates)
        else:
            method, session = resumed_session(resume, stats, record_iterates)
            if step_size is not None and step_size != session.step_size:
                raise InvalidParameterError(
                    f"The checkpoint's run used step_size={session.step_size:g}; resume "
                    f"without one (CLI: --step-size) or with the same, not {step_size:g}."
                )
        session.checkpoint = checkpoint
        self._partition_rows = [int(r) for r in matrix.partition_rows()]
        self._begin(placement, self._partition_rows)
        try:
            summary, reason = self._drive(method, session, stop=stop, progress=progress)
        finally:
            self._end()
        return self._finish(method, session, summary, reason, matrix=matrix, stop=stop,
                            load_duration=load_duration)

    def _new_session(self, method: Method, problem: Problem, stats: MatrixStats,
                     placement: list[tuple[int, ...]], settings: dict[str, Any], *,
                     stop: StopRule, step_size: float | None, reference: bool,
                     rng: np.random.Generator, record_iterates: bool) -> RunSession:
        """Bind the problem, pick the step size, start the monitor: a fresh run's state."""
        bound = problem.bind(stats)
        if step_size is None:
            step_size = (bound.default_step_size(self._map_reduce, rng)
                         * method.step_factor(bound, self.n_workers))
        ref: Reference | None = bound.reference_solution(self._map_reduce) if reference else None
        x0 = bound.init_iterate(rng)
        start = self._exact_pass(bound, x0) if method.start_pass else None
        monitor = ConvergenceMonitor(
            bound, tol=stop.tol, start_result=start, start=x0,
            step_size=step_size, window=method.convergence_window(self.n_workers),
            max_iter=stop.max_iter)
        return RunSession(problem=bound, monitor=monitor, recorder=TraceRecorder(self.n_workers),
                        reference=ref, step_size=step_size, placement=placement,
                        settings=settings, stats=stats, x0=x0,
                        iterates=[] if record_iterates else None)

    def _finish(self, method: Method, session: RunSession, summary: RoundSummary, reason: str,
                *, matrix: Matrix, stop: StopRule, load_duration: float) -> Result:
        """The fitted quantities, from one exact pass at the returned point (outside the
        timed loop, whatever the method estimated during the run), as a Result."""
        bound, monitor, ref = session.problem, session.monitor, session.reference
        trace = session.recorder.to_dataset()
        if session.iterates is not None:
            self._record_exact(trace, bound, session.iterates, ref)
        x = summary.iterate
        total = monitor.checked_result(x)  # a run that stopped on an exact check: reuse it
        if total is None:
            total = self._exact_pass(bound, x)
        x, total = bound.conclude(x, total)
        objective = bound.objective(total.values, x)
        optimality = monitor.final(x, total, objective)
        converged = monitor.converged(optimality, reason)
        fitted = bound.finalize(x, total)
        extra = {} if session.checkpoint is None else {
            "checkpoint": session.checkpoint.describe()}
        if session.resumed_at is not None:
            extra["resumed_at_iteration"] = session.resumed_at
        result = Result(
            problem=bound.name,
            method=method.name,
            fitted=fitted,
            trace=trace,
            iterate=x,
            objective=float(objective),
            stop_reason=reason,
            converged=converged,
            optimality=float(optimality),
            reference_objective=None if ref is None else ref.objective,
            distance=None if ref is None else bound.distance(x, ref),
            attrs={
                "runtime": self.name,
                "workers": self.worker_names,
                "placement": [list(p) for p in session.placement],
                "matrix": matrix.describe(),
                "step_size": session.step_size,
                "load_duration_s": load_duration,
                "method_params": method.get_params(),
                "stop": {"max_iter": stop.max_iter, "tol": stop.tol, "gap_tol": stop.gap_tol,
                         "time_budget": stop.time_budget},
                "convergence": monitor.describe(),
                "reference_info": {} if ref is None else ref.info,
                **extra,
                **self._run_attrs(),
            },
            feature_dim=matrix.dims[1],
            feature_coords=matrix.columns,
        )
        if not converged and (stop.tol is not None or stop.gap_tol is not None):
            warnings.warn(result.convergence_message(), ConvergenceWarning, stacklevel=3)
        return result

    def _fit_partitions(self, method: Method, matrix: Matrix) -> Matrix:
        """Repartition ``matrix`` to what the method needs (at least one per worker)."""
        wanted = method.partition_count(self.n_workers, matrix.n_rows)
        if wanted is not None:
            if matrix.n_rows < wanted:
                raise InvalidParameterError(
                    f"Method {method.name!r} splits the rows into {wanted} partitions for "
                    f"{self.n_workers} workers, but the matrix has only {matrix.n_rows} rows; "
                    "use fewer workers or other scheme parameters."
                )
            return matrix if matrix.n_partitions == wanted else matrix.repartition(wanted)
        if matrix.n_partitions < self.n_workers:
            if matrix.n_rows < self.n_workers:
                raise InvalidParameterError(
                    f"The matrix has {matrix.n_rows} rows, fewer than the {self.n_workers} "
                    "workers; use fewer workers."
                )
            return matrix.repartition(self.n_workers)
        return matrix

    def _exact_pass(self, problem: Problem, iterate: np.ndarray) -> KernelResult:
        """Return the exact kernel sum over every partition at ``iterate`` (one pass)."""
        return self._map_reduce(_kernel_at, problem, iterate)

    def _record_exact(self, trace: Any, problem: Problem, iterates: list[np.ndarray],
                      ref: Reference | None) -> None:
        """Add ``exact_objective`` (and ``exact_gap``) at every recorded point to the trace."""
        exact = np.array([problem.objective(self._exact_pass(problem, x).values, x)
                          for x in iterates])
        trace["exact_objective"] = ("iteration", exact)
        if ref is not None:
            trace["exact_gap"] = ("iteration", exact - ref.objective)

    def _drive(self, method: Method, session: RunSession, *, stop: StopRule,
               progress: bool) -> tuple[RoundSummary, str]:
        """Execute the coordinator's instructions until it finishes (see
        :mod:`daskstraggle.engine.coordinator`, where every decision is made).

        ``session`` carries the bound problem, the monitor that judges every round, the
        trace and, when resuming, where the interrupted run stood.
        """
        from daskstraggle._progress import progress_bar

        problem, recorder = session.problem, session.recorder
        if session.resumed_at is None:
            method.start(problem, session.x0, session.placement, step_size=session.step_size,
                         partition_rows=list(self._partition_rows))
        elif not session.stepped:
            method.step()  # the checkpoint was taken at a stop, before this round's step
        work = method.work_problem(problem)
        balancing = None
        if method.load_balancer() is not None:
            from daskstraggle.runtime.balancing import BalanceLoop

            # only the SGD family (SGD, SAG, DSAG) has a load balancer
            balancing = BalanceLoop(cast("SGD", method), self.n_workers,
                                    background=self.balance_in_background)
        writer = session.checkpoint
        coordinator = Coordinator(method, session, stop=stop, n_workers=self.n_workers,
                                  unit_load=self._unit_load, balancing=balancing,
                                  checkpoint=None if writer is None else writer.schedule,
                                  log_size=self.stimulus_log)
        self.coordinator = coordinator  # its log (with stimulus_log): for a replay
        bar = progress_bar(
            total=stop.max_iter, initial=len(recorder), disable=None if progress else True,
            file=sys.stderr, unit="it", desc=f"{method.name} {problem.name}", leave=False,
        )
        # the handler of each instruction type, looked up in singledispatch's cache: calling
        # self._execute would build a bound dispatcher for every instruction (~4 us each)
        execute = vars(Runtime)["_execute"].dispatcher.dispatch
        event: Event | None = Begin(time=self._clock())
        self._inbound = 0
        self._fetched_bytes()  # (what an earlier run fetched after its last row)
        try:
            while True:
                assert event is not None, "the coordinator expected no reply"
                instructions, event = coordinator.handle(event), None
                for instruction in instructions:
                    if isinstance(instruction, Finish):
                        logger.info("%s stopped after %d iterations (%s)", method.name,
                                    len(recorder), instruction.reason)
                        return instruction.summary, instruction.reason
                    if isinstance(instruction, RecordRow):
                        self._record_row(instruction, recorder, bar, progress=progress)
                        continue
                    event = execute(type(instruction))(self, instruction, work, problem,
                                                       session)
        finally:
            bar.close()
            if balancing is not None:
                balancing.close()
            self._cancel_pending()  # first: nothing of this run may reach the next one
            try:
                self._on_row(len(recorder) - 1, recorder, final=True)
            except Exception as err:  # bookkeeping must not mask the run's own outcome
                logger.warning("final latency bookkeeping failed: %s", err)

    def _record_row(self, instruction: RecordRow, recorder: TraceRecorder, bar: Any, *,
                    progress: bool) -> None:
        """Add the engine's trace row with the bytes the round's results brought to the
        coordinator (``bytes_to_coordinator``); update the progress bar."""
        fields = dict(instruction.fields)
        inbound, self._inbound = self._inbound + self._fetched_bytes(), 0
        fields["extras"] = {**(fields.get("extras") or {}),
                            "bytes_to_coordinator": float(inbound)}
        row = recorder.add(**fields)
        assert row == instruction.row, (row, instruction.row)
        self._on_row(row, recorder)
        bar.update(1)
        if progress:
            objective = instruction.objective
            bar.set_postfix(objective="?" if objective is None else f"{objective:.6g}",
                            refresh=False)

    @functools.singledispatchmethod
    def _execute(self, instruction: Instruction, work: Any, problem: Problem,
                 session: RunSession) -> Event | None:
        """Carry out one engine instruction (one method per instruction type); return its
        reply event, if any."""
        raise TypeError(f"unknown instruction {instruction!r}")

    @_execute.register(Submit)
    def _(self, instruction: Submit, work: Any, problem: Problem,
          session: RunSession) -> Event | None:
        self._submit(instruction.unit, work)
        return None

    @_execute.register(Await)
    def _(self, instruction: Await, work: Any, problem: Problem,
          session: RunSession) -> Event | None:
        result = self._next(timeout=instruction.timeout)
        if result is None:
            return Quiet(time=self._clock())
        self._inbound += payload_bytes(result.result)
        return Arrived(result=result, time=self._clock())

    @_execute.register(CheckExact)
    def _(self, instruction: CheckExact, work: Any, problem: Problem,
          session: RunSession) -> Event | None:
        return Checked(result=self._exact_pass(problem, instruction.iterate), time=self._clock())

    @_execute.register(AfterStep)
    def _(self, instruction: AfterStep, work: Any, problem: Problem,
          session: RunSession) -> Event | None:
        self._after_step()
        return Stepped(time=self._clock())

    @_execute.register(Abandon)
    def _(self, instruction: Abandon, work: Any, problem: Problem,
          session: RunSession) -> Event | None:
        return Freed(workers=tuple(self._abandon(instruction.version)), time=self._clock())

    @_execute.register(WriteCheckpoint)
    def _(self, instruction: WriteCheckpoint, work: Any, problem: Problem,
          session: RunSession) -> Event | None:
        session.checkpoint.write(instruction.state, iteration=instruction.iteration)
        return Saved(time=self._clock())

    @_execute.register(RecordEvent)
    def _(self, instruction: RecordEvent, work: Any, problem: Problem,
          session: RunSession) -> Event | None:
        session.recorder.add_event(instruction.event)
        return None

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


def refuse_no_calls(stats: MatrixStats, matrix: Matrix) -> None:
    """Raise :class:`~daskstraggle.errors.NoCallError` if a genotype matrix has a sample
    (column) or a variant (row) without any called genotype (``stats`` of the load).

    Such a sample's column (or variant's row) is all imputed, hence zero once centred: it
    would be scored 0, which is no answer. The callers that can remove it do so and run
    again (:func:`daskstraggle.api._run`).
    """
    dead_columns = (np.flatnonzero(stats.column_called == 0)
                    if stats.column_called is not None else np.zeros(0, dtype=np.int64))
    dead_rows = np.unique(np.asarray(stats.rows_without_call, dtype=np.int64))
    if dead_columns.size == 0 and dead_rows.size == 0:
        return
    from daskstraggle.data.genotypes import no_call_subject

    raise NoCallError(
        f"{no_call_subject(matrix, dead_columns, dead_rows)} no called genotype: they would "
        "be scored 0. Remove them (max_sample_missing=1 removes such samples, max_missing "
        "below 1 such variants; CLI --mind 1, --max-missing) or fit through fit_pca, which "
        "removes them.",
        samples=dead_columns, variants=dead_rows,
    )
