"""When a run writes its checkpoint, and whether reloaded data are the checkpoint's (pure).

Writing the file is the runtime's (:class:`daskstraggle.runtime.checkpoint.Checkpointer`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from daskstraggle._validation import check_int, check_positive

__all__ = ["CHECKPOINT_INTERVAL", "CheckpointSchedule", "same_stats"]

#: Seconds between checkpoints when neither an interval nor an iteration count is given.
CHECKPOINT_INTERVAL = 60.0
#: Relative difference tolerated between the statistics of the reloaded data and the
#: checkpoint's (sums folded in another order differ in their last bits).
_STATS_RTOL = 1e-9


@dataclass
class CheckpointSchedule:
    """How often a run writes its checkpoint: every ``interval`` seconds of the runtime's
    clock (simulated seconds for the simulated runtime), every ``iterations`` rounds,
    and/or before the iterate would drift more than ``divergence`` from the written one.

    The divergence rule is MLfabric's bounded-divergence replication: with ``point`` the
    iterate of the last round and ``step`` its distance from the round before, a write is
    due when ``||point - written|| + ||step|| > divergence`` (the next round, moving as far
    as the last, would pass the bound), so the written state stays within about
    ``divergence`` of the run's at every round boundary. A run's first round boundary
    writes (there is nothing written yet).

    Parameters
    ----------
    interval : float or None, default=None
        Seconds between writes. None: 60 s, unless ``iterations`` or ``divergence`` is
        given.
    iterations : int or None, default=None
        Also write every this many rounds.
    divergence : float or None, default=None
        Also write when the iterate would drift further than this (Frobenius norm) from
        the written one.

    Examples
    --------
    >>> schedule = CheckpointSchedule(iterations=3)
    >>> schedule.start(0, now=0.0)
    >>> schedule.due(2, now=1.0), schedule.due(3, now=1.0)
    (False, True)
    >>> replica = CheckpointSchedule(divergence=1.0)
    >>> replica.start(0, now=0.0, point=np.zeros(2))
    >>> replica.due(1, now=0.0, point=np.array([0.3, 0.0]))
    False
    >>> replica.due(2, now=0.0, point=np.array([0.6, 0.0]))  # 0.6 + 0.3 < 1
    False
    >>> replica.due(3, now=0.0, point=np.array([0.9, 0.0]))  # 0.9 + 0.3 > 1
    True
    """

    interval: float | None = None
    iterations: int | None = None
    divergence: float | None = None
    _last_time: float = field(default=-math.inf, init=False, repr=False)
    _last_iteration: int = field(default=0, init=False, repr=False)
    _written: np.ndarray | None = field(default=None, init=False, repr=False)
    _point: np.ndarray | None = field(default=None, init=False, repr=False)
    _step: float = field(default=0.0, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.interval is not None:
            self.interval = check_positive(self.interval, name="checkpoint_interval",
                                           caller="run")
        if self.iterations is not None:
            self.iterations = check_int(self.iterations, name="checkpoint_iterations",
                                        caller="run", low=1)
        if self.divergence is not None:
            self.divergence = check_positive(self.divergence, name="replica_divergence",
                                             caller="run")
        if self.interval is None and self.iterations is None and self.divergence is None:
            self.interval = CHECKPOINT_INTERVAL

    def start(self, iteration: int, now: float, point: np.ndarray | None = None) -> None:
        """Count from ``iteration`` at time ``now`` (a fresh or resumed run, or a write),
        the written iterate being ``point`` (None: nothing written yet)."""
        self._last_time, self._last_iteration = now, iteration
        self._written = None if point is None else np.array(point, dtype=np.float64)

    def due(self, iteration: int, now: float, point: np.ndarray | None = None) -> bool:
        """Whether a checkpoint is due after ``iteration`` rounds at time ``now``, the last
        round's iterate being ``point``. Ask once per round boundary: the divergence rule
        measures the step from the point of the call before."""
        by_time = self.interval is not None and now - self._last_time >= self.interval
        by_count = (self.iterations is not None
                    and iteration - self._last_iteration >= self.iterations)
        diverging = self._diverging(point)  # every call: it remembers the step
        return by_time or by_count or diverging

    def _diverging(self, point: np.ndarray | None) -> bool:
        """The divergence rule (False without a bound or a point)."""
        if self.divergence is None or point is None:
            return False
        point = np.asarray(point, dtype=np.float64)
        if self._point is not None and self._point.shape == point.shape:
            self._step = float(np.linalg.norm(point - self._point))
        self._point = point.copy()
        if self._written is None or self._written.shape != point.shape:
            return True
        return float(np.linalg.norm(point - self._written)) + self._step > self.divergence


def same_stats(recorded: Any, fresh: Any) -> bool:
    """Whether two ``MatrixStats`` describe the same data (up to summation order).

    Examples
    --------
    >>> from types import SimpleNamespace as S
    >>> same_stats(S(n_samples=3, sq_norm=2.0), S(n_samples=3, sq_norm=2.0 + 1e-15))
    True
    """
    for name in ("n_samples", "column_sums", "sq_norm", "label_counts", "label_sum",
                 "column_sq_dev"):
        a, b = getattr(recorded, name, None), getattr(fresh, name, None)
        if a is None or b is None or isinstance(a, dict):
            if a != b:
                return False
            continue
        a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        scale = max(float(np.max(np.abs(a), initial=0.0)), 1e-300)
        if a.shape != b.shape or float(np.max(np.abs(a - b), initial=0.0)) > _STATS_RTOL * scale:
            return False
    return True
