"""Checkpoints of a run, written atomically (a kill leaves the previous or the new file),
and resuming from them. The file is a Python pickle: load only checkpoints your own runs
wrote. What it holds: ``docs/architecture.md`` (Checkpoints)."""

from __future__ import annotations

import os
import pickle
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from daskstraggle._output import (
    check_not_in_zarr,
    check_not_input,
    check_writable_folder,
    write_atomically,
)
from daskstraggle.engine.checkpoint import CHECKPOINT_INTERVAL, CheckpointSchedule
from daskstraggle.errors import (
    DataNotFoundError,
    InvalidDataError,
    InvalidParameterError,
    OutputExistsError,
)

__all__ = [
    "CHECKPOINT_INTERVAL",
    "Checkpointer",
    "check_checkpoint_path",
    "check_resume_iterations",
    "load_checkpoint",
    "resume_state",
]

_FORMAT = "daskstraggle-checkpoint"
_FORMAT_VERSION = 1


@dataclass
class StateWriter:
    """The writer of a run's state, when :attr:`schedule` (the engine's decision) says so.

    It counts the states written by this run (:attr:`n_written`), the iteration of the
    last one (:attr:`written`, None if none) and the seconds spent writing them.
    """

    schedule: CheckpointSchedule = field(init=False)
    written: int | None = field(default=None, init=False)
    n_written: int = field(default=0, init=False)
    seconds: float = field(default=0.0, init=False)
    #: Bytes of the last state written (0 before the first).
    nbytes: int = field(default=0, init=False)

    def write(self, state: dict[str, Any], *, iteration: int, now: float | None = None) -> None:
        """Write ``state`` (see :func:`resume_state`) over the previous one.

        ``now`` (the writer's clock), when given, restarts :attr:`schedule` from this
        write; in a run the engine does that itself.
        """
        t0 = time.perf_counter()
        data = dump_state(state)
        self._store(data, iteration)
        self.nbytes = len(data)
        self.written = iteration
        self.n_written += 1
        self.seconds += time.perf_counter() - t0
        if now is not None:
            self.schedule.start(iteration, now)

    def _store(self, data: bytes, iteration: int) -> None:
        raise NotImplementedError

    def _counts(self) -> dict[str, Any]:
        return {"last_iteration": self.written, "n_written": self.n_written,
                "write_seconds": self.seconds}


@dataclass
class Checkpointer(StateWriter):
    """Where and how often a run writes its checkpoint file; writes it (:class:`StateWriter`).

    The file at ``path`` is replaced atomically at every write, every ``interval`` seconds
    (None: 60 s, unless ``iterations`` is given) and every ``iterations`` rounds.
    """

    path: Path
    interval: float | None = None
    iterations: int | None = None

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        self.schedule = CheckpointSchedule(interval=self.interval, iterations=self.iterations)
        self.interval, self.iterations = self.schedule.interval, self.schedule.iterations

    def _store(self, data: bytes, iteration: int) -> None:
        write_atomically(self.path, lambda tmp: _write_file(tmp, data))

    def describe(self) -> dict[str, Any]:
        """The settings and last write, for ``Result.attrs``."""
        return {"path": str(self.path), "interval_s": self.interval,
                "iterations": self.iterations, **self._counts()}


def check_checkpoint_path(path: str | os.PathLike[str], *, resume: str | os.PathLike[str] | None,
                          inputs: list[str], out: str | os.PathLike[str] | None) -> Path:
    """Return the checkpoint path ``path`` (CLI: ``--checkpoint``) unless it would destroy
    something.

    Raises OutputExistsError if ``path`` exists and is not ``resume`` (the checkpoint
    being resumed; ``--resume`` is suggested only for an existing checkpoint);
    InvalidParameterError if it is, lies in or contains one of ``inputs``, lies in a Zarr
    store, or is ``out`` (the result store); OutputNotWritableError if its folder cannot
    be written.
    """
    p = Path(path)
    what = "The checkpoint path (CLI: --checkpoint)"
    check_not_input(p, inputs, what=what)
    check_not_in_zarr(p, what=what)
    if out is not None and os.path.realpath(p) == os.path.realpath(out):
        raise InvalidParameterError(
            f"{what} {str(p)!r} is also the result's path (--out); choose another one."
        )
    same = resume is not None and os.path.realpath(p) == os.path.realpath(resume)
    if os.path.lexists(p) and not same:
        if not is_checkpoint(p):
            kind = "a folder" if p.is_dir() else "a file"
            raise OutputExistsError(
                f"{what} {str(p)!r} exists already and is {kind}, not a daskstraggle "
                "checkpoint; choose another path (a checkpoint never replaces other data)."
            )
        raise OutputExistsError(
            f"{what} {str(p)!r} exists already: continue that run with --resume {str(p)!r} "
            "(API: resume=), or choose another path."
        )
    check_writable_folder(p.absolute().parent, out=p, what=what)
    return p


