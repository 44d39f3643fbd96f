"""Straggler modifiers that follow a per-worker chain: two-state Markov and burst models."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import ClassVar, cast

import numpy as np

from daskstraggle._validation import check_choice, check_positive
from daskstraggle.errors import InvalidParameterError
from daskstraggle.latency.base import LatencyModel, LatencySampler, Streams, register_model
from daskstraggle.latency.modifiers import (
    _check_base,
    _check_probability,
    _check_workers,
    _FactorSampler,
    _Modifier,
    _sub_sampler,
)

__all__ = ["Bursts", "TwoStateMarkov"]


# --------------------------------------------------------------------------- Markov chains


class _ChainSampler(_FactorSampler):
    """Per-worker two-state (fast/slow) chains advanced lazily by iteration or by time."""

    stateless = False

    def __init__(self, model: TwoStateMarkov, n_workers: int, streams: Streams) -> None:
        super().__init__(model.base, n_workers, streams)
        self.slow = _sub_sampler(model.slow, n_workers, streams)
        self.slow_factor = model.slow_factor
        self.p_slow, self.p_fast = model.p_slow, cast(float, model.p_fast)
        self.step, self.initial = model.step, model.initial
        workers = cast("tuple[int, ...] | None", model.workers)  # normalised by __post_init__
        self.listed = np.zeros(n_workers, dtype=bool)
        self.listed[list(range(n_workers)) if workers is None else list(workers)] = True
        self._slow: list[bool | None] = [None] * n_workers
        self._step_index = [0] * n_workers

    def _init(self, worker_index: int) -> bool:
        state = self._slow[worker_index]
        if state is None:
            if self.initial == "stationary":
                pi = self.p_slow / (self.p_slow + self.p_fast)
                state = bool(self.streams[worker_index].random() < pi)
            else:
                state = self.initial == "slow"
            self._slow[worker_index] = state
        return state

    def _advance(self, worker_index: int, time: float, iteration: int) -> bool:
        state = self._init(worker_index)
        if self.step == "iteration":
            target = int(iteration)
        else:
            target = math.floor(float(time) / float(self.step))
        n_steps = target - self._step_index[worker_index]
        if n_steps <= 0:
            return state
        self._step_index[worker_index] = target
        total = self.p_slow + self.p_fast
        if total == 0.0:
            return state
        # n-step transition of a two-state chain in closed form: one uniform per advance
        pi = self.p_slow / total
        prob_slow = pi + (float(state) - pi) * (1.0 - total) ** n_steps
        state = bool(self.streams[worker_index].random() < prob_slow)
        self._slow[worker_index] = state
        return state

    def state(self, worker_index: int) -> bool:
        """Return whether ``worker_index`` is slow now (True) or fast (False)."""
        if not self.listed[worker_index]:
            return False
        return self._init(worker_index)

    def _source(
        self, worker_index: int, time: float, iteration: int
    ) -> tuple[LatencySampler | None, float]:
        """Return the slow model (if any) in the slow state, else the base and the factor."""
        slow = self.listed[worker_index] and self._advance(worker_index, time, iteration)
        if slow and self.slow is not None:
            return self.slow, 1.0
        return self.base, self.slow_factor if slow and self.slow_factor is not None else 1.0


@register_model
@dataclass(frozen=True, kw_only=True, slots=True)
class TwoStateMarkov(_Modifier):
    """Two-state Markov stragglers: each worker is fast or slow and switches at random.

    Each listed worker's chain moves fast -> slow with probability ``p_slow`` and
    slow -> fast with probability ``p_fast`` once per iteration (``step="iteration"``)
    or once per ``step`` seconds of time. The chain is advanced lazily to the
    ``iteration`` / ``time`` of each call, using only that worker's stream. In the slow
    state the compute time is multiplied by ``slow_factor``, or drawn from the ``slow``
    model instead of ``base`` (give exactly one of the two).

    Parameters
    ----------
    base : LatencyModel or None, default=None
        Model of the fast state. None scales the real (``measured``) compute time.
    slow_factor : float or None, default=None
        Compute-time factor (> 0) in the slow state.
    slow : LatencyModel or None, default=None
        Model drawn from in the slow state (must have a distribution).
    p_slow : float
        Probability of switching fast -> slow at each step.
    p_fast : float or None, default=None
        Probability of switching slow -> fast at each step (None: equal to ``p_slow``).
    step : "iteration" or float, default="iteration"
        When the chain steps: at each iteration, or every ``step`` seconds.
    initial : {"fast", "slow", "stationary"}, default="fast"
        First state; "stationary" draws it with P(slow) = p_slow / (p_slow + p_fast).
    workers : int, tuple of int or None, default=None
        Workers that follow a chain (None: all); the others are always fast.

    See Also
    --------
    Bursts : DSAG's burst chain, stepped in time.

    Notes
    -----
    The age paper's model (rate mu_s when slow, mu_f when fast, switching with
    probability p at the start of each iteration) is
    ``TwoStateMarkov(base=MultiMessage(alpha=a, rate=mu_f),
    slow=MultiMessage(alpha=a, rate=mu_s), p_slow=p)``.

    Sampler method ``state(worker_index)`` tells whether a worker is slow now.

    References
    ----------
    .. [1] E. Ozfatura, B. Buyukates, D. Gündüz and S. Ulukus, "Age-Based Coded Computation
       for Bias Reduction in Distributed Learning", IEEE GLOBECOM, 2020, §V (two-state
       Markov straggling).

    Examples
    --------
    >>> m = TwoStateMarkov(slow_factor=4.0, p_slow=0.0, initial="slow")
    >>> s = m.sampler(2, rng=0)
    >>> s.sample(0, measured=0.5), s.state(0)
    ((2.0, 0.0), True)
    """

    name: ClassVar[str] = "markov"
    _sampler_class = _ChainSampler
    slow_factor: float | None = None
    slow: LatencyModel | None = None
    p_slow: float
    p_fast: float | None = None
    step: str | float = "iteration"
    initial: str = "fast"
    workers: int | tuple[int, ...] | None = None

    _checks = (*_Modifier._checks, ("slow", _check_base),
               ("slow_factor", functools.partial(check_positive, allow_none=True)),
               ("p_slow", _check_probability), ("workers", _check_workers))

    def __post_init__(self) -> None:
        LatencyModel.__post_init__(self)
        caller, slow, p_slow = "TwoStateMarkov", self.slow, cast(float, self.p_slow)
        if (slow is None) == (self.slow_factor is None):
            raise InvalidParameterError(
                f"The 'slow_factor' and 'slow' parameters of {caller}: give exactly one of "
                f"them (a factor on the compute time, or a model for the slow state). Got "
                f"slow_factor={self.slow_factor!r}, slow={slow!r} instead."
            )
        if slow is not None and not slow.has_distribution:
            raise InvalidParameterError(
                f"The 'slow' parameter of {caller} must be a model with a distribution (such "
                f"as gamma(...)). Got {slow!r} instead; use slow_factor to scale the measured "
                "time."
            )
        p_fast = p_slow if self.p_fast is None else _check_probability(
            self.p_fast, name="p_fast", caller=caller
        )
        step: str | float
        if isinstance(self.step, str):
            step = check_choice(self.step, name="step", caller=caller, choices=["iteration"])
        else:
            step = check_positive(self.step, name="step", caller=caller,
                                  remedy="Give 'iteration' or a number of seconds.")
        initial = check_choice(
            self.initial, name="initial", caller=caller, choices=["fast", "slow", "stationary"]
        )
        if initial == "stationary" and p_slow + p_fast == 0.0:
            raise InvalidParameterError(
                f"The 'initial' parameter of {caller} cannot be 'stationary' when p_slow and "
                "p_fast are both 0 (no stationary law). Choose 'fast' or 'slow'."
            )
        self._set(p_fast=p_fast, step=step)


@register_model
@dataclass(frozen=True, kw_only=True, slots=True)
class Bursts(_Modifier):
    """Latency bursts: DSAG reference code's two-state chain stepped in time.

    Every ``period`` seconds each listed worker's chain steps with transition matrix
    ``[[1 - p_enter, p_enter], [p_leave, 1 - p_leave]]`` (state 0: normal, 1: burst);
    during a burst the compute time is multiplied by ``factor``. Chains start outside a
    burst.

    Parameters
    ----------
    base : LatencyModel or None, default=None
        Model outside bursts. None scales the real (``measured``) compute time.
    factor : float, default=1.103
        Compute-time factor (> 0) during a burst.
    p_enter : float, default=0.011
        Probability of entering a burst at each step.
    p_leave : float, default=0.286
        Probability of leaving a burst at each step.
    period : float, default=10.0
        Seconds between steps.
    workers : int, tuple of int or None, default=None
        Workers with bursts (None: all).

    See Also
    --------
    TwoStateMarkov : The general chain (this model is a special case).

    References
    ----------
    .. [1] The DSAG paper (:mod:`daskstraggle.latency`), §IV (event-driven simulation) and
       its reference code (burst model).

    Examples
    --------
    >>> s = Bursts(p_enter=1.0, p_leave=0.0, factor=2.0).sampler(1, rng=0)
    >>> s.sample(0, time=5.0, measured=1.0), s.sample(0, time=10.0, measured=1.0)
    ((1.0, 0.0), (2.0, 0.0))
    """

    name: ClassVar[str] = "bursts"
    _checks = (*_Modifier._checks, ("factor", check_positive), ("p_enter", _check_probability),
               ("p_leave", _check_probability), ("period", check_positive),
               ("workers", _check_workers))
    factor: float = 1.103
    p_enter: float = 0.011
    p_leave: float = 0.286
    period: float = 10.0
    workers: int | tuple[int, ...] | None = None

    def _make_sampler(self, n_workers: int, streams: Streams) -> LatencySampler:
        # the chain of TwoStateMarkov, stepped every ``period`` seconds
        chain = TwoStateMarkov(base=self.base, slow_factor=self.factor, p_slow=self.p_enter,
                               p_fast=self.p_leave, step=self.period, workers=self.workers)
        return _ChainSampler(chain, n_workers, streams)
