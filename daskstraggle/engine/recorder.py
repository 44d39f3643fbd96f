"""The rows of a run's trace, one per judged round (pure: no xarray;
:func:`daskstraggle.trace.trace_dataset` makes the Dataset)."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["TraceRecorder"]


class TraceRecorder:
    """Collects one row per iteration (round) while a runtime drives a method.

    Parameters
    ----------
    n_workers : int
        Number of worker indices (columns of the per-worker variables).
    """

    def __init__(self, n_workers: int) -> None:
        self.n_workers = n_workers
        self.rows: list[dict[str, float]] = []
        self.compute: list[np.ndarray] = []
        self.latency: list[np.ndarray] = []
        self.ages: list[np.ndarray | None] = []
        self.extras: list[dict[str, float]] = []
        self.subpartitions: list[tuple[int, ...] | None] = []
        self.events: list[dict[str, Any]] = []

    def add(
        self,
        *,
        wall_time: float,
        iteration_duration: float,
        objective: float | None,
        gap: float | None,
        n_fresh: int,
        n_stale: int,
        workers_used: tuple[int, ...],
        compute_durations: dict[int, float],
        latencies: dict[int, float] | None = None,
        coverage: float = 1.0,
        n_dropped: int = 0,
        ages: np.ndarray | None = None,
        extras: dict[str, float] | None = None,
        subpartitions: tuple[int, ...] | None = None,
    ) -> int:
        """Append a row; return its index.

        ``compute_durations`` and ``latencies`` (send-to-receive seconds) hold the last
        result each worker delivered during the round, used or not; communication is
        their difference. ``ages`` (one per partition) become the ``age`` variable over
        ``(iteration, partition)``; ``extras`` become variables over ``iteration``
        (NaN in rows that lack them); ``subpartitions`` (per worker, load-balanced runs)
        becomes ``subpartitions`` over ``(iteration, worker)``.
        """
        per_worker = np.full(self.n_workers, np.nan)
        for i, d in compute_durations.items():
            per_worker[i] = d
        lat = np.full(self.n_workers, np.nan)
        for i, d in (latencies or {}).items():
            lat[i] = d
        used = [per_worker[i] for i in workers_used if np.isfinite(per_worker[i])]
        self.rows.append(
            {
                "wall_time": wall_time,
                "iteration_duration": iteration_duration,
                "objective": np.nan if objective is None else objective,
                "gap": np.nan if gap is None else gap,
                "n_workers_used": len(workers_used),
                "n_fresh": n_fresh,
                "n_stale": n_stale,
                "max_compute_duration": float(max(used)) if used else np.nan,
                "coverage": float(coverage),
                "n_dropped": n_dropped,
            }
        )
        self.ages.append(None if ages is None else np.asarray(ages, dtype=np.float64))
        self.extras.append(dict(extras or {}))
        self.subpartitions.append(None if subpartitions is None else tuple(subpartitions))
        self.compute.append(per_worker)
        self.latency.append(lat)
        return len(self.rows) - 1

    def add_event(self, event: dict[str, Any]) -> None:
        """Record a load-balancing event.

        ``event`` has ``iteration`` (the first row run with the new counts),
        ``previous`` and ``subpartitions`` (per worker), ``improvement``,
        ``previous_imbalance`` and ``imbalance`` (predicted max/min expected latency).
        """
        self.events.append(dict(event))

    def set_compute(self, row: int, worker_index: int, duration: float) -> None:
        """Replace a recorded compute duration (e.g. with the scheduler's measurement)."""
        self.compute[row][worker_index] = duration

    def __len__(self) -> int:
        return len(self.rows)

    def column(self, key: str) -> np.ndarray:
        """The values of ``key`` (a row field such as ``"iteration_duration"``, or an
        extra) in every row, as floats (NaN where a row lacks it)."""
        source = self.rows if key in (self.rows[0] if self.rows else {}) else self.extras
        return np.array([row.get(key, np.nan) for row in source], dtype=np.float64)

    def per_worker(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Compute durations, latencies and communication durations (latency minus
        compute, at least 0) over (row, worker); NaN where a worker delivered nothing."""
        shape = (len(self.rows), self.n_workers)
        compute = np.array(self.compute, dtype=np.float64).reshape(shape)
        latency = np.array(self.latency, dtype=np.float64).reshape(shape)
        return compute, latency, np.maximum(latency - compute, 0.0)
