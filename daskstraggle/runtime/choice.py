"""Which runtime a fit runs on: the one asked for, else Dask's convention
(:func:`choose_runtime`, taken by the ``fit_*`` functions and ``solve``)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from daskstraggle._resources import available_memory
from daskstraggle.runtime.base import Runtime, get_runtime_class

__all__ = ["IN_PROCESS_MEMORY_FRACTION", "RuntimeChoice", "active_client",
           "available_memory", "choose_runtime"]

#: Without a runtime, client, scheduler or workers asked for, a fit runs in this process
#: when the data it holds (rows x bytes per row of the storage the runtime keeps: 1 byte a
#: call for int8 genotypes, 1/4 for packed ones, 8 a value for float64) take at most this
#: fraction of the memory available, leaving the rest to the method's own arrays (a Gram
#: matrix, Krylov blocks) and to other programs.
IN_PROCESS_MEMORY_FRACTION = 0.25

#: The runtime chosen for data that fit, and the one for everything else.
_IN_PROCESS, _CLUSTER = "local", "dask"


@dataclass(frozen=True, slots=True)
class RuntimeChoice:
    """The runtime a fit runs on, the client it runs on, and why.

    Parameters
    ----------
    runtime : Runtime, str or None
        The runtime given, or the registered name chosen; None: not decided until the
        data's size is known (:func:`choose_runtime` without ``data_bytes``).
    client : distributed.Client or None, default=None
        The client the run uses: the one given, else the active one for a cluster runtime
        (None: a LocalCluster is started, or the run is in process).
    reason : str or None, default=None
        Why, when the caller named no runtime, e.g. ``"default: data fit in memory (1.2 MB
        of 20 GB available), no client"``; None when the runtime was given.
    """

    runtime: Runtime | str | None
    client: Any = None
    reason: str | None = None


def choose_runtime(runtime: Runtime | str | None, *, client: Any = None,
                   scheduler: str | None = None, scheduler_file: Any = None,
                   n_workers: int | None = None, min_workers: int | None = None,
                   stragglers: Any = None, backup_after: float | None = None,
                   aggregation: str = "flat", data_bytes: int | None = None,
                   available: int | None = None) -> RuntimeChoice:
    """Return the runtime a fit runs on, its client, and why (the one rule of the default).

    Parameters
    ----------
    runtime : Runtime, str or None
        Given: it runs (a cluster runtime by name, without ``client``, ``scheduler`` or
        ``n_workers``, on the active client if there is one). None: chosen, in this order:
        the Dask runtime for a ``client`` or ``scheduler`` given, or for ``n_workers``
        (a LocalCluster of that many processes); the Dask runtime on the active
        ``distributed`` client (:func:`active_client`); the Dask runtime (a LocalCluster)
        for an option the in-process runtime does not take (``stragglers``,
        ``backup_after``, ``aggregation="tree"``, ``min_workers``); the in-process
        runtime ``"local"`` when ``data_bytes`` is at most
        :data:`IN_PROCESS_MEMORY_FRACTION` of ``available``; else a LocalCluster.
    client, scheduler, scheduler_file, n_workers, min_workers, backup_after, aggregation
        The run's options of those names, as given (:class:`~daskstraggle.options.RuntimeSpec`).
    stragglers : Stragglers or None, default=None
        The parsed stragglers spec (empty or None: none).
    data_bytes : int or None, default=None
        What the run holds in memory (:attr:`Matrix.row_nbytes` times the rows). None:
        unknown yet; when only the data would decide, the choice's ``runtime`` is None.
    available : int or None, default=None
        Bytes of memory available (None: :func:`available_memory`).

    Returns
    -------
    choice : RuntimeChoice

    Raises
    ------
    InvalidParameterError
        If ``runtime`` is a name no runtime is registered under (the message lists them).

    Examples
    --------
    >>> choose_runtime(None, data_bytes=10**6, available=10**9).runtime
    'local'
    >>> choose_runtime(None, data_bytes=10**9, available=10**9).reason
    'default: data larger than 1/4 of the memory available (1.0 GB of 1.0 GB): a LocalCluster'
    >>> choose_runtime(None, n_workers=2).reason
    'default: n_workers given (CLI: --workers): a LocalCluster'
    """
    if runtime is not None:
        asks_cluster = (not isinstance(runtime, Runtime)
                        and not get_runtime_class(runtime).in_process)
        if asks_cluster and (client, scheduler, scheduler_file, n_workers) == (None,) * 4:
            client = active_client()
        return RuntimeChoice(runtime, client)
    if (client, scheduler, scheduler_file) != (None, None, None):
        which = ("client" if client is not None else "scheduler" if scheduler is not None
                 else "scheduler file")
        return RuntimeChoice(_CLUSTER, client, f"default: the {which} given")
    if n_workers is not None:
        return RuntimeChoice(_CLUSTER, None,
                             "default: n_workers given (CLI: --workers): a LocalCluster")
    active = active_client()
    if active is not None:
        return RuntimeChoice(_CLUSTER, active, "default: the active distributed client")
    needs = _cluster_option(min_workers=min_workers, stragglers=stragglers,
                            backup_after=backup_after, aggregation=aggregation)
    if needs is not None:
        return RuntimeChoice(_CLUSTER, None,
                             f"default: {needs} needs worker processes: a LocalCluster")
    return _by_size(data_bytes, available)


def _by_size(data_bytes: int | None, available: int | None) -> RuntimeChoice:
    """The default when nothing asked for a cluster (runtime None: size unknown)."""
    if data_bytes is None:
        return RuntimeChoice(None)
    free = available_memory() if available is None else available
    sizes = f"{_size(data_bytes)} of {_size(free)}"
    if data_bytes <= IN_PROCESS_MEMORY_FRACTION * free:
        return RuntimeChoice(_IN_PROCESS, None,
                             f"default: data fit in memory ({sizes} available), no client")
    return RuntimeChoice(_CLUSTER, None, f"default: data larger than 1/"
                         f"{round(1 / IN_PROCESS_MEMORY_FRACTION)} of the memory available "
                         f"({sizes}): a LocalCluster")


def _cluster_option(*, min_workers: int | None, stragglers: Any, backup_after: float | None,
                    aggregation: str) -> str | None:
    """The first option given that the in-process runtime refuses (None: none)."""
    local = get_runtime_class(_IN_PROCESS)
    refused = {
        "min_workers": min_workers is not None,
        "stragglers": bool(stragglers) and local.latency_kind == "none",
        "backup_after": backup_after is not None and not local.backups,
        "aggregation='tree'": aggregation == "tree" and not local.aggregates,
    }
    return next((name for name, given in refused.items() if given), None)


def active_client() -> Any:
    """Return the active (default) ``distributed`` client, or None when there is none (or
    ``distributed`` was never imported: checking must not cost its import)."""

    if "distributed" not in sys.modules:
        return None
    from distributed import default_client

    try:
        return default_client()
    except ValueError:  # no client
        return None


def _size(n_bytes: float) -> str:
    """``n_bytes`` in words (``"1.2 MB"``, ``"20 GB"``)."""
    for unit in ("B", "kB", "MB", "GB"):
        if n_bytes < 999.5:
            return f"{n_bytes:.1f} {unit}" if n_bytes < 9.95 else f"{n_bytes:.0f} {unit}"
        n_bytes /= 1000
    return f"{n_bytes:.0f} TB"
