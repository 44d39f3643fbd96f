"""A replica of the run's state off the client, kept within a divergence bound (MLfabric).

The coordinator (this client) is a run's single point of failure: its state (iterate,
momentum, caches, trace) lives in this process, and a file checkpoint lives on this
machine's disk, which a cloud client may not keep. With ``replica_divergence=D`` the run
publishes its state, as the bytes of a checkpoint, to the Dask *scheduler*
(``Client.publish_dataset``) under a name derived from the run's inputs
(:func:`replica_name`), refreshed whenever the iterate would drift further than ``D``
from the published one (:class:`~daskstraggle.engine.checkpoint.CheckpointSchedule`'s
divergence rule, the engine's decision). A published dataset outlives the client that
published it, so after the client is killed, the same command with ``--resume replica``
(API ``resume="replica"``) on the same scheduler carries on from it: exact methods end on
the iterates of a run that was never interrupted, having redone at most the rounds since
the last refresh. A run that ends normally removes its replica.

The replica is held in the scheduler's memory (one pickled state: the iterate, and for
SAG/DSAG the cache of one result per worker); it dies with the scheduler, as the workers'
data do. Only a cluster that outlives the client keeps it: a ``scheduler=`` address or a
``client=`` of another process's cluster.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Any

from daskstraggle.engine.checkpoint import CheckpointSchedule
from daskstraggle.errors import DataNotFoundError, SchedulerLostError
from daskstraggle.runtime.checkpoint import dump_state, load_state

__all__ = ["Replica", "load_replica", "remove_replica", "replica_name"]

#: The value of ``resume`` (CLI ``--resume``) that resumes from the scheduler's replica.
RESUME_FROM_REPLICA = "replica"


def replica_name(problem: str, sources: list[str]) -> str:
    """Return the name a run's replica is published under on the scheduler.

    Parameters
    ----------
    problem : str
        The problem's name (``"pca"``, ``"logistic"``, ...).
    sources : list of str
        The run's input stores (their paths or URLs; empty for arrays in memory).

    Returns
    -------
    name : str
        ``"daskstraggle-replica-<problem>-<12 hex digits of the sources' hash>"``: the
        same command names the same replica.

    Examples
    --------
    >>> replica_name("pca", ["/data/a.vcz"]) == replica_name("pca", ["/data/a.vcz"])
    True
    >>> replica_name("pca", []).startswith("daskstraggle-replica-pca-")
    True
    """
    digest = hashlib.sha256("\n".join(sorted(sources)).encode()).hexdigest()[:12]
    return f"daskstraggle-replica-{problem}-{digest}"


@dataclass
class Replica:
    """Publishes a run's state to the scheduler when the divergence rule says so.

    The writer of a run's state, as :class:`~daskstraggle.runtime.checkpoint.Checkpointer`
    is for a file (``run_on(runtime, ..., checkpoint=...)`` takes either).

    Parameters
    ----------
    client : distributed.Client
        The run's client.
    name : str
        The dataset name (:func:`replica_name`).
    divergence : float
        The bound ``D`` on the iterate's distance from the published one.

    Attributes
    ----------
    schedule : CheckpointSchedule
        The divergence rule (no time or round schedule).
    written : int or None
        Iteration (trace rows) of the last state published, None if none.
    n_written : int
        States published by this run.
    seconds : float
        Time spent pickling and publishing them.
    bytes : int
        Size of the last state published.
    history : list of int
        The iteration of every state published, in order (what a lost client would
        resume from at each round: the work it costs is the rounds since).
    """

    client: Any
    name: str
    divergence: float
    schedule: CheckpointSchedule = field(init=False)
    written: int | None = field(default=None, init=False)
    n_written: int = field(default=0, init=False)
    seconds: float = field(default=0.0, init=False)
    bytes: int = field(default=0, init=False)
    history: list[int] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        self.schedule = CheckpointSchedule(divergence=self.divergence)  # checks the bound

    @property
    def path(self) -> str:
        """Where the state goes, as the error naming the last checkpoint shows it."""
        return RESUME_FROM_REPLICA

    def write(self, state: dict[str, Any], *, iteration: int, now: float | None = None) -> None:
        """Publish ``state`` over the previous replica (``now``: as for a Checkpointer)."""
        t0 = time.perf_counter()
        data = dump_state(state)
        try:  # a scheduler RPC: bounded by distributed's comm timeouts
            self.client.publish_dataset(override=True, **{self.name: data})
        except (OSError, TimeoutError) as err:  # CommClosedError is an OSError
            raise SchedulerLostError(
                f"The scheduler stopped answering while the replica {self.name!r} was "
                f"published ({type(err).__name__}); the replica was in its memory, so start "
                "the run again."
            ) from None
        self.written = iteration
        self.n_written += 1
        self.history.append(iteration)
        self.bytes = len(data)
        self.seconds += time.perf_counter() - t0
        if now is not None:
            self.schedule.start(iteration, now)

    def remove(self) -> None:
        """Unpublish the replica (a run that ended normally needs none)."""
        remove_replica(self.client, self.name)

    def describe(self) -> dict[str, Any]:
        """The settings and last write, for ``Result.attrs["replica"]``."""
        return {"name": self.name, "divergence": self.divergence,
                "last_iteration": self.written, "n_written": self.n_written,
                "write_seconds": self.seconds, "bytes": self.bytes,
                "history": list(self.history)}


def remove_replica(client: Any, name: str) -> None:
    """Unpublish the replica ``name`` from the client's scheduler, if it holds one."""
    if name in client.list_datasets():
        client.unpublish_dataset(name)


def load_replica(client: Any, name: str) -> dict[str, Any]:
    """Return the run state published under ``name`` on the client's scheduler.

    Raises
    ------
    DataNotFoundError
        If the scheduler holds no replica of that name (a run that ended normally
        removed its own; another scheduler never had it).
    InvalidDataError
        If the dataset is not a daskstraggle checkpoint.
    """
    if name not in client.list_datasets():
        raise DataNotFoundError(
            f"The scheduler holds no replica of this run ({name!r}): --resume replica needs "
            "the scheduler the run published to (--scheduler) and the same inputs; a run "
            "that ended normally removes its replica."
        )
    return load_state(client.get_dataset(name), where=f"the replica {name!r}",
                      writer="--replica-divergence")
