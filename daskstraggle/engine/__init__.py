"""The engine: every decision of a run, as a pure state machine (no Dask, no I/O, no clock).

The runtimes report events to :meth:`Engine.handle_stimulus` and carry out the
instructions it returns.
"""

from __future__ import annotations

from daskstraggle.engine.checkpoint import CheckpointSchedule
from daskstraggle.engine.convergence import ConvergenceMonitor
from daskstraggle.engine.coordinator import Coordinator, Phase
from daskstraggle.engine.engine import Engine
from daskstraggle.engine.session import RunSession
from daskstraggle.engine.stop import StopRule

__all__ = [
    "CheckpointSchedule",
    "ConvergenceMonitor",
    "Coordinator",
    "Engine",
    "Phase",
    "RunSession",
    "StopRule",
]
