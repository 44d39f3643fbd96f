"""The grouped options of :func:`~daskstraggle.solve`: where it runs, how it opens the data,
how it checkpoints and what it reports.

``solve`` takes a handful of objects instead of thirty keywords; the ``fit_*`` functions
keep every option as a flat keyword and build these groups. Each group is a frozen value
object; its fields are checked by ``solve`` once, before any cluster work, with the same
one-line errors as the flat keywords.

>>> from daskstraggle.options import Checkpoint, DataOptions, Report, RuntimeSpec
>>> RuntimeSpec("sim", n_workers=100, stragglers="gamma(mean=0.05, var=1e-4)").n_workers
100
>>> Checkpoint("run.ckpt", iterations=10).interval is None
True
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

__all__ = ["Checkpoint", "DataOptions", "Report", "RuntimeSpec"]


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
        A chunk absent from a Zarr store: refuse it, or read it as the fill value.
    storage_options : dict or None, default=None
        A URL's fsspec options (see ``docs/remote-stores.md``).
    genotype_dims : tuple of str or None, default=None
        ``X`` is a 2-D array of allele counts with these dimensions.
    qc : GenotypeQC, dict or None, default=None
        Genotypes only: the variants used (see :class:`~daskstraggle.GenotypeQC`); MAF and
        missingness are counted on the run's workers before the fit.
    """

    array: str | None = None
    n_partitions: int | None = None
    missing_chunks: str = "error"
    storage_options: dict[str, Any] | None = None
    genotype_dims: tuple[str, str] | None = None
    qc: Any = None


@dataclass(frozen=True, slots=True)
class RuntimeSpec:
    """Which runtime runs the fit, and the workers it starts or connects to.

    Parameters
    ----------
    name : str or None, default=None
        A registered runtime (:func:`daskstraggle.runtime.list_runtimes`): ``"dask"`` (a
        Dask cluster from ``client``, ``scheduler`` or ``n_workers``; with none of them the
        active client, else a LocalCluster started for the call), ``"local"`` (in process)
        or ``"sim"`` (in process, simulated time). None: chosen as Dask does
        (:func:`~daskstraggle.runtime.choice.choose_runtime`): the Dask runtime for a
        client, scheduler, workers or an option only it takes, else in process when the
        data fit comfortably in memory, else a LocalCluster.
    client : distributed.Client or None, default=None
        Cluster to run on.
    scheduler : str or None, default=None
        Scheduler address to connect to.
    n_workers : int or None, default=None
        Workers of the LocalCluster started, or of the in-process runtimes (None: the
        ``daskstraggle.workers`` setting, 4).
    min_workers : int or None, default=None
        With ``client`` or ``scheduler``: wait until the cluster has this many workers.
    stragglers : str, LatencyModel, Stragglers or None, default=None
        Slow workers down on purpose (injected on Dask, simulated with ``"sim"``); see
        :mod:`daskstraggle.latency.spec`.
    backup_after : float or None, default=None
        Dask and simulated runtimes: send a unit unanswered after this many times the
        median latency again to another worker.
    aggregation : {"flat", "tree"}, default="flat"
        Dask runtime: sum a round's results on the workers (``"tree"``) instead of at
        the client.
    """

    name: str | None = None
    client: Any = None
    scheduler: str | None = None
    n_workers: int | None = None
    min_workers: int | None = None
    stragglers: Any = None
    backup_after: float | None = None
    aggregation: str = "flat"


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """Where and how often ``solve`` writes its state, and what it resumes from.

    Parameters
    ----------
    path : str, path or None, default=None
        File written atomically at round boundaries (None: ``resume``'s file).
    interval : float or None, default=None
        Seconds between checkpoints (None: 60, unless ``iterations`` is given).
    iterations : int or None, default=None
        Also write one every this many iterations.
    resume : str, path or None, default=None
        Carry on from this checkpoint (same method, problem, workers and data);
        ``"replica"``: from the scheduler's replica.
    replica_divergence : float or None, default=None
        Keep a replica of the state on the Dask scheduler instead of a file, published
        again before the iterate drifts further than this from it (needs a scheduler
        address or a client; :mod:`daskstraggle.runtime.replica`).
    """

    path: str | os.PathLike[str] | None = None
    interval: float | None = None
    iterations: int | None = None
    resume: str | os.PathLike[str] | None = None
    replica_divergence: float | None = None


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

    reference: bool = False
    record_iterates: bool = False
