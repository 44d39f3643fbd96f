#!/usr/bin/env python
"""Generalized BCC vs load balancing on a heterogeneous cluster (BCC paper §IV-C, Fig. 5).

Reproduces the numerical example of S. Li, S. M. M. Kalan, A. S. Avestimehr and
M. Soltanolkotabi, "Near-Optimal Straggler Mitigation for Distributed Gradient Methods",
IPDPSW 2018 (arXiv:1710.09990), §IV-C: n = 100 workers, m = 500 examples, a_i = 20 for
all workers, mu_i = 1 for 95 workers and 20 for 5, worker i with load r_i finishing after
T_i, P(T_i <= t) = 1 - exp(-(mu_i / r_i)(t - a_i r_i)). The paper reports that the
generalized BCC (loads from problem P2 with s = floor(m log m), random placement, stop at
coverage, eq. 16) cuts the average computation time by 29.28 % against load balancing
(LB: r_i = mu_i / sum(mu) * m on disjoint blocks, wait for every worker).

For each c in the spec (default 1, 2, 3 and Theorem 2's c) it reports, by Monte Carlo
(``coverage_time``: placement and times redrawn each trial), with standard errors:

- the fraction of random placements that never cover (some example on no worker);
- the mean coverage time three ways: over covering placements only (= redraw the
  placement until it covers, which the master can check before computing), counting a
  non-covering run as "wait for all" (max_i T_i, a free fallback), and as "wait for all,
  then recompute the missing examples on the worker with the smallest a_j + 1/mu_j";
- the reduction against LB for each, and P2's quantities: t*(s) (the large-n value of
  E[T^(s)] that P2 optimises), E[T^(s)] by Monte Carlo for the same loads, and Theorem 2's
  lower bound t*(m) and upper bound t*(floor(c m log m)) + 1;
- as a reference that is not in the paper, the uniform split r_i = m / n on disjoint
  blocks, waiting for every worker.

Everything is composed from ``daskstraggle.coding.bcc`` (``HeterogeneousBCC``,
``p2_loads``, ``proportional_loads``, ``coverage_time``) and
``daskstraggle.latency.ShiftedExponential``. Parameters are read from
``pipelines/bcc_heterogeneous.toml`` (``--spec`` for another); results go to
``results/bcc_heterogeneous/<UTC timestamp>.json``.

Usage::

    python pipelines/bcc_heterogeneous.py           # ~1-2 minutes
    python pipelines/bcc_heterogeneous.py --quick   # smoke run, a few seconds
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import numpy as np

from daskstraggle.coding.bcc import (
    HeterogeneousBCC,
    coverage_time,
    p2_loads,
    proportional_loads,
)
from daskstraggle.latency import ShiftedExponential

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SPEC = Path(__file__).with_suffix(".toml")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def load_spec(path: Path) -> dict[str, Any]:
    """Read the TOML spec; fail early with the key that is missing or wrong."""
    if not path.is_file():
        raise SystemExit(f"--spec {path}: no such file (default: {DEFAULT_SPEC})")
    with open(path, "rb") as f:
        spec = tomllib.load(f)
    exp = spec.get("experiment")
    groups = spec.get("workers")
    if not isinstance(exp, dict) or not isinstance(groups, list) or not groups:
        raise SystemExit(f"{path}: needs an [experiment] table and at least one [[workers]]")
    for key in ("n_workers", "n_partitions", "coverage_factors", "samples", "placements"):
        if key not in exp:
            raise SystemExit(f"{path}: [experiment] lacks {key!r}")
    count = sum(int(g["count"]) for g in groups)
    if count != exp["n_workers"]:
        raise SystemExit(f"{path}: the [[workers]] counts sum to {count}, "
                         f"not n_workers = {exp['n_workers']}")
    return spec


def worker_arrays(spec: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """Return per-worker ``(a_i, mu_i)`` of shape (n,), groups in spec order."""
    a = np.concatenate([np.full(int(g["count"]), float(g["shift"])) for g in spec["workers"]])
    mu = np.concatenate([np.full(int(g["count"]), float(g["rate"])) for g in spec["workers"]])
    return a, mu


def mean_se(x: np.ndarray) -> tuple[float, float]:
    x = np.asarray(x, dtype=float)
    if x.size == 0:
        return float("nan"), float("nan")
    se = float(x.std(ddof=1) / math.sqrt(x.size)) if x.size > 1 else float("nan")
    return float(x.mean()), se


def reduction(bcc: tuple[float, float], lb: tuple[float, float]) -> tuple[float, float]:
    """Return ``100 (1 - B / L)`` and its standard error (delta method, independent runs)."""
    (b, sb), (lv, sl) = bcc, lb
    red = 100.0 * (1.0 - b / lv)
    se = 100.0 * math.hypot(sb / lv, b * sl / lv**2)
    return red, se


def finish_times(a: np.ndarray, mu: np.ndarray, loads: np.ndarray, n_samples: int,
                 rng: np.random.SeedSequence) -> np.ndarray:
    """Draw ``T_i`` for the given loads: shape (n_samples, n), eq. 15 of the paper."""
    sampler = ShiftedExponential(shift=tuple(a), rate=tuple(mu)).sampler(a.size, rng=rng)
    cols = [sampler.sample(i, load=float(r), size=n_samples)[0] for i, r in enumerate(loads)]
    return np.column_stack(cols)


def t_hat(finish: np.ndarray, loads: np.ndarray, n_results: int) -> np.ndarray:
    """Return ``T^(s)`` per row (eq. 18): first time the finished loads reach ``s``."""
    order = np.argsort(finish, axis=1)
    done = np.cumsum(loads[order], axis=1)
    if loads.sum() < n_results:
        return np.full(finish.shape[0], np.inf)
    first = np.argmax(done >= n_results, axis=1)
    return np.take_along_axis(np.take_along_axis(finish, order, axis=1), first[:, None],
                              axis=1)[:, 0]


def group_loads(loads: np.ndarray, spec: dict[str, Any]) -> list[list[int]]:
    """Return the distinct loads of each worker group (spec order)."""
    out, start = [], 0
    for g in spec["workers"]:
        stop = start + int(g["count"])
        out.append(sorted({int(x) for x in loads[start:stop]}))
        start = stop
    return out


def run_disjoint(spec: dict[str, Any], rate: tuple[float, ...], n_samples: int,
                 rng: np.random.SeedSequence) -> dict[str, Any]:
    """Disjoint blocks with loads ``r_i ~ rate_i`` summing to m, wait for all workers.

    ``rate = mu`` is the paper's LB baseline; equal rates give the uniform split r_i = m/n.
    """
    exp = spec["experiment"]
    a, mu = worker_arrays(spec)
    m = int(exp["n_partitions"])
    loads = proportional_loads(rate, m)
    est = coverage_time(loads, shift=tuple(a), rate=tuple(mu), n_partitions=m,
                        n_trials=n_samples, disjoint=True, rng=np.random.default_rng(rng))
    mean, se = mean_se(est.times[np.isfinite(est.times)])
    return {
        "loads": loads.tolist(),
        "loads_per_group": group_loads(loads, spec),
        "load_sum": int(loads.sum()),
        "max_shift": float(np.max(a * loads)),
        "never_cover_fraction": est.never_cover_fraction,
        "mean": mean, "se": se,
        "library_mean_time": est.mean_time,
        "quartiles": np.quantile(est.times, [0.25, 0.5, 0.75]).tolist(),
    }


def run_bcc(spec: dict[str, Any], factor: float | None, n_samples: int, n_placements: int,
            rng: np.random.SeedSequence) -> dict[str, Any]:
    """One generalized-BCC case: ``factor`` is c, or None for Theorem 2's c."""
    exp = spec["experiment"]
    a, mu = worker_arrays(spec)
    n, m = a.size, int(exp["n_partitions"])
    s_cov, s_place, s_times, s_fall = rng.spawn(4)
    scheme = HeterogeneousBCC(shift=tuple(a), rate=tuple(mu), n_partitions=m,
                              coverage_factor=factor)
    c, s = scheme.samples_target(n)
    loads = scheme.loads(n)
    direct = p2_loads(tuple(a), tuple(mu), m, s)

    # (1) coverage time, eq. 16: a fresh random placement and fresh times in each trial
    est = coverage_time(loads, shift=tuple(a), rate=tuple(mu), n_partitions=m,
                        n_trials=n_samples, rng=np.random.default_rng(s_cov))
    covered = np.isfinite(est.times)
    p = est.never_cover_fraction

    # (2) how many examples a non-covering placement misses (the same draws the scheme makes)
    gen = np.random.default_rng(s_place)
    missing, t_star = [], float("nan")
    for _ in range(n_placements):
        assignment = scheme.assign(n, rng=gen)
        seen = np.zeros(m, dtype=bool)
        for part in assignment.placement:
            seen[list(part)] = True
        missing.append(int(m - seen.sum()))
        t_star = float(assignment.info["expected_time_p2"])
    missing_arr = np.asarray(missing)
    k_pool = missing_arr[missing_arr > 0]

    # (3) fallbacks for the non-covering trials. Times are independent of the placement, so
    # fresh draws of max_i T_i have the law those trials' finishing times have.
    finish = finish_times(a, mu, loads, n_samples, s_times)
    wait_all = finish.max(axis=1)
    fall_gen = np.random.default_rng(s_fall)
    j = int(np.argmin(a + 1.0 / mu))  # smallest expected time per example
    unit = ShiftedExponential(shift=float(a[j]), rate=float(mu[j])).sampler(
        1, rng=fall_gen).sample(0, load=1.0, size=n_samples)[0]
    pool = k_pool if k_pool.size else np.array([1])  # no non-covering placement drawn: k = 1
    k = fall_gen.choice(pool, size=n_samples)
    t_wait = np.where(covered, est.times, wait_all)
    t_redo = np.where(covered, est.times, wait_all + k * unit)

    that = t_hat(finish, loads, s)
    return {
        "coverage_factor": c,
        "n_results": s,
        "loads_per_group": group_loads(loads, spec),
        "load_sum": int(loads.sum()),
        "loads_match_p2_loads": bool(np.array_equal(loads, direct)),
        "t_star": t_star,
        "t_hat_mc": mean_se(that),
        "never_cover_fraction": p,
        "never_cover_se": math.sqrt(p * (1.0 - p) / n_samples),
        "placements_drawn": n_placements,
        "placements_never_cover_fraction": float(np.mean(missing_arr > 0)),
        "missing_given_never_cover_mean": float(k_pool.mean()) if k_pool.size else None,
        "missing_given_never_cover_max": int(k_pool.max()) if k_pool.size else None,
        "covering": mean_se(est.times[covered]),
        "library_mean_time": est.mean_time,
        "wait_all_mean": mean_se(wait_all),
        "counted_wait_all": mean_se(t_wait),
        "counted_wait_all_recompute": mean_se(t_redo),
        "fallback_worker": j,
        "quartiles_covering": (np.quantile(est.times[covered], [0.25, 0.5, 0.75]).tolist()
                               if covered.any() else None),
    }


