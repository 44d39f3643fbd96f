"""Simulated faults: workers lost, frozen, joining or retiring at given simulated times.

Terms of the stragglers spec (:mod:`daskstraggle.latency.spec`) for the simulated runtime:
``loss(workers=..., at=SECONDS)``, ``freeze(workers=..., at=..., for=SECONDS)``,
``join(count=..., at=...)`` and ``retire(workers=..., at=...)``. Workers are named by their
index at the start of the run (0 .. N-1), workers that join N, N+1, ... in order. Each kind
is a :class:`Fault` class registered in :data:`FAULTS` (entry points ``daskstraggle.faults``).

Examples
--------
>>> from daskstraggle.latency.spec import parse_stragglers
>>> spec = parse_stragglers("loss(workers=1, at=2) + join(count=2, at=5.5)")
>>> [f.to_spec() for f in spec.faults]
['loss(workers=[1], at=2)', 'join(count=2, at=5.5)']
>>> parse_stragglers("freeze(workers=[0, 2], at=1, for=3)").faults[0].until
4.0
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from daskstraggle._registry import Registry
from daskstraggle._validation import _fail, check_int
from daskstraggle.errors import InvalidParameterError
from daskstraggle.latency.base import MAX_SECONDS, _check_in_range, _is_number, _worker_indices

T = TypeVar("T")

__all__ = ["FAULTS", "ClusterState", "Fault", "Freeze", "Join", "Loss", "Retire", "make_fault",
           "term_names"]


def _seconds(value: Any, *, name: str, term: str, positive: bool = False) -> float:
    ok = _is_number(value) and math.isfinite(value) and \
        (float(value) > 0 if positive else float(value) >= 0) and float(value) <= MAX_SECONDS
    if not ok:
        bound = "> 0" if positive else ">= 0"
        _fail(name, term, f"a number of seconds {bound} and at most {MAX_SECONDS:g}", value)
    return float(value)


@dataclass(frozen=True, kw_only=True, slots=True)
class ClusterState:
    """The simulated cluster's membership, as the faults played so far leave it.

    Parameters
    ----------
    n_workers : int
        Workers at the start of the run, named ``"0"`` .. ``"N-1"``.
    joined : int, default=0
        Workers that joined since, named ``"N"``, ``"N+1"``, ... in order.
    gone : frozenset of str, default=frozenset()
        Workers that left.
    retiring : frozenset of str, default=frozenset()
        Workers retiring gracefully (no new work; their data can be fetched).
    """

    n_workers: int
    joined: int = 0
    gone: frozenset[str] = frozenset()
    retiring: frozenset[str] = frozenset()

    def live(self) -> list[str]:
        """Return the workers named so far that have not left, in order."""
        named = (str(i) for i in range(self.n_workers + self.joined))
        return [w for w in named if w not in self.gone]

    def statuses(self) -> dict[str, str]:
        """Return each live worker's status as the scheduler reports it."""
        return {w: "closing_gracefully" if w in self.retiring else "running" for w in self.live()}


@dataclass(frozen=True, kw_only=True, slots=True)
class _Term:
    """A spec term that may stand anywhere in a spec (a fault, the throttle): its fields are
    its parameters, ``workers`` (if any) worker indices."""

    name: ClassVar[str] = ""

    @classmethod
    def from_term(cls: type[T], name: str, params: dict[str, Any], *, base: Any, spec: str) -> T:
        """Build the term ``name(**params)`` (``for`` may be ``for_``); InvalidParameterError
        names the parameters it takes."""
        if "for" in params:
            params["for_"] = params.pop("for")
        try:
            return cls(**params)
        except TypeError:
            shown = ", ".join(p.rstrip("_") for p in inspect.signature(cls).parameters)
            raise InvalidParameterError(
                f"{name} takes {shown}; got {', '.join(sorted(params)) or 'nothing'}."
            ) from None

    def check_n_workers(self, n_workers: int) -> None:
        """Raise InvalidParameterError if a worker index is out of range."""
        _check_in_range(self.name, getattr(self, "workers", ()), n_workers)

    def _spec_names(self) -> list[str]:
        return [f.name for f in dataclasses.fields(self)]

    def to_spec(self) -> str:
        """Return the term that parses back to this one (``for_`` written ``for``)."""
        args = (f"{name.rstrip('_')}={_spec_value(getattr(self, name))}"
                for name in self._spec_names())
        return f"{self.name}({', '.join(args)})"


@dataclass(frozen=True, kw_only=True, slots=True)
class Fault(_Term):
    """A fault at simulated time ``at`` (seconds from the start of the run's loop).

    A subclass sets ``name`` (its spec term), declares and validates its parameters and
    overrides what it changes: :meth:`apply`, :meth:`freeze_windows`, :meth:`to_event`.
    """

    at: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "at", _seconds(self.at, name="at", term=self.name))

    def apply(self, cluster: ClusterState) -> ClusterState:
        """Return the membership this fault leaves on ``cluster`` (default: unchanged)."""
        return cluster

    def freeze_windows(self) -> tuple[tuple[str, float, float], ...]:
        """Return ``(worker, at, until)`` per worker stopped during ``[at, until)`` (default
        none)."""
        return ()

    def workers_named(self, cluster: ClusterState) -> list[str]:
        """Return the names of the workers this fault concerns, played on ``cluster``."""
        return [str(w) for w in getattr(self, "workers", ())]

    def to_event(self, cluster: ClusterState) -> dict[str, Any]:
        """Return this fault on ``cluster`` as a ``simulate`` report event: ``time``,
        ``event`` (the name), ``workers``."""
        return {"time": self.at, "event": self.name, "workers": self.workers_named(cluster)}

    @staticmethod
    def describe(event: dict[str, Any]) -> str:
        """Return an event of :meth:`to_event` in words, for ``simulate``'s table."""
        workers = event["workers"]
        until = f" until {event['until']:g} s" if "until" in event else ""
        return (f"{event['event']}: worker{'s' if len(workers) > 1 else ''} "
                f"{', '.join(workers)}{until}")

    def _spec_names(self) -> list[str]:
        """Its first own parameter, ``at``, then the others."""
        names = _Term._spec_names(self)
        return [*names[1:2], "at", *names[2:]]


