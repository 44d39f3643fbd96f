"""The Method contract: a pure policy driven by a runtime (``docs/architecture.md``).

A method consumes *events* (a :class:`WorkResult` arrived) and emits *decisions* (which
:class:`WorkUnit` an idle worker should compute, whether the iterate may step): after
``start``, idle workers get ``dispatch(worker_index)``; each result goes to ``receive``;
once ``ready()`` (and ``collect_window`` of the round's time later) the runtime records
``summary()`` and, unless the run stops, calls ``step()``. It never imports dask.
"""
from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from daskstraggle.errors import InvalidParameterError
from daskstraggle.methods.options import MethodOption
from daskstraggle.problems.base import KernelResult, Problem

__all__ = [
    "Method",
    "RoundSummary",
    "WorkResult",
    "WorkUnit",
    "check_oversampling",
    "contiguous_placement",
]

#: Which partitions each worker index stores (:meth:`Method.placement`).
Placement = list[tuple[int, ...]]


@dataclass(frozen=True, slots=True)
class WorkUnit:
    """One task for one worker: sum the kernel over some of its partitions.

    Parameters
    ----------
    worker_index : int
        Row of the placement (not a Dask address).
    partitions : tuple of int
        Partitions the worker holds and sums over.
    iterate : ndarray
        Point at which the kernel is evaluated.
    version : int
        Iterate version (iteration number) the unit was computed for.
    coefficients : ndarray of shape (n_messages, len(partitions)) or None, default=None
        Coded units: the worker returns one message per row,
        ``sum_p coefficients[j, p] * kernel(partition p)``, instead of the plain sum.
    rows : tuple of (int, int) or None, default=None
        Only rows ``[a, b)`` of the listed partitions, counted along their concatenation
        (DSAG's subpartitions); None: all their rows. Not with ``coefficients``.
    stream : bool, default=False
        With ``coefficients``: compute the messages one after another and deliver each
        as soon as it is computed (multi-message results, one :class:`WorkResult` per
        message, ``final`` on the last); False: one result with every message.
    """

    worker_index: int
    partitions: tuple[int, ...]
    iterate: np.ndarray
    version: int
    coefficients: np.ndarray | None = None
    rows: tuple[int, int] | None = None
    stream: bool = False

    def message_supports(self) -> list[tuple[int, ...]]:
        """Positions (into ``partitions``) each message of a coded unit sums over."""
        if self.coefficients is None:
            return [tuple(range(len(self.partitions)))]
        coef = np.asarray(self.coefficients)
        return [tuple(int(p) for p in np.flatnonzero(row)) for row in coef]


@dataclass(frozen=True, slots=True)
class WorkResult:
    """A completed :class:`WorkUnit`.

    Parameters
    ----------
    unit : WorkUnit
        What was computed.
    result : KernelResult or tuple of KernelResult
        Kernel sums over the unit's partitions (one per message for coded units).
    compute_duration : float
        Seconds the task took on the worker (kernel plus any injected delay).
    latency : float or None, default=None
        Seconds from sending the unit to receiving its result, as the runtime saw it
        (None when the runtime did not measure it).
    message : int or None, default=None
        For a streamed unit (``unit.stream``): which message (row of the coefficients)
        ``result`` is; None otherwise.
    final : bool, default=True
        Whether this is the unit's last result (the worker is idle after it).
    """

    unit: WorkUnit
    result: KernelResult | tuple[KernelResult, ...]
    compute_duration: float
    latency: float | None = None
    message: int | None = None
    final: bool = True


@dataclass(frozen=True, slots=True)
class RoundSummary:
    """What a method knows when it is ready to step.

    Parameters
    ----------
    iterate : ndarray
        The point the gradient was evaluated at this round.
    result : KernelResult
        The (exact or estimated) kernel sum at ``iterate`` over all rows.
    objective : float or None
        Objective at ``iterate`` when the round saw every row, else None.
    workers_used : tuple of int
        Worker indices whose results entered this round.
    n_fresh : int
        Results computed at the current version.
    n_stale : int
        Results computed at older versions that were used.
    coverage : float, default=1.0
        Fraction of the rows the estimate's results cover (1: every row).
    n_dropped : int, default=0
        Results received since the last round and thrown away by design (e.g. updates
        over the delay bound, superseded cache entries).
    ages : ndarray of shape (n_partitions,) or None, default=None
        Per-partition age (rounds since the partition was last recovered), for methods
        that track it.
    extras : dict of str to float, default={}
        Other per-round figures recorded in the trace under their names (e.g.
        ``delay`` of an asynchronous update).
    """

    iterate: np.ndarray
    result: KernelResult
    objective: float | None
    workers_used: tuple[int, ...]
    n_fresh: int
    n_stale: int = 0
    coverage: float = 1.0
    n_dropped: int = 0
    ages: np.ndarray | None = None
    extras: dict[str, float] = field(default_factory=dict)