def run_bounds(spec: dict[str, Any], n_samples: int,
               rng: np.random.SeedSequence) -> dict[str, Any]:
    """Theorem 2's lower bound ``min E[T^(m)]``: t*(m) and a Monte Carlo of P2(m)'s loads."""
    exp = spec["experiment"]
    a, mu = worker_arrays(spec)
    n, m = a.size, int(exp["n_partitions"])
    # s = max(m, floor(c m log m)) = m for c = 1 / log m
    scheme = HeterogeneousBCC(shift=tuple(a), rate=tuple(mu), n_partitions=m,
                              coverage_factor=1.0 / math.log(m))
    _, s = scheme.samples_target(n)
    loads = scheme.loads(n)
    t_star = float(scheme.assign(n, rng=0).info["expected_time_p2"])
    that = t_hat(finish_times(a, mu, loads, n_samples, rng), loads, s)
    return {"n_results": s, "loads_per_group": group_loads(loads, spec),
            "t_star": t_star, "t_hat_mc": mean_se(that)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", type=Path, default=DEFAULT_SPEC,
                        help=f"TOML experiment spec (default: {DEFAULT_SPEC.name})")
    parser.add_argument("--quick", action="store_true", help="smoke run (quick_samples)")
    parser.add_argument("--samples", type=int, default=None,
                        help="Monte Carlo trials per scheme (default: the spec's samples)")
    parser.add_argument("--seed", type=int, default=0, help="root seed (default 0)")
    parser.add_argument("--out", type=Path, default=None, help="JSON file to write")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_foundation import machine_info

    spec = load_spec(args.spec)
    exp = spec["experiment"]
    q = args.quick
    n_samples = args.samples or int(exp["quick_samples" if q else "samples"])
    n_placements = int(exp["quick_placements" if q else "placements"])
    factors: list[float | None] = [float(c) for c in exp["coverage_factors"]]
    if exp.get("theorem2_factor", False):
        factors.append(None)

    t0 = time.perf_counter()
    root = np.random.SeedSequence(args.seed)
    lb_seed, bound_seed, *case_seeds, uniform_seed = root.spawn(3 + len(factors))
    results: dict[str, Any] = {
        "spec": spec, "spec_path": str(args.spec), "machine": machine_info(), "quick": q,
        "seed": args.seed, "samples": n_samples, "placements": n_placements,
        "paper_reduction_percent": exp.get("paper_reduction_percent"),
    }
    log(f"LB: {n_samples} trials")
    _, mu = worker_arrays(spec)
    lb = results["lb"] = run_disjoint(spec, tuple(mu), n_samples, lb_seed)
    if exp.get("uniform_baseline", False):
        log(f"uniform split r_i = m/n: {n_samples} trials")
        results["uniform"] = run_disjoint(spec, (1.0,) * mu.size, n_samples, uniform_seed)
    lb_ms = (lb["mean"], lb["se"])
    results["bcc"] = {}
    for factor, seed in zip(factors, case_seeds, strict=True):
        label = "theorem2" if factor is None else f"c={factor:g}"
        log(f"generalized BCC {label}: {n_samples} trials, {n_placements} placements")
        case = run_bcc(spec, factor, n_samples, n_placements, seed)
        case["reduction_percent"] = {
            key: reduction(tuple(case[key]), lb_ms)
            for key in ("covering", "counted_wait_all", "counted_wait_all_recompute")
        }
        results["bcc"][label] = case
    log("lower bound: P2 with s = m")
    results["lower_bound"] = run_bounds(spec, n_samples, bound_seed)
    if "theorem2" in results["bcc"]:
        results["upper_bound"] = results["bcc"]["theorem2"]["t_star"] + 1.0
    results["runtime_s"] = time.perf_counter() - t0

    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    out = args.out or REPO / "results" / exp.get("name", "bcc_heterogeneous") / f"{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    report(results, out)
    return results


