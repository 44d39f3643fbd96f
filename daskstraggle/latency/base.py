"""The LatencyModel contract: seeded, per-worker, possibly stateful task latency.

A :class:`LatencyModel` holds parameters only; :meth:`LatencyModel.sampler` builds the
stateful :class:`LatencySampler` that draws one task's ``(compute, communication)``. Every
sampler follows these rules (the conformance tests check them):

- **Per-worker streams.** Worker ``i``'s draws come only from ``sampler.streams[i]`` and its
  state evolves only through calls for worker ``i``, so a sampler built on worker ``i`` alone
  (the worker-side injector) draws the same sequence as a full sampler in the simulator.
- **Load.** Compute time of a model with a distribution scales linearly with ``load``;
  communication does not. Pure slow-down models (``has_distribution`` False) scale the
  ``measured`` compute time instead (communication 0); the others ignore ``measured``.
- **Time and iteration** are non-decreasing per worker; stateful models advance lazily.
- **Finite times.** Every time parameter is at most :data:`MAX_SECONDS` and every variance
  at most its square, so draws, their sums and squares stay finite in float64.
"""

from __future__ import annotations

import functools
import numbers
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, ClassVar, overload

import numpy as np
from numpy.typing import NDArray

from daskstraggle._registry import Registry
from daskstraggle._validation import _fail, check_int
from daskstraggle.errors import InvalidParameterError

if TYPE_CHECKING:
    from daskstraggle.latency.modifiers import Link

__all__ = [
    "MAX_SECONDS", "PER_WORKER_STREAMS_MAX", "Constant", "LatencyModel", "LatencySampler",
    "WorkerStreams", "check_per_worker", "get_model_class", "list_models", "make_model",
    "register_model", "worker_streams"
]

Draw = tuple[Any, Any]
#: ``(name, check)`` per parameter of a model (:attr:`LatencyModel._checks`).
Checks = tuple[tuple[str, Callable[..., Any]], ...]
#: The per-worker random streams a sampler draws from (:func:`worker_streams`).
Streams = Sequence[np.random.Generator]
#: A seed (:func:`worker_streams`): an int, a SeedSequence, a Generator or None.
Seed = int | np.random.SeedSequence | np.random.Generator | None

#: Largest time parameter (seconds) of a latency model, about 32 million years.
MAX_SECONDS = 1e15

#: Most workers whose block draws (:meth:`LatencySampler.draw`) come from one stream per
#: worker; above, samplers that can draw every worker at once from one stream do so.
PER_WORKER_STREAMS_MAX = 10_000

_REGISTRY: Registry[LatencyModel] = Registry(
    "latency model", group="daskstraggle.latency",
    unknown=lambda name, names: f"Unknown latency model {name!r}; choose one of {names}.",
)
# The registry's methods are the public functions (see daskstraggle._registry).
register_model = _REGISTRY.register
list_models = _REGISTRY.names
get_model_class = _REGISTRY.get
make_model = _REGISTRY.make


class WorkerStreams(Sequence[np.random.Generator]):
    """One independent Generator per worker, each built when first used.

    ``streams[i]`` is ``default_rng(SeedSequence(entropy, spawn_key=(*key, i)))`` for the
    seed's entropy and spawn key: it depends only on the seed and ``i``. Streams are built
    lazily, so a worker that draws nothing costs nothing.

    Parameters
    ----------
    seed : SeedSequence
        The root seed.
    n_workers : int
        Number of streams.
    """

    def __init__(self, seed: np.random.SeedSequence, n_workers: int) -> None:
        self._seed = seed
        self._n = n_workers
        self._built: dict[int, np.random.Generator] = {}
        self._shared: np.random.Generator | None = None

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, index: int) -> np.random.Generator: ...

    @overload
    def __getitem__(self, index: slice) -> list[np.random.Generator]: ...

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._n))]
        i = int(index) + (self._n if index < 0 else 0)
        if not 0 <= i < self._n:
            raise IndexError(f"worker {index} out of range for {self._n} streams")
        stream = self._built.get(i)
        if stream is None:
            seed = self._seed
            stream = np.random.default_rng(
                np.random.SeedSequence(seed.entropy, spawn_key=(*seed.spawn_key, i)))
            self._built[i] = stream
        return stream

    @property
    def shared(self) -> np.random.Generator:
        """One Generator for every worker at once: the root seed's own stream (the
        workers' are its children), independent of theirs, built on first use and kept."""
        if self._shared is None:
            self._shared = np.random.default_rng(self._seed)
        return self._shared


