"""A run's lifecycle against any runtime: :func:`run` checks, repartitions and places the
data, and :func:`drive` carries out the engine's run on the runtime, returning an
:class:`Outcome` that the face (:func:`daskstraggle.api.run_on`) turns into a Result.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import itertools
import logging
import sys
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from daskstraggle._validation import check_bool
from daskstraggle.data.matrix import Matrix
from daskstraggle.engine.engine import Concluded, Engine
from daskstraggle.engine.events import (
    Begin,
    EndRounds,
    Event,
    Instruction,
    Load,
    Loaded,
    RecordRow,
    StartRounds,
)
from daskstraggle.engine.recorder import TraceRecorder
from daskstraggle.engine.stop import StopRule
from daskstraggle.errors import InvalidParameterError, NoCallError
from daskstraggle.methods.base import Method, check_oversampling
from daskstraggle.problems.base import Problem
from daskstraggle.problems.block import MatrixStats
from daskstraggle.runtime.base import Runtime
from daskstraggle.runtime.checkpoint import Checkpointer, resume_state, run_settings

if TYPE_CHECKING:
    from daskstraggle.methods.sgd import SGD

__all__ = ["Outcome", "drive", "fit_partitions", "refuse_no_calls", "run"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class Outcome(Concluded):
    """What a run ended with, before it is a :class:`~daskstraggle.trace.Result`: the
    engine's :class:`~daskstraggle.engine.engine.Concluded`, with the runtime's attributes
    (workers, placement, the load's seconds, ...) in ``attrs``, and:

    Attributes
    ----------
    stop : StopRule
        The stop rule the run had.
    matrix : Matrix
        The data as run (after repartitioning).
    """

    stop: StopRule
    matrix: Matrix

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
        Show a progress bar (iteration, objective, elapsed) on stderr, and once per runtime
        its cluster's dashboard address (:attr:`Runtime.dashboard_link`).
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
        runtime.engine = engine = Engine(log_size=runtime.stimulus_log)
        runtime._stimulus_numbers = itertools.count(1)
        matrix = fit_partitions(runtime, method, matrix)
        placement = method.placement(matrix.n_partitions, runtime.n_workers)
        settings = run_settings(method=method, problem=problem, n_workers=runtime.n_workers,
                                matrix=matrix.describe())
        if resume is not None:
            resume_state(resume, settings=settings, placement=placement, max_iter=stop.max_iter)
        runtime._partition_rows = [int(r) for r in matrix.partition_rows()]
        runtime._total_rows = max(sum(runtime._partition_rows), 1)
        program = engine.lifecycle(
            method, problem, n_workers=runtime.n_workers, placement=placement,
            partition_rows=runtime._partition_rows, settings=settings, stop=stop,
            step_size=step_size, reference=reference, rng=rng,
            record_iterates=record_iterates, resume=resume, checkpoint=checkpoint,
            unit_load=runtime._unit_load, balance_loop=functools.partial(_balance_loop, runtime))
        done, load_duration = drive(runtime, program, matrix, stop=stop, progress=progress)
    logger.info("%s stopped after %d iterations (%s)", done.method.name,
                len(done.session.recorder), done.reason)
    attrs = {"runtime": runtime.name, "workers": runtime.worker_names,
             "placement": [list(p) for p in done.session.placement],
             "matrix": matrix.describe(), "step_size": done.session.step_size,
             "load_duration_s": load_duration, **done.attrs, **runtime._run_attrs()}
    return Outcome(**{**vars(done), "attrs": attrs}, stop=stop, matrix=matrix)


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


def drive(runtime: Runtime, program: Generator[Instruction, Event | None, Concluded],
          matrix: Matrix, *, stop: StopRule, progress: bool) -> tuple[Concluded, float]:
    """Carry out the instructions of an engine's run (:meth:`Engine.lifecycle
    <daskstraggle.engine.engine.Engine.lifecycle>`, where every decision is made) on
    ``runtime``, sending each reply back; return the run's conclusion and the load's seconds.

    The rounds are undone (:meth:`Runtime._end`) also when the run fails or is interrupted.
    """
    # the handler of each instruction type, from the cache of the runtime class's own
    # ``_execute`` (a subclass may register handlers of its own)
    execute = inspect.getattr_static(type(runtime), "_execute").dispatcher.dispatch
    rounds: StartRounds | None = None
    bar: Any = None
    load_duration = 0.0
    reply: Event | None = None
    try:
        with _cluster_errors(runtime):  # (before the clean-up: it must not wait on a
            # cluster that is gone)
            while True:
                try:
                    instruction = program.send(reply)
                except StopIteration as done:
                    return done.value, load_duration
                kind, reply = type(instruction), None
                if kind is RecordRow:
                    assert rounds is not None
                    _record_row(runtime, cast(RecordRow, instruction), rounds.session.recorder, bar,
                                progress=progress)
                elif kind is Load:
                    t_load = time.perf_counter()
                    stats = runtime._load(matrix, cast(Load, instruction).placement)
                    load_duration = time.perf_counter() - t_load
                    refuse_no_calls(stats, matrix)
                    reply = runtime._reply(Loaded, stats=stats)
                elif kind is StartRounds:
                    bar = _start_rounds(runtime, cast(StartRounds, instruction), stop=stop,
                                        progress=progress)
                    rounds = cast(StartRounds, instruction)  # (begun: to be undone)
                    reply = runtime._reply(Begin)
                elif kind is EndRounds:
                    _end_rounds(runtime, rounds, bar)
                    rounds = None
                else:
                    reply = execute(kind)(runtime, instruction, rounds and rounds.work,
                                          rounds and rounds.session)
    finally:
        program.close()  # (its own clean-up: the load balancing loop)
        if rounds is not None:
            _end_rounds(runtime, rounds, bar)


def _start_rounds(runtime: Runtime, rounds: StartRounds, *, stop: StopRule,
                  progress: bool) -> Any:
    """Prepare the runtime's loop for the rounds; return the progress bar."""
    from daskstraggle._progress import progress_bar

    session = rounds.session
    runtime._begin(session.placement, runtime._partition_rows)
    link = runtime.dashboard_link if progress and not runtime._announced else None
    if link is not None:  # once per runtime, where a person watches
        runtime._announced = True
        print(f"Dask dashboard: {link}", file=sys.stderr)
    runtime._inbound = 0
    runtime._fetched_bytes()  # (what an earlier run fetched after its last row)
    return progress_bar(
        total=stop.max_iter, initial=len(session.recorder),
        disable=None if progress else True, file=sys.stderr, unit="it",
        desc=f"{rounds.method.name} {session.problem.name}", leave=False,
    )


def _end_rounds(runtime: Runtime, rounds: StartRounds | None, bar: Any) -> None:
    """Forget the work in flight (first: nothing of this run may reach the next one), the
    last latency bookkeeping, undo :meth:`Runtime._begin`."""
    bar.close()
    try:
        runtime._cancel_pending()
        if rounds is not None:
            recorder = rounds.session.recorder
            try:
                runtime._on_row(len(recorder) - 1, recorder, final=True)
            except Exception as err:  # bookkeeping must not mask the run's own outcome
                logger.warning("final latency bookkeeping failed: %s", err)
    finally:
        runtime._end()


def _balance_loop(runtime: Runtime, method: Method) -> Any:
    """The load-balancing loop of ``method`` on ``runtime`` (the SGD family has one), or
    None."""
    if method.load_balancer() is None:
        return None
    from daskstraggle.runtime.balancing import BalanceLoop

    return BalanceLoop(cast("SGD", method), runtime.n_workers,
                       background=runtime.balance_in_background)


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
