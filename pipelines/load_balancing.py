#!/usr/bin/env python
"""DSAG load balancing: per-worker latency (paper Fig. 7) and DSAG vs DSAG-LB time to accuracy.

Two experiments of the DSAG paper and the load-balancing issue's check, read from
``pipelines/load_balancing.toml``:

(fig7) §VI, Fig. 7: N = 8 workers, DSAG waiting for all of them (w = N). From iteration
       40 three randomly chosen (seeded) workers compute twice as slowly, from iteration
       90 three others twice as fast (the ``schedule`` latency modifier on a gamma base).
       Run without and with the load balancer (``DSAG(..., balance=LoadBalancer(...))``),
       in simulated time (section ``sim``, ``SimRuntime``) and on a LocalCluster of 8
       process workers with the same law injected as delays (section ``cluster``,
       ``DaskRuntime``). Reported per phase (before the slow-down, slowed, sped up, and the
       paper's final 20 iterations): the mean iteration time and the largest and smallest
       per-worker mean latency; the figure shows every worker's latency per iteration with
       the balancing events marked (the paper: "for the final 20 iterations, the overall
       latency of the unbalanced system is more than twice that of the system with
       load-balancing").
(tta)  §VII-B, Fig. 8 (top right): DSAG (w = 10, 10 subpartitions per worker) and DSAG-LB
       on logistic regression at N = 49 in the artificial scenario, simulated time. Every
       round's point is evaluated exactly after the run (``record_iterates``); reported:
       the relative gap ``(f - f*) / f*`` against an independent exact optimum, the
       simulated time at which each variant first reaches each target gap (medians over
       latency seeds) and DSAG-LB's reduction of that time (the paper: 30-40 % at gaps
       1e-6 to 1e-12).
(check) The load-balancing issue's acceptance check, asserted once (``--quick``: one
       repeat) by ``tests/test_pipeline_load_balancing.py``, repeated: a LocalCluster of 4 process
       workers, worker 0 twice as slow (injected delays), DSAG with w = N and 20
       subpartitions, logistic regression on 4000 x 8 Gaussian data; an unbalanced run,
       then a balanced run (``LoadBalancer(min_samples=5)``) in the same cluster, a new
       cluster per repeat. Reported per repeat and as medians: balancing events, when the
       balanced run settled, the spread (max/min) of the per-worker mean latency, the
       median iteration time of both runs and their ratio, the data transfers (the run's
       ``unit_transfers`` and the workers' ``transfer_incoming_log``), and whether the
       issue's thresholds hold (spread < 1.2, iterations >= 25 % shorter, no transfers).

Usage::

    python pipelines/load_balancing.py                      # all sections, ~10 minutes
    python pipelines/load_balancing.py --sections sim,tta   # simulation only
    python pipelines/load_balancing.py --sections check     # the issue's check, ~1.2 minutes
    python pipelines/load_balancing.py --quick --sections sim tta   # smoke run, seconds

Results go to ``results/load_balancing/<UTC timestamp>.json`` (every run's numbers, the
spec, machine, versions), a Markdown report with the same name and ``.md``, and figures
``-fig7.png`` and ``-tta.png`` (when matplotlib is installed).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import tomllib  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SPEC = Path(__file__).with_suffix(".toml")
SECTIONS = ("sim", "cluster", "tta", "check")
# a gap of exactly 0 is drawn at this floor
GAP_FLOOR = 1e-16


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- setup


def settings(spec: dict[str, Any], quick: bool) -> dict[str, Any]:
    """The spec with the ``[quick]`` overrides applied (data, fig7, cluster, tta, check)."""
    data = dict(spec["data"])
    fig7 = {k: v for k, v in spec["fig7"].items() if not isinstance(v, dict) or k == "balancer"}
    fig7["balancer"] = dict(fig7["balancer"])
    sim = dict(spec["fig7"]["sim"])
    cluster = dict(spec["fig7"]["cluster"])
    tta = {k: v for k, v in spec["tta"].items() if k != "balancers"}
    balancers = {k: dict(v) for k, v in spec["tta"]["balancers"].items()}
    check = dict(spec["check"])
    check["balancer"] = dict(check["balancer"])
    check["thresholds"] = dict(check["thresholds"])
    if quick:
        q = spec["quick"]
        data.update({k: q[k] for k in ("n_rows", "n_features")})
        qf = dict(q["fig7"])
        sim["repeats"] = qf.pop("repeats")
        fig7["balancer"].update(qf.pop("balancer", {}))
        fig7.update(qf)
        qc = dict(q["cluster"])
        cluster["warmup_iterations"] = qc.pop("warmup_iterations")
        cluster["fig7"] = qc
        tta.update(q["tta"])
        check.update(q["check"])
    return {"data": data, "fig7": fig7, "sim": sim, "cluster": cluster, "tta": tta,
            "balancers": balancers, "check": check}


def pick_workers(n_workers: int, n_slow: int, n_fast: int, seed: int) -> tuple[list[int],
                                                                                 list[int]]:
    """Disjoint random sets of workers to slow down and to speed up (seeded)."""
    perm = np.random.default_rng(seed).permutation(n_workers)
    return sorted(int(w) for w in perm[:n_slow]), \
        sorted(int(w) for w in perm[n_slow:n_slow + n_fast])


def fig7_latency(cfg: dict[str, Any], slow: list[int], fast: list[int]) -> str:
    """The Fig. 7 latency spec: the gamma base times the schedule of changes."""
    changes = [[cfg["slow_at"], slow, cfg["slow_factor"]],
               [cfg["fast_at"], fast, cfg["fast_factor"]]]
    return f"{cfg['base']} + schedule(changes={changes!r})"


def make_balancer(params: dict[str, Any]) -> Any:
    from daskstraggle.balance.balancer import LoadBalancer

    return LoadBalancer(**params)


# --------------------------------------------------------------------------- fig. 7


def phases(cfg: dict[str, Any], n_rows: int) -> dict[str, tuple[int, int]]:
    """Iteration ranges [a, b) of the phases (trace row t = iterate version t)."""
    return {
        "before": (0, cfg["slow_at"]),
        "slowed": (cfg["slow_at"], cfg["fast_at"]),
        "sped-up": (cfg["fast_at"], n_rows),
        f"final-{cfg['final']}": (max(n_rows - cfg["final"], 0), n_rows),
    }


def summarise_fig7(trace: Any, cfg: dict[str, Any]) -> dict[str, Any]:
    """Per-phase iteration time and per-worker mean latency of one run, plus its events."""
    latency = trace.latency.values  # (iteration, worker), NaN where nothing was delivered
    duration = trace.iteration_duration.values
    out: dict[str, Any] = {
        "iterations": int(latency.shape[0]),
        "total_s": float(trace.wall_time.values[-1]),
        "latency": latency.tolist(),
        "iteration_duration": duration.tolist(),
        "phases": {},
    }
    for name, (a, b) in phases(cfg, latency.shape[0]).items():
        per_worker = np.nanmean(latency[a:b], axis=0)
        out["phases"][name] = {
            "range": [a, b],
            "mean_iteration_s": float(duration[a:b].mean()),
            "worker_mean_s": per_worker.tolist(),
            "max_worker_mean_s": float(np.nanmax(per_worker)),
            "min_worker_mean_s": float(np.nanmin(per_worker)),
            "max_min_ratio": float(np.nanmax(per_worker) / np.nanmin(per_worker)),
        }
    out["events"] = events(trace)
    if "subpartitions" in trace:
        out["subpartitions"] = trace.subpartitions.values.tolist()
    return out


def events(trace: Any) -> list[dict[str, Any]]:
    """The balancing events of a trace (empty without balancing)."""
    if "balance_iteration" not in trace:
        return []
    return [
        {"iteration": int(trace.balance_iteration.values[k]),
         "time_s": float(trace.wall_time.values[min(int(trace.balance_iteration.values[k]),
                                                    trace.sizes["iteration"] - 1)]),
         "previous": trace.balance_previous.values[k].tolist(),
         "subpartitions": trace.balance_subpartitions.values[k].tolist(),
         "improvement": float(trace.balance_improvement.values[k]),
         "previous_imbalance": float(trace.balance_previous_imbalance.values[k]),
         "imbalance": float(trace.balance_imbalance.values[k])}
        for k in range(trace.sizes["balance_event"])
    ]


def _fig7_run(rt: Any, balanced: bool, cfg: dict[str, Any], matrix: Any, seed: int,
              n_iterations: int) -> Any:
    from daskstraggle.api import run_on
    from daskstraggle.methods import DSAG
    from daskstraggle.problems import Logistic
    from daskstraggle.runtime import StopRule

    balance = make_balancer(cfg["balancer"]) if balanced else None
    method = DSAG(cfg["workers"], subpartitions=cfg["subpartitions"], balance=balance)
    return run_on(rt, method, Logistic(), matrix, stop=StopRule(max_iter=n_iterations, tol=None),
                  step_size=cfg["step_size"], rng=seed).trace


def _phase_medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    keys = ("mean_iteration_s", "max_worker_mean_s", "min_worker_mean_s", "max_min_ratio")
    return {name: {k: float(np.median([r["phases"][name][k] for r in runs])) for k in keys}
            for name in runs[0]["phases"]}


def run_fig7(section: str, s: dict[str, Any]) -> dict[str, Any]:
    """Fig. 7 without and with balancing, simulated (``sim``) or on a LocalCluster."""
    from bench_foundation import make_logistic_data

    from daskstraggle import open_matrix
    from daskstraggle.runtime import DaskRuntime, SimRuntime

    cfg = dict(s["fig7"])
    if section == "cluster":
        cfg.update(s["cluster"].get("fig7", {}))
    repeats = s["sim"]["repeats"] if section == "sim" else s["cluster"]["repeats"]
    n = cfg["workers"]
    slow, fast = pick_workers(n, cfg["n_slow"], cfg["n_fast"], cfg["scenario_seed"])
    latency = fig7_latency(cfg, slow, fast)
    X, y = make_logistic_data(s["data"])
    matrix = open_matrix(X, labels=y, n_partitions=n)
    runs: dict[str, list[dict[str, Any]]] = {"unbalanced": [], "balanced": []}
    cluster = None
    if section == "cluster":
        cluster = DaskRuntime(n_workers=n, stragglers=latency, rng=0)
    try:
        if cluster is not None:
            t0 = time.perf_counter()
            _fig7_run(cluster, False, cfg, matrix, 0, s["cluster"]["warmup_iterations"])
            log(f"  cluster warm-up: {time.perf_counter() - t0:.1f} s")
        for rep in range(repeats):
            for label in runs:
                t0 = time.perf_counter()
                if cluster is not None:
                    trace = _fig7_run(cluster, label == "balanced", cfg, matrix, rep,
                                      cfg["n_iterations"])
                else:
                    with SimRuntime(n, latency=latency, rng=rep) as rt:
                        trace = _fig7_run(rt, label == "balanced", cfg, matrix, rep,
                                          cfg["n_iterations"])
                r = summarise_fig7(trace, cfg)
                r["seed"] = rep
                runs[label].append(r)
                final = r["phases"][f"final-{cfg['final']}"]
                log(f"  {section} {label:10s} seed {rep}: {r['iterations']} it, "
                    f"{r['total_s']:.2f} s, {len(r['events'])} events, final "
                    f"{final['mean_iteration_s']:.3f} s/it, worker max/min "
                    f"{final['max_min_ratio']:.2f} ({time.perf_counter() - t0:.1f} s real)")
    finally:
        if cluster is not None:
            cluster.close()
    median = {label: _phase_medians(rs) for label, rs in runs.items()}
    final = f"final-{cfg['final']}"
    ratios = [u["phases"][final]["mean_iteration_s"] / b["phases"][final]["mean_iteration_s"]
              for u, b in zip(runs["unbalanced"], runs["balanced"], strict=True)]
    return {
        "workers": n, "n_wait": n, "latency": latency, "slowed": slow, "sped_up": fast,
        "settings": cfg, "repeats": repeats, "runs": runs, "median": median,
        "final_phase": final,
        "final_unbalanced_over_balanced": {"per_seed": ratios,
                                           "median": float(np.median(ratios))},
        "n_events": {label: [len(r["events"]) for r in rs] for label, rs in runs.items()},
    }


# --------------------------------------------------------------------------- time to accuracy


def time_to(times: np.ndarray, gaps: np.ndarray, target: float) -> float:
    """First time the gap is <= target (inf if never)."""
    hit = np.flatnonzero(gaps <= target)
    return float(times[hit[0]]) if hit.size else math.inf


def _grid_median(runs: list[dict[str, Any]], grid: np.ndarray) -> list[float]:
    """Median over runs of each run's gap at the grid times (last recorded value)."""
    rows = []
    for r in runs:
        t, g = np.asarray(r["wall_time"]), np.asarray(r["gap"])
        k = np.searchsorted(t, grid, side="right") - 1
        rows.append(np.where(k >= 0, g[np.maximum(k, 0)], g[0]))
    return np.median(np.array(rows), axis=0).tolist()


