"""The ``simulate`` command's size checks and output (table and ``--json`` summary)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from daskstraggle.errors import InputError

__all__ = ["SIMULATE_MAX_CELLS", "SIMULATE_MAX_EVENTS", "SIMULATE_MAX_FAULT_SECONDS",
           "check_fault_size", "check_simulate_size", "fault_summary", "fault_table",
           "simulate_summary", "simulate_table"]

#: Most Monte Carlo draws (--workers x --samples) and simulated worker-iterations
#: (--workers x --iterations) of ``simulate``: one double each, 400 MB.
SIMULATE_MAX_CELLS = 50_000_000
#: Most worker-iterations of a model with state over time, simulated event by event
#: (about 20 us each: 20 s).
SIMULATE_MAX_EVENTS = 1_000_000
#: Most real seconds a simulation with fault terms may be estimated to take
#: (:func:`daskstraggle.runtime.fault_simulation.estimate_duration`).
SIMULATE_MAX_FAULT_SECONDS = 60.0
#: Events the table lists (``--json`` has them all).
_EVENTS_SHOWN = 40


def check_simulate_size(n_workers: int, n_samples: int, n_iterations: int, *,
                        stateful: bool) -> None:
    """Refuse a simulation too large for memory (or, event by event, for time)."""
    for flag, count in (("--samples", n_samples), ("--iterations", n_iterations)):
        if count < 1 or n_workers * count > SIMULATE_MAX_CELLS:
            raise InputError(
                f"{flag} x --workers must be in [1, {SIMULATE_MAX_CELLS:,}] (memory: one "
                f"double each); got {count} x {n_workers}; lower {flag}"
            )
    if stateful and n_workers * n_iterations > SIMULATE_MAX_EVENTS:
        raise InputError(
            f"--iterations x --workers must be at most {SIMULATE_MAX_EVENTS:,} for a latency "
            f"model with state over time (simulated event by event, about 20 us each); got "
            f"{n_iterations} x {n_workers}; lower --iterations or --workers"
        )


def check_fault_size(n_workers: int, n_iterations: int) -> None:
    """Refuse a simulation with faults estimated above ``SIMULATE_MAX_FAULT_SECONDS``."""
    from daskstraggle.runtime.fault_simulation import estimate_duration

    if n_iterations < 1:
        raise InputError(f"--iterations must be >= 1, got {n_iterations}")
    seconds = estimate_duration(n_workers, n_iterations)
    if seconds <= SIMULATE_MAX_FAULT_SECONDS:
        return
    most = math.floor(SIMULATE_MAX_FAULT_SECONDS / estimate_duration(n_workers, 1))
    remedy = f"lower --iterations to at most {most:,} or --workers" if most >= 1 else \
        "lower --workers"
    raise InputError(
        f"--workers {n_workers} x --iterations {n_iterations} with fault terms would take "
        f"about {seconds:,.0f} s (DSAG in the simulated runtime, task by task, slower with "
        f"more workers), above {SIMULATE_MAX_FAULT_SECONDS:g} s; {remedy}"
    )


def _durations(sim: Any) -> dict[str, float]:
    durations = np.asarray(sim.iteration_duration)
    return {"mean": float(durations.mean()), "median": float(np.median(durations)),
            "p95": float(np.quantile(durations, 0.95))}


def simulate_summary(model: Any, source: str, sim: Any, order: Any) -> dict[str, Any]:
    """Return what ``simulate --json`` prints."""
    n_workers, n_wait = sim.n_workers, sim.n_wait
    return {
        "model": model.to_dict(),
        "source": source,
        "n_workers": n_workers,
        "n_wait": n_wait,
        "n_iterations": sim.n_iterations,
        "order_statistics": None if order is None else {
            "w": list(range(1, n_workers + 1)), "mean_s": order.mean.tolist()},
        "predicted_wth_fastest_s": None if order is None else float(order.mean[n_wait - 1]),
        "iteration_duration_s": _durations(sim),
        "total_time_s": float(sim.total_time),
        "mean_fresh": float(np.mean(sim.n_fresh)),
        "mean_stale": float(np.mean(sim.n_stale)),
        "participation": sim.participation.tolist(),
    }


def fault_summary(model: Any, source: str, sim: Any) -> dict[str, Any]:
    """Return what ``simulate --json`` prints for a spec with fault terms: the fields of
    :func:`simulate_summary` (no order statistics) plus the faults and the events."""
    from daskstraggle.runtime.fault_simulation import N_FEATURES, ROWS_PER_WORKER

    return dict(
        simulate_summary(model, source, sim, None),
        faults=[f.to_spec() for f in sim.faults],
        method="dsag",
        problem={"name": "least-squares", "rows_per_worker": ROWS_PER_WORKER,
                 "n_features": N_FEATURES},
        stale_participation=sim.stale.mean(axis=0).tolist(),
        events=[dict(e) for e in sim.events],
        faults_not_reached=[f.to_spec() for f in sim.not_reached],
        workers_at_end=list(sim.workers),
    )


def simulate_table(source: str, load: float, collect_window: float, sim: Any,
                   order: Any) -> str:
    """Return what ``simulate`` prints without ``--json``."""
    n_workers, n_wait = sim.n_workers, sim.n_wait
    lines = [
        f"latency model: {source}",
        f"N = {n_workers} workers, waiting for w = {n_wait}, load {load:g}",
        "",
    ]
    if order is None:
        lines.append("(no one-round order statistics: the model has state over time; see the "
                     "simulated iterations)")
    else:
        lines.append("expected latency of the w-th fastest worker (one round, all workers "
                     "start together):")
        shown = sorted({1, n_wait, n_workers} | (set(range(1, n_workers + 1)) if n_workers <= 12
                       else {max(1, round(q * n_workers)) for q in (0.25, 0.5, 0.75, 0.9)}))
        lines += [f"  w = {w:>5d}   {seconds(order.mean[w - 1])}" for w in shown]
    u = np.asarray(sim.participation)
    lines += [
        "",
        f"{sim.n_iterations} iterations waiting for the {n_wait} fastest fresh results "
        f"(stale workers re-tasked at once, {collect_window:g} collect window):",
        *_iteration_lines(sim),
        f"  share of iterations each worker is fresh in: min {u.min():.2f}, max {u.max():.2f}",
    ]
    return "\n".join(lines)


def _iteration_lines(sim: Any) -> list[str]:
    d = _durations(sim)
    return [
        f"  per iteration: mean {seconds(d['mean'])}, median {seconds(d['median'])}, "
        f"95th percentile {seconds(d['p95'])}",
        f"  total time:    {seconds(sim.total_time)}",
        f"  fresh results per iteration: {np.mean(sim.n_fresh):.2f}; stale: "
        f"{np.mean(sim.n_stale):.2f}",
    ]


def fault_table(source: str, collect_window: float, sim: Any) -> str:
    """Return what ``simulate`` prints without ``--json`` for a spec with fault terms."""
    from daskstraggle.runtime.fault_simulation import ROWS_PER_WORKER

    n_workers = sim.n_workers

    def share(u: Any) -> str:
        return ", ".join(f"{i}: {v:.2f}" for i, v in enumerate(u)) if n_workers <= 12 else \
            f"min {u.min():.2f}, max {u.max():.2f}"

    lines = [
        f"latency model: {source}",
        f"faults: {' + '.join(f.to_spec() for f in sim.faults)}",
        f"N = {n_workers} workers, waiting for w = {sim.n_wait}",
        "",
        "(no one-round order statistics: the faults change the workers during the run; see "
        "the simulated iterations)",
        "",
        f"{sim.n_iterations} iterations of DSAG waiting for the {sim.n_wait} fastest fresh "
        f"results in the simulated runtime (stale results folded in and their workers "
        f"re-tasked at once, {collect_window:g} collect window; least squares, "
        f"{ROWS_PER_WORKER} rows per worker index):",
        *_iteration_lines(sim),
        f"  share of iterations each worker index is fresh in: {share(sim.participation)}",
        f"  and stale in (computed at an older iterate, folded in): "
        f"{share(sim.stale.mean(axis=0))}",
        "",
        "events (simulated time, iteration):" if sim.events else
        "events: none (no fault was reached before the run ended)",
        *[f"  {seconds(e['time'])}  it {e['iteration']:>5d}  {_event_text(e)}"
          for e in sim.events[:_EVENTS_SHOWN]],
    ]
    if len(sim.events) > _EVENTS_SHOWN:
        lines.append(f"  ... and {len(sim.events) - _EVENTS_SHOWN} more (--json lists them all)")
    if sim.not_reached:
        lines.append(f"not reached (the run ended at {sim.total_time:.3f} s): "
                     + " + ".join(f.to_spec() for f in sim.not_reached))
    moved = [f"{i} -> {w}" for i, w in enumerate(sim.workers) if w != str(i)]
    lines.append("worker of each index at the end: "
                 + (", ".join(moved) + "; the others unchanged" if moved else "unchanged"))
    return "\n".join(lines)


_DATA = {"reloaded": "rows reloaded from the source", "fetched":
         "rows fetched from the retiring worker", "from-helper": "rows already held there"}


def _event_text(event: dict[str, Any]) -> str:
    """One event in words (a fault's as its kind describes it)."""
    from daskstraggle.latency.faults import FAULTS

    kind = event["event"]
    if kind in FAULTS:
        return FAULTS.get(kind).describe(event)
    rows = ", ".join(f"[{a}, {b})" for a, b in event["rows"])
    index = f"worker index {event['worker_index']} (rows {rows})"
    if kind == "move":
        return (f"move: {index} from worker {event['from']} to {event['to']} "
                f"({event['kind']}: {event['reason']}; {_DATA[event['data']]})")
    if kind == "help":
        return f"help: worker {event['worker']} shares the units of {index}"
    return f"stop helping: worker {event['worker']} leaves {index} ({event['reason']})"


def seconds(value: float) -> str:
    """A time for the tables: milliseconds below one second."""
    value = float(value)
    return f"{value * 1e3:8.2f} ms" if value < 1 else f"{value:8.3f} s "
