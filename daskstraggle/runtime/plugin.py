"""Record the latency of daskstraggle's tasks on the Dask scheduler.

:class:`LatencyPlugin` records on the scheduler, :class:`LatencyRecorder` reads from the
client. The module travels to the scheduler by value (cloudpickle), so it imports nothing
else of daskstraggle at module level; ``dask scheduler --preload daskstraggle.runtime.plugin``
installs the plugin at start instead (:func:`dask_setup`).
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import uuid
from collections import deque
from dataclasses import dataclass, fields
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from distributed.diagnostics.plugin import SchedulerPlugin
from distributed.metrics import time

if TYPE_CHECKING:
    import numpy as np
    from distributed import Client, Scheduler

__all__ = [
    "DEFAULT_MAXLEN",
    "DEFAULT_PREFIX",
    "JANITOR_PREFIX",
    "PRELOAD_NAME",
    "LatencyPlugin",
    "LatencyRecorder",
    "TaskLatency",
    "WorkerPluginJanitor",
    "dask_setup",
    "guard_worker_plugin",
    "unguard_worker_plugin",
]

logger = logging.getLogger(__name__)

#: Keys recorded by default: the work units of :class:`~daskstraggle.runtime.DaskRuntime`.
DEFAULT_PREFIX = "daskstraggle-unit-"
#: Records kept per worker by default (a record takes about 0.4 kB on the scheduler).
DEFAULT_MAXLEN = 1000
#: Name of the plugin installed by the ``--preload daskstraggle.runtime.plugin`` route.
PRELOAD_NAME = "daskstraggle-latency"
#: Scheduler plugins guarding a worker plugin are named this plus the worker plugin's name.
JANITOR_PREFIX = "daskstraggle-janitor-"
#: The recorder keeps at most this many times ``maxlen`` records not yet read.
_BUFFER_FACTOR = 64
#: The recorder keeps the recent compute durations of at most this many workers.
_MAX_WORKERS = 4096


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskLatency:
    """What the scheduler learnt about one finished task.

    Parameters
    ----------
    seq : int
        Number of the record: increases by one with each recorded task.
    key : str
    worker : str
        Address of the worker that computed it.
    compute_duration : float
        Seconds spent computing (sum of the worker's ``compute`` spans).
    transfer_duration : float
        Seconds spent fetching dependencies from other workers.
    start_time, stop_time : float
        Start and end of the computation on the worker's own clock (compare only their
        differences, never across workers).
    nbytes : int
        Size of the result in the worker's memory.

    Examples
    --------
    >>> record = TaskLatency(seq=1, key="daskstraggle-unit-v0-w0-ab12cd-ef34", worker="w",
    ...                      compute_duration=0.2, transfer_duration=0.0,
    ...                      start_time=10.0, stop_time=10.2, nbytes=8)
    >>> record.compute_duration
    0.2
    """

    seq: int
    key: str
    worker: str
    compute_duration: float
    transfer_duration: float
    start_time: float
    stop_time: float
    nbytes: int

    @classmethod
    def from_tuple(cls, record: tuple[Any, ...] | list[Any]) -> TaskLatency:
        """Build a record from the plugin's tuple (a list after msgpack) of its fields."""
        return cls(**dict(zip((f.name for f in fields(cls)), record, strict=True)))


@dataclass(slots=True)
class _WorkerLog:
    """One worker's records and membership, as the plugin sees it."""

    records: deque[tuple[Any, ...]]
    n_records: int = 0
    initial: bool = False
    joined_time: float | None = None
    left_time: float | None = None


