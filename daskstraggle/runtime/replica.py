"""A replica of the run's state on the Dask scheduler, kept within a divergence bound
(MLfabric): a killed client's run resumes from it (``--resume replica``); it dies with the
scheduler."""

from __future__ import annotations

import builtins
import hashlib
from dataclasses import dataclass, field
from typing import Any

from daskstraggle.engine.checkpoint import CheckpointSchedule
from daskstraggle.errors import DataNotFoundError, SchedulerLostError
from daskstraggle.runtime.checkpoint import StateWriter, load_state

__all__ = ["Replica", "load_replica", "remove_replica", "replica_name"]

#: The value of ``resume`` (CLI ``--resume``) that resumes from the scheduler's replica.
RESUME_FROM_REPLICA = "replica"


def replica_name(problem: str, sources: list[str]) -> str:
    """Return the name a run's replica is published under on the scheduler:
    ``"daskstraggle-replica-<problem>-<12 hex digits of the hash of sources>"`` (the run's
    input stores, empty for arrays in memory), so the same command names the same replica.

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
class Replica(StateWriter):
    """Publishes a run's state to the scheduler when the divergence rule says so.

    The state, as the bytes of a checkpoint, is published (``Client.publish_dataset``)
    whenever the iterate would drift further than ``divergence`` from the published one
    (the engine's :class:`~daskstraggle.engine.checkpoint.CheckpointSchedule`). A
    published dataset outlives the client, so the same command with ``--resume replica``
    (API ``resume="replica"``) on the same scheduler carries on from it, having redone at
    most the rounds since; it lives in the scheduler's memory, so only a cluster that
    outlives the client (``scheduler=``, or another process's ``client=``) keeps it. A run
    that ends normally removes it. ``run_on(runtime, ..., checkpoint=...)`` takes a
    Replica or a :class:`~daskstraggle.runtime.checkpoint.Checkpointer`.

    The dataset is named ``name`` (:func:`replica_name`); :attr:`bytes` is the size of the
    last state published, :attr:`history` the iteration of each state published, in order
    (what a lost client would resume from at each round).
    """

    client: Any
    name: str
    divergence: float
    bytes: int = field(default=0, init=False)
    history: list[int] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        self.schedule = CheckpointSchedule(divergence=self.divergence)  # checks the bound

    @property
    def path(self) -> str:
        """Where the state goes, as the error naming the last checkpoint shows it."""
        return RESUME_FROM_REPLICA

    def _store(self, data: builtins.bytes, iteration: int) -> None:
        try:  # a scheduler RPC: bounded by distributed's comm timeouts
            self.client.publish_dataset(override=True, **{self.name: data})
        except (OSError, TimeoutError) as err:  # CommClosedError is an OSError
            raise SchedulerLostError(
                f"The scheduler stopped answering while the replica {self.name!r} was "
                f"published ({type(err).__name__}); the replica was in its memory, so start "
                "the run again."
            ) from None
        self.history.append(iteration)
        self.bytes = len(data)

    def remove(self) -> None:
        """Unpublish the replica (a run that ended normally needs none)."""
        remove_replica(self.client, self.name)

    def describe(self) -> dict[str, Any]:
        """The settings and last write, for ``Result.attrs["replica"]``."""
        return {"name": self.name, "divergence": self.divergence, **self._counts(),
                "bytes": self.bytes, "history": list(self.history)}


def remove_replica(client: Any, name: str) -> None:
    """Unpublish the replica ``name`` from the client's scheduler, if it holds one."""
    if name in client.list_datasets():
        client.unpublish_dataset(name)


def load_replica(client: Any, name: str) -> dict[str, Any]:
    """Return the run state published under ``name`` on the client's scheduler; raise
    DataNotFoundError if it holds none, InvalidDataError if it is not a checkpoint."""
    if name not in client.list_datasets():
        raise DataNotFoundError(
            f"The scheduler holds no replica of this run ({name!r}): --resume replica needs "
            "the scheduler the run published to (--scheduler) and the same inputs; a run "
            "that ended normally removes its replica."
        )
    return load_state(client.get_dataset(name), where=f"the replica {name!r}",
                      writer="--replica-divergence")