def is_checkpoint(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a file that starts as :func:`dump_state` writes (not unpickled)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(64)
    except OSError:  # a folder, or unreadable
        return False
    return head.startswith(b"\x80") and _FORMAT.encode() in head


def dump_state(state: dict[str, Any]) -> bytes:
    """Return a run's state as the bytes of a checkpoint (format, version, time, pickle)."""
    payload = {"format": _FORMAT, "format_version": _FORMAT_VERSION,
               "written_at": time.time(), **state}
    return pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)


def load_state(data: bytes, *, where: str, writer: str) -> dict[str, Any]:
    """Return the state in checkpoint bytes (:func:`dump_state`); raise InvalidDataError,
    naming their source ``where`` and the option ``writer`` that writes such states, if
    they are not a daskstraggle checkpoint (or one of another format version)."""
    not_ours = f"{where} is not a daskstraggle checkpoint (written by {writer})"
    try:
        state = pickle.loads(data)
    except Exception as err:  # any unreadable payload is the same mistake
        raise InvalidDataError(f"{not_ours}: {type(err).__name__}: {err}") from None
    if not isinstance(state, dict) or state.get("format") != _FORMAT:
        raise InvalidDataError(f"{not_ours}.")
    if state.get("format_version") != _FORMAT_VERSION:
        raise InvalidDataError(
            f"{not_ours} of format version {_FORMAT_VERSION}: it has version "
            f"{state.get('format_version')!r}; resume it with the daskstraggle that wrote it."
        )
    return state


def _write_file(path: Path, data: bytes) -> None:
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def load_checkpoint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Return the run state in the checkpoint file ``path`` (CLI: ``--resume``), for
    ``run(..., resume=state)``.

    Raises DataNotFoundError if there is no file at ``path``, InvalidDataError if it is
    not a daskstraggle checkpoint (or one of another format version).
    """
    p = Path(path)
    if not p.is_file():
        raise DataNotFoundError(f"No checkpoint at {str(path)!r} (--resume / resume=).")
    return load_state(p.read_bytes(), where=repr(str(path)), writer="--checkpoint")


def resume_state(state: dict[str, Any], *, settings: dict[str, Any],
                 placement: list[tuple[int, ...]], max_iter: int) -> None:
    """Raise InvalidParameterError (one line) unless the checkpoint ``state`` belongs to
    this run: the same :func:`run_settings` (method and problem with their parameters,
    number of workers, matrix shape) and placement as recorded, and ``max_iter`` above
    its iterations."""
    check_resume_iterations(state, max_iter)
    check_resume_workers(state, settings["n_workers"])
    recorded = state["settings"]
    for key, what in (("method", "method (and its parameters)"),
                      ("problem", "problem (and its parameters)"),
                      ("shape", "matrix shape")):
        if recorded[key] != settings[key]:
            raise _another(what, recorded[key], settings[key])
    if [tuple(p) for p in state["placement"]] != [tuple(p) for p in placement]:
        raise InvalidParameterError(
            "The checkpoint was written with another placement of the partitions; resume "
            "with the same data partitions (--partitions) and workers."
        )


def _another(what: str, recorded: Any, now: Any, remedy: str = "") -> InvalidParameterError:
    """The one line refusing a checkpoint whose run had another ``what``."""
    return InvalidParameterError(
        f"The checkpoint was written by a run with another {what}: {recorded!r}, this run has "
        f"{now!r}. Resume with the same settings{remedy}, or start afresh without --resume."
    )


def check_resume_workers(state: dict[str, Any], n_workers: int | None) -> None:
    """Raise InvalidParameterError, naming the count to pass, if ``n_workers`` is not the
    checkpoint's (None, not known until connecting to a cluster, passes)."""

    recorded = int(state["settings"]["n_workers"])
    if n_workers is not None and int(n_workers) != recorded:
        raise _another("number of workers", recorded, int(n_workers),
                       f" (n_workers={recorded}; CLI: --workers {recorded}, or on a cluster "
                       f"--min-workers {recorded} with {recorded} workers up)")


def check_resume_iterations(state: dict[str, Any], max_iter: int) -> None:
    """Raise InvalidParameterError unless ``max_iter`` leaves rounds to run after the
    checkpoint's."""
    done = int(state["iteration"])
    if max_iter <= done:
        raise InvalidParameterError(
            f"The checkpoint holds {done} iterations already, and max_iter is {max_iter}: "
            f"pass a larger max_iter (CLI: --max-iter) to carry on."
        )


def run_settings(*, method: Any, problem: Any, n_workers: int,
                 matrix: dict[str, Any]) -> dict[str, Any]:
    """What a resumed run must share with the run that wrote the checkpoint."""
    return {
        "method": [method.name, _comparable(method.get_params())],
        "problem": [problem.name, _comparable(problem.get_params())],
        "n_workers": int(n_workers),
        "shape": list(matrix.get("shape", [])),
        # recorded, not compared: a resume removes the same samples and variants first
        "no_call": matrix.get("qc", {}).get("no_call"),
    }


def _comparable(value: Any) -> Any:
    """Parameters as plain values (objects by class name) so two runs' can be compared."""
    if isinstance(value, dict):
        return {str(k): _comparable(v) for k, v in sorted(value.items())}
    if isinstance(value, list | tuple):
        return [_comparable(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return type(value).__name__