def worker_streams(rng: Seed, n_workers: int) -> WorkerStreams:
    """Return one independent Generator per worker, spawned from one seed.

    Parameters
    ----------
    rng : int, SeedSequence, Generator or None
        The seed. A Generator is used to draw a seed (so it advances); None is fresh
        entropy.
    n_workers : int
        Number of streams.

    Returns
    -------
    streams : WorkerStreams
        ``streams[i]`` depends only on the seed and ``i`` (not on ``n_workers``).

    Examples
    --------
    >>> a = worker_streams(7, 3)[1].random()
    >>> b = worker_streams(7, 5)[1].random()
    >>> a == b
    True
    """
    if isinstance(rng, np.random.Generator):
        seq = np.random.SeedSequence(int(rng.integers(2**63)))
    elif isinstance(rng, np.random.SeedSequence):
        seq = rng
    else:
        seq = np.random.SeedSequence(rng)
    return WorkerStreams(seq, n_workers)


def _is_number(value: Any) -> bool:
    """Whether ``value`` is a real number, not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _is_index(value: Any) -> bool:
    """Whether ``value`` is an int >= 0 (not a bool): a worker index."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and int(value) >= 0


def _worker_indices(value: Any, *, term: str, options: str = "") -> tuple[int, ...]:
    """Return a worker index or a non-empty list of them as a tuple of ints, in order
    (InvalidParameterError names the ``workers`` parameter of ``term``, plus ``options``)."""
    items = (value,) if _is_index(value) else value
    if not isinstance(items, tuple | list) or not items or not all(map(_is_index, items)):
        _fail("workers", term, f"a worker index or a list of them (ints >= 0){options}", value)
    return tuple(int(w) for w in items)


def _check_in_range(term: str, workers: Sequence[int], n_workers: int) -> None:
    """Raise InvalidParameterError naming ``term`` if a listed worker is ``>= n_workers``."""
    bad = [w for w in workers if w >= n_workers]
    if bad:
        raise InvalidParameterError(
            f"{term}: worker {bad[0]} is out of range for {n_workers} workers "
            f"(indices 0..{n_workers - 1})."
        )


def _in_bounds(v: Any, low: float, strict: bool, high: float | None) -> bool:
    """Whether ``v`` is a finite real number above ``low`` (or at it) and at most ``high``."""
    if not (_is_number(v) and np.isfinite(float(v))):
        return False
    return (v > low if strict else v >= low) and (high is None or v <= high)


def check_per_worker(value: Any, *, name: str, caller: str, low: float = 0.0, strict: bool = False,
                     high: float | None = None) -> float | tuple[float, ...]:
    """Normalise a scalar-or-per-worker parameter to a float or a tuple of floats.

    Parameters
    ----------
    value : float or sequence of float
        One value for every worker, or one per worker.
    name, caller : str
        For the error message.
    low : float, default=0.0
        Lower bound of every value (excluded when ``strict``).
    strict : bool, default=False
    high : float or None, default=None
        Upper bound of every value (included), e.g. :data:`MAX_SECONDS` for a time.

    Raises
    ------
    InvalidParameterError
        If a value is not a finite number within the bounds.
    """
    bound = "" if high is None else f" and <= {high:g}"
    constraint = f"a finite number {'>' if strict else '>='} {low:g}{bound} or a list of them"
    per_worker = isinstance(value, Sequence | np.ndarray) and not isinstance(value, str)
    items = list(value) if per_worker else [value]
    for v in items:
        if not _in_bounds(v, low, strict, high):
            _fail(name, caller, constraint, value)
    if not per_worker:
        return float(value)
    if not items:
        raise InvalidParameterError(
            f"The {name!r} parameter of {caller} must be {constraint}. Got an empty list."
        )
    return tuple(float(v) for v in items)


#: :func:`check_per_worker` for times: seconds in [0, MAX_SECONDS].
check_seconds = functools.partial(check_per_worker, high=MAX_SECONDS)


def _lists(value: Any) -> Any:
    """``value`` with its tuples, nested ones too, as lists (for dicts and spec text)."""
    return [_lists(v) for v in value] if isinstance(value, tuple) else value


