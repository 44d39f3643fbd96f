"""Reaching a cluster without hanging: the handshake probe, the client check, LocalCluster.

``distributed.Client(address, timeout=...)`` bounds neither the handshake (a server that
never answers, e.g. a dashboard's port, hangs it) nor its retries of a refused connection:
:func:`probe_scheduler` asks for the server's identity under one deadline first.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import sys
import time
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from daskstraggle._validation import check_int
from daskstraggle.errors import (
    ClusterConnectionError,
    DataNotFoundError,
    InvalidDataError,
    InvalidParameterError,
    InvalidTypeError,
    SchedulerLostError,
    StraggleWarning,
)

__all__ = [
    "MAX_LOCAL_WORKERS",
    "OWN_CLUSTER_CONFIG",
    "WORKER_PRELOAD",
    "ask_scheduler",
    "check_client",
    "connect",
    "probe_scheduler",
    "read_scheduler_file",
    "scheduler_lost",
    "scheduler_timeout",
    "start_local_cluster",
    "worker_addresses",
    "worker_identity",
    "worker_start_config",
    "worker_status",
]

def scheduler_timeout() -> float:
    """Seconds the scheduler may take to answer (``daskstraggle.timeouts.scheduler``)."""
    from daskstraggle import config

    return float(config.seconds("timeouts.scheduler"))

#: A LocalCluster with more single-threaded worker processes than this many per core gets a
#: warning.
WORKERS_PER_CORE_WARNING = 4

def _unreachable(address: str, timeout: float, why: str) -> ClusterConnectionError:
    return ClusterConnectionError(
        f"Could not reach the Dask scheduler at {address!r} within {timeout:g} s{why}. Check "
        "the address and that the scheduler runs, or omit it to start a local cluster."
    )


def default_client(client: Any) -> Any:
    """``client``, or ``distributed.get_client()`` for None."""
    if client is None:
        from distributed import get_client

        return get_client()
    return client


def check_client(client: Any) -> None:
    """Raise InvalidTypeError unless ``client`` is a ``distributed.Client`` (or None)."""
    from distributed import Client

    if client is None or isinstance(client, Client):
        return
    hint = (f" To connect to the scheduler at {client!r}, pass scheduler={client!r} "
            "(DaskRuntime: address=...; CLI: --scheduler)." if isinstance(client, str) else "")
    raise InvalidTypeError(
        f"The 'client' parameter must be a distributed.Client or None. Got a "
        f"{type(client).__name__} instead.{hint}"
    )


def probe_scheduler(address: str, *, timeout: float) -> None:
    """Check within ``timeout`` seconds that a Dask scheduler answers at ``address``; raise
    ClusterConnectionError if the connection is refused (at once) or not made in time, or
    the server does not answer the handshake as a Dask scheduler in time."""
    from distributed.comm.addressing import get_address_host_port, parse_address

    scheme, _ = parse_address(address)
    if scheme != "tcp":  # tls, inproc, ucx: leave them to distributed
        return
    deadline = time.monotonic() + timeout
    try:
        with socket.create_connection(get_address_host_port(address), timeout=timeout):
            pass
    except ConnectionRefusedError:
        raise _unreachable(address, timeout, ": the connection was refused (nothing listens "
                                             "on that port)") from None
    except OSError as err:
        raise _unreachable(address, timeout, f" ({type(err).__name__}: {err})") from None
    remaining = max(deadline - time.monotonic(), 0.5)
    with ThreadPoolExecutor(1) as pool:  # its own event loop, also under a running one
        reply = pool.submit(asyncio.run, _identity(address, remaining)).result()
    _check_identity(address, reply, timeout)


async def _identity(address: str, timeout: float) -> Any:
    """Return the server's identity reply, or the exception that prevented it."""
    from distributed.comm import connect

    async def ask() -> Any:
        comm = await connect(address, timeout=timeout)
        try:
            await comm.write({"op": "identity", "reply": True})
            return await comm.read()
        finally:
            comm.abort()

    try:
        return await asyncio.wait_for(ask(), timeout)
    except Exception as err:  # reported as "not a scheduler", whatever the server sent
        return err