class LatencyPlugin(SchedulerPlugin):
    """Record the worker, compute and transfer spans of our tasks on the scheduler.

    A task is recorded when its key is a string starting with ``prefix`` and it goes from
    ``processing`` to ``memory``; the plugin also tracks the workers present, joined and
    left.

    Parameters
    ----------
    prefix : str, default="daskstraggle-unit-"
        Record tasks whose key is a string starting with this.
    maxlen : int, default=1000
        Records kept per worker (the newest).
    max_departed : int, default=100
        Departed workers remembered (with their records); older ones are forgotten.
    topic : str or None, default=None
        Also publish every record as a scheduler event on this topic.
    client : str or None, default=None
        Id of the client that owns this plugin: it is subscribed to ``topic`` when the
        plugin starts, and the plugin removes itself when that client leaves.

    See Also
    --------
    LatencyRecorder : Install the plugin from a client and read its records.
    dask_setup : Install it when the scheduler starts (preload).
    """

    name = PRELOAD_NAME

    def __init__(self, prefix: str = DEFAULT_PREFIX, *, maxlen: int = DEFAULT_MAXLEN,
                 max_departed: int = 100, topic: str | None = None,
                 client: str | None = None) -> None:
        # runs on the client (or in dask_setup), never after unpickling on the scheduler
        from daskstraggle._validation import check_int

        self.prefix = _check_name(prefix, "prefix", "LatencyPlugin")
        self.maxlen = check_int(maxlen, name="maxlen", caller="LatencyPlugin", low=1)
        self.max_departed = check_int(max_departed, name="max_departed",
                                      caller="LatencyPlugin", low=0)
        self.owner = client
        self.topics: dict[str, str | None] = {} if topic is None else {topic: client}
        self.seq = 0
        self._workers: dict[str, _WorkerLog] = {}
        self._departed: deque[str] = deque()
        self._scheduler: Any = None

    async def start(self, scheduler: Scheduler) -> None:
        """Learn the workers present now (``add_worker`` never fires for them)."""
        # no await in here: no worker can join between this and the plugin being added
        self._scheduler = scheduler
        for address in scheduler.workers:
            log = self._log(address)
            if log.joined_time is None:
                log.initial = True
        for topic, client in self.topics.items():
            if client is not None:
                scheduler.subscribe_topic(topic, client)

    def add_worker(self, scheduler: Scheduler, worker: str) -> None:
        """Note a worker that joined."""
        log = self._log(worker)
        if log.left_time is not None:  # the same address is back
            log.left_time = None
            with contextlib.suppress(ValueError):
                self._departed.remove(worker)
        log.joined_time = time()

    def remove_worker(
        self, scheduler: Scheduler, worker: str, *, stimulus_id: str, **kwargs: Any
    ) -> None:
        """Note a worker that left; forget the oldest departed beyond ``max_departed``."""
        log = self._workers.get(worker)
        if log is None or log.left_time is not None:
            return
        log.left_time = time()
        self._departed.append(worker)
        while len(self._departed) > self.max_departed:
            gone = self._departed.popleft()
            old = self._workers.get(gone)
            if old is not None and old.left_time is not None:
                del self._workers[gone]

    def transition(
        self, key: Any, start: str, finish: str, *args: Any, stimulus_id: str, **kwargs: Any
    ) -> None:
        """Record one of our tasks going from ``processing`` to ``memory``."""
        if (finish != "memory" or start != "processing" or not isinstance(key, str)
                or not key.startswith(self.prefix)):
            return
        worker = kwargs.get("worker")
        if not isinstance(worker, str):
            return
        compute = transfer = 0.0
        start_time = stop_time = float("nan")
        for span in kwargs.get("startstops") or ():
            action = span.get("action")
            if action == "compute":
                compute += span["stop"] - span["start"]
                if not span["start"] >= start_time:  # also true while start_time is nan
                    start_time = span["start"]
                if not span["stop"] <= stop_time:
                    stop_time = span["stop"]
            elif action == "transfer":
                transfer += span["stop"] - span["start"]
        self.seq += 1
        record = (self.seq, key, worker, compute, transfer, start_time, stop_time,
                  kwargs.get("nbytes", 0))
        log = self._log(worker)
        log.records.append(record)
        log.n_records += 1
        if self.topics and self._scheduler is not None:
            self._scheduler.log_event(list(self.topics), record)

    def remove_client(self, scheduler: Scheduler, client: str) -> None:
        """Stop publishing to a departed client; remove the plugin if it owned it."""
        for topic, owner in list(self.topics.items()):
            if owner == client:
                self.detach(topic)
        if self.owner is not None and self.owner == client:
            _remove_plugin(scheduler, self)

    def drain(self, after_seq: int) -> tuple[list[tuple[Any, ...]], int]:
        """Return the kept records numbered after ``after_seq`` (0: all), as tuples of
        :class:`TaskLatency`'s fields in increasing ``seq``, and the newest record's number
        ``seq``: numbers in ``(after_seq, seq]`` missing from them were dropped (``maxlen``
        or ``max_departed``)."""
        out: list[tuple[Any, ...]] = []
        for log in self._workers.values():
            for record in reversed(log.records):
                if record[0] <= after_seq:
                    break
                out.append(record)
        out.sort(key=itemgetter(0))
        return out, self.seq

    def workers(self) -> dict[str, Any]:
        """Return the workers seen: ``initial`` (sorted addresses present when the plugin
        started), ``current`` (sorted, present now), ``joined`` and ``left`` (address ->
        scheduler time of the event), ``n_records`` (address -> tasks recorded) and ``seq``
        (the newest record's number); departed workers beyond ``max_departed`` forgotten."""
        items = self._workers.items()
        return {
            "initial": sorted(a for a, log in items if log.initial),
            "current": sorted(a for a, log in items if log.left_time is None),
            "joined": {a: log.joined_time for a, log in items if log.joined_time is not None},
            "left": {a: log.left_time for a, log in items if log.left_time is not None},
            "n_records": {a: log.n_records for a, log in items},
            "seq": self.seq,
        }

    def attach(self, topic: str, client: str | None) -> int:
        """Publish every new record on ``topic``, subscribe ``client`` to it, and return the
        number of the newest record so far."""
        self.topics[topic] = client
        if client is not None and self._scheduler is not None:
            self._scheduler.subscribe_topic(topic, client)
        return self.seq

    def detach(self, topic: str) -> None:
        """Stop publishing on ``topic`` and drop the events the scheduler kept for it."""
        client = self.topics.pop(topic, None)
        scheduler = self._scheduler
        if scheduler is None:
            return
        if client is not None:
            scheduler.unsubscribe_topic(topic, client)
        broker = getattr(scheduler, "_broker", None)  # private: guard, it may move
        if broker is not None and hasattr(broker, "truncate"):
            broker.truncate(topic)

    def _log(self, worker: str) -> _WorkerLog:
        log = self._workers.get(worker)
        if log is None:
            log = self._workers[worker] = _WorkerLog(deque(maxlen=self.maxlen))
        return log