def run_tta(s: dict[str, Any]) -> dict[str, Any]:
    """DSAG vs DSAG-LB variants: relative gap vs simulated time, times to target gaps."""
    from bench_foundation import make_logistic_data

    from daskstraggle import open_matrix
    from daskstraggle.api import run_on
    from daskstraggle.methods import DSAG
    from daskstraggle.problems import Logistic
    from daskstraggle.runtime import SimRuntime, StopRule

    cfg, targets = s["tta"], s["tta"]["targets"]
    n = cfg["workers"]
    X, y = make_logistic_data(s["data"])
    matrix = open_matrix(X, labels=y, n_partitions=n)
    variants: dict[str, dict[str, Any] | None] = {"dsag": None, **s["balancers"]}
    runs: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    for rep in range(cfg["repeats"]):
        for label, params in variants.items():
            t0 = time.perf_counter()
            balance = None if params is None else make_balancer(params)
            method = DSAG(cfg["n_wait"], subpartitions=cfg["subpartitions"], balance=balance)
            with SimRuntime(n, latency=cfg["latency"], rng=rep) as rt:
                res = run_on(rt, method, Logistic(), matrix,
                             stop=StopRule(max_iter=cfg["max_iter"], tol=None,
                                           time_budget=cfg["horizon"]),
                             step_size=cfg["step_size"], reference=True, rng=rep,
                             record_iterates=True)
            tr = res.trace
            optimum = float(tr.exact_objective.values[0] - tr.exact_gap.values[0])
            gaps = np.maximum(tr.exact_gap.values / abs(optimum), 0.0)
            times = tr.wall_time.values
            r = {
                "seed": rep, "optimum": optimum,
                "wall_time": times.tolist(), "gap": gaps.tolist(),
                "time_to": {f"{t:g}": time_to(times, gaps, t) for t in targets},
                "final_gap": float(gaps[-1]), "min_gap": float(gaps.min()),
                "iterations": int(times.size), "total_s": float(times[-1]),
                "mean_iteration_s": float(tr.iteration_duration.values.mean()),
                "mean_fresh": float(tr.n_fresh.values.mean()),
                "mean_stale": float(tr.n_stale.values.mean()),
                "events": events(tr),
            }
            runs[label].append(r)
            log(f"  tta {label:14s} seed {rep}: {r['iterations']} it, final gap "
                f"{r['final_gap']:.2e}, {len(r['events'])} events, "
                f"{r['mean_fresh']:.2f} fresh/it ({time.perf_counter() - t0:.1f} s real)")
    grid = np.linspace(0.0, cfg["horizon"], 401)
    median: dict[str, Any] = {}
    for label, rs in runs.items():
        median[label] = {
            "time_to": {f"{t:g}": float(np.median([r["time_to"][f"{t:g}"] for r in rs]))
                        for t in targets},
            **{k: float(np.median([r[k] for r in rs]))
               for k in ("final_gap", "min_gap", "iterations", "mean_iteration_s",
                         "mean_fresh", "mean_stale")},
            "n_events": float(np.median([len(r["events"]) for r in rs])),
            "first_event_s": _median_first_event(rs),
            "curve": _grid_median(rs, grid),
        }
    for m in median.values():
        m["reduction_vs_dsag"] = {}
        for t, v in m["time_to"].items():
            ref = median["dsag"]["time_to"][t]
            ok = math.isfinite(v) and math.isfinite(ref) and ref > 0
            m["reduction_vs_dsag"][t] = 1.0 - v / ref if ok else None
    return {"workers": n, "n_wait": cfg["n_wait"], "settings": cfg,
            "balancers": s["balancers"], "targets": targets, "grid": grid.tolist(),
            "runs": runs, "median": median}


