"""Worker-side straggler injection: a latency model's delays added to the tasks that call
:func:`inject_delay` (to slow any Dask workload use
:class:`~daskstraggle.runtime.throttle.ProcessThrottle`)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np
from distributed.diagnostics.plugin import WorkerPlugin

from daskstraggle._validation import check_addresses, check_int
from daskstraggle.errors import InvalidParameterError
from daskstraggle.latency.base import LatencyModel
from daskstraggle.runtime._connect import default_client

if TYPE_CHECKING:
    from distributed import Worker

__all__ = [
    "INJECTOR_PREFIX",
    "StragglerInjector",
    "inject_delay",
    "injected",
    "install_injector",
    "remove_injector",
]

#: Every injector is registered on the workers under a name starting with this.
INJECTOR_PREFIX = "daskstraggle-injector"


class StragglerInjector(WorkerPlugin):
    """WorkerPlugin that delays our tasks on each worker by a latency model's draws.

    Samplers keep per-worker streams (:func:`~daskstraggle.latency.base.worker_streams`),
    so worker ``i`` draws exactly what ``model.sampler(n_workers, seed).sample(i, ...)``
    draws on the client or in the simulator, and model state (Markov chains, bursts) lives
    on the worker across tasks. A model with a distribution *adds* its draw to the real
    work; a pure slow-down (``slowdown(workers=1, factor=3)`` without a base) stretches the
    task to ``factor`` times its measured compute time.

    Parameters
    ----------
    model : LatencyModel
        The latency model (its per-worker parameters fit ``len(workers)``).
    workers : sequence of str
        Worker addresses; a worker's index is its position. Workers not listed (e.g. ones
        that join later) inject nothing.
    seed : int
        Seed of the per-worker streams (the same on every worker).

    After :meth:`setup`, :attr:`worker_index` is this worker's index (None: not listed,
    inactive).

    See Also
    --------
    install_injector : Register an injector on the cluster.
    inject_delay : What a task calls to get delayed.
    """

    idempotent = False

    def __init__(self, model: LatencyModel, workers: Sequence[str], seed: int) -> None:
        self.model = model
        self.workers = tuple(workers)
        self.seed = seed
        self.worker_index: int | None = None
        self._sampler: Any = None
        self._lock: Any = None
        self._start_time = 0.0
        self._added = model.has_distribution

    def __reduce__(self) -> tuple[Any, ...]:
        # no sampler or lock to pickle before setup; the model goes through cloudpickle
        # (a model from a module registered by value, or from __main__, works too)
        import cloudpickle

        return (_rebuild_injector, (cloudpickle.dumps(self.model), self.workers, self.seed))

    def setup(self, worker: Worker) -> None:
        """Build this worker's sampler (only its own index is ever drawn)."""
        self.activate(worker.address)

    def activate(self, address: str) -> None:
        """Become the injector of the worker at ``address`` (inactive if not listed)."""
        self._lock = threading.Lock()
        self._start_time = time.monotonic()
        if address in self.workers:
            self.worker_index = self.workers.index(address)
            self._sampler = self.model.sampler(len(self.workers), self.seed)
        else:
            self.worker_index = None
            self._sampler = None

    def delay(self, *, iteration: int = 0, load: float = 1.0, measured: float | None = None,
              sleep: bool = True) -> float:
        """Draw this worker's next latency and sleep for the injected part.

        Parameters
        ----------
        iteration : int, default=0
            Iterate version the task computed.
        load : float, default=1.0
            Work the task carried relative to an equal share of the rows.
        measured : float or None, default=None
            Seconds the real work took (needed by pure slow-down models).
        sleep : bool, default=True
            Sleep here (in the task's thread). False only returns the seconds, e.g. for
            an ``async`` task that awaits ``asyncio.sleep`` itself.

        Returns
        -------
        extra : float
            Injected seconds (never negative; 0.0 when this worker is not listed).

        Raises
        ------
        RuntimeError
            If asked to sleep inside a running event loop (it would block the worker).
        """
        if self._sampler is None:
            return 0.0
        if sleep:
            _check_not_in_event_loop()
        with self._lock:
            compute, communication = self._sampler.sample(
                self.worker_index, time=time.monotonic() - self._start_time,
                iteration=iteration, load=load, measured=measured,
            )
        extra = float(compute) + float(communication)
        if not self._added:
            extra -= float(measured or 0.0)
        extra = max(extra, 0.0)
        if sleep and extra > 0:
            time.sleep(extra)
        return extra


def _rebuild_injector(model: bytes, workers: tuple[str, ...], seed: int) -> StragglerInjector:
    import pickle

    return StragglerInjector(pickle.loads(model), workers, seed)


