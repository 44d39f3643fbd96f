"""Runtimes that drive methods: in process (zero latency), simulated time, a Dask cluster."""

from __future__ import annotations

from daskstraggle.engine.stop import StopRule
from daskstraggle.runtime.base import (
    Runtime,
    RuntimeOptions,
    get_runtime_class,
    list_runtimes,
    register_runtime,
)
from daskstraggle.runtime.dask import DaskRuntime, connect
from daskstraggle.runtime.fault_simulation import FaultSimulation, simulate_faults
from daskstraggle.runtime.local import LocalRuntime
from daskstraggle.runtime.sim import SimRuntime

__all__ = ["DaskRuntime", "FaultSimulation", "LocalRuntime", "Runtime", "RuntimeOptions",
           "SimRuntime", "StopRule", "connect", "get_runtime_class", "list_runtimes",
           "register_runtime", "simulate_faults"]
