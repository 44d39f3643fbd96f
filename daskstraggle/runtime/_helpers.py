"""Workers that join beyond the run's worker count help the slowest worker index.

The methods keep their ``N`` worker indices (a placement, a code, a balancer sized for
``N``), so a newcomer cannot become an index of its own. When every index has a worker
of its own, a newcomer becomes the *helper* of the index with the highest recent latency
(:func:`~daskstraggle.runtime._resilience.helper_targets`): it loads that index's
partitions from the source, and from the index's next unit on, each of its units is
computed as two tasks, rows ``[lo, cut)`` on the index's worker and ``[cut, hi)`` on the
helper (:func:`~daskstraggle.runtime._resilience.split_unit`). Kernel sums are sums over
rows and coded messages ``sum_p c_p kernel(p)`` are linear in each partition's rows, so
the two results added (first part first, whichever arrives first) are the unit's result
to rounding, and the method sees one result from that index, sooner. The share of rows
follows the two workers' measured speeds
(:func:`~daskstraggle.runtime._resilience.next_fraction`).

A helper that leaves, retires or freezes stops helping (the index's work in flight is
sent again whole to its own worker); a helper is also the first replacement for an index
whose worker is lost (it holds that index's data when it helped it) and the first to
take back a doubled-up index. Streamed units (partial recovery sends messages one by
one) and exact passes are not split.
"""

from __future__ import annotations

import logging
import statistics
import time
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any

from daskstraggle.methods.base import WorkUnit
from daskstraggle.problems.base import Problem
from daskstraggle.runtime._resilience import helper_targets, next_fraction, split_unit

__all__ = ["HelperMixin"]

logger = logging.getLogger(__name__)