def _spec_value(value: Any) -> str:
    """A parameter as spec text: tuples as lists, floats in ``g`` format."""
    if isinstance(value, tuple):
        return repr(list(value))
    return f"{value:g}" if isinstance(value, float) else repr(value)


@dataclass(frozen=True, kw_only=True, slots=True)
class _WorkersFault(Fault):
    """A fault of some workers (``workers``: distinct indices, sorted)."""

    workers: tuple[int, ...]

    def __post_init__(self) -> None:
        Fault.__post_init__(self)
        workers = _worker_indices(self.workers, term=self.name)
        object.__setattr__(self, "workers", tuple(sorted(set(workers))))


@dataclass(frozen=True, kw_only=True, slots=True)
class Loss(_WorkersFault):
    """Workers that die at ``at`` (killed, preempted): their work never answers."""

    name: ClassVar[str] = "loss"

    def apply(self, cluster: ClusterState) -> ClusterState:
        """Return ``cluster`` without the workers."""
        return dataclasses.replace(cluster, gone=cluster.gone | set(self.workers_named(cluster)))


@dataclass(frozen=True, kw_only=True, slots=True)
class Retire(_WorkersFault):
    """Workers that retire gracefully at ``at`` (scale-down, ``--lifetime``): they take
    no new work, and their data is fetched from them."""

    name: ClassVar[str] = "retire"

    def apply(self, cluster: ClusterState) -> ClusterState:
        """Return ``cluster`` with those of the workers still there retiring."""
        return dataclasses.replace(cluster, retiring=cluster.retiring
                                   | (set(self.workers_named(cluster)) - cluster.gone))


@dataclass(frozen=True, kw_only=True, slots=True)
class Freeze(_WorkersFault):
    """Workers that stop computing from ``at`` for ``for_`` seconds (spec: ``for=``; a
    stopped process, a suspended VM): their work is late by the overlap."""

    name: ClassVar[str] = "freeze"
    for_: float

    def __post_init__(self) -> None:
        _WorkersFault.__post_init__(self)
        object.__setattr__(self, "for_", _seconds(self.for_, name="for", term=self.name,
                                                  positive=True))

    @property
    def until(self) -> float:
        """When the workers compute again."""
        return self.at + self.for_

    def freeze_windows(self) -> tuple[tuple[str, float, float], ...]:
        """Return ``(worker, at, until)`` for each of the workers."""
        return tuple((str(w), self.at, self.until) for w in self.workers)

    def to_event(self, cluster: ClusterState) -> dict[str, Any]:
        """Return the event of :meth:`Fault.to_event` with ``until``."""
        return {**Fault.to_event(self, cluster), "until": self.until}


@dataclass(frozen=True, kw_only=True, slots=True)
class Join(Fault):
    """``count`` new workers join at ``at``."""

    name: ClassVar[str] = "join"
    count: int = 1

    def __post_init__(self) -> None:
        Fault.__post_init__(self)
        count = check_int(self.count, name="count", caller="join", low=1, high=1_000_000)
        object.__setattr__(self, "count", count)

    def apply(self, cluster: ClusterState) -> ClusterState:
        """Return ``cluster`` with ``count`` more workers."""
        return dataclasses.replace(cluster, joined=cluster.joined + self.count)

    def workers_named(self, cluster: ClusterState) -> list[str]:
        """Return the names the new workers get on ``cluster``."""
        first = cluster.n_workers + cluster.joined
        return [str(first + k) for k in range(self.count)]


#: The fault kinds (the fault terms of the stragglers spec), by name; other packages add
#: theirs under the entry-point group ``daskstraggle.faults``.
FAULTS: Registry[Fault] = Registry(
    "fault kind", group="daskstraggle.faults", load=lambda: (Loss, Freeze, Join, Retire),
    unknown=lambda name, names: f"Unknown fault kind {name!r}; choose one of {names}.",
)


def make_fault(name: str, **params: Any) -> Fault:
    """Build the fault term ``name`` (``for`` may be spelled ``for_``).

    Raises
    ------
    InvalidParameterError
        For an unknown kind, or a missing or unknown parameter, naming the ones the term
        takes.

    Examples
    --------
    >>> make_fault("retire", workers=[3], at=10)
    Retire(at=10.0, workers=(3,))
    """
    return FAULTS.get(name).from_term(name, params, base=None, spec="")


def term_names(faults: Any) -> str:
    """The distinct terms of ``faults``, in order, for a message: ``"loss and join"``."""
    names = list(dict.fromkeys(fault.name for fault in faults))
    return " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)
