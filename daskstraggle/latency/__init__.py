"""Latency models, fitting, order statistics, the event-driven simulator and the profiler.

Pure numpy/scipy: nothing here imports dask or distributed.
"""

from __future__ import annotations

from daskstraggle.latency.base import (
    Constant,
    LatencyModel,
    LatencySampler,
    get_model_class,
    list_models,
    make_model,
    register_model,
    worker_streams,
)

__all__ = [
    "Constant",
    "LatencyModel",
    "LatencySampler",
    "get_model_class",
    "list_models",
    "make_model",
    "register_model",
    "worker_streams",
]