def _check_not_in_event_loop() -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise RuntimeError(
        "inject_delay would block the worker's event loop: call it from a task running in a "
        "worker thread, or pass sleep=False and await asyncio.sleep(delay) yourself."
    )


def inject_delay(*, iteration: int = 0, load: float = 1.0, measured: float | None = None,
                 sleep: bool = True, name: str | None = None) -> float:
    """Delay the calling task by the worker's injected straggler latency (call it at the end
    of a task body): each injector registered on the current worker draws and sleeps.

    Parameters
    ----------
    iteration, load, measured, sleep
        As in :meth:`StragglerInjector.delay`.
    name : str or None, default=None
        Use only the injector registered under this name (the one of the task's own run,
        so a task still running after its run ended never draws from the next run's
        injector); None uses every injector on the worker.

    Returns
    -------
    extra : float
        Seconds injected; 0.0 when not on a worker or no injector is installed.

    Raises
    ------
    RuntimeError
        If asked to sleep inside a running event loop (an ``async`` task).

    Examples
    --------
    >>> inject_delay(iteration=3, load=1.0, measured=0.5)
    0.0
    """
    from distributed import get_worker

    try:
        worker = get_worker()
    except ValueError:
        return 0.0
    return sum((plugin.delay(iteration=iteration, load=load, measured=measured, sleep=sleep)
                for key, plugin in list(worker.plugins.items())
                if (name is None or key == name) and key.startswith(INJECTOR_PREFIX)
                and isinstance(plugin, StragglerInjector)), 0.0)


def install_injector(client: Any, model: LatencyModel, addresses: Sequence[str], *,
                     seed: int | None = None) -> str:
    """Register a :class:`StragglerInjector` of ``model`` on every worker of ``client``'s
    cluster (None: ``distributed.get_client()``) and return its name, unique per call
    (starting with :data:`INJECTOR_PREFIX`; pass it to :func:`remove_injector`).

    ``addresses`` are the workers by worker index; ``seed`` seeds the per-worker streams
    (None: fresh entropy, the same on every worker).

    Raises
    ------
    InvalidParameterError
        If ``model`` is not a LatencyModel, its per-worker parameters do not fit
        ``len(addresses)``, or ``addresses`` or ``seed`` is invalid (checked before any
        cluster work).

    Examples
    --------
    >>> from daskstraggle.latency.base import Constant
    >>> name = install_injector(client, Constant(compute=(0.0, 0.2)), workers,
    ...                         seed=0)  # doctest: +SKIP
    >>> remove_injector(client, name)  # doctest: +SKIP
    """
    caller = "install_injector"
    if not isinstance(model, LatencyModel):
        raise InvalidParameterError(
            f"The 'model' parameter of {caller} must be a LatencyModel. "
            f"Got {type(model).__name__} instead."
        )
    workers = check_addresses(
        addresses, name="addresses", caller=caller,
        constraint="a non-empty list of worker addresses (the worker index is the position)")
    model.check_n_workers(len(workers))
    if seed is None:  # fresh entropy, one seed for all workers (an int when drawn fresh)
        seed = int(cast(int, np.random.SeedSequence().entropy))
    else:
        seed = check_int(seed, name="seed", caller=caller, low=0,
                         remedy="None draws a fresh one.")
    client = default_client(client)
    name = f"{INJECTOR_PREFIX}-{uuid.uuid4().hex[:10]}"
    try:
        client.register_plugin(StragglerInjector(model, workers, seed), name=name)
        # a client killed before remove_injector: the scheduler removes it
        from daskstraggle.runtime.plugin import guard_worker_plugin

        guard_worker_plugin(client, name)
    except BaseException:
        remove_injector(client, name)
        raise
    return name


def remove_injector(client: Any, name: str) -> None:
    """Unregister the injector ``name`` (returned by :func:`install_injector`) from every
    worker of ``client``'s cluster (None: ``distributed.get_client()``); no-op if it is not
    there."""
    from daskstraggle.runtime.plugin import _ship_by_value, _unregister, unguard_worker_plugin

    client = default_client(client)
    _ship_by_value()
    client.run_on_scheduler(_unregister, name)  # as the janitor of a departed client does
    unguard_worker_plugin(client, name)


@contextlib.contextmanager
def injected(client: Any, model: LatencyModel, addresses: Sequence[str], *,
             seed: int | None = None) -> Iterator[str]:
    """Inject ``model`` on the workers inside a ``with`` block (yields the plugin name);
    as :func:`install_injector`, the injector removed on exit, also on errors.

    Examples
    --------
    >>> with injected(client, model, workers, seed=0):  # doctest: +SKIP
    ...     client.submit(task_calling_inject_delay).result()
    """
    name = install_injector(client, model, addresses, seed=seed)
    try:
        yield name
    finally:
        remove_injector(client, name)