def _check_identity(address: str, reply: Any, timeout: float) -> None:
    if isinstance(reply, dict) and reply.get("type") == "Scheduler":
        return
    check = ("Check the address and port: a scheduler listens on 8786 by default, its "
             "dashboard (HTTP) on 8787.")
    if isinstance(reply, asyncio.TimeoutError | TimeoutError):
        what = f"did not answer the Dask handshake within {timeout:g} s"
    elif isinstance(reply, BaseException):
        what = f"broke off the Dask handshake ({type(reply).__name__})"
    elif isinstance(reply, dict) and "type" in reply:
        what = f"is a Dask {reply['type']}, not the scheduler"
    else:
        what = "answered the Dask handshake with something else"
    raise ClusterConnectionError(
        f"The server at {address!r} {what}: it is not a Dask scheduler. {check}"
    )


def check_oversubscription(n_workers: int, *, processes: bool) -> None:
    """Warn when a LocalCluster would start far more worker processes than cores."""
    cores = os.cpu_count() or 1
    if processes and n_workers > WORKERS_PER_CORE_WARNING * cores:
        warnings.warn(
            f"Starting {n_workers} worker processes on {cores} CPU core(s): they only take "
            f"turns on the cores and each needs memory and start-up time; use at most "
            f"{WORKERS_PER_CORE_WARNING * cores} (--workers), or connect to a larger "
            "cluster (--scheduler).",
            StraggleWarning,
            stacklevel=5,
        )


@contextlib.contextmanager
def _sigint_blocked() -> Iterator[None]:
    """Block SIGINT in this thread meanwhile (threads and processes it starts inherit)."""
    if not hasattr(signal, "pthread_sigmask"):  # Windows: no signal masks
        yield
        return
    from multiprocessing import resource_tracker

    # started later from the cluster's loop thread, the tracker would *unblock* SIGINT
    # there afterwards (it blocks, spawns, then unblocks rather than restoring the mask)
    resource_tracker.ensure_running()
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


#: Modules the forkserver of a LocalCluster started here imports before it forks workers
#: (the second also loads the problems' numba kernels once: see its docstring).
WORKER_PRELOAD = ("distributed", "daskstraggle._worker_preload")

#: Prefixes of environment variables read when a library is imported (thread pools, numba,
#: the allocator, hashing): see :func:`read_at_import`.
_IMPORT_TIME_ENVIRON = ("OMP_", "MKL_", "OPENBLAS_", "BLIS_", "NUMEXPR_", "VECLIB_", "NUMBA_",
                        "PYTHON", "MALLOC_", "KMP_", "GOTO_")

#: Import-time variables libraries set when imported (scikit-learn): a worker sets them too,
#: so their appearing is passed on to forked workers, not a reason to spawn.
_SET_BY_IMPORTS = frozenset({"KMP_DUPLICATE_LIB_OK", "KMP_INIT_AT_FORK"})


def read_at_import(name: str) -> bool:
    """Whether the environment variable ``name`` is read when a library is imported, so a
    worker forked from a server started before it changed would not see the change."""
    return name.startswith(_IMPORT_TIME_ENVIRON) and name not in _SET_BY_IMPORTS


#: The environment our forkserver was configured with, None before (or without) it.
_server_environ: dict[str, str] | None = None


def _forkserver_running() -> bool:
    """Whether a forkserver already runs in this process (``multiprocessing``'s own)."""
    from multiprocessing import forkserver

    server = getattr(forkserver, "_forkserver", None)
    return getattr(server, "_forkserver_address", None) is not None


def nanny_environ() -> dict[str, str]:
    """Return the variables a Nanny sets (for good) in this process's environment before
    it starts a worker process, as it does: ``distributed.nanny.pre-spawn-environ``, values
    already in the environment winning, and ``PYTHONHASHSEED`` when it is unset or 0."""
    import dask

    config = dask.config.get("distributed.nanny.pre-spawn-environ", default={}) or {}
    environ = {k: os.environ.get(k, str(v)) for k, v in config.items() if v is not None}
    if environ.get("PYTHONHASHSEED") in (None, "0"):
        environ["PYTHONHASHSEED"] = "6640"  # the Nanny's choice
    return environ


