"""The engine's resilience rules (:mod:`daskstraggle.engine.resilience`, re-exported) with
their settings from :mod:`daskstraggle.config`, and set-up and clean-up steps bounded in
time (a frozen worker would hold them up forever). No dask import."""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Iterable
from typing import Any

from daskstraggle.engine import resilience as _engine
from daskstraggle.engine.resilience import (
    SlowBounds,
    check_memory,
    helper_targets,
    next_fraction,
    overdue_workers,
    replacement_targets,
    split_unit,
)
from daskstraggle.errors import StraggleError, StraggleWarning

__all__ = [
    "SlowBounds",
    "bounded",
    "check_memory",
    "frozen_bound",
    "helper_targets",
    "next_fraction",
    "overdue_workers",
    "quietly",
    "replacement_targets",
    "setup_timeout",
    "slow_bounds",
    "split_unit",
    "stale_bound",
    "wait_ready",
]

def _config() -> Any:
    from daskstraggle import config  # dask.config, read when a bound is needed

    return config


def setup_timeout() -> float:
    """Seconds a set-up step that every worker must answer (installing the injector,
    starting the throttle) may take (``daskstraggle.timeouts.setup``)."""
    return float(_config().seconds("timeouts.setup"))


def slow_bounds(frozen_after: float | None = None, stale_after: int | None = None
                ) -> SlowBounds:
    """The frozen and stale bounds with the ``daskstraggle.frozen`` and
    ``daskstraggle.stale`` settings (:mod:`daskstraggle.config`) read now."""
    config = _config()
    return SlowBounds(
        frozen_after=frozen_after, stale_after=stale_after,
        frozen_minimum=float(config.seconds("frozen.minimum")),
        frozen_factor=float(config.number("frozen.factor")),
        stale_minimum_rounds=float(config.count("stale.minimum-rounds")),
        stale_factor=float(config.number("stale.factor")),
        stale_wait=float(config.seconds("stale.minimum-wait")),
    )


def frozen_bound(frozen_after: float | None, recent: Iterable[float]) -> float:
    """:func:`daskstraggle.engine.resilience.frozen_bound` with the ``daskstraggle.frozen``
    settings.

    Examples
    --------
    >>> frozen_bound(None, [0.1, 0.2, 0.3]), frozen_bound(None, [2.0, 3.0]), frozen_bound(5.0, [])
    (30.0, 50.0, 5.0)
    """
    bounds = slow_bounds()
    return _engine.frozen_bound(frozen_after, recent, minimum=bounds.frozen_minimum,
                                factor=bounds.frozen_factor)


def stale_bound(stale_after: int | None, ages: Iterable[int]) -> float:
    """:func:`daskstraggle.engine.resilience.stale_bound` with the ``daskstraggle.stale``
    settings.

    Examples
    --------
    >>> stale_bound(None, []), stale_bound(10, [100])
    (50.0, 10.0)
    """
    bounds = slow_bounds()
    return _engine.stale_bound(stale_after, ages, minimum=bounds.stale_minimum_rounds,
                               factor=bounds.stale_factor)


def bounded(what: str, fn: Callable[..., Any], *args: Any, timeout: float | None = None) -> Any:
    """Return ``fn(*args)``, a set-up step that waits for every worker (a frozen one would
    hold it up forever), waiting at most ``timeout`` s (default :func:`setup_timeout`);
    raise StraggleError naming ``what`` if it has not returned in time (it goes on in a
    background thread). ``fn``'s own errors propagate."""
    limit = setup_timeout() if timeout is None else timeout
    outcome = _within(what, limit, fn, *args)
    if not outcome:
        raise StraggleError(
            f"Could not {what}: a worker did not answer within {limit:g} s (frozen?); "
            "nothing was run. Check the workers (or restart them) and run again."
        )
    ok, value = outcome[0]
    if not ok:
        raise value
    return value


def quietly(what: str, fn: Callable[..., Any], *args: Any) -> None:
    """Call a clean-up step, waiting at most the ``daskstraggle.timeouts.cleanup`` setting's
    seconds (a frozen worker never answers the scheduler's broadcast); turn its failure or
    overrun into a warning."""
    bound = float(_config().seconds("timeouts.cleanup"))
    outcome = _within(what, bound, fn, *args)
    if not outcome:
        why = f"no answer within {bound:g} s: a worker may be frozen"
    elif not outcome[0][0]:
        why = f"{type(outcome[0][1]).__name__}: {outcome[0][1]}"
    else:
        return
    warnings.warn(f"Could not {what} ({why}); the workers may stay slowed until they "
                  "restart.", StraggleWarning, stacklevel=3)


def _within(what: str, limit: float, fn: Callable[..., Any], *args: Any
            ) -> list[tuple[bool, Any]]:
    """Call ``fn(*args)`` in a daemon thread named for ``what`` and wait at most ``limit``
    s; return ``[(True, value)]``, ``[(False, error)]``, or ``[]`` if it is still running."""
    outcome: list[tuple[bool, Any]] = []

    def call() -> None:
        try:
            outcome.append((True, fn(*args)))
        except BaseException as err:
            outcome.append((False, err))

    thread = threading.Thread(target=call, name=f"daskstraggle-{what}", daemon=True)
    thread.start()
    thread.join(limit)
    return outcome


def wait_ready(ac: Any, timeout: float) -> None:
    """Wait until ``ac`` (an ``as_completed`` or a ``ResultStream``) has a result queued,
    at most ``timeout`` s (checked under its condition's lock, which its notifications
    hold: else a result queued between the check and the wait would sleep the whole
    timeout)."""
    with ac.thread_condition:
        if not ac.has_ready():
            ac.thread_condition.wait(timeout=timeout)
