"""Whole-process throttle: slow chosen Dask workers down for *any* workload (peer libraries
included), by stopping and resuming their processes: :class:`ProcessThrottle`."""

from __future__ import annotations

import atexit
import contextlib
import logging
import math
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any

from daskstraggle._validation import _real, check_addresses
from daskstraggle.errors import InvalidParameterError, StraggleError
from daskstraggle.runtime import _throttler
from daskstraggle.runtime._connect import default_client, worker_identity
from daskstraggle.runtime._throttler import _state as _process_state
from daskstraggle.runtime._throttler import _unlink

__all__ = ["ProcessThrottle", "ThrottleError"]

logger = logging.getLogger(__name__)

_CALLER = "ProcessThrottle"

#: Throttler scripts started in this process (a nanny or a worker): token -> (Popen, pid,
#: lease file).
_LIVE: dict[str, tuple[subprocess.Popen[bytes], int, str]] = {}
_LIVE_LOCK = threading.Lock()


class ThrottleError(StraggleError, RuntimeError):
    """A throttle could not be started, or a worker could not be confirmed running."""


def _resume_and_check(pid: int, *, attempts: int = 20) -> str | None:
    """Send SIGCONT to ``pid`` until /proc no longer shows it stopped; return its state."""
    state: str | None = "?"
    for _ in range(attempts):
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            return None
        except PermissionError:
            return "?"
        state = _process_state(pid)
        if state not in ("T", "t"):
            return state
        time.sleep(0.01)
    return state


def _identity(dask_worker: Any = None) -> tuple[str, int]:
    """Return ``(hostname, pid)`` of the process this runs in."""
    return socket.gethostname(), os.getpid()


def _spawn(token: str, factor: float, period: float, lease: float,
           dask_worker: Any = None) -> dict[str, Any]:
    """Start the throttler script (runs on the nanny, or on the worker without one)."""
    from distributed import Nanny

    pid = dask_worker.pid if isinstance(dask_worker, Nanny) else os.getpid()
    if not pid:
        raise ThrottleError("The nanny has no running worker process to throttle.")
    fd, lease_file = tempfile.mkstemp(prefix=f"daskstraggle-lease-{token}-")
    os.close(fd)
    # -I: isolated (no script directory on sys.path, no user site): the script needs only
    # the standard library, so it starts in milliseconds
    proc = subprocess.Popen(
        [sys.executable, "-I", os.path.abspath(_throttler.__file__), "--pid", str(pid),
         "--factor", repr(factor), "--period", repr(period), "--lease-file", lease_file,
         "--lease", repr(lease)],
        stdin=subprocess.DEVNULL, close_fds=True,
    )
    with _LIVE_LOCK:
        _LIVE[token] = (proc, int(pid), lease_file)
    return {"host": socket.gethostname(), "pid": int(pid), "throttler_pid": proc.pid,
            "lease_file": lease_file}


def _renew(tokens: list[str], dask_worker: Any = None) -> None:
    """Touch the lease files of the throttlers ``tokens`` living here that still run."""
    with _LIVE_LOCK:
        entries = [_LIVE[t] for t in tokens if t in _LIVE]
    for proc, _pid, lease_file in entries:
        if proc.poll() is None:  # poll also reaps an exited script
            with contextlib.suppress(OSError):
                os.utime(lease_file)


def _release(token: str, pid: int, dask_worker: Any = None) -> str | None:
    """End the throttler ``token``, resume ``pid`` and return its state (None: gone)."""
    with _LIVE_LOCK:
        entry = _LIVE.pop(token, None)
    if entry is not None:
        proc, pid, lease_file = entry
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        _unlink(lease_file)
    return _resume_and_check(pid)


#: Seconds ``stop`` waits for the Dask call that releases a throttler on another host, and
#: for the clean-up call after a release on this host by signals.
_RELEASE_TIMEOUT = 10.0
_LOCAL_RELEASE_TIMEOUT = 2.0


def _release_locally(throttler_pid: int, pid: int) -> None:
    """Release a throttler on this host without Dask (client gone): signal, then resume."""
    with contextlib.suppress(OSError):
        os.kill(throttler_pid, signal.SIGTERM)
    deadline = time.monotonic() + _LOCAL_RELEASE_TIMEOUT
    while time.monotonic() < deadline and _process_state(throttler_pid) not in (None, "Z", "?"):
        time.sleep(0.01)
    _resume_and_check(pid)