def dask_setup(scheduler: Scheduler) -> None:
    """Install the shared plugin :data:`PRELOAD_NAME` (default prefix and ``maxlen``),
    recording from the scheduler's start, when the scheduler starts with ``dask scheduler
    --preload daskstraggle.runtime.plugin``."""
    scheduler.add_plugin(LatencyPlugin(), name=PRELOAD_NAME, idempotent=True)


class WorkerPluginJanitor(SchedulerPlugin):
    """Unregister the worker plugin ``plugin``, then itself, when the client of id
    ``client`` that registered it leaves (a client killed mid-run cannot; its straggler
    injector would slow every later run on a shared cluster)."""

    def __init__(self, client: str, plugin: str) -> None:
        self.client = client
        self.plugin = plugin

    def remove_client(self, scheduler: Scheduler, client: str) -> None:
        """Remove the worker plugin and this janitor when their client leaves."""
        if client != self.client:
            return
        import asyncio

        if self.plugin in scheduler.worker_plugins:
            removal = _unregister(self.plugin, dask_scheduler=scheduler)
            asyncio.get_running_loop().create_task(removal)
        _remove_plugin(scheduler, self)


def _remove_plugin(scheduler: Scheduler, plugin: SchedulerPlugin) -> None:
    for name, installed in list(scheduler.plugins.items()):
        if installed is plugin:
            scheduler.remove_plugin(name)


def _check_name(value: Any, name: str, caller: str, *, none: bool = False) -> Any:
    """``value`` if it is a non-empty str (or None with ``none``), else InvalidParameterError."""
    if (value is None and none) or (isinstance(value, str) and value):
        return value
    from daskstraggle.errors import InvalidParameterError

    raise InvalidParameterError(
        f"The {name!r} parameter of {caller} must be a non-empty str"
        f"{' or None' if none else ''}. Got {value!r} instead."
    )