class HelperMixin:
    """Newcomers that help a worker index, for :class:`~daskstraggle.runtime.DaskRuntime`,
    whose state it uses."""

    # the runtime's (declared here, set by DaskRuntime)
    client: Any
    _addresses: list[str]
    _held: list[dict[int, Any]]
    _pending: dict[str, tuple[WorkUnit, float, int | None, bool, Any]]
    _matrix: Any
    _ac: Any
    _injector: str | None
    _partition_rows: list[int]
    _shunned: set[str]
    _pinned: Callable[..., Any]
    _resend: Callable[[int], None]
    # the helpers' own
    _helpers: dict[int, str]
    _helper_held: dict[int, dict[int, Any]]
    _fractions: dict[int, float]
    _halves: dict[str, tuple[str, int, int]]  # key: (other part's key, position, index)
    _half_done: dict[str, Any]
    _index_latency: dict[int, deque[float]]
    _joins: list[dict[str, Any]]  # what every helper did in the run (Result attrs)
    _join_of: dict[int, dict[str, Any]]  # the entry of each index's current helper

    def _reset_helpers(self) -> None:
        """Forget the previous run's helpers (their data is released with it)."""
        self._helpers = {}
        self._helper_held = {}
        self._fractions = {}
        self._halves = {}
        self._half_done = {}
        self._index_latency = {}
        self._joins = []
        self._join_of = {}

    def _note_latency(self, index: int, latency: float) -> None:
        self._index_latency.setdefault(index, deque(maxlen=5)).append(latency)

    def _adopt_newcomers(self, live: list[str]) -> None:
        """Make every live worker that neither holds nor helps an index the helper of the
        slowest index without one."""
        newcomers = set(live) - set(self._addresses) - set(self._helpers.values())
        if not newcomers:
            return
        latency = {i: statistics.median(v) for i, v in self._index_latency.items() if v}
        for address, index in helper_targets(self._addresses, newcomers, self._helpers,
                                              latency).items():
            token = uuid.uuid4().hex[:6]
            self._helper_held[index] = {p: self._on(
                address, self._matrix.loader(p), key=f"helper-p{p}-w{index}-{token}")
                for p in sorted(self._held[index])}
            self._helpers[index] = address
            self._fractions[index] = 0.5
            self._join_of[index] = {"worker": address, "helps": index,
                                    "partitions": sorted(self._held[index]),
                                    "latency_s": latency.get(index), "split_units": 0,
                                    "own_share": 0.5}
            self._joins.append(self._join_of[index])
            logger.info("worker %s joined: it helps worker index %d (%s, latency %s s), "
                        "whose partitions %s it loads from the source", address, index,
                        self._addresses[index], latency.get(index),
                        sorted(self._held[index]))

    def _on(self, address: str, fn: Callable[..., Any], *args: Any, key: str,
            **kwargs: Any) -> Any:
        """Submit ``fn`` strictly pinned to the worker at ``address``."""
        return self.client.submit(
            fn, *args, **kwargs, key=f"daskstraggle-{key}-{uuid.uuid4().hex[:8]}",
            workers=[address], allow_other_workers=False, pure=False)

    def _submit_split(self, unit: WorkUnit, problem: Problem) -> bool:
        """Send ``unit`` as two tasks, on its worker and on its helper; return whether it
        was (False: no helper, its data not loaded yet, or a unit that is not split)."""
        index = unit.worker_index
        helper = self._helpers.get(index)
        if helper is None or unit.stream or not all(
                f.status == "finished" for f in self._helper_held[index].values()):
            return False
        rows = [self._partition_rows[p] for p in unit.partitions]
        parts = split_unit(rows, rows=unit.rows, coefficients=unit.coefficients,
                           fraction=self._fractions[index])
        if parts is None:
            return False
        from daskstraggle.runtime.dask import run_unit_task

        total = max(sum(self._partition_rows), 1)
        sent, token, keys = time.perf_counter(), uuid.uuid4().hex[:6], []
        for position, (part, address, held) in enumerate(zip(
                parts, (self._addresses[index], helper),
                (self._held[index], self._helper_held[index]), strict=True)):
            blocks = [held[unit.partitions[k]] for k in part.positions]
            load = (part.rows[1] - part.rows[0]) * len(self._addresses) / total
            future = self._on(
                address, run_unit_task, problem, unit.iterate, unit.version, load,
                self._injector, *blocks, coefficients=part.coefficients, rows=part.rows,
                key=f"unit-v{unit.version}-w{index}-part{position}-{token}")
            self._pending[future.key] = (unit, sent, None, True, future)
            self._ac.add(future)
            keys.append(future.key)
        self._halves[keys[0]] = (keys[1], 0, index)
        self._halves[keys[1]] = (keys[0], 1, index)
        self._join_of[index]["split_units"] += 1
        return True

    def _join_half(self, key: str, outcome: Any) -> Any:
        """The outcome of a finished task, or None while it is the first part of a split
        unit (kept until the other part arrives; then their sum)."""
        if key not in self._halves:
            return outcome
        partner, position, index = self._halves.pop(key)
        if partner not in self._half_done:
            self._half_done[key] = outcome
            return None
        other = self._half_done.pop(partner)
        (first, own), (second, helper) = (outcome, other) if position == 0 else (other, outcome)
        if index in self._fractions:  # (its helper may have stopped meanwhile)
            self._fractions[index] = next_fraction(self._fractions[index], own, helper)
            self._join_of[index]["own_share"] = round(self._fractions[index], 3)
        if isinstance(first, tuple):  # coded messages
            return tuple(a + b for a, b in zip(first, second, strict=True)), max(own, helper)
        return first + second, max(own, helper)

    def _forget_split(self, key: str) -> None:
        """``key`` was cancelled: forget it as a part of a split unit."""
        entry = self._halves.pop(key, None)
        self._half_done.pop(key, None)
        if entry is not None:  # the other part may have arrived already
            self._half_done.pop(entry[0], None)

    def _worker_of(self, key: str, unit: WorkUnit) -> str:
        """The address computing the task ``key`` of ``unit`` (its helper for a part)."""
        if self._halves.get(key, (None, 0, 0))[1] == 1:
            return self._helpers.get(unit.worker_index, self._addresses[unit.worker_index])
        return self._addresses[unit.worker_index]

    def _drop_helper(self, index: int, *, why: str, resend: bool = True) -> None:
        """Worker index ``index``'s helper stops helping; its work in flight is sent again
        whole (``resend``)."""
        address = self._helpers.pop(index, None)
        if address is None:
            return
        self._helper_held.pop(index, None)
        self._fractions.pop(index, None)
        self._join_of.pop(index)["ended"] = why
        logger.info("helper %s of worker index %d %s: it stops helping", address, index, why)
        if resend:
            self._resend(index)

    def _take_helper_data(self, index: int, target: str) -> dict[int, Any]:
        """``target`` becomes the worker of ``index``: if it helped an index it stops, and
        the partitions it loaded for ``index`` (if that is the index it helped) are kept."""
        helped = next((i for i, a in self._helpers.items() if a == target), None)
        if helped is None:
            return {}
        data = self._helper_held.get(helped, {}) if helped == index else {}
        self._drop_helper(helped, why=f"takes over worker index {index}",
                          resend=helped != index)
        return dict(data)
