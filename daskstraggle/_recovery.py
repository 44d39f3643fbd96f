"""Where a run's state is kept and resumed from: a checkpoint file or the scheduler's
replica, checked before any cluster work (:func:`recovery`); the replica is read once the
run is connected (:meth:`Recovery.connect`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from daskstraggle._validation import check_positive
from daskstraggle.errors import InvalidParameterError, SchedulerLostError
from daskstraggle.runtime.checkpoint import (
    Checkpointer,
    check_checkpoint_path,
    check_resume_iterations,
    check_resume_workers,
    load_checkpoint,
)
from daskstraggle.runtime.replica import (
    RESUME_FROM_REPLICA,
    Replica,
    load_replica,
    remove_replica,
    replica_name,
)

__all__ = ["Recovery", "recovery"]


@dataclass
class Recovery:
    """A run's checkpoint ``writer`` (a Replica once connected), the ``state`` it resumes
    from, the replica's bound ``divergence`` (None: no replica) and whether it resumes
    ``from_replica``."""

    writer: Checkpointer | Replica | None = None
    state: dict[str, Any] | None = None
    divergence: float | None = None
    from_replica: bool = False
    _name: str | None = None
    _client: Any = None

    @property
    def uses_replica(self) -> bool:
        """Whether the run writes or reads the scheduler's replica."""
        return self.divergence is not None or self.from_replica

    def connect(self, runtime: Any, *, problem: str, sources: list[str], max_iter: int
                ) -> dict[str, Any] | None:
        """Read the replica to resume (checked against the run) and start the replica
        writer, on the connected ``runtime``; return the state to resume from."""
        client = getattr(runtime, "client", None)
        if client is None:  # refused before: only a Dask runtime gets here
            raise InvalidParameterError("The replica needs a Dask client.")
        self._client, self._name = client, replica_name(problem, sources)
        if self.from_replica:
            self.state = load_replica(client, self._name)
            check_resume_iterations(self.state, max_iter)
            check_resume_workers(self.state, runtime.n_workers)
        if self.divergence is not None:
            self.writer = Replica(client, self._name, self.divergence)
        return self.state

    def resume_hint(self, err: BaseException) -> str | None:
        """The ``--resume`` value that carries on after ``err`` (a lost scheduler or lost
        workers), None if nothing was written or what was written is gone with it."""
        writer = self.writer
        if writer is None or writer.written is None:
            return None
        if isinstance(writer, Replica) and isinstance(err, SchedulerLostError):
            return None  # the replica was in the lost scheduler's memory
        return str(writer.path)

    def finished(self) -> None:
        """The run ended normally: remove its replica (it resumes nothing now)."""
        if self._client is not None and self._name is not None:
            remove_replica(self._client, self._name)


def recovery(checkpoint: str | os.PathLike[str] | None, interval: float | None,
             iterations: int | None, resume: str | os.PathLike[str] | None,
             divergence: float | None, *, replica_ok: bool, inputs: list[str], out: Any,
             caller: str) -> Recovery:
    """Check the fit functions' ``checkpoint``, ``checkpoint_interval``,
    ``checkpoint_iterations``, ``resume`` and ``replica_divergence``; read a checkpoint file
    to resume. ``replica_ok``: the run's cluster outlives this process, as a replica needs;
    a checkpoint file may not touch ``inputs`` or ``out``."""
    from_replica = resume is not None and str(resume) == RESUME_FROM_REPLICA
    if divergence is not None:
        divergence = check_positive(divergence, name="replica_divergence", caller=caller)
        if checkpoint is not None:
            raise InvalidParameterError(
                f"Pass either checkpoint (a file) or replica_divergence (the scheduler's "
                f"replica) to {caller}, not both (CLI: --checkpoint, --replica-divergence)."
            )
    if (divergence is not None or from_replica) and not replica_ok:
        what = ("The 'replica_divergence' parameter (CLI: --replica-divergence)"
                if divergence is not None else "resume='replica' (CLI: --resume replica)")
        raise InvalidParameterError(
            f"{what} of {caller} keeps the run's state on a Dask scheduler that outlives "
            "this process: pass scheduler=ADDRESS (CLI: --scheduler) or client=."
        )
    rec = Recovery(divergence=divergence, from_replica=from_replica)
    file_resume = None if from_replica else resume
    path = checkpoint if checkpoint is not None else file_resume
    if path is None:
        if given := [name for name, value in (("checkpoint_interval", interval),
                                              ("checkpoint_iterations", iterations))
                     if value is not None]:
            raise InvalidParameterError(
                f"The {given[0]!r} parameter (CLI: --{given[0].replace('_', '-')}) needs a "
                "checkpoint file: pass checkpoint=PATH (CLI: --checkpoint PATH)."
            )
        return rec
    rec.state = None if file_resume is None else load_checkpoint(file_resume)
    path = check_checkpoint_path(path, resume=file_resume, inputs=inputs, out=out)
    rec.writer = Checkpointer(path, interval=interval, iterations=iterations)
    return rec
