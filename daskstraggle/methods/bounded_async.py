"""Bounded-delay asynchronous updates (MLfabric, Viswanathan and Akella, §3.1, §5.1)."""

from __future__ import annotations

from daskstraggle._validation import check_choice, check_int
from daskstraggle.methods.base import Method, RoundSummary, WorkResult, WorkUnit
from daskstraggle.methods.options import MethodOption
from daskstraggle.problems.base import Problem

__all__ = ["UPDATE_ORDERS", "BoundedAsync"]

#: How pending updates are ordered: as they arrived, or shortest delay first under deadlines.
UPDATE_ORDERS = ("arrival", "shortest")


class BoundedAsync(Method):
    """Asynchronous updates applied as they arrive; those delayed over ``max_delay`` dropped.

    Every worker computes its partitions' kernel sum at the iterate it was sent, tagged
    with that iterate's version ``v(g)``. The coordinator applies results one at a time:
    each application is one iteration (one trace row) and advances the version by one.
    The *delay* of an update applied at version ``V`` is ``V - v(g)``. An update whose
    delay would exceed ``max_delay`` (``tau_max``) is dropped and counted in the trace's
    ``n_dropped``; a worker is re-tasked with the current iterate as soon as it
    delivers. So no applied update ever has delay above ``max_delay``.

    Each update steps along the worker's sum scaled by (all rows) / (its rows), an
    unbiased estimate of the full kernel sum. Updates that arrive together wait in a
    buffer: ``order="arrival"`` applies them first come, first served; ``"shortest"``
    the freshest first (MLfabric), except that an update at its deadline
    ``v(g) + max_delay`` goes first.

    Parameters
    ----------
    max_delay : int or None, default=None
        ``tau_max``: largest delay (in versions) an applied update may have (None: no
        bound, plain asynchronous SGD).
    order : {"arrival", "shortest"}, default="arrival"
        Order of pending updates.

    Notes
    -----
    Without an explicit ``step_size`` the runtime uses the problem's GD step over ``N``
    (:meth:`step_factor`); with large delays use a smaller step still. Unlike MLfabric,
    late updates are dropped at the coordinator, not at the worker.

    References
    ----------
    .. [1] R. Viswanathan, A. Akella, "Network-accelerated Distributed Machine Learning
       Using MLfabric", §3.1 and §5.1 (notes: ``docs/algorithms.md``).

    Examples
    --------
    >>> BoundedAsync(max_delay=4, order="shortest").get_params()
    {'max_delay': 4, 'order': 'shortest'}
    """

    name = "async"
    description = "updates applied as they arrive, see --max-delay"
    cli_options = (
        MethodOption("--max-delay", "max_delay", "drop updates computed more than this many "
                     "versions ago (default: no bound).", type=int),
        MethodOption("--update-order", "update_order", "apply pending updates as they "
                     "arrived (default) or the freshest first, under deadlines.",
                     choices=UPDATE_ORDERS, param="order"),
    )

    def __init__(self, max_delay: int | None = None, *, order: str = "arrival") -> None:
        if max_delay is not None:
            max_delay = check_int(max_delay, name="max_delay", caller="BoundedAsync", low=0)
        self.max_delay = max_delay
        self.order = check_choice(order, name="order", caller="BoundedAsync",
                                  choices=UPDATE_ORDERS)

    def step_factor(self, problem: Problem, n_workers: int) -> float:
        """Return ``1 / n_workers``: each result is a step along a full-gradient estimate."""
        return 1.0 / max(int(n_workers), 1)

    def convergence_window(self, n_workers: int) -> int:
        """Return ``n_workers``: one update per result, so a round of all workers is that
        many versions."""
        return max(int(n_workers), 1)

    def _reset(self) -> None:
        self._worker_rows_of()
        self._pending: list[WorkResult] = []
        self._choice: WorkResult | None = None
        self.applied_delays: list[int] = []

    def dispatch(self, worker_index: int) -> WorkUnit | None:
        """Give an idle worker the current iterate (once no update is waiting to be applied)."""
        if not self._placement[worker_index] or self._pending:
            return None
        return WorkUnit(worker_index, self._placement[worker_index], self._x, self._version)

    def _delay(self, result: WorkResult) -> int:
        return self._version - result.unit.version

    def _expire(self) -> None:
        """Drop pending updates whose delay is over the bound."""
        if self.max_delay is None:
            return
        keep = [r for r in self._pending if self._delay(r) <= self.max_delay]
        self._dropped += len(self._pending) - len(keep)
        self._pending = keep

    def receive(self, result: WorkResult) -> None:
        """Buffer the update (dropped at once if already over the delay bound)."""
        self._plain(result)
        self._pending.append(result)
        self._expire()
        self._summary = None
        self._choice = None

    def ready(self) -> bool:
        """True while an update is pending."""
        return bool(self._pending)

    def _pick(self) -> WorkResult:
        if self._choice is None:
            if self.order == "arrival":
                self._choice = self._pending[0]
            else:
                due = [r for r in self._pending
                       if self.max_delay is not None and self._delay(r) == self.max_delay]
                pool = due or self._pending
                self._choice = min(pool, key=lambda r: (self._delay(r), self._pending.index(r)))
        return self._choice

    def _summarise(self) -> RoundSummary:
        """The chosen update's scaled kernel sum (the point is the current iterate)."""
        assert self.ready()
        chosen = self._pick()
        i = chosen.unit.worker_index
        assert not isinstance(chosen.result, tuple)
        delay = self._delay(chosen)
        return self._summary_of(
            chosen.result, covered=self._worker_rows[i], n_rows=self._total_rows, exact=False,
            workers_used=(i,), n_fresh=int(delay == 0), n_stale=int(delay > 0),
            extras={"delay": float(delay), "n_pending": float(len(self._pending) - 1)},
        )

    def step(self) -> None:
        """Apply the chosen update; the version advances and pending updates age by one."""
        summary = self.summary()
        chosen = self._pick()
        self.applied_delays.append(self._delay(chosen))
        self._pending.remove(chosen)
        self._update(summary.result.gradient)
        self._next_version()
        self._choice = None
        self._expire()
