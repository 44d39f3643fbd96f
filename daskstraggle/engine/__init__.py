"""The engine: every decision of a run, as a pure state machine (no Dask, no I/O, no clock).

The runtimes (:mod:`daskstraggle.runtime`) execute its instructions and report what
happened as events (:mod:`daskstraggle.engine.events`) to one entry point,
:meth:`Engine.handle_stimulus`; its parts decide: the coordinator (:class:`Coordinator`,
rounds) and the worker pool (:class:`~daskstraggle.engine.pool.WorkerPool`, tasks and
workers). The convergence verdict (:class:`ConvergenceMonitor`), the
stop rule (:class:`StopRule`) and the checkpoint schedule (:class:`CheckpointSchedule`) are
its parts.
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
