"""A run's state besides the method's: what a checkpoint keeps with the method (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from daskstraggle.engine.checkpoint import same_stats
from daskstraggle.engine.convergence import ConvergenceMonitor
from daskstraggle.errors import InvalidDataError, InvalidParameterError
from daskstraggle.methods.base import Method
from daskstraggle.problems.base import Problem, Reference
from daskstraggle.problems.block import MatrixStats

__all__ = ["RunSession", "resumed_session"]


@dataclass(eq=False)
class RunSession:
    """A run's state besides the method's: what a checkpoint keeps with the method.

    ``recorder`` is the run's :class:`~daskstraggle.trace.TraceRecorder` (its rows are
    added by the runtime, on the engine's :class:`~daskstraggle.engine.events.RecordRow`);
    ``checkpoint`` the runtime's checkpoint writer, or None.
    """

    problem: Problem
    monitor: ConvergenceMonitor
    recorder: Any
    reference: Reference | None
    step_size: float
    placement: list[tuple[int, ...]]
    settings: dict[str, Any]
    stats: MatrixStats
    x0: np.ndarray
    iterates: list[np.ndarray] | None = None
    checkpoint: Any = None
    elapsed: float = 0.0  # loop seconds before this (resumed) run
    stepped: bool = True  # a resumed run: whether the checkpoint was taken after a step
    resumed_at: int | None = None

    def state(self, method: Method, *, elapsed: float, stepped: bool,
              iteration: int) -> dict[str, Any]:
        """Everything a resumed run needs, for a checkpoint taken after ``iteration``
        rounds. The recorder is the live one: write the state before the next row."""
        return {
            "settings": self.settings,
            "placement": [list(p) for p in self.placement],
            "elapsed": elapsed,
            "stepped": stepped,
            "iteration": iteration,
            # one pickle: the method, monitor and trace share the bound problem
            "run": {"method": method, "problem": self.problem, "monitor": self.monitor,
                    "recorder": self.recorder, "reference": self.reference,
                    "step_size": self.step_size, "stats": self.stats, "x0": self.x0,
                    "iterates": self.iterates},
        }


def resumed_session(state: dict[str, Any], stats: MatrixStats,
                     record_iterates: bool) -> tuple[Method, RunSession]:
    """The method and session of a checkpoint, once the reloaded data is checked."""
    run = state["run"]
    if not same_stats(run["stats"], stats):
        raise InvalidDataError(
            "The data differ from those of the run that wrote the checkpoint (their column "
            "sums or norms changed); resume with the same data, or start afresh without "
            "--resume."
        )
    iterates = run["iterates"]
    if record_iterates and iterates is None:
        raise InvalidParameterError(
            "record_iterates=True needs a checkpoint of a run that recorded its iterates; "
            "resume without it, or start afresh."
        )
    session = RunSession(
        problem=run["problem"], monitor=run["monitor"], recorder=run["recorder"],
        reference=run["reference"], step_size=run["step_size"],
        placement=[tuple(p) for p in state["placement"]], settings=state["settings"],
        stats=run["stats"], x0=run["x0"], iterates=iterates if record_iterates else None,
        elapsed=float(state["elapsed"]), stepped=bool(state["stepped"]),
        resumed_at=int(state["iteration"]),
    )
    return run["method"], session