def worker_start_config() -> tuple[dict[str, Any], dict[str, str]]:
    """Return the config that forks LocalCluster workers from our preloaded server (started
    with the first worker, shared by later clusters), and the environment variables to pass
    them (those changed since the server started); ``({}, {})`` (spawn as usual) off Linux,
    under another ``distributed.worker.multiprocessing-method``, when a forkserver not ours
    runs, or when a variable read at import time changed since ours started."""
    global _server_environ
    import dask
    from distributed.utils import get_mp_context  # (loads distributed's config too)

    key = "distributed.worker.multiprocessing-method"
    if not sys.platform.startswith("linux") or dask.config.get(key) != "spawn":
        return {}, {}
    if _server_environ is None:
        if _forkserver_running():
            return {}, {}
        with dask.config.set({key: "forkserver"}):
            context = get_mp_context()  # distributed sets its own preload list first
        context.set_forkserver_preload(list(WORKER_PRELOAD))
        # the server starts with the first worker, after the Nanny set its variables
        _server_environ = {**os.environ, **nanny_environ()}
    environ = {**os.environ, **nanny_environ()}  # what the Nanny starts workers with
    changed = {k: v for k, v in environ.items() if _server_environ.get(k) != v}
    removed = set(_server_environ) - set(environ)
    if removed or any(read_at_import(k) for k in changed):
        return {}, {}
    return {key: "forkserver"}, changed


def start_local_cluster(
    n_workers: int, *, threads_per_worker: int, processes: bool, config: dict[str, Any]
) -> tuple[Any, list[Any]]:
    """Start a LocalCluster whose workers ignore Ctrl-C and skip zarr's exit hook
    (:class:`~daskstraggle.runtime._quiet.QuietExit`), forked where
    :func:`worker_start_config` allows (spawned if that fails); return a client and what to
    close."""
    from distributed import Client

    from daskstraggle.runtime._quiet import QuietExit

    check_oversubscription(n_workers, processes=processes)
    cluster = None
    try:
        start, environ = worker_start_config() if processes else ({}, {})
        try:
            cluster = _local_cluster(n_workers, threads_per_worker, processes,
                                     {**config, **start}, environ)
        except (RuntimeError, OSError, TimeoutError):
            if not start:
                raise
            # forked workers did not start (the server could not): spawn them instead
            cluster = _local_cluster(n_workers, threads_per_worker, processes, config, {})
        client = Client(cluster, set_as_default=False)
        client.register_plugin(QuietExit())
    except BaseException as err:
        if cluster is not None:
            cluster.close()
        if not isinstance(err, RuntimeError | OSError | TimeoutError):
            raise
        cause = err.__cause__ or err
        script = unguarded_main()
        remedy = ("Check free memory and the process limit, or start fewer workers (CLI: "
                  "--workers)." if script is None else
                  f"{script} has no 'if __name__ == \"__main__\":' guard: each worker process "
                  "imports the script that starts it, so put the code that starts the "
                  "cluster (the fit) under that guard.")
        raise ClusterConnectionError(
            f"Could not start a LocalCluster of {n_workers} worker processes ("
            f"{type(cause).__name__}: {cause}); a worker process died while starting. "
            f"{remedy}"
        ) from err
    return client, [client, cluster]


def unguarded_main() -> str | None:
    """Return the path of the script being run when its source has no
    ``if __name__ == "__main__":`` guard (None for the CLI, a notebook, ``python -c`` or
    a guarded script): worker processes that import it start clusters of their own."""
    import re

    path = getattr(sys.modules.get("__main__"), "__file__", None)
    if not path or not str(path).endswith(".py"):
        return None
    try:
        with open(path, encoding="utf-8") as file:
            source = file.read()
    except (OSError, UnicodeDecodeError):
        return None
    guard = re.compile(r"""^\s*if\s+__name__\s*==\s*['"]__main__['"]\s*:""", re.M)
    return None if guard.search(source) else str(path)


def _local_cluster(n_workers: int, threads_per_worker: int, processes: bool,
                   config: dict[str, Any], environ: dict[str, str]) -> Any:
    """Start the LocalCluster under ``config``, its workers with ``environ`` set."""
    import dask
    from distributed import LocalCluster

    # the cluster's event loop thread starts the worker processes: both keep SIGINT
    # blocked; a Ctrl-C meanwhile is delivered to this thread once it unblocks
    with dask.config.set(config), _sigint_blocked():
        return LocalCluster(
            n_workers=n_workers,
            threads_per_worker=threads_per_worker,
            processes=processes,
            # any free port (never collide with another cluster), on this machine only
            dashboard_address="127.0.0.1:0",
            # worker logs would print tracebacks of errors the caller already reports
            # (e.g. NaN found while loading); the exception itself still propagates
            silence_logs=logging.CRITICAL,
            **({"env": environ} if environ else {}),
        )