def _check_number(value: Any, name: str, *, seconds: bool = True) -> float:
    """``value`` as a finite float: seconds > 0 (or a duration string such as ``"50ms"``)
    with ``seconds``, else a factor >= 1."""
    if isinstance(value, str) and seconds:
        from dask.utils import parse_timedelta

        try:
            value = parse_timedelta(value)
        except (ValueError, KeyError) as err:
            raise InvalidParameterError(
                f"The {name!r} parameter of {_CALLER} must be seconds or a duration like "
                f"'50ms'. Got {value!r} instead."
            ) from err
    if seconds:
        return _real(value, lambda x: 0 < x < math.inf, name, _CALLER, "a number of seconds > 0")
    return _real(value, lambda x: 1 <= x < math.inf, name, _CALLER, "a number >= 1")


@dataclass(slots=True)
class _Target:
    worker: str
    via_nanny: bool
    token: str
    host: str = ""
    pid: int = 0
    throttler_pid: int = 0



class ProcessThrottle:
    """Slow chosen workers down by stopping and resuming their processes.

    With factor ``f`` and period ``P`` a worker runs ``P/f`` seconds, then is stopped
    (``SIGSTOP``) for ``P(1 - 1/f)``, so every task it runs takes about ``f`` times as
    long. A standard-library script (:mod:`daskstraggle.runtime._throttler`) does it on the
    worker's host, started by its nanny (never stopped), else by the worker; it resumes the
    worker whenever it ends, also when its *lease* expires: the client renews the leases
    every ``lease / 4`` s, so a dead client's workers are released within ``lease`` s.

    Parameters
    ----------
    client : distributed.Client or None
        Client of the cluster (None: ``distributed.get_client()``).
    workers : str or sequence of str
        Addresses of the workers to throttle.
    factor : float
        Slow-down factor (>= 1; 1 leaves the workers alone).
    period : float or str, default=0.05
        Seconds of one run/stop cycle (or a duration such as ``"50ms"``).
    lease : float or str, default=10.0
        Seconds after which a throttle whose client stopped renewing it (a crashed or
        killed client) releases its worker by itself.

    Raises
    ------
    InvalidParameterError
        If a parameter is invalid, a worker is unknown, or a worker runs in this client's
        or the scheduler's process (thread-based workers); nothing is started then.

    Notes
    -----
    POSIX only; checking that a worker runs again reads ``/proc`` (Linux), elsewhere the
    signals are trusted. The whole process stops (event loop, heartbeats, transfers, as
    with a real straggler): keep ``period`` short next to Dask's timeouts (the default
    is). Periods below ~10 ms get inaccurate, and with fewer cores than busy processes
    the slow-down exceeds ``factor`` somewhat. Only ``SIGKILL`` of the script can leave a
    worker stopped; :meth:`stop` resumes it anyway.

    See Also
    --------
    daskstraggle.runtime.inject.StragglerInjector : Injected delays in our own tasks.

    Examples
    --------
    >>> with ProcessThrottle(client, [worker], factor=4):  # doctest: +SKIP
    ...     client.submit(work, workers=[worker]).result()  # about 4x slower
    """

    def __init__(self, client: Any, workers: str | Any, factor: float, *,
                 period: float | str = 0.05, lease: float | str = 10.0) -> None:
        self.factor = _check_number(factor, "factor", seconds=False)
        self.period = _check_number(period, "period")
        self.lease = _check_number(lease, "lease")
        if self.lease < 2 * self.period:
            raise InvalidParameterError(
                f"The 'lease' parameter of {_CALLER} must be at least twice the period "
                f"({2 * self.period:g} s). Got {lease!r} instead."
            )
        self.workers = check_addresses(workers, name="workers", caller=_CALLER,
                                       constraint="a worker address or a non-empty list of them")
        self.client = client = default_client(client)
        info = worker_identity(client)
        unknown = [w for w in self.workers if w not in info]
        if unknown:
            raise InvalidParameterError(
                f"The 'workers' parameter of {_CALLER} must list addresses of workers of "
                f"this cluster. Got unknown {unknown!r}; known workers are {sorted(info)}."
            )
        ids = client.run(_identity, workers=list(self.workers))
        here = _identity()
        scheduler = client.run_on_scheduler(_identity)
        for w in self.workers:
            where = tuple(ids[w])
            if where in (here, tuple(scheduler)):
                whose = "this client's" if where == here else "the scheduler's"
                raise InvalidParameterError(
                    f"The 'workers' parameter of {_CALLER} must name workers that run in "
                    f"their own processes. Got {w!r}, which runs in {whose} process (a "
                    "thread-based cluster such as LocalCluster(processes=False)); stopping "
                    "it would stop that process too. Use process workers (processes=True)."
                )
        token = uuid.uuid4().hex[:10]
        self._targets = [_Target(worker=w, via_nanny=info[w].get("nanny") is not None,
                                 token=f"{token}-{i}") for i, w in enumerate(self.workers)]
        self._active = False
        self._stop_event = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def active(self) -> bool:
        """Whether the throttle is running (between :meth:`start` and :meth:`stop`)."""
        return self._active

    @property
    def throttlers(self) -> list[dict[str, Any]]:
        """Per target worker: address, nanny used, host, worker pid, throttler pid."""
        return [{k: v for k, v in asdict(t).items() if k != "token"} for t in self._targets]

    def start(self) -> ProcessThrottle:
        """Start throttling the workers (no-op when already active) and return ``self``;
        raise ThrottleError if a throttler could not be started (those already started
        are stopped)."""
        with self._lock:
            if self._active:
                return self
            self._active = True
            self._stop_event.clear()
            atexit.register(self.stop)
        if self.factor == 1:
            return self
        try:
            for target in self._targets:
                result = self.client.run(_spawn, target.token, self.factor, self.period,
                                         self.lease, nanny=target.via_nanny,
                                         workers=[target.worker])
                if target.worker not in result:
                    raise ThrottleError(
                        f"Could not start the throttle on worker {target.worker!r}: it (or its "
                        "nanny) did not answer."
                    )
                started = result[target.worker]
                target.host, target.pid, target.throttler_pid = (
                    started[k] for k in ("host", "pid", "throttler_pid"))
            self._thread = threading.Thread(target=self._renew_loop, daemon=True,
                                            name="daskstraggle-throttle-lease")
            self._thread.start()
        except BaseException:
            self.stop()
            raise
        logger.info("throttling %s by a factor %g (period %g s)", list(self.workers),
                    self.factor, self.period)
        return self

    def _renew_loop(self) -> None:
        interval = self.lease / 4
        groups = {via: [t for t in self._targets if t.via_nanny == via and t.throttler_pid]
                  for via in (True, False)}
        while not self._stop_event.wait(interval):
            if self.client.status in ("closing", "closed"):
                logger.warning("throttle lease not renewed: the client is closed; the "
                               "workers are released within %g s", self.lease)
                return
            for via, targets in groups.items():
                if not targets:
                    continue
                try:
                    self.client.run(_renew, [t.token for t in targets], nanny=via,
                                    workers=[t.worker for t in targets], on_error="return")
                except Exception as err:  # keep renewing; the lease covers a lost client
                    if not self._stop_event.is_set():
                        logger.warning("renewing the throttle lease failed: %s", err)

    def stop(self) -> None:
        """Stop throttling, resume every target worker and check that none is stopped
        (idempotent); raise ThrottleError if a worker could not be confirmed running (it
        was resumed as far as possible)."""
        with self._lock:
            if not self._active:
                return
            self._active = False
            self._stop_event.set()
            atexit.unregister(self.stop)
        here = socket.gethostname()
        stuck = []
        for target in self._targets:
            if not target.pid:
                continue  # never started there
            local = target.host == here
            if local:
                # signals first: the worker runs again even if the Dask call below stalls
                _release_locally(target.throttler_pid, target.pid)
            try:
                # on the worker's side: reap the throttler, drop its entry and lease
                state = self.client.run(
                    _release, target.token, target.pid, nanny=target.via_nanny,
                    workers=[target.worker], on_error="return",
                    callback_timeout=_LOCAL_RELEASE_TIMEOUT if local else _RELEASE_TIMEOUT,
                ).get(target.worker, "?")
                if isinstance(state, BaseException):
                    raise state
            except Exception as err:
                state = "?"
                if not local:
                    logger.warning("could not release the throttle of %s through Dask: %s",
                                   target.worker, err)
            if local:
                state = _resume_and_check(target.pid)
            if state in ("T", "t"):
                stuck.append(target.worker)
            elif state == "?":
                logger.warning("could not confirm that worker %s runs again; its throttle "
                               "ends by itself within %g s", target.worker, self.lease)
        if self._thread is not None:
            self._thread.join(timeout=1.0)  # a daemon: never hold up the caller for long
            self._thread = None
        if stuck:
            raise ThrottleError(
                f"Workers {stuck} still appear stopped after the throttle ended; resume them "
                "with `kill -CONT <pid>` on their hosts."
            )
        logger.info("throttle of %s stopped", list(self.workers))

    def __enter__(self) -> ProcessThrottle:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return (f"ProcessThrottle(workers={list(self.workers)!r}, factor={self.factor:g}, "
                f"period={self.period:g}, lease={self.lease:g}, active={self._active})")
