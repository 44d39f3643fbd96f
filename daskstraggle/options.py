"""The grouped options of :func:`~daskstraggle.solve`, frozen value objects whose fields
the ``fit_*`` functions take as flat keywords (declared once:
:mod:`daskstraggle._declared_options`).

>>> from daskstraggle.options import Checkpoint, DataOptions, Report, RuntimeSpec
>>> RuntimeSpec("sim", n_workers=100, stragglers="gamma(mean=0.05, var=1e-4)").n_workers
100
>>> Checkpoint("run.ckpt", iterations=10).interval is None
True
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from daskstraggle._declared_options import CliOption, Constraint, check_fields, declared

__all__ = ["RUN_GROUPS", "Checkpoint", "DataOptions", "Report", "RuntimeSpec", "StopRule",
           "run_groups"]


@dataclass(frozen=True, kw_only=True, slots=True)
class DataOptions:
    """How ``solve`` opens ``X`` (the options of :func:`~daskstraggle.open_matrix`).

    Parameters
    ----------
    array : str or None, default=None
        Member of a Zarr group holding the matrix.
    n_partitions : int or None, default=None
        Row partitions (None: storage chunks, at least one per worker).
    missing_chunks : {"error", "fill"}, default="error"
        A chunk absent from a Zarr store: refuse it (each worker checks the chunks of its
        partitions), or read it as the fill value (stores written with
        ``write_empty_chunks=False``).
    storage_options : dict or None, default=None
        A URL's fsspec options (see ``docs/remote-stores.md``).
    genotype_dims : tuple of str or None, default=None
        ``X`` is a 2-D array of allele counts with these dimensions.
    qc : GenotypeQC, dict or None, default=None
        Genotypes only: the variants and samples used (see
        :class:`~daskstraggle.GenotypeQC`). The steps on per-variant arrays (region,
        FILTER, alleles) run before any cluster work; those that count genotypes (MAF,
        missingness, HWE, sample missingness, relatedness, LD pruning) in one pass on the
        run's workers (in process for ``"local"`` or ``"sim"``) before the fit.
    """

    array: str | None = declared(None, cli=CliOption(
        "--array", "array", "Member of the Zarr group holding the matrix."))
    n_partitions: int | None = declared(None, cli=CliOption(
        "--partitions", "n_partitions", "Row partitions (default: storage chunks, at least "
        "one per worker).", type=int))
    missing_chunks: str = declared("error", cli=CliOption(
        "--missing-chunks", "missing_chunks", "A chunk absent from the Zarr store: refuse it "
        "(error), or read it as the fill value (fill: stores written with "
        "write_empty_chunks=False).", choices=("error", "fill"), default="error",
        show_default=True))
    storage_options: dict[str, Any] | None = declared(None, cli=CliOption(  # noqa: RUF009
        "--storage-option", "storage_options", "Option of the fsspec file system of a URL "
        "SOURCE (s3://, gs://, https://, memory://), repeatable; true/false, numbers and JSON "
        "values are parsed, e.g. --storage-option anon=true --storage-option "
        "endpoint_url=http://127.0.0.1:9000. The workers open the store with the same "
        "options (docs/remote-stores.md).", metavar="KEY=VALUE", multiple=True))
    genotype_dims: tuple[str, str] | None = None
    qc: Any = None


@dataclass(frozen=True, slots=True)
class RuntimeSpec:
    """Which runtime runs the fit, and the workers it starts or connects to.

    Parameters
    ----------
    name : Runtime, str or None, default=None
        A Runtime you built, or a registered runtime's name
        (:func:`daskstraggle.runtime.list_runtimes`): ``"dask"`` (a Dask cluster from
        ``client``, ``scheduler`` or ``n_workers``; with none of them the active client,
        else a LocalCluster started for the call), ``"local"`` (in process) or ``"sim"``
        (in process, simulated time). None: chosen as Dask does
        (:func:`~daskstraggle.runtime.choice.choose_runtime`): the Dask runtime for a
        client, scheduler, workers or an option only it takes, else in process when the
        data take at most a quarter of the memory available, else a LocalCluster;
        ``result.attrs["runtime_reason"]`` says which ran and why.
    client : distributed.Client or None, default=None
        Cluster to run on.
    scheduler : str or None, default=None
        Scheduler address to connect to.
    scheduler_file : path or None, default=None
        Or the scheduler whose address this JSON file holds (``dask scheduler
        --scheduler-file PATH``, the convention of batch jobs and dask-mpi), waited for up
        to the ``daskstraggle.timeouts.scheduler-file`` setting (120 s).
    n_workers : int or None, default=None
        Worker processes of the LocalCluster started, at most 256, or workers of the
        in-process runtimes, at most 100,000 (None: the ``daskstraggle.workers`` setting,
        4).
    min_workers : int or None, default=None
        With ``client`` or ``scheduler``: wait until the cluster has this many workers
        (up to the ``daskstraggle.timeouts.min-workers`` setting, 300 s), e.g. while
        dask-jobqueue jobs start.
    stragglers : str, LatencyModel, Stragglers or None, default=None
        Slow workers down on purpose (grammar: :mod:`daskstraggle.latency.spec`), e.g.
        ``"slowdown(workers=1, factor=4)"``, ``"markov(p_slow=0.05, p_fast=0.2,
        slow_factor=4)"``, ``"gamma(mean=0.05, var=1e-4)"`` or ``"throttle(workers=1,
        factor=4)"``. On Dask a latency model adds a delay to each of our tasks on the
        workers, while a throttle stops and resumes the whole worker process; with
        ``"sim"`` the model is the simulated latency. Seeded by ``rng`` when an int.
    backup_after : float or None, default=None
        Dask and simulated runtimes: speculative backups. A unit unanswered after this
        many times the median latency of recent units is sent again to another worker
        (which loads a spare copy of those partitions from the source once); the first
        answer counts. Helps methods that wait for every worker (gd, nag). None: none.
    aggregation : {"flat", "tree"}, default="flat"
        Dask and simulated runtimes: where a round's results are summed. ``"tree"``
        keeps them on the
        workers and sums them there, a few at a time, so one message reaches the client
        instead of one per worker: worth it for large messages (``gram``'s d x d Gram
        matrix, wide PCA blocks) or a slow link to the client. The same iterates to
        rounding; the trace's ``bytes_to_coordinator`` counts what arrived either way.
    """

    name: str | None = declared(None, keyword="runtime")  # --runtime: the CLI lists runtimes
    client: Any = None
    scheduler: str | None = declared(None, cli=CliOption(
        "--scheduler", "scheduler", "Dask scheduler address (tcp://host:port): run on that "
        "cluster. Default: see --runtime.", metavar="ADDRESS"))
    scheduler_file: str | os.PathLike[str] | None = declared(  # noqa: RUF009
        None, constraint=Constraint(Path, example="scheduler.json"), cli=CliOption(
            "--scheduler-file", "scheduler_file", "JSON file a Dask scheduler wrote (dask "
            "scheduler --scheduler-file PATH, as in a batch job): run on that cluster, once "
            "the file appears (up to the daskstraggle.timeouts.scheduler-file setting, "
            "120 s).", type=Path, metavar="PATH"))
    n_workers: int | None = declared(None, cli=CliOption(  # its bound depends on the runtime
        "--workers", "n_workers", "Process workers of the LocalCluster to start (the Dask "
        "runtime, unless --runtime says otherwise), at most 256; with --runtime sim or local "
        "the in-process workers, at most 100000 (default: the daskstraggle.workers setting, "
        "4).", type=int))
    min_workers: int | None = declared(None, constraint=Constraint(int, low=1), cli=CliOption(
        "--min-workers", "min_workers", "With --scheduler(-file): wait (up to the "
        "daskstraggle.timeouts.min-workers setting, 300 s) until the cluster has this many "
        "workers before starting (e.g. jobqueue jobs starting).", type=int))
    stragglers: Any = declared(None, cli=CliOption(  # noqa: RUF009
        "--stragglers", "stragglers", "Slow workers down on purpose, e.g. 'slowdown(workers=1, "
        "factor=4)', 'markov(p_slow=0.05, p_fast=0.2, slow_factor=4)', 'bursts()', "
        "'artificial()', 'gamma(mean=0.05, var=1e-4)', 'throttle(workers=1, factor=4)'. Terms "
        "name(key=value, ...) joined by '+': models gamma, shifted_exponential, "
        "multi_message, constant, replay; modifiers slowdown, markov, bursts, artificial, "
        "schedule.", metavar="SPEC"))
    backup_after: float | None = declared(None, constraint=Constraint(float), cli=CliOption(
        "--backup-after", "backup_after", "Dask runtime: send a work unit unanswered after "
        "FACTOR times the median unit latency again to another worker (speculative backup; "
        "the first answer counts). Default: no backups.", type=float, metavar="FACTOR"))
    aggregation: str = declared(
        "flat", constraint=Constraint(str, choices=("flat", "tree"), none=False),
        cli=CliOption("--aggregation", "aggregation", "Dask and sim runtimes: where a "
                      "round's results are summed. tree: on the workers, a few at a time, so "
                      "one message reaches the client instead of one per worker (large "
                      "messages: gram, wide blocks); the same iterates to rounding.",
                      choices=("flat", "tree"),
                      default="flat", show_default=True))


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """Where and how often ``solve`` writes its state, and what it resumes from.

    Parameters
    ----------
    path : str, path or None, default=None
        File written at round boundaries, atomically (a kill leaves the previous or the
        new checkpoint); an existing file is refused unless it is ``resume``'s (None:
        ``resume``'s file).
    interval : float or None, default=None
        Seconds between checkpoints (None: 60, unless ``iterations`` is given).
    iterations : int or None, default=None
        Also write one every this many iterations.
    resume : str, path or None, default=None
        Carry on from this checkpoint (same method, problem, workers and data; the stop
        rule may differ). Exact methods (gd, nag, coded, gram, block) reach the same
        iterates as an uninterrupted run. The file is a pickle: load only your own runs'.
        ``"replica"``: from the scheduler's replica.
    replica_divergence : float or None, default=None
        Keep a replica of the state on the Dask scheduler instead of a file, published
        again before the iterate drifts further than this from it (needs a scheduler
        address or a client; :mod:`daskstraggle.runtime.replica`). It outlives this
        process: if the client dies, the same call with ``resume="replica"`` carries on
        from it. A run that ends normally removes it.
    """

    path: str | os.PathLike[str] | None = declared(  # noqa: RUF009
        None, keyword="checkpoint", constraint=Constraint(Path, example="run.ckpt"),
        cli=CliOption("--checkpoint", "checkpoint", "Write the run's state to this file at "
                      "round boundaries, atomically (every 60 s unless --checkpoint-interval "
                      "or --checkpoint-iterations), so --resume can carry on after a crash.",
                      type=Path))
    interval: float | None = declared(None, keyword="checkpoint_interval", cli=CliOption(
        "--checkpoint-interval", "checkpoint_interval", "with --checkpoint: seconds between "
        "checkpoints (default 60).", type=float, metavar="SECONDS"))
    iterations: int | None = declared(None, keyword="checkpoint_iterations", cli=CliOption(
        "--checkpoint-iterations", "checkpoint_iterations", "with --checkpoint: also write "
        "one every N iterations.", type=int, metavar="N"))
    resume: str | os.PathLike[str] | None = declared(  # noqa: RUF009
        None, constraint=Constraint(Path, example="run.ckpt"), cli=CliOption(
            "--resume", "resume", "Carry on from this checkpoint (same data, method and "
            "workers; --max-iter etc. may change) and keep checkpointing to it. Exact methods "
            "reach the same iterates as an uninterrupted run. The word 'replica': from the "
            "scheduler's replica (--replica-divergence).", type=Path))
    replica_divergence: float | None = declared(None, cli=CliOption(
        "--replica-divergence", "replica_divergence", "With --scheduler: keep a replica of "
        "the run's state on the scheduler, published again before the iterate drifts further "
        "than D from it; if this process dies, the same command with --resume replica "
        "carries on from it. Not with --checkpoint.", type=float, metavar="D"))


@dataclass(frozen=True, kw_only=True, slots=True)
class Report:
    """What ``solve`` computes besides the fit, for the result and its trace.

    Parameters
    ----------
    reference : bool, default=False
        Also compute the exact optimum independently and report the gap (needed by
        ``StopRule(gap_tol=...)``).
    record_iterates : bool, default=False
        Evaluate the exact objective at every iteration's point after the run.
    """

    reference: bool = declared(False, constraint=Constraint(bool, none=False), cli=CliOption(
        "--reference", "reference", "Also compute the exact optimum independently and report "
        "the gap.", type=bool, default=False))
    record_iterates: bool = declared(False, constraint=Constraint(bool, none=False))


@dataclass(frozen=True, kw_only=True, slots=True)
class StopRule:
    """When a run ends: whichever criterion is met first.

    Parameters
    ----------
    max_iter : int, default=100
        Maximum number of iterations (rounds over the data).
    tol : float or None, default=1e-6
        Stop, converged, once the problem's relative optimality measure at the evaluated
        point is at most ``tol`` (judged exactly; see
        :mod:`daskstraggle.engine.convergence`): for PCA every component's relative
        eigen-residual ``|X_c^T X_c y_i - lambda_i y_i| / lambda_i``, for regression the
        gradient norm over its value at the start. None disables.
    gap_tol : float or None, default=None
        Stop when ``f_t - f_ref <= gap_tol`` (needs a reference solution).
    time_budget : float or None, default=None
        Stop at the first iteration that ends after this many seconds.

    Examples
    --------
    >>> StopRule(max_iter=10).check(iteration=9, gap=None, elapsed=0.0)
    'max_iter'
    """

    max_iter: int = declared(100, constraint=Constraint(int, low=1, none=False), cli=CliOption(
        "--max-iter", "max_iter", "Maximum number of iterations.", type=int,
        show_default="the daskstraggle.max-iter setting, 100"))
    tol: float | None = declared(1e-6, constraint=Constraint(float), cli=CliOption(
        "--tol", "tol", "Stop, converged, once the optimality measure (PCA: every component's "
        "relative eigen-residual; regression: gradient norm relative to the start) is at most "
        "this, judged exactly.", type=float, show_default="the daskstraggle.tol setting, 1e-6"))
    gap_tol: float | None = declared(None, constraint=Constraint(float))
    time_budget: float | None = declared(None, constraint=Constraint(float), cli=CliOption(
        "--time-budget", "time_budget", "Stop after this many seconds.", type=float))

    def __post_init__(self) -> None:
        check_fields(self, caller="StopRule")

    def check(self, *, iteration: int, gap: float | None, elapsed: float) -> str | None:
        """Return why to stop after 0-based ``iteration`` (the ``tol`` test aside), or None.

        Parameters
        ----------
        iteration : int
            0-based round just finished.
        gap : float or None
            Objective minus the reference objective, when known exactly.
        elapsed : float
            Seconds since the run started.

        Returns
        -------
        reason : {"gap", "max_iter", "time_budget"} or None
        """
        if self.gap_tol is not None and gap is not None and gap <= self.gap_tol:
            return "gap"
        if iteration + 1 >= self.max_iter:
            return "max_iter"
        if self.time_budget is not None and elapsed >= self.time_budget:
            return "time_budget"
        return None


#: The run's option groups by ``solve``'s parameter, in the order the ``fit_*`` functions
#: list their fields.
RUN_GROUPS: dict[str, type] = {
    "stop": StopRule, "report": Report, "runtime": RuntimeSpec, "data": DataOptions,
    "checkpoint": Checkpoint}


def run_groups() -> dict[str, type]:
    """A copy of :data:`RUN_GROUPS`."""
    return dict(RUN_GROUPS)