def worker_addresses(client: Any) -> list[str]:
    """Return the sorted addresses of the cluster's workers, asked of the scheduler now
    (``Client.scheduler_info()`` is a cache the client's periodic update may empty)."""
    return sorted(worker_status(client))


def worker_status(client: Any) -> dict[str, str]:
    """Return each worker's status (``"running"``, ``"paused"``, ``"closing_gracefully"``
    while it retires, ...) by address: :func:`worker_identity`'s, raising as it does."""
    return {address: str(worker.get("status", "running"))
            for address, worker in worker_identity(client).items()}


def worker_identity(client: Any) -> dict[str, dict[str, Any]]:
    """Return what the scheduler knows of each worker now, by address (one round trip): its
    ``status``, ``nanny`` (the address of the nanny that restarts it, or None),
    ``memory_limit`` (bytes, 0: none), ``nthreads`` and ``metrics`` (``memory``: the
    process's bytes at its last heartbeat).

    Raises :func:`ask_scheduler`'s SchedulerLostError, and InvalidParameterError for an
    asynchronous ``client``.
    """
    if client.asynchronous:
        raise InvalidParameterError(
            "daskstraggle needs a synchronous distributed.Client (asynchronous=False)."
        )
    return dict(ask_scheduler(client, "identity", n_workers=-1)["workers"])


def ask_scheduler(client: Any, op: str, **kwargs: Any) -> Any:
    """Return the scheduler's answer to the RPC ``op`` (one round trip); raise
    :func:`scheduler_lost`'s SchedulerLostError if the client is closed (it gave up
    reconnecting) or the scheduler does not answer within :func:`scheduler_timeout` s."""
    if client.status in ("closing", "closed"):
        raise scheduler_lost(client, f"the client is {client.status}")
    try:
        return client.sync(getattr(client.scheduler, op), **kwargs,
                           callback_timeout=scheduler_timeout())
    except (OSError, TimeoutError) as err:
        raise scheduler_lost(client, f"{type(err).__name__}: {err}") from None


def scheduler_lost(client: Any, cause: str) -> SchedulerLostError:
    """Return the one-line error for a scheduler that stopped answering."""
    cause = " ".join(cause.split())  # one line, whatever the exception's text
    return SchedulerLostError(
        f"Lost the connection to the Dask scheduler at {_scheduler_address(client)!r} "
        f"({cause}); no result was written. Restart the scheduler (and workers) and run again."
    )


def _scheduler_address(client: Any) -> str:
    """The address of ``client``'s scheduler, also once the client closed and forgot it."""
    if client.scheduler is not None:
        return str(client.scheduler.address)
    cluster = getattr(client, "cluster", None)
    if cluster is not None:
        return str(cluster.scheduler_address)
    return str(client._start_arg)  # the address it was given (distributed keeps no other)


#: Most worker processes a LocalCluster started by this package may have.
MAX_LOCAL_WORKERS = 256

#: Config for clusters this package starts itself.
OWN_CLUSTER_CONFIG = {
    "distributed.scheduler.work-stealing": False,
    "distributed.scheduler.active-memory-manager.start": False,
}


#: Seconds a scheduler file that exists may take to hold an address (it is being written).
SCHEDULER_FILE_GRACE = 2.0


def read_scheduler_file(path: str | os.PathLike[str]) -> str:
    """Return the address in the scheduler file at ``path`` (as ``dask scheduler
    --scheduler-file PATH`` writes it), waiting for it up to the
    ``daskstraggle.timeouts.scheduler-file`` setting.

    Raises DataNotFoundError if the file's folder does not exist (at once) or the file does
    not appear in time; InvalidDataError if it holds no ``"address"``
    :data:`SCHEDULER_FILE_GRACE` seconds after it appeared.
    """
    from daskstraggle import config

    path = Path(path)
    name = f"The scheduler file (CLI: --scheduler-file) {str(path)!r}"
    if not path.parent.is_dir():
        raise DataNotFoundError(f"{name} is in a folder that does not exist; check the path.")
    limit = config.seconds("timeouts.scheduler-file")
    deadline, appeared = time.monotonic() + limit, None
    while True:
        address = _address_in(path)
        if address is not None:
            return address
        now = time.monotonic()
        if appeared is None and path.exists():
            appeared = now
        if appeared is not None and now - appeared > SCHEDULER_FILE_GRACE:
            raise InvalidDataError(
                f"{name} holds no scheduler address (a JSON object with \"address\", as "
                f"'dask scheduler --scheduler-file {path}' writes); check the path."
            )
        if appeared is None and now > deadline:
            raise DataNotFoundError(
                f"{name} did not appear within {limit:g} s (the daskstraggle.timeouts."
                f"scheduler-file setting); start the scheduler with 'dask scheduler "
                f"--scheduler-file {path}', or check the path."
            )
        time.sleep(0.1)


