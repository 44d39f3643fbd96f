"""Latency models, fitting, order statistics, the event-driven simulator and the profiler.

Spec strings such as ``"gamma(mean=0.05, var=1e-4) + slowdown(workers=1, factor=4)"`` are
read by :func:`parse_latency` / :func:`parse_stragglers` (grammar in :mod:`.spec`).

References
----------
.. [1] A. Severinson, E. Rosnes, S. El Rouayheb and A. Graell i Amat, "DSAG: A Mixed
   Synchronous-Asynchronous Iterative Method for Straggler-Resilient Learning", IEEE
   Trans. Commun., 2023: "the DSAG paper" of this package's docstrings.
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
from daskstraggle.latency.fit import (
    Links,
    fit_gamma,
    fit_link,
    fit_peers,
    fit_shifted_exponential,
    fit_trace,
)
from daskstraggle.latency.models import (
    Artificial,
    Bursts,
    Gamma,
    MultiMessage,
    Replay,
    Schedule,
    ShiftedExponential,
    Slowdown,
    TwoStateMarkov,
)
from daskstraggle.latency.modifiers import Link, SharedLink, parse_bandwidth, share_link
from daskstraggle.latency.order import OrderStatistics, order_statistics
from daskstraggle.latency.profiler import LatencyProfiler, ProfileStatistics
from daskstraggle.latency.simulator import SimulationResult, simulate
from daskstraggle.latency.spec import Stragglers, ThrottleSpec, parse_latency, parse_stragglers

__all__ = [
    "Artificial", "Bursts", "Constant", "Gamma", "LatencyModel", "LatencyProfiler",
    "LatencySampler", "Link", "Links", "MultiMessage", "OrderStatistics",
    "ProfileStatistics", "Replay", "Schedule", "SharedLink", "ShiftedExponential",
    "SimulationResult", "Slowdown", "Stragglers", "ThrottleSpec", "TwoStateMarkov",
    "fit_gamma", "fit_link", "fit_peers", "fit_shifted_exponential", "fit_trace",
    "get_model_class", "list_models", "make_model", "order_statistics", "parse_bandwidth",
    "parse_latency", "parse_stragglers", "register_model", "share_link", "simulate",
    "worker_streams"
]