def report(results: dict[str, Any], out: Path) -> None:
    lb = results["lb"]
    n = results["samples"]
    print(f"BCC paper §IV-C, {n} Monte Carlo trials per scheme (mean ± standard error)")
    print(f"LB, disjoint r_i ~ mu_i (loads {lb['loads_per_group']}), wait for all: "
          f"{lb['mean']:.1f} ± {lb['se']:.2f} (largest shift a_i r_i = {lb['max_shift']:g})")
    print(f"{'c':>9s} {'s':>6s} {'loads':>12s} {'t*(s)':>7s} {'E[T^(s)]':>8s} "
          f"{'never covers':>17s} {'covering only':>15s} {'red.':>6s} "
          f"{'+wait all':>9s} {'red.':>6s} {'+recompute':>10s} {'red.':>6s}")
    for label, r in results["bcc"].items():
        red = r["reduction_percent"]
        loads = "/".join(",".join(map(str, g)) for g in r["loads_per_group"])
        print(f"{label:>9s} {r['n_results']:6d} {loads:>12s} {r['t_star']:7.1f} "
              f"{r['t_hat_mc'][0]:8.1f} "
              f"{100 * r['never_cover_fraction']:6.3f}% ± {100 * r['never_cover_se']:5.3f} "
              f"{r['covering'][0]:7.1f} ± {r['covering'][1]:4.2f} "
              f"{red['covering'][0]:5.1f}% "
              f"{r['counted_wait_all'][0]:9.1f} {red['counted_wait_all'][0]:5.1f}% "
              f"{r['counted_wait_all_recompute'][0]:10.1f} "
              f"{red['counted_wait_all_recompute'][0]:5.1f}%")
    if "uniform" in results:
        u = results["uniform"]
        print(f"(not in the paper) uniform disjoint split, loads {u['loads_per_group']}, wait "
              f"for all: {u['mean']:.1f} ± {u['se']:.2f} "
              f"({reduction((u['mean'], u['se']), (lb['mean'], lb['se']))[0]:.1f}% below LB)")
    lo = results["lower_bound"]
    print(f"Theorem 2 lower bound min E[T^(m)]: t*(m) = {lo['t_star']:.1f}, "
          f"Monte Carlo with P2(m) loads {lo['loads_per_group']} = {lo['t_hat_mc'][0]:.1f}")
    if "upper_bound" in results:
        th = results["bcc"]["theorem2"]
        print(f"Theorem 2 upper bound (c = {th['coverage_factor']:.3f}): t*(s) + 1 = "
              f"{results['upper_bound']:.1f}; that c's BCC covering mean "
              f"{th['covering'][0]:.1f}")
    c1 = results["bcc"].get("c=1")
    if c1 is not None:
        print(f"paper: {results['paper_reduction_percent']} % reduction at c = 1; here "
              f"{c1['reduction_percent']['covering'][0]:.2f} ± "
              f"{c1['reduction_percent']['covering'][1]:.2f} % over covering placements")
    print(f"runtime {results['runtime_s']:.1f} s; raw numbers: {out}")


if __name__ == "__main__":
    main()