class LatencyModel(ABC):
    """Abstract base of the latency models: parameters only, immutable.

    Subclasses are ``@dataclass(frozen=True, kw_only=True, slots=True)``, validate in
    ``__post_init__``, are decorated with :func:`register_model` and set ``name``
    (hyphenated, e.g. ``"shifted-exponential"``). Per-worker parameters are a float
    (every worker alike) or a tuple with one value per worker.
    """

    #: Registry name.
    name: ClassVar[str]
    #: The parameters :meth:`__post_init__` checks, in order: ``(name, check)`` pairs,
    #: ``check(value, *, name, caller)`` returning the normalised value (``caller``: the
    #: class name).
    _checks: ClassVar[Checks] = ()

    def __post_init__(self) -> None:
        for name, check in self._checks:
            self._set(**{name: check(getattr(self, name), name=name, caller=type(self).__name__)})

    @property
    def has_distribution(self) -> bool:
        """Whether the model draws compute times itself (False: scales ``measured``)."""
        return True

    @property
    def link(self) -> Link | None:
        """The model's ``link`` term, which says how long replies take on the network
        (:class:`~daskstraggle.latency.modifiers.Link`); None: the model has none."""
        return None

    def _set(self, **values: Any) -> None:
        """Store normalised parameters (the dataclass is frozen)."""
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def _fields(self, skip_base: bool = False) -> list[tuple[str, Any]]:
        """Return ``(name, value)`` of each parameter, tuples (nested too) as lists."""
        return [(f.name, _lists(getattr(self, f.name)))
                for f in fields(self)  # type: ignore[arg-type]
                if not (skip_base and f.name == "base")]

    #: Whether a tuple parameter holds one value per worker (modifiers: per listed worker).
    _per_worker: ClassVar[bool] = True

    def check_n_workers(self, n_workers: int) -> None:
        """Raise InvalidParameterError if a nested model, a per-worker parameter or a listed
        worker (parameter ``workers``) does not fit ``n_workers``."""
        for f in fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if isinstance(value, LatencyModel):
                value.check_n_workers(n_workers)
            elif f.name == "workers" and value is not None:
                _check_in_range(f"The 'workers' parameter of {type(self).__name__}", value,
                                n_workers)
            elif isinstance(value, tuple) and self._per_worker and len(value) != n_workers:
                raise InvalidParameterError(
                    f"The {f.name!r} parameter of the {self.name!r} latency model has "
                    f"{len(value)} values but there are {n_workers} workers; give one value "
                    "per worker or a single number."
                )

    #: The sampler's class, built as ``_sampler_class(model, n_workers, streams)``.
    _sampler_class: ClassVar[Callable[..., LatencySampler]]

    def _make_sampler(self, n_workers: int, streams: Streams) -> LatencySampler:
        """Return the sampler (``n_workers`` already checked)."""
        return self._sampler_class(self, n_workers, streams)

    def sampler(self, n_workers: int, rng: Seed = None) -> LatencySampler:
        """Return a stateful sampler for ``n_workers`` workers.

        Parameters
        ----------
        n_workers : int
            Number of workers (indices ``0 .. n_workers - 1``).
        rng : int, SeedSequence, Generator or None, default=None
            Seed of the per-worker streams (:func:`worker_streams`).

        Returns
        -------
        sampler : LatencySampler

        Raises
        ------
        InvalidParameterError
            If per-worker parameters do not have ``n_workers`` values.
        """
        n_workers = check_int(n_workers, name="n_workers", caller=f"{type(self).__name__}.sampler",
                              low=1)
        self.check_n_workers(n_workers)
        return self._make_sampler(n_workers, worker_streams(rng, n_workers))

    def to_dict(self) -> dict[str, Any]:
        """Return ``{"name": ..., **parameters}`` (nested models as dicts)."""
        return {"name": self.name, **{k: v.to_dict() if isinstance(v, LatencyModel) else v
                                      for k, v in self._fields()}}

    @staticmethod
    def from_dict(data: dict[str, Any]) -> LatencyModel:
        """Rebuild a model written by :meth:`to_dict`."""
        params = dict(data)
        name = params.pop("name")
        for key, value in params.items():
            if isinstance(value, dict) and "name" in value:
                params[key] = LatencyModel.from_dict(value)
            elif isinstance(value, list):
                params[key] = tuple(value)
        return make_model(name, **params)

    @classmethod
    def from_term(
        cls, name: str, params: dict[str, Any], *, base: LatencyModel | None, spec: str
    ) -> LatencyModel:
        """Build the model of the spec term ``name(**params)`` (``spec``: the whole text).

        ``base`` is the model of the terms before it (None: it comes first); a model with a
        ``base`` field (a modifier) takes it, any other raises InvalidParameterError.
        """
        if base is not None:
            if "base" not in cls.__dataclass_fields__:  # type: ignore[attr-defined]
                raise InvalidParameterError(
                    f"{name!r} is not a modifier and cannot follow another term in {spec!r}; "
                    f"put the distribution first. Models: {list_models()}."
                )
            params["base"] = base
        return make_model(cls.name, **params)

    def to_spec(self) -> str:
        """Return the model as a spec string that ``parse_latency`` reads back."""
        base = getattr(self, "base", None)
        term = self._spec_term(skip_base=True)
        return term if base is None else f"{base.to_spec()} + {term}"

    def _spec_term(self, *, skip_base: bool = False) -> str:
        """Write the model as one term; nested models self-contained (``base=`` an argument)."""
        args = [f"{k}={v._spec_term() if isinstance(v, LatencyModel) else repr(v)}"
                for k, v in self._fields(skip_base)]
        return f"{self.name.replace('-', '_')}({', '.join(args)})"