async def _unregister(name: str, *, dask_scheduler: Scheduler) -> None:
    """Unregister the worker plugin ``name`` from every worker (a no-op if it is not there);
    run on the scheduler."""
    with contextlib.suppress(ValueError):  # already removed
        try:
            await dask_scheduler.unregister_worker_plugin(None, name)
        except OSError:  # the broadcast met a worker that just left (CommClosedError): the
            # scheduler forgot the plugin, the live workers it missed may still hold it
            await dask_scheduler.broadcast(msg={"op": "plugin-remove", "name": name},
                                           on_error="ignore")


# --- functions run on the scheduler (travel by value) ----------------------------------


def _janitor(plugin: str, client: str | None, *, dask_scheduler: Scheduler) -> None:
    """Add the janitor of ``plugin`` for ``client``, or remove it (``client`` None)."""
    name = f"{JANITOR_PREFIX}{plugin}"
    if client is not None:
        dask_scheduler.add_plugin(WorkerPluginJanitor(client, plugin), name=name,
                                  idempotent=True)
    elif name in dask_scheduler.plugins:
        dask_scheduler.remove_plugin(name)


def guard_worker_plugin(client: Client, plugin: str) -> None:
    """Have the scheduler unregister the worker plugin named ``plugin`` if ``client`` (the
    one that registered it) leaves."""
    _ship_by_value()
    client.run_on_scheduler(_janitor, plugin, client.id)


def unguard_worker_plugin(client: Client, plugin: str) -> None:
    """Remove the guard of :func:`guard_worker_plugin` (the plugin was removed)."""
    _ship_by_value()
    client.run_on_scheduler(_janitor, plugin, None)


def _attach(name: str, topic: str | None, client: str, prefix: str, *,
            dask_scheduler: Scheduler) -> dict[str, Any]:
    plugin: Any = dask_scheduler.plugins.get(name)  # ours, perhaps of another version
    if plugin is None:
        return {"found": False}
    found_prefix = getattr(plugin, "prefix", None)
    if found_prefix != prefix or not hasattr(plugin, "drain"):
        return {"found": True, "prefix": found_prefix}
    seq = plugin.attach(topic, client) if topic is not None else plugin.seq
    return {"found": True, "prefix": found_prefix, "seq": seq}


def _ask(name: str, method: str, *args: Any, dask_scheduler: Scheduler) -> Any:
    """``method(*args)`` of the plugin called ``name`` (None: it is gone)."""
    plugin: Any = dask_scheduler.plugins.get(name)
    return None if plugin is None else getattr(plugin, method)(*args)


def _release(name: str, topic: str | None, owned: bool, *, dask_scheduler: Scheduler) -> None:
    plugin: Any = dask_scheduler.plugins.get(name)
    if plugin is None:
        return
    if topic is not None:
        plugin.detach(topic)
    if owned:
        dask_scheduler.remove_plugin(name)


def _ship_by_value() -> None:
    """Send this module's classes and functions to the scheduler by value."""
    import cloudpickle

    module = sys.modules[__name__]
    if __name__ not in cloudpickle.list_registry_pickle_by_value():
        cloudpickle.register_pickle_by_value(module)