def _address_in(path: Path) -> str | None:
    """The ``"address"`` of the scheduler file at ``path``, None while it has none."""
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    address = info.get("address") if isinstance(info, dict) else None
    return address if isinstance(address, str) and address else None


def connect(client: Any = None, *, address: str | None = None,
            scheduler_file: str | os.PathLike[str] | None = None, n_workers: int | None = None,
            processes: bool = True, threads_per_worker: int = 1,
            timeout: float = 10.0) -> tuple[Any, list[Any]]:
    """Return a Client and the objects to close when done (what this call started).

    Parameters
    ----------
    client : distributed.Client or None, default=None
        Use this client (nothing to close).
    address : str or None, default=None
        Connect to the scheduler at this address (``tcp://host:port``).
    scheduler_file : path or None, default=None
        Connect to the scheduler whose address this file holds
        (:func:`read_scheduler_file`).
    n_workers : int or None, default=None
        Start a LocalCluster with this many workers (default 4) when none of ``client``,
        ``address`` and ``scheduler_file`` is given.
    processes : bool, default=True
        LocalCluster workers are processes (True) or threads.
    threads_per_worker : int, default=1
        Threads of each LocalCluster worker.
    timeout : float, default=10.0
        Seconds to wait for the scheduler at ``address`` and for workers.

    Raises
    ------
    ClusterConnectionError
        If the scheduler at ``address`` cannot be reached in time, refuses the connection
        (raised at once) or does not answer the handshake as a Dask scheduler in time.
    InvalidParameterError
        If more than one of ``client``, ``address``, ``scheduler_file`` and ``n_workers``
        is given.
    DataNotFoundError, InvalidDataError
        If ``scheduler_file`` does not appear in time or holds no address.
    InvalidTypeError
        If ``client`` is not a ``distributed.Client`` (e.g. an address string).

    Warns
    -----
    StraggleWarning
        If a LocalCluster would start more than 4 worker processes per CPU core.
    """
    from distributed import Client

    given = [name for name, v in (("client", client), ("address", address),
                                  ("scheduler_file", scheduler_file),
                                  ("n_workers", n_workers)) if v is not None]
    if len(given) > 1:
        raise InvalidParameterError(
            f"Pass only one of client, address (CLI: --scheduler), scheduler_file (CLI: "
            f"--scheduler-file) and n_workers (CLI: --workers); got {', '.join(given)}."
        )
    check_client(client)
    if client is not None:
        return client, []
    if scheduler_file is not None:
        address = read_scheduler_file(scheduler_file)
    if address is not None:
        from distributed.comm.addressing import get_address_host_port

        try:  # check before building a Client: a half-built one hangs in __del__
            valid = isinstance(address, str) and bool(get_address_host_port(address.strip()))
        except ValueError:
            valid = False
        if not valid:
            raise InvalidParameterError(
                f"The scheduler address (CLI: --scheduler) must look like "
                f"'tcp://127.0.0.1:8786'. Got {address!r} instead."
            )
        probe_scheduler(address, timeout=timeout)  # see the module docstring
        try:
            client = Client(address, timeout=timeout, set_as_default=False)
        except (OSError, TimeoutError, ValueError) as err:
            raise _unreachable(address, timeout, f" ({type(err).__name__})") from err
        return client, [client]
    from daskstraggle import config

    n = check_int(config.workers() if n_workers is None else n_workers, name="n_workers",
                  caller="connect", low=1, high=MAX_LOCAL_WORKERS)
    return start_local_cluster(n, threads_per_worker=threads_per_worker, processes=processes,
                               config=OWN_CLUSTER_CONFIG)