def _median_first_event(runs: list[dict[str, Any]]) -> float | None:
    firsts = [r["events"][0]["time_s"] for r in runs if r["events"]]
    return float(np.median(firsts)) if firsts else None


# --------------------------------------------------------------------------- issue check


def make_check_data(cfg: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """The test's data: ``X ~ N(0, I)``, ``y = sign(x_0 + 0.5 noise)`` (labels +-1)."""
    rng = np.random.default_rng(cfg["data_seed"])
    X = rng.normal(size=(cfg["n_rows"], cfg["n_features"]))
    y = np.where(X[:, 0] + 0.5 * rng.normal(size=cfg["n_rows"]) > 0, 1.0, -1.0)
    return X, y


def window_stats(trace: Any, start: int) -> dict[str, Any]:
    """Per-worker mean latency and median iteration time over iterations ``[start:]``.

    Every value is None when the window is empty (the run ended before ``start``).
    """
    latency = trace.latency.values[start:]
    duration = trace.iteration_duration.values[start:]
    out: dict[str, Any] = {"window": [start, int(trace.sizes["iteration"])],
                           "worker_mean_s": None, "max_worker_mean_s": None,
                           "min_worker_mean_s": None, "spread": None,
                           "median_iteration_s": None}
    if duration.size == 0:
        return out
    seen = np.isfinite(latency)
    counts = seen.sum(axis=0)
    means = np.where(counts > 0, np.where(seen, latency, 0.0).sum(axis=0)
                     / np.maximum(counts, 1), np.nan)
    out["worker_mean_s"] = means.tolist()
    if np.isfinite(means).all():
        out["max_worker_mean_s"] = float(means.max())
        out["min_worker_mean_s"] = float(means.min())
        out["spread"] = float(means.max() / means.min())
    out["median_iteration_s"] = float(np.median(duration))
    return out


def _check_run(rt: Any, cfg: dict[str, Any], matrix: Any, balanced: bool, n_iterations: int,
               seed: int) -> Any:
    from daskstraggle.api import run_on
    from daskstraggle.methods import DSAG
    from daskstraggle.problems import Logistic
    from daskstraggle.runtime import StopRule

    balance = make_balancer(cfg["balancer"]) if balanced else None
    method = DSAG(cfg["n_wait"], subpartitions=cfg["subpartitions"], balance=balance)
    return run_on(rt, method, Logistic(alpha=cfg["alpha"]), matrix,
                  stop=StopRule(max_iter=n_iterations, tol=None), step_size=cfg["step_size"],
                  rng=seed)


def _count_incoming(dask_worker: Any) -> int:
    """Transfers this worker fetched from other workers (run on every worker)."""
    return len(dask_worker.transfer_incoming_log)


def summarise_check(unbalanced: Any, balanced: Any, incoming: dict[str, int],
                    cfg: dict[str, Any]) -> dict[str, Any]:
    """One repeat of the check: events, settling, spread, iteration times, transfers."""
    u, b = unbalanced.trace, balanced.trace
    ev = events(b)
    settled = ev[-1]["iteration"] + cfg["settle"] if ev else None
    before = window_stats(u, cfg["skip"])
    # without any event the balanced run is another unbalanced run: same window
    after = window_stats(b, cfg["skip"] if settled is None else settled)
    ratio = None
    if before["median_iteration_s"] and after["median_iteration_s"] is not None:
        ratio = after["median_iteration_s"] / before["median_iteration_s"]
    return {
        "n_events": len(ev),
        "first_event": ev[0]["iteration"] if ev else None,
        "settled": settled,
        "final_subpartitions": (b.subpartitions.values[-1].tolist()
                                if "subpartitions" in b else None),
        "unbalanced": before,
        "balanced": after,
        "iteration_ratio": ratio,
        "unit_transfers": int(balanced.attrs["unit_transfers"]),
        "unit_transfers_unbalanced": int(unbalanced.attrs["unit_transfers"]),
        "incoming_transfers": int(sum(incoming.values())),
        "incoming_per_worker": {str(k): int(v) for k, v in incoming.items()},
        "events": ev,
        "iterations": {"unbalanced": int(u.sizes["iteration"]),
                       "balanced": int(b.sizes["iteration"])},
        "latency": {"unbalanced": u.latency.values.tolist(),
                    "balanced": b.latency.values.tolist()},
        "iteration_duration": {"unbalanced": u.iteration_duration.values.tolist(),
                               "balanced": b.iteration_duration.values.tolist()},
        "subpartitions": (b.subpartitions.values.tolist() if "subpartitions" in b else None),
    }


def _median_of(values: list[float | None]) -> float | None:
    """Median of the values that exist (None if there are none)."""
    present = [v for v in values if v is not None]
    return float(np.median(present)) if present else None


def check_verdict(spread: float | None, ratio: float | None, transfers: int,
                  thresholds: dict[str, float]) -> dict[str, bool]:
    """The issue's three thresholds (a missing value fails its threshold)."""
    return {
        "spread": spread is not None and spread < thresholds["max_spread"],
        "iteration_time": ratio is not None and ratio <= 1.0 - thresholds["min_improvement"],
        "no_transfers": transfers == 0,
    }


def run_check(s: dict[str, Any]) -> dict[str, Any]:
    """The issue's LocalCluster check, repeated with a new cluster and latency seed each time."""
    from daskstraggle import open_matrix
    from daskstraggle.runtime import DaskRuntime

    cfg = s["check"]
    X, y = make_check_data(cfg)
    matrix = open_matrix(X, labels=y)
    runs: list[dict[str, Any]] = []
    for rep in range(cfg["repeats"]):
        t0 = time.perf_counter()
        with DaskRuntime(n_workers=cfg["workers"], stragglers=cfg["latency"], rng=rep) as rt:
            started = time.perf_counter() - t0
            unbalanced = _check_run(rt, cfg, matrix, False, cfg["unbalanced_iterations"], rep)
            balanced = _check_run(rt, cfg, matrix, True, cfg["balanced_iterations"], rep)
            incoming = rt.client.run(_count_incoming)
        r = summarise_check(unbalanced, balanced, incoming, cfg)
        r["seed"] = rep
        r["cluster_start_s"] = started
        r["real_s"] = time.perf_counter() - t0
        r["passes"] = check_verdict(r["balanced"]["spread"], r["iteration_ratio"],
                                    r["unit_transfers"] + r["incoming_transfers"],
                                    cfg["thresholds"])
        runs.append(r)
        log(f"  check seed {rep}: {r['n_events']} events (first {r['first_event']}, settled "
            f"{r['settled']}), spread {_fmt(r['unbalanced']['spread'], '.2f')} -> "
            f"{_fmt(r['balanced']['spread'], '.2f')}, median iteration "
            f"{_fmt(r['unbalanced']['median_iteration_s'])} -> "
            f"{_fmt(r['balanced']['median_iteration_s'])} s, transfers "
            f"{r['unit_transfers']}/{r['incoming_transfers']} ({r['real_s']:.1f} s real, "
            f"cluster start {started:.1f} s)")
    median = {
        "n_events": _median_of([r["n_events"] for r in runs]),
        "first_event": _median_of([r["first_event"] for r in runs]),
        "settled": _median_of([r["settled"] for r in runs]),
        **{f"{label}_{key}": _median_of([r[label][key] for r in runs])
           for label in ("unbalanced", "balanced")
           for key in ("max_worker_mean_s", "min_worker_mean_s", "spread",
                       "median_iteration_s")},
        "iteration_ratio": _median_of([r["iteration_ratio"] for r in runs]),
    }
    transfers = {"unit_transfers": sum(r["unit_transfers"] for r in runs),
                 "incoming_transfers": sum(r["incoming_transfers"] for r in runs)}
    return {
        "workers": cfg["workers"], "n_wait": cfg["n_wait"], "latency": cfg["latency"],
        "settings": cfg, "repeats": cfg["repeats"], "runs": runs, "median": median,
        "transfers": transfers,
        "passes": check_verdict(median["balanced_spread"], median["iteration_ratio"],
                                sum(transfers.values()), cfg["thresholds"]),
        "all_repeats_pass": all(all(r["passes"].values()) for r in runs),
    }


# --------------------------------------------------------------------------- output


def _json_safe(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_json_safe(v) for v in x]
    return x


def _fmt(v: float | None, spec: str = ".3g") -> str:
    return "-" if v is None or not math.isfinite(v) else format(v, spec)


def fig7_table(block: dict[str, Any]) -> list[str]:
    """Markdown table of one Fig. 7 section (medians over seeds)."""
    lines = [
        "| phase (iterations) | run | mean iteration (s) | max worker mean (s) | "
        "min worker mean (s) | max/min |",
        "|---|---|---:|---:|---:|---:|",
    ]
    first = block["runs"]["unbalanced"][0]["phases"]
    for name, ph in first.items():
        a, b = ph["range"]
        for label in ("unbalanced", "balanced"):
            m = block["median"][label][name]
            lines.append(f"| {name} [{a}, {b}) | {label} | {_fmt(m['mean_iteration_s'])} | "
                         f"{_fmt(m['max_worker_mean_s'])} | {_fmt(m['min_worker_mean_s'])} | "
                         f"{_fmt(m['max_min_ratio'], '.2f')} |")
    return lines


def tta_table(block: dict[str, Any]) -> list[str]:
    """Markdown table of the time-to-accuracy section (medians over seeds)."""
    keys = [f"{t:g}" for t in block["targets"]]
    lines = ["| variant | " + " | ".join(f"t to {k} (s)" for k in keys)
             + " | final gap | iterations | fresh/it | events | first event (s) |",
             "|---|" + "---:|" * (len(keys) + 5)]
    for label, m in block["median"].items():
        lines.append(f"| {label} | " + " | ".join(_fmt(m["time_to"][k]) for k in keys)
                     + f" | {m['final_gap']:.1e} | {int(m['iterations'])} | "
                     f"{m['mean_fresh']:.2f} | {_fmt(m['n_events'], 'g')} | "
                     f"{_fmt(m['first_event_s'])} |")
    lines += ["", "Reduction of the median time to each gap relative to DSAG "
              "(positive: load balancing is faster):", "",
              "| variant | " + " | ".join(keys) + " |", "|---|" + "---:|" * len(keys)]
    for label, m in block["median"].items():
        if label == "dsag":
            continue
        cells = [_fmt(None if v is None else 100 * v, "+.1f") + (" %" if v is not None else "")
                 for v in m["reduction_vs_dsag"].values()]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def check_table(block: dict[str, Any]) -> list[str]:
    """Markdown table of the issue check: one row per repeat, then the medians."""
    lines = [
        "| latency seed | events | first event | settled | final subpartitions | "
        "unbalanced worker max / min (s) | unbalanced spread | balanced worker max / min (s) | "
        "balanced spread | unbalanced median it (s) | balanced median it (s) | "
        "balanced / unbalanced | unit transfers | incoming transfers |",
        "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def row(name: str, r: dict[str, Any], u: dict[str, Any], b: dict[str, Any],
            final: str, unit: Any, incoming: Any) -> str:
        return (f"| {name} | {_fmt(r['n_events'], 'g')} | {_fmt(r['first_event'], 'g')} | "
                f"{_fmt(r['settled'], 'g')} | {final} | "
                f"{_fmt(u['max_worker_mean_s'])} / {_fmt(u['min_worker_mean_s'])} | "
                f"{_fmt(u['spread'], '.2f')} | "
                f"{_fmt(b['max_worker_mean_s'])} / {_fmt(b['min_worker_mean_s'])} | "
                f"{_fmt(b['spread'], '.2f')} | {_fmt(u['median_iteration_s'])} | "
                f"{_fmt(b['median_iteration_s'])} | {_fmt(r['iteration_ratio'], '.2f')} | "
                f"{unit} | {incoming} |")

    for r in block["runs"]:
        final = "-" if r["final_subpartitions"] is None else str(r["final_subpartitions"])
        lines.append(row(str(r["seed"]), r, r["unbalanced"], r["balanced"], final,
                         r["unit_transfers"], r["incoming_transfers"]))
    m = block["median"]
    split = {label: {k: m[f"{label}_{k}"] for k in ("max_worker_mean_s", "min_worker_mean_s",
                                                     "spread", "median_iteration_s")}
             for label in ("unbalanced", "balanced")}
    lines.append(row("**median**", m, split["unbalanced"], split["balanced"], "",
                     f"{block['transfers']['unit_transfers']} (sum)",
                     f"{block['transfers']['incoming_transfers']} (sum)"))
    return lines


def report(results: dict[str, Any]) -> str:
    """The Markdown report: settings, tables, figures, every number from this run."""
    out = ["# Load balancing (DSAG paper §VI Fig. 7, §VII-B DSAG-LB)", "",
           f"Run {results['stamp']}, {results['real_duration_s']:.0f} s real"
           + (", quick settings" if results["quick"] else "") + ".", ""]
    for section, title in (("sim", "simulated time (SimRuntime)"),
                           ("cluster", "LocalCluster with injected delays (DaskRuntime)")):
        if section not in results:
            continue
        b = results[section]
        cfg = b["settings"]
        out += [f"## Fig. 7, {title}", "",
                f"N = {b['workers']}, DSAG w = N, {cfg['subpartitions']} subpartitions per "
                f"worker, {cfg['n_iterations']} iterations; latency `{b['latency']}` "
                f"(workers {b['slowed']} x{cfg['slow_factor']:g} from iteration "
                f"{cfg['slow_at']}, workers {b['sped_up']} x{cfg['fast_factor']:g} from "
                f"{cfg['fast_at']}); balancer {cfg['balancer']}; medians over "
                f"{b['repeats']} latency seed(s).", ""]
        out += fig7_table(b)
        ratio = b["final_unbalanced_over_balanced"]
        out += ["", f"Final {cfg['final']} iterations, mean iteration time unbalanced / "
                f"balanced: {ratio['median']:.2f} (per seed: "
                f"{', '.join(f'{v:.2f}' for v in ratio['per_seed'])}). Balancing events per "
                f"balanced run: {b['n_events']['balanced']}.", ""]
        ev = b["runs"]["balanced"][0]["events"]
        if ev:
            out += ["Events of the first balanced run (iteration: subpartitions):", ""]
            out += [f"- {e['iteration']}: {e['previous']} -> {e['subpartitions']} "
                    f"(predicted max/min {e['previous_imbalance']:.2f} -> "
                    f"{e['imbalance']:.2f})" for e in ev]
            out.append("")
    if "tta" in results:
        b = results["tta"]
        cfg = b["settings"]
        out += ["## DSAG vs DSAG-LB, time to accuracy (simulated)", "",
                f"Logistic regression {results['data']['n_rows']} x "
                f"{results['data']['n_features']}, N = {b['workers']}, w = {b['n_wait']}, "
                f"{cfg['subpartitions']} subpartitions, step {cfg['step_size']:g}, latency "
                f"`{cfg['latency']}`, {cfg['horizon']:g} simulated s per run; relative gap "
                f"(f - f*)/f*; medians over {cfg['repeats']} latency seeds. Balancers: "
                f"{b['balancers']}.", ""]
        out += tta_table(b)
        out.append("")
    if "check" in results:
        b = results["check"]
        cfg = b["settings"]
        th = cfg["thresholds"]
        verdict = b["passes"]
        out += ["## Issue check: 4 workers, one 2x slower, w = N (LocalCluster)", "",
                f"DaskRuntime LocalCluster of {b['workers']} single-threaded process workers, "
                f"latency `{b['latency']}` injected; logistic regression (alpha "
                f"{cfg['alpha']:g}) on {cfg['n_rows']} x {cfg['n_features']} Gaussian data; "
                f"DSAG w = {b['n_wait']}, {cfg['subpartitions']} subpartitions, step "
                f"{cfg['step_size']:g}; {cfg['unbalanced_iterations']} unbalanced iterations, "
                f"then {cfg['balanced_iterations']} balanced (balancer {cfg['balancer']}) in "
                f"the same cluster; a new cluster per repeat, latency seed = repeat. "
                f"Unbalanced statistics over iterations [{cfg['skip']}:], balanced over "
                f"[settled:], settled = last event + {cfg['settle']}; spread = max / min of "
                f"the per-worker mean latency.", ""]
        out += check_table(b)

        def yes(ok: bool) -> str:
            return "yes" if ok else "**no**"

        out += ["", "Thresholds on the medians: balanced spread < "
                f"{th['max_spread']:g}: {yes(verdict['spread'])}; iterations at least "
                f"{100 * th['min_improvement']:g} % shorter (balanced / unbalanced <= "
                f"{1 - th['min_improvement']:g}): {yes(verdict['iteration_time'])}; no "
                f"transfers: {yes(verdict['no_transfers'])}. Every repeat passes all three: "
                f"{yes(b['all_repeats_pass'])}.", ""]
    for name in results.get("figures", []):
        out += [f"![{name}]({name})", ""]
    return "\n".join(out)


def _plot_fig7(results: dict[str, Any], path: Path) -> Path | None:
    import matplotlib.pyplot as plt

    sections = [s for s in ("sim", "cluster") if s in results]
    if not sections:
        return None
    fig, axes = plt.subplots(len(sections), 2, figsize=(12, 3.8 * len(sections)),
                             squeeze=False, sharey="row")
    for row, section in zip(axes, sections, strict=True):
        b = results[section]
        cfg = b["settings"]
        for ax, label in zip(row, ("balanced", "unbalanced"), strict=True):
            r = b["runs"][label][0]
            lat = np.array(r["latency"], dtype=float)
            its = np.arange(lat.shape[0])
            for w in range(lat.shape[1]):
                color = "tab:blue" if w in b["slowed"] else "tab:red" if w in b["sped_up"] \
                    else "0.45"
                ax.plot(its, lat[:, w], color=color, lw=0.9,
                        label=f"worker {w}" if w in (b["slowed"][0], b["sped_up"][0],
                                                     next(i for i in range(lat.shape[1])
                                                          if i not in b["slowed"]
                                                          and i not in b["sped_up"]))
                        else None)
            for e in r["events"]:
                ax.axvline(e["iteration"], color="0.7", lw=1.2, zorder=0)
            for at in (cfg["slow_at"], cfg["fast_at"]):
                ax.axvline(at, color="k", ls=":", lw=0.8)
            where = "simulated" if section == "sim" else "LocalCluster"
            ax.set_title(f"{where}, {label} (seed {r['seed']}, {len(r['events'])} events)")
            ax.set_xlabel("iteration")
        row[0].set_ylabel("per-worker latency (s)")
        handles = [plt.Line2D([], [], color=c, label=t) for c, t in
                   (("tab:blue", f"slowed x{cfg['slow_factor']:g} from {cfg['slow_at']}"),
                    ("tab:red", f"sped up x{cfg['fast_factor']:g} from {cfg['fast_at']}"),
                    ("0.45", "unchanged"), ("0.7", "balancing event"))]
        row[1].legend(handles=handles, fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _plot_tta(results: dict[str, Any], path: Path) -> Path | None:
    import matplotlib.pyplot as plt

    if "tta" not in results:
        return None
    b = results["tta"]
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for label, m in b["median"].items():
        line, = ax.semilogy(b["grid"], np.maximum(m["curve"], GAP_FLOOR), label=label)
        if m["first_event_s"] is not None:
            ax.axvline(m["first_event_s"], color=line.get_color(), ls=":", lw=0.8)
    ax.set_xlabel("simulated seconds")
    ax.set_ylabel("relative gap (f - f*) / f*  (median)")
    ax.set_title(f"logistic, N={b['workers']}, w={b['n_wait']}, artificial scenario")
    ax.set_ylim(bottom=1e-15)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _write(path: Path, text: str) -> None:
    """Write through a temporary name, then rename (nothing half-written is left)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def _sections(values: list[str]) -> list[str]:
    chosen = [v for value in values for v in value.split(",") if v]
    bad = [v for v in chosen if v not in SECTIONS]
    if bad:
        raise SystemExit(f"error: unknown section {bad[0]!r}; choose from {', '.join(SECTIONS)} "
                         "(e.g. --sections sim,cluster)")
    return chosen


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", type=Path, default=SPEC, help="experiment spec (TOML)")
    parser.add_argument("--sections", nargs="+", default=list(SECTIONS),
                        help="which experiments: sim, cluster, tta, check (space or comma "
                        "separated)")
    parser.add_argument("--quick", action="store_true", help="smoke run (tiny settings)")
    parser.add_argument("--out", type=Path, default=None, help="JSON file to write")
    args = parser.parse_args(argv)
    chosen = _sections(args.sections)
    spec = tomllib.loads(args.spec.read_text())
    s = settings(spec, args.quick)
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_foundation import machine_info, pyplot

    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    results: dict[str, Any] = {"spec": spec, "quick": args.quick, "stamp": stamp,
                               "data": s["data"], "machine": machine_info()}
    t0 = time.perf_counter()
    for section in SECTIONS:
        if section not in chosen:
            continue
        if section == "tta":
            log("(tta) DSAG vs DSAG-LB, time to accuracy, SimRuntime")
            results["tta"] = run_tta(s)
        elif section == "check":
            log("(check) the issue's LocalCluster check: 4 workers, one 2x slower, w = N")
            results["check"] = run_check(s)
        else:
            log(f"(fig7 {section}) per-worker latency with and without balancing")
            results[section] = run_fig7(section, s)
    results["real_duration_s"] = time.perf_counter() - t0

    out = args.out or REPO / "results" / "load_balancing" / f"{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    figures: list[str] = []
    if pyplot() is not None:
        for suffix, plot in (("fig7", _plot_fig7), ("tta", _plot_tta)):
            path = plot(results, out.with_name(f"{out.stem}-{suffix}.png"))
            if path is not None:
                figures.append(path.name)
    results["figures"] = figures
    _write(out, json.dumps(_json_safe(results), indent=1))
    text = report(results)
    _write(out.with_suffix(".md"), text + "\n")
    print(text)
    print(f"\nraw numbers: {out}; report: {out.with_suffix('.md')}")
    return results


if __name__ == "__main__":
    main()