def contiguous_placement(n_partitions: int, n_workers: int) -> Placement:
    """Return the uncoded placement: contiguous, near-equal runs of partitions per worker.

    Parameters
    ----------
    n_partitions : int
        Number of row partitions (at least ``n_workers``).
    n_workers : int
        Number of workers.

    Returns
    -------
    placement : list of tuple of int
        ``placement[i]`` lists the partitions worker index ``i`` stores; every partition
        appears exactly once.

    Examples
    --------
    >>> contiguous_placement(6, 3)
    [(0, 1), (2, 3), (4, 5)]
    """
    if n_partitions < n_workers:
        raise ValueError(f"need at least one partition per worker ({n_partitions} < {n_workers})")
    edges = np.linspace(0, n_partitions, n_workers + 1).round().astype(int)
    return [tuple(range(int(edges[i]), int(edges[i + 1]))) for i in range(n_workers)]


def check_oversampling(method: Method, problem: Problem) -> None:
    """Refuse an oversampled problem (PCA's ``oversample``) for a method without exact rounds.

    Raises
    ------
    InvalidParameterError
        If ``problem.oversampled`` and not ``method.exact_rounds``.
    """
    if problem.oversampled and not method.exact_rounds:
        raise InvalidParameterError(
            "The 'oversample' parameter of PCA (CLI: --oversample) needs a method whose "
            f"rounds are exact (gd, coded, block); {method.name!r} estimates the products "
            "from cached or partial sums, which the extra columns keep from ever becoming "
            f"exact. Drop oversample, or use one of those. Got {method.name!r} instead."
        )


