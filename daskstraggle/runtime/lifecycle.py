"""A run's lifecycle, from the data to the engine's finish, against any runtime.

:func:`run` is the driver: it checks what the method asks of the runtime and the data,
repartitions and places the partitions, has the runtime load them, binds the problem,
picks the step size, starts (or restores) the engine's session, executes the engine's
instructions until it finishes (:func:`drive`), and ends with one exact pass at the
returned point. What it returns is an :class:`Outcome` (plain values and the trace's
rows); the face (:func:`daskstraggle.api.run_on`, the ``fit_*`` functions) builds the
:class:`~daskstraggle.trace.Result` from it. The runtimes only execute: load, map-reduce,
submit and wait (:class:`~daskstraggle.runtime.base.Runtime`).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from daskstraggle._validation import check_bool
from daskstraggle.data.matrix import Matrix
from daskstraggle.engine.convergence import ConvergenceMonitor
from daskstraggle.engine.coordinator import Coordinator
from daskstraggle.engine.engine import Engine
from daskstraggle.engine.events import Begin, Event, Finish, RecordRow
from daskstraggle.engine.recorder import TraceRecorder
from daskstraggle.engine.session import RunSession, resumed_session
from daskstraggle.engine.stop import StopRule
from daskstraggle.errors import InvalidParameterError, NoCallError
from daskstraggle.methods.base import Method, RoundSummary, check_oversampling
from daskstraggle.problems.base import Problem, Reference
from daskstraggle.problems.block import MatrixStats
from daskstraggle.runtime.base import Runtime
from daskstraggle.runtime.checkpoint import Checkpointer, resume_state, run_settings

if TYPE_CHECKING:
    from daskstraggle.methods.sgd import SGD

__all__ = ["Outcome", "drive", "fit_partitions", "refuse_no_calls", "run"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """What a run ended with, before it is a :class:`~daskstraggle.trace.Result`.

    Attributes
    ----------
    method : Method
        The method as it ended (a resumed run's is the checkpoint's).
    session : RunSession
        The bound problem, monitor, reference and the trace's rows (``session.recorder``).
    reason : str
        Why the run stopped.
    iterate : ndarray
        The returned point, after the problem's conclusion (e.g. PCA's rotation).
    objective, optimality : float
        At ``iterate``, from the final exact pass.
    converged : bool
        The monitor's verdict (see :mod:`daskstraggle.engine.convergence`).
    fitted : dict
        The problem's fitted values at ``iterate``.
    exact_objectives : ndarray or None
        With ``record_iterates``: the exact objective at every round's point.
    stop : StopRule
        The stop rule the run had.
    matrix : Matrix
        The data as run (after repartitioning).
    attrs : dict
        The runtime's and the run's attributes (workers, placement, step size, ...).
    """

    method: Method
    session: RunSession
    reason: str
    iterate: np.ndarray
    objective: float
    optimality: float
    converged: bool
    fitted: dict[str, Any]
    exact_objectives: np.ndarray | None
    stop: StopRule
    matrix: Matrix
    attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def rows(self) -> TraceRecorder:
        """The trace's rows (the session's recorder)."""
        return cast("TraceRecorder", self.session.recorder)


def run(
    runtime: Runtime,
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
) -> Outcome:
    """Solve ``problem`` on ``matrix`` with ``method`` on ``runtime``: the run's lifecycle.

    Parameters
    ----------
    runtime : Runtime
        The executor (in process, simulated or Dask), already started.
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
    outcome : Outcome
        What the face turns into a :class:`~daskstraggle.trace.Result`
        (:func:`daskstraggle.api.run_on`).

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

    Notes
    -----
    Before the loop one exact pass at the starting point gives the scale of the
    optimality measure and the starting objective; after it, one exact pass at the
    returned point gives every fitted value, the objective and ``optimality``.
    """

    stop = stop or StopRule()
    rng = np.random.default_rng(rng)
    _check_run(runtime, method, problem, matrix, step_size)
    record_iterates = check_bool(record_iterates, name="record_iterates", caller="run")
    with _cluster_errors(runtime):  # a scheduler lost anywhere: one line
        runtime._validate()
        runtime.engine = Engine(log_size=runtime.stimulus_log)
        runtime._stimulus_numbers = itertools.count(1)
        matrix = fit_partitions(runtime, method, matrix)
        placement = method.placement(matrix.n_partitions, runtime.n_workers)
        settings = run_settings(method=method, problem=problem, n_workers=runtime.n_workers,
                                matrix=matrix.describe())
        if resume is not None:
            resume_state(resume, settings=settings, placement=placement, max_iter=stop.max_iter)
        t_load = time.perf_counter()
        stats = runtime._load(matrix, placement)
        load_duration = time.perf_counter() - t_load
        refuse_no_calls(stats, matrix)
        if resume is None:
            session = _new_session(runtime, method, problem, stats, placement, settings,
                                   stop=stop, step_size=step_size, reference=reference, rng=rng,
                                   record_iterates=record_iterates)
        else:
            method, session = resumed_session(resume, stats, record_iterates)
            if step_size is not None and step_size != session.step_size:
                raise InvalidParameterError(
                    f"The checkpoint's run used step_size={session.step_size:g}; resume "
                    f"without one (CLI: --step-size) or with the same, not {step_size:g}."
                )
        session.checkpoint = checkpoint
        runtime._partition_rows = [int(r) for r in matrix.partition_rows()]
        runtime._begin(placement, runtime._partition_rows)
        try:
            summary, reason = drive(runtime, method, session, stop=stop, progress=progress)
        finally:
            runtime._end()
        return _conclude(runtime, method, session, summary, reason, matrix=matrix, stop=stop,
                         load_duration=load_duration)


@contextlib.contextmanager
def _cluster_errors(runtime: Runtime) -> Iterator[None]:
    """Raise the runtime's one-line error (:meth:`Runtime._lost`) in place of an error that
    means its cluster is gone (e.g. a closed client's ``ClosedClientError``)."""
    try:
        yield
    except Exception as err:
        lost = runtime._lost(err)
        if lost is None:
            raise
        raise lost from err


def _check_run(runtime: Runtime, method: Method, problem: Problem, matrix: Matrix,
               step_size: float | None) -> None:
    """Refuse a method, problem, worker count or step size that do not fit, before any
    work."""
    if problem.needs_labels and matrix.labels is None:
        raise InvalidParameterError(
            f"The {problem.name} problem needs labels: pass labels=... (CLI: --labels)."
        )
    method.check_problem(problem)
    check_oversampling(method, problem)
    try:
        method.check_n_workers(runtime.n_workers)
    except InvalidParameterError as err:
        raise InvalidParameterError(f"{err}{runtime._worker_count_note()}") from None
    method.check_shape(matrix.n_rows, matrix.n_columns)
    if step_size is not None:
        problem.check_step_size(step_size)


def _new_session(runtime: Runtime, method: Method, problem: Problem, stats: MatrixStats,
                 placement: list[tuple[int, ...]], settings: dict[str, Any], *,
                 stop: StopRule, step_size: float | None, reference: bool,
                 rng: np.random.Generator, record_iterates: bool) -> RunSession:
    """Bind the problem, pick the step size, start the monitor: a fresh run's state."""
    bound = problem.bind(stats)
    if step_size is None:
        step_size = (bound.default_step_size(runtime._map_reduce, rng)
                     * method.step_factor(bound, runtime.n_workers))
    ref: Reference | None = (bound.reference_solution(runtime._map_reduce) if reference
                             else None)
    x0 = bound.init_iterate(rng)
    start = runtime._exact_pass(bound, x0) if method.start_pass else None
    monitor = ConvergenceMonitor(
        bound, tol=stop.tol, start_result=start, start=x0,
        step_size=step_size, window=method.convergence_window(runtime.n_workers),
        max_iter=stop.max_iter)
    return RunSession(problem=bound, monitor=monitor, recorder=TraceRecorder(runtime.n_workers),
                      reference=ref, step_size=step_size, placement=placement,
                      settings=settings, stats=stats, x0=x0,
                      iterates=[] if record_iterates else None)


def _conclude(runtime: Runtime, method: Method, session: RunSession, summary: RoundSummary,
              reason: str, *, matrix: Matrix, stop: StopRule,
              load_duration: float) -> Outcome:
    """The fitted quantities, from one exact pass at the returned point (outside the
    timed loop, whatever the method estimated during the run)."""
    bound, monitor, ref = session.problem, session.monitor, session.reference
    exact = None if session.iterates is None else np.array(
        [bound.objective(runtime._exact_pass(bound, x).values, x) for x in session.iterates])
    x = summary.iterate
    total = monitor.checked_result(x)  # a run that stopped on an exact check: reuse it
    if total is None:
        total = runtime._exact_pass(bound, x)
    x, total = bound.conclude(x, total)
    objective = bound.objective(total.values, x)
    optimality = monitor.final(x, total, objective)
    extra = {} if session.checkpoint is None else {
        "checkpoint": session.checkpoint.describe()}
    if session.resumed_at is not None:
        extra["resumed_at_iteration"] = session.resumed_at
    return Outcome(
        method=method, session=session, reason=reason, iterate=x,
        objective=float(objective), optimality=float(optimality),
        converged=monitor.converged(optimality, reason), fitted=bound.finalize(x, total),
        exact_objectives=exact, stop=stop, matrix=matrix,
        attrs={
            "runtime": runtime.name,
            "workers": runtime.worker_names,
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
            **runtime._run_attrs(),
        },
    )


def fit_partitions(runtime: Runtime, method: Method, matrix: Matrix) -> Matrix:
    """Repartition ``matrix`` to what the method needs (at least one per worker)."""
    n_workers = runtime.n_workers
    wanted = method.partition_count(n_workers, matrix.n_rows)
    if wanted is not None:
        if matrix.n_rows < wanted:
            raise InvalidParameterError(
                f"Method {method.name!r} splits the rows into {wanted} partitions for "
                f"{n_workers} workers, but the matrix has only {matrix.n_rows} rows; "
                "use fewer workers or other scheme parameters."
            )
        return matrix if matrix.n_partitions == wanted else matrix.repartition(wanted)
    if matrix.n_partitions < n_workers:
        if matrix.n_rows < n_workers:
            raise InvalidParameterError(
                f"The matrix has {matrix.n_rows} rows, fewer than the {n_workers} "
                "workers; use fewer workers."
            )
        return matrix.repartition(n_workers)
    return matrix


def drive(runtime: Runtime, method: Method, session: RunSession, *, stop: StopRule,
          progress: bool) -> tuple[RoundSummary, str]:
    """Execute the engine's instructions on ``runtime`` until it finishes (see
    :mod:`daskstraggle.engine.coordinator`, where every decision is made); return the
    finishing round and why it stopped.

    ``session`` carries the bound problem, the monitor that judges every round, the
    trace and, when resuming, where the interrupted run stood.
    """
    from daskstraggle._progress import progress_bar

    problem, recorder = session.problem, session.recorder
    if session.resumed_at is None:
        method.start(problem, session.x0, session.placement, step_size=session.step_size,
                     partition_rows=list(runtime._partition_rows))
    elif not session.stepped:
        method.step()  # the checkpoint was taken at a stop, before this round's step
    work = method.work_problem(problem)
    balancing = None
    if method.load_balancer() is not None:
        from daskstraggle.runtime.balancing import BalanceLoop

        # only the SGD family (SGD, SAG, DSAG) has a load balancer
        balancing = BalanceLoop(cast("SGD", method), runtime.n_workers,
                                background=runtime.balance_in_background)
    writer = session.checkpoint
    engine = runtime.engine
    engine.coordinator = Coordinator(method, session, stop=stop, n_workers=runtime.n_workers,
                                     unit_load=runtime._unit_load, balancing=balancing,
                                     checkpoint=None if writer is None else writer.schedule)
    bar = progress_bar(
        total=stop.max_iter, initial=len(recorder), disable=None if progress else True,
        file=sys.stderr, unit="it", desc=f"{method.name} {problem.name}", leave=False,
    )
    # the handler of each instruction type, looked up in singledispatch's cache: calling
    # runtime._execute would build a bound dispatcher for every instruction (~4 us each)
    execute = vars(Runtime)["_execute"].dispatcher.dispatch
    event: Event | None = Begin(time=runtime._clock(),
                                stimulus_id=runtime._new_stimulus_id("begin"))
    runtime._inbound = 0
    runtime._fetched_bytes()  # (what an earlier run fetched after its last row)
    try:
        while True:
            assert event is not None, "the coordinator expected no reply"
            instructions, event = engine.handle_stimulus(event), None
            for instruction in instructions:
                if isinstance(instruction, Finish):
                    logger.info("%s stopped after %d iterations (%s)", method.name,
                                len(recorder), instruction.reason)
                    return instruction.summary, instruction.reason
                if isinstance(instruction, RecordRow):
                    _record_row(runtime, instruction, recorder, bar, progress=progress)
                    continue
                event = execute(type(instruction))(runtime, instruction, work, problem,
                                                   session)
    finally:
        bar.close()
        if balancing is not None:
            balancing.close()
        runtime._cancel_pending()  # first: nothing of this run may reach the next one
        try:
            runtime._on_row(len(recorder) - 1, recorder, final=True)
        except Exception as err:  # bookkeeping must not mask the run's own outcome
            logger.warning("final latency bookkeeping failed: %s", err)


def _record_row(runtime: Runtime, instruction: RecordRow, recorder: TraceRecorder, bar: Any,
                *, progress: bool) -> None:
    """Add the engine's trace row with the bytes the round's results brought to the
    coordinator (``bytes_to_coordinator``); update the progress bar."""
    fields = dict(instruction.fields)
    inbound, runtime._inbound = runtime._inbound + runtime._fetched_bytes(), 0
    fields["extras"] = {**(fields.get("extras") or {}),
                        "bytes_to_coordinator": float(inbound)}
    row = recorder.add(**fields)
    assert row == instruction.row, (row, instruction.row)
    runtime._on_row(row, recorder)
    bar.update(1)
    if progress:
        objective = instruction.objective
        bar.set_postfix(objective="?" if objective is None else f"{objective:.6g}",
                        refresh=False)


def refuse_no_calls(stats: MatrixStats, matrix: Matrix) -> None:
    """Raise :class:`~daskstraggle.errors.NoCallError` if a genotype matrix has a sample
    (column) or a variant (row) without any called genotype (``stats`` of the load).

    Such a sample's column (or variant's row) is all imputed, hence zero once centred: it
    would be scored 0, which is no answer. The callers that can remove it do so and run
    again (:func:`daskstraggle.api.solve`).
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