class LatencySampler(ABC):
    """Stateful draws of task latency for each worker (see the module docstring).

    Parameters
    ----------
    n_workers : int
        Number of workers.
    streams : sequence of Generator
        One random stream per worker (:func:`worker_streams`).
    """

    #: True when draws depend only on the worker's stream and ``load`` (not on ``time``,
    #: ``iteration`` or history); its ``size=k`` draw then equals ``k`` single draws.
    stateless: bool = False

    #: True when :meth:`_draw_shared` draws every worker at once from one Generator.
    shared_draws: bool = False

    def __init__(self, n_workers: int, streams: Streams) -> None:
        self.n_workers = n_workers
        self.streams = streams

    def draw(self, loads: NDArray[np.float64], size: int) -> NDArray[np.float64]:
        """Return ``size`` latencies (compute + communication) of every worker, stateless only.

        Up to :data:`PER_WORKER_STREAMS_MAX` workers (or without ``shared_draws``), row
        ``i`` is ``sample(i, load=loads[i], size=size)`` from worker ``i``'s own stream.
        Above, every worker is drawn at once from ``streams.shared``, vectorised: the same
        laws, other numbers (building one stream per worker would take minutes for
        millions of workers).

        Parameters
        ----------
        loads : ndarray of shape (n_workers,)
            Work per task of each worker relative to an equal share of the rows.
        size : int
            Draws per worker.

        Returns
        -------
        latency : ndarray of shape (n_workers, size)
            Seconds; row ``i`` is worker ``i``'s draws in order.

        Raises
        ------
        InvalidParameterError
            If the sampler is not stateless (its draws depend on time or history).
        """
        if not self.stateless:
            raise InvalidParameterError(
                f"{type(self).__name__}.draw needs a stateless sampler (draws independent of "
                "time, iteration and history); draw a stateful one task by task with sample()."
            )
        shared = getattr(self.streams, "shared", None)
        if self.shared_draws and shared is not None and self.n_workers > PER_WORKER_STREAMS_MAX:
            compute, communication = self._draw_shared(loads, size, shared)
            return np.add(compute, communication, out=compute)
        out = np.empty((self.n_workers, size))
        for i in range(self.n_workers):
            compute, communication = self.sample(i, load=float(loads[i]), size=size)
            np.add(compute, communication, out=out[i])
        return out

    def _draw_shared(
        self, loads: NDArray[np.float64], size: int, generator: np.random.Generator
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Return ``(compute, communication)`` of every worker from ``generator``, each of
        shape (n_workers, size), compute times ``loads`` (samplers with ``shared_draws``)."""
        raise NotImplementedError(f"{type(self).__name__} cannot draw every worker at once")

    @abstractmethod
    def sample(self, worker_index: int, *, time: float = 0.0, iteration: int = 0,
               load: float = 1.0, measured: float | None = None, size: int | None = None) -> Draw:
        """Return ``(compute, communication)`` seconds for one task of ``worker_index``.

        Parameters
        ----------
        worker_index : int
            Which worker.
        time : float, default=0.0
            Seconds since the run started when the task starts.
        iteration : int, default=0
            Iterate version the task computes.
        load : float, default=1.0
            Work the task carries relative to an equal share of the rows.
        measured : float or None, default=None
            Compute seconds the real kernel took (used by pure slow-down models).
        size : int or None, default=None
            Number of independent draws (None: one, returned as floats).

        Returns
        -------
        compute, communication : float or ndarray of shape (size,)
        """


def _out(compute: NDArray[np.float64], communication: Any, size: int | None) -> Draw:
    """Return a draw: floats for ``size=None``, else arrays of shape (size,)."""
    if size is None:
        return float(compute[0]), float(np.ravel(communication)[0])
    return compute, np.broadcast_to(communication, (size,)).astype(float)


class _UnitSampler(LatencySampler):
    """A sampler whose compute time is a draw at load 1 times ``load`` (``time``,
    ``iteration`` and ``measured`` unused): subclasses say how to draw in :meth:`_units`."""

    def _units(self, worker_index: int, n: int) -> tuple[NDArray[np.float64], Any]:
        """Return ``n`` draws of ``worker_index``: compute at load 1, shape (n,), and
        communication, a number or shape (n,)."""
        raise NotImplementedError

    def sample(self, worker_index: int, *, time: float = 0.0, iteration: int = 0,
               load: float = 1.0, measured: float | None = None,
               size: int | None = None) -> Draw:
        compute, communication = self._units(worker_index, 1 if size is None else size)
        return _out(load * compute, communication, size)


class _GammaSampler(_UnitSampler):
    """Independent gamma compute and communication times of the laws ``(mean, var)``;
    a variance of 0 is a deterministic time (Constant, Gamma)."""

    stateless = True
    shared_draws = True

    def __init__(self, n_workers: int, streams: Streams, *laws: tuple[Any, Any]) -> None:
        super().__init__(n_workers, streams)
        params = []
        for law in laws:
            mean, var = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in law))
            random = var > 0
            safe_var = np.where(random, var, 1.0)
            values = (mean, random, mean**2 / safe_var, safe_var / np.where(random, mean, 1.0))
            params.append(tuple(np.broadcast_to(v, (n_workers,)) for v in values))
        self.compute, self.communication = params

    def _units(self, worker_index, n):
        i = worker_index
        (c_mean, c_random, c_shape, c_scale) = self.compute
        (m_mean, m_random, m_shape, m_scale) = self.communication
        stream = self.streams[i]
        if c_random[i] and m_random[i]:
            # draws interleaved (compute, communication) so size=k equals k single calls
            both = stream.gamma([c_shape[i], m_shape[i]], [c_scale[i], m_scale[i]], size=(n, 2))
            compute, communication = both[:, 0], both[:, 1]
        else:
            compute = stream.gamma(c_shape[i], c_scale[i], size=n) if c_random[i] \
                else np.full(n, c_mean[i])
            communication = stream.gamma(m_shape[i], m_scale[i], size=n) if m_random[i] \
                else np.full(n, m_mean[i])
        return compute, communication

    def _draw_shared(self, loads, size, generator):
        compute, communication = (self._all(part, size, generator)
                                  for part in (self.compute, self.communication))
        compute *= loads[:, None]
        return compute, communication

    def _all(self, part, size, generator):
        mean, random, shape, scale = part
        if random.all():
            return generator.gamma(shape[:, None], scale[:, None], size=(self.n_workers, size))
        out = np.repeat(mean[:, None], size, axis=1)
        if random.any():
            out[random] = generator.gamma(shape[random][:, None], scale[random][:, None],
                                          size=(int(random.sum()), size))
        return out


@register_model
@dataclass(frozen=True, kw_only=True, slots=True)
class Constant(LatencyModel):
    """Deterministic latency: the same compute and communication time for every task.

    Parameters
    ----------
    compute : float or tuple of float, default=0.0
        Compute seconds per task at load 1 (one value, or one per worker; at most
        :data:`MAX_SECONDS`).
    communication : float or tuple of float, default=0.0
        Communication seconds per task (likewise).

    Examples
    --------
    >>> s = Constant(compute=(1.0, 2.0)).sampler(2)
    >>> s.sample(1, load=0.5)
    (1.0, 0.0)
    """

    name: ClassVar[str] = "constant"
    _checks = (("compute", check_seconds), ("communication", check_seconds))
    compute: float | tuple[float, ...] = 0.0
    communication: float | tuple[float, ...] = 0.0

    def _make_sampler(self, n_workers: int, streams: Streams) -> LatencySampler:
        return _GammaSampler(n_workers, streams, (self.compute, 0.0), (self.communication, 0.0))