class LatencyRecorder:
    """Install the latency plugin on a cluster and read its records from the client.

    Parameters
    ----------
    client : distributed.Client
        A synchronous client of the cluster.
    prefix : str, default="daskstraggle-unit-"
        Record tasks whose key starts with this.
    maxlen : int, default=1000
        Records kept per worker, on the scheduler and in :meth:`per_worker`.
    name : str or None, default=None
        Plugin to use: an installed plugin of that name (with the same ``prefix``), or a
        new one registered under it. By default, the preloaded plugin
        (:data:`PRELOAD_NAME`) when it records ``prefix``, else a new plugin with a
        unique name.
    push : bool, default=True
        The plugin pushes each record to this client as a scheduler event, sent before
        the task's result on the same ordered stream, so :meth:`poll` reads a local buffer
        (a gap in the record numbers is filled with one round trip); with False each
        :meth:`poll` asks the scheduler.

    Attributes
    ----------
    name : str
        Name of the plugin on the scheduler.
    owned : bool
        Whether this recorder registered the plugin (and removes it at :meth:`close`).
    n_lost : int
        Records dropped before :meth:`poll` returned them: the scheduler keeps ``maxlen``
        per worker, this recorder ``64 * maxlen`` unread ones.

    Raises
    ------
    StraggleError
        If the scheduler cannot load the plugin.
    InvalidParameterError
        If a parameter is out of range, or the plugin called ``name`` records another
        prefix.

    Notes
    -----
    A plugin registered by this recorder removes itself when the client disconnects (also
    on a reconnect): :meth:`workers` then raises, :meth:`poll` returns nothing more.

    Examples
    --------
    >>> with LatencyRecorder(client) as recorder:  # doctest: +SKIP
    ...     futures = client.map(work, parts, key=[f"daskstraggle-unit-{i}" for i in ...])
    ...     client.gather(futures)
    ...     for record in recorder.poll():
    ...         print(record.worker, record.compute_duration)
    """

    def __init__(self, client: Client, *, prefix: str = DEFAULT_PREFIX,
                 maxlen: int = DEFAULT_MAXLEN, name: str | None = None, push: bool = True) -> None:
        from daskstraggle._validation import check_bool, check_int
        from daskstraggle.errors import InvalidParameterError

        self.prefix = _check_name(prefix, "prefix", "LatencyRecorder")
        _check_name(name, "name", "LatencyRecorder", none=True)
        if getattr(client, "asynchronous", False):
            raise InvalidParameterError(
                "The 'client' parameter of LatencyRecorder must be a synchronous Client. "
                "Got an asynchronous one instead."
            )
        self.client = client
        self.maxlen = check_int(maxlen, name="maxlen", caller="LatencyRecorder", low=1)
        self.push = check_bool(push, name="push", caller="LatencyRecorder")
        self.n_lost = 0
        self.owned = False
        self._closed = False
        self._lock = threading.Lock()
        self._seq = 0
        self._topic = f"{PRELOAD_NAME}-{uuid.uuid4().hex[:12]}"
        self._inbox: deque[Any] = deque(maxlen=_BUFFER_FACTOR * self.maxlen)
        self._unread: deque[TaskLatency] = deque(maxlen=_BUFFER_FACTOR * self.maxlen)
        self._history: dict[str, deque[float]] = {}
        _ship_by_value()
        if self.push:  # the handler must exist before the first event arrives
            client.subscribe_topic(self._topic, self._on_event)
        try:
            self.name = self._install(name)
        except BaseException:
            if self.push:
                client.unsubscribe_topic(self._topic)
            raise

    def _install(self, name: str | None) -> str:
        from daskstraggle.errors import InvalidParameterError

        topic = self._topic if self.push else None
        wanted = PRELOAD_NAME if name is None else name
        try:
            found = self.client.run_on_scheduler(_attach, wanted, topic, self.client.id,
                                                 self.prefix)
            if "seq" in found:
                self._seq = found["seq"]
                return wanted
            if found["found"] and name is not None:
                raise InvalidParameterError(
                    f"The 'name' parameter of LatencyRecorder must be a free plugin name or "
                    f"that of a latency plugin recording prefix {self.prefix!r}. Got "
                    f"{name!r} instead, a plugin recording {found.get('prefix')!r}. Pass "
                    f"another name, or None for a new plugin."
                )
            own = self._topic if name is None else name
            plugin = LatencyPlugin(self.prefix, maxlen=self.maxlen, topic=topic,
                                   client=self.client.id)
            self.client.register_plugin(plugin, name=own)
        except (InvalidParameterError, OSError, TimeoutError):
            raise
        except Exception as err:
            from daskstraggle.errors import StraggleError

            raise StraggleError(
                f"The Dask scheduler could not load the latency plugin "
                f"({type(err).__name__}: {err}). Run the client and the scheduler with the "
                f"same Python and cloudpickle versions, or install daskstraggle on the "
                f"scheduler and start it with 'dask scheduler --preload "
                f"daskstraggle.runtime.plugin'; or run without it (DaskRuntime("
                f"record_latency=False))."
            ) from err
        self.owned = True
        return own

    def _on_event(self, event: tuple[float, Any]) -> None:
        # runs on the client's event loop thread: only append (atomic on a deque)
        if not self._closed:
            self._inbox.append(event[1])

    def _drain(self) -> tuple[list[Any], int]:
        answer = self.client.run_on_scheduler(_ask, self.name, "drain", self._seq)
        if answer is None:
            logger.warning("latency plugin %r is gone from the scheduler", self.name)
            return [], self._seq
        return answer

    def _pushed(self) -> tuple[list[tuple[Any, ...]], int]:
        """The pushed records not read yet, and the newest sequence number; a gap in the
        numbers (a record lost on the way) is filled from the scheduler."""
        pushed = []
        while self._inbox:
            record = self._inbox.popleft()
            if record[0] > self._seq:
                pushed.append(record)
        newest = pushed[-1][0] if pushed else self._seq
        if newest - self._seq == len(pushed):
            return pushed, newest
        drained, last = self._drain()
        merged = {r[0]: r for r in pushed}
        merged.update((r[0], r) for r in drained if r[0] > self._seq)
        return [merged[seq] for seq in sorted(merged)], max(newest, last)

    def _absorb(self) -> None:
        """Move new records from the scheduler or the push buffer into the unread list."""
        with self._lock:
            if self._closed:
                return
            records, newest = self._pushed() if self.push else self._drain()
            lost = newest - self._seq - len(records)
            if lost > 0:
                self.n_lost += lost
                logger.warning(
                    "%d latency records were dropped before they were read; poll more "
                    "often or raise maxlen (now %d)", lost, self.maxlen,
                )
            self._seq = max(self._seq, newest)
            for raw in records:
                record = TaskLatency.from_tuple(raw)
                if len(self._unread) == self._unread.maxlen:  # never polled: drop the oldest
                    self.n_lost += 1
                self._unread.append(record)
                history = self._history.get(record.worker)
                if history is None:
                    if len(self._history) >= _MAX_WORKERS:
                        del self._history[next(iter(self._history))]
                    history = self._history[record.worker] = deque(maxlen=self.maxlen)
                history.append(record.compute_duration)

    def poll(self) -> list[TaskLatency]:
        """Return the records of the tasks finished since the last call, in increasing
        ``seq`` (each record once)."""
        self._absorb()
        with self._lock:
            out = list(self._unread)
            self._unread.clear()
        return out

    def per_worker(self) -> dict[str, np.ndarray]:
        """Return each worker's last (at most ``maxlen``) compute durations in seconds, by
        address, oldest first (records not yet polled included; the next :meth:`poll`
        still returns them)."""
        import numpy as np

        self._absorb()
        with self._lock:
            return {w: np.fromiter(h, dtype=float, count=len(h))
                    for w, h in self._history.items()}

    def workers(self) -> dict[str, Any]:
        """Return :meth:`LatencyPlugin.workers` (one round trip)."""
        summary = self.client.run_on_scheduler(_ask, self.name, "workers")
        if summary is None:
            from daskstraggle.errors import StraggleError

            raise StraggleError(
                f"The latency plugin {self.name!r} is no longer installed on the scheduler "
                f"(closed, or its client disconnected). Create a new LatencyRecorder."
            )
        return summary

    def close(self) -> None:
        """Stop recording: unregister the plugin if this recorder installed it (safe to
        call again, and after the client closed)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._inbox.clear()
            self._unread.clear()
        if self.client.status != "running":
            return  # the plugin drops what a departed client owned
        if self.push:
            self.client.unsubscribe_topic(self._topic)
        self.client.run_on_scheduler(_release, self.name, self._topic if self.push else None,
                                     self.owned)

    def __enter__(self) -> LatencyRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "push" if self.push else "poll"
        return f"<LatencyRecorder {self.name!r} prefix={self.prefix!r} {state}>"