class Method(ABC):
    """Abstract base of the optimisation policies.

    Subclasses hold their parameters (set in ``__init__``) and their run state (set in
    :meth:`start`). One instance drives one run at a time.
    """

    #: Registry name, e.g. ``"gd"``.
    name: ClassVar[str]
    #: What the method does, in a few words: the ``--method`` help lists it.
    description: ClassVar[str] = ""
    #: After :meth:`ready` first holds, the runtime keeps receiving results for this
    #: fraction of the round's elapsed time before it calls :meth:`summary`.
    collect_window: float = 0.0
    #: When True, after each step the runtime abandons the undelivered messages of
    #: streamed units computed for older versions, and their workers become idle at once
    #: (a message already being computed on a Dask worker finishes; its result is dropped).
    abandon_stale: bool = False
    #: Whether every round's kernel sum is exact, at one iterate, over every row; only
    #: such methods take an oversampled PCA block (whose extra columns never settle).
    exact_rounds: ClassVar[bool] = False
    #: Whether the run starts with an exact pass at the starting point (the optimality
    #: measure's scale, the divergence checks' starting objective). Methods that skip it
    #: may only solve problems whose optimality measure is relative already.
    start_pass: ClassVar[bool] = True
    #: Whether the run ends with an exact pass at the returned point (the fitted values,
    #: objective and optimality). A method whose runs only measure (``auto``'s probe)
    #: skips it: the result then holds the last round's estimate.
    final_pass: ClassVar[bool] = True
    #: Whether :meth:`dispatch` gives each worker index at most one unit per version, and
    #: an index it declined stays declined until :meth:`step`: the coordinator then offers
    #: work once per version instead of to every idle index after every result.
    dispatch_once_per_version: ClassVar[bool] = False
    #: The parameters the ``daskstraggle`` solve commands expose for this method
    #: (:mod:`daskstraggle.methods.options`).
    cli_options: ClassVar[tuple[MethodOption, ...]] = ()
    #: This round's summary once built (:meth:`summary`); None until then.
    _summary: RoundSummary | None = None
    #: Partitions each worker index stores, and the rows of each partition (None: not
    #: given), set by :meth:`start`.
    _placement: Placement
    _partition_rows: list[int] | None = None
    #: Iterate version (steps taken), set by :meth:`start` and :meth:`step`.
    _version: int = 0
    #: The bound problem of the current run (None before :meth:`start`).
    _problem: Problem | None = None
    #: Results thrown away by design since the last step (:attr:`RoundSummary.n_dropped`).
    _dropped: int = 0
    #: The run's Nesterov momentum (:class:`~daskstraggle.methods.gd.Nesterov`), set by
    #: the :meth:`start` of methods that accelerate; None: plain steps.
    _momentum: Any = None

    @classmethod
    def params_from_cli(cls, values: dict[str, Any]) -> dict[str, Any]:
        """Return the method's parameters from the values of its :attr:`cli_options`.

        Parameters
        ----------
        values : dict
            The options given (parsed; by ``dest``), a subset of :attr:`cli_options`.

        Returns
        -------
        params : dict
            Keyword arguments of the method's constructor; by default each option sets
            the parameter it names.
        """
        targets = {option.dest: option.target for option in cls.cli_options}
        return {targets[dest]: value for dest, value in values.items()}

    def placement(self, n_partitions: int, n_workers: int) -> Placement:
        """Return which partitions each worker index stores (default: uncoded, contiguous)."""
        return contiguous_placement(n_partitions, n_workers)

    def check_problem(self, problem: Problem) -> None:  # noqa: B027 - optional hook
        """Raise InvalidParameterError if the method cannot solve ``problem``."""

    def check_n_workers(self, n_workers: int) -> None:  # noqa: B027 - optional hook
        """Raise InvalidParameterError if the parameters do not fit ``n_workers`` workers."""

    def check_shape(self, n_rows: int, n_columns: int) -> None:  # noqa: B027 - optional hook
        """Raise InvalidParameterError if the method cannot handle a matrix of this shape."""

    def step_factor(self, problem: Problem, n_workers: int) -> float:
        """Return the multiple of ``problem.default_step_size`` to use when none is given.

        1.0 (the exact-gradient step) unless the method steps from gradient estimates.
        """
        return 1.0

    def work_problem(self, problem: Problem) -> Any:
        """Return what the workers run for this method's units (default: ``problem``): it
        offers ``kernel(block, iterate) -> KernelResult`` and pickles. The exact passes
        use ``problem`` itself."""
        return problem

    def convergence_window(self, n_workers: int) -> int:
        """Return the rounds over which the iterate's change is judged: 1, or more when
        one round refreshes only part of the rows."""
        return 1

    def load_balancer(self) -> Any:
        """Return the :class:`~daskstraggle.balance.LoadBalancer` to run beside this method
        (whose units can be resized between rounds), or None (the default)."""
        return None

    def partition_count(self, n_workers: int, n_rows: int) -> int | None:
        """Return the number of row partitions the method needs (None: any, >= workers)."""
        return None

    def start(self, problem: Problem, iterate: np.ndarray, placement: Placement, *,
              step_size: float, partition_rows: list[int] | None = None) -> None:
        """Reset the run state: check and keep ``problem``, the placement, the partition rows,
        the step size and a float64 copy of ``iterate`` (version 0, no summary, no momentum,
        nothing dropped), then :meth:`_reset` the method's own state.

        Parameters
        ----------
        problem : Problem
            The bound problem.
        iterate : ndarray
            Starting point.
        placement : list of tuple of int
            Partitions stored by each worker index.
        step_size : float
            Step size of the updates.
        partition_rows : list of int or None, default=None
            Number of rows of each partition (runtimes always pass it; methods that
            weigh partial results by the rows they cover need it).
        """
        self.check_problem(problem)
        self._problem = problem
        self._placement = placement
        self._partition_rows = partition_rows
        self._step_size = float(step_size)
        self._x = np.array(iterate, dtype=np.float64)
        self._version = 0
        self._summary = None
        self._momentum = None
        self._dropped = 0
        if len(inspect.signature(self._reset).parameters) == 2:  # the earlier hook
            import warnings

            warnings.warn(f"{type(self).__name__}._reset(placement, partition_rows) is "
                          "deprecated: take no arguments and read self._placement and "
                          "self._partition_rows.", DeprecationWarning, stacklevel=2)
            self._reset(placement, partition_rows)  # type: ignore[call-arg]
        else:
            self._reset()

    @abstractmethod
    def _reset(self) -> None:
        """Set the method's own run state for :attr:`_placement` (and
        :attr:`_partition_rows`)."""

    @abstractmethod
    def dispatch(self, worker_index: int) -> WorkUnit | None:
        """Return the work an idle worker should do now, or None to leave it idle."""

    @abstractmethod
    def receive(self, result: WorkResult) -> None:
        """Take in a completed result."""

    @abstractmethod
    def ready(self) -> bool:
        """Return whether enough results arrived to step."""

    def summary(self) -> RoundSummary:
        """Return the round's evaluated point, kernel sum and counts (when ready), built by
        :meth:`_summarise` once and kept until a new result or a step sets ``_summary``
        back to None."""
        if self._summary is None:
            self._summary = self._summarise()
        return self._summary

    def _summarise(self) -> RoundSummary:
        """Build this round's :meth:`summary` (a method that overrides :meth:`summary`
        itself, as methods written earlier do, need not)."""
        raise NotImplementedError(f"{type(self).__name__} must implement _summarise()")

    @abstractmethod
    def step(self) -> None:
        """Advance the iterate and the version."""

    @property
    def version(self) -> int:
        """Current iterate version (number of steps taken)."""
        return self._version

    def get_params(self) -> dict[str, Any]:
        """Return the method's parameters (for traces): each named parameter of the
        constructor that the method keeps under its name, in the constructor's order."""
        parameters = inspect.signature(type(self)).parameters.values()
        return {p.name: getattr(self, p.name) for p in parameters
                if p.kind is not p.VAR_KEYWORD and hasattr(self, p.name)}

    def _point(self) -> np.ndarray:
        """Where this round's kernel is evaluated: the iterate, or the momentum's
        look-ahead point."""
        return self._x if self._momentum is None else np.asarray(self._momentum.point)

    def _update(self, gradient: np.ndarray, objective: float | None = None) -> None:
        """Step the iterate along ``gradient`` taken at :meth:`_point`
        (:meth:`Problem.update`); with momentum, ``objective`` there decides a restart."""
        assert self._problem is not None
        if self._momentum is None:
            self._x = self._problem.update(self._x, gradient, self._step_size)
        else:
            self._x = self._momentum.step(self._problem, gradient, objective, self._step_size)

    def _worker_rows_of(self) -> list[int]:
        """Set ``_worker_rows`` (rows each worker index stores) and ``_total_rows``; return
        the partition rows. InvalidParameterError if the runtime did not pass them."""
        partition_rows = self._partition_rows
        if partition_rows is None:
            raise InvalidParameterError(
                f"{type(self).__name__} needs the partition row counts from the runtime.")
        self._worker_rows = [sum(partition_rows[p] for p in parts) for parts in self._placement]
        self._total_rows = sum(partition_rows)
        return partition_rows

    def _plain(self, result: WorkResult) -> KernelResult:
        """Return ``result.result``; InvalidParameterError naming the method if it holds a
        coded unit's messages (a tuple of kernel sums)."""
        if isinstance(result.result, tuple):
            raise InvalidParameterError(f"{type(self).__name__} takes plain (uncoded) results.")
        return result.result

    def _plain_sum(self, results: dict[int, WorkResult]) -> KernelResult:
        """Return the sum of the non-empty ``results`` in worker index order (so it does
        not depend on arrival order), each checked by :meth:`_plain`."""
        order = sorted(results)
        return sum((self._plain(results[i]) for i in order[1:]), self._plain(results[order[0]]))

    def _next_version(self, *cleared: Any) -> None:
        """Advance the version and empty ``cleared`` (the round's sets and dicts): the next
        round has no summary and nothing dropped yet."""
        self._version += 1
        self._summary = None
        self._dropped = 0
        for container in cleared:
            container.clear()

    def _summary_of(self, total: KernelResult, *, covered: float = 1, n_rows: float = 1,
                    exact: bool = True, point: np.ndarray | None = None,
                    **fields: Any) -> RoundSummary:
        """Return the summary of ``total``, the kernel sum over ``covered`` of the ``n_rows``
        rows at ``point`` (None: :meth:`_point`), scaled to every row; its objective only
        when ``exact``; ``fields`` the other :class:`RoundSummary` fields."""
        assert self._problem is not None
        point = self._point() if point is None else point
        return RoundSummary(
            iterate=point,
            result=total if covered == n_rows else total.scaled(n_rows / covered),
            objective=self._problem.objective(total.values, point) if exact else None,
            coverage=covered / n_rows, n_dropped=self._dropped, **fields)
