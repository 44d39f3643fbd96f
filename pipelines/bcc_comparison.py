#!/usr/bin/env python
"""BCC paper comparison: uncoded vs cyclic repetition vs BCC (exact coded gradients).

Reproduces §III-C of the BCC paper (Li et al., IPDPSW 2018; Fig. 4, Tables I and
II): logistic regression with Nesterov's accelerated gradient on the paper's generated
data, one data batch of 100 points per worker (m = n), 100 iterations, and three ways to
get the exact gradient every iteration:

- ``uncoded``: each worker holds its own batch, the master waits for all n;
- ``cyclic-repetition``: each worker holds r batches (s = r - 1), the master waits for
  any n - s;
- ``bcc``: each worker holds one random group of r batches, the master stops at coverage
  (about (m/r) H_{m/r} results).

Reported per scheme, as in the paper's tables: the mean number of workers the master
waited for (results of the current iteration received before it stepped), computation
time (per iteration the largest compute time among the results received during it, summed
over iterations), communication time (total minus computation) and total time; plus the
largest difference between the scheme's final iterate and the uncoded one (the gradients
are exact, so the iterates must agree).

Two settings, each read from ``pipelines/bcc_comparison.toml``:

(sim) simulated time with real numbers (``SimRuntime``) at the paper's n = 50 and 100:
      per-worker compute from BCC eq. (15) scaled by the load, and the master's link as a
      queue that receives one gradient message at a time (``receive_duration``);
(cluster) a real LocalCluster of process workers with the same law injected as delays on
      the workers (``DaskRuntime(stragglers=...)``); here messages travel over localhost.

Usage::

    python pipelines/bcc_comparison.py            # ~3 minutes on 2 cores
    python pipelines/bcc_comparison.py --quick    # smoke run, ~30 s
    python pipelines/bcc_comparison.py --sections sim --spec my.toml

Results (every repeat, medians, the spec, machine, versions) go to
``results/bcc_comparison/<UTC timestamp>.json`` and a bar chart of the total times to the
same name with ``.png`` (when matplotlib is installed).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import tomllib  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SPEC = Path(__file__).with_suffix(".toml")
SCHEMES = ("uncoded", "cyclic-repetition", "bcc")
# the paper's Tables I and II: workers waited for and total seconds for 100 iterations
PAPER = {
    50: {"uncoded": (50, 28.786), "cyclic-repetition": (41, 13.990), "bcc": (11, 4.205)},
    100: {"uncoded": (100, 33.020), "cyclic-repetition": (91, 29.482), "bcc": (25, 8.931)},
}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def make_data(n_rows: int, n_features: int, rng: np.random.Generator
              ) -> tuple[np.ndarray, np.ndarray]:
    """The paper's generated data (§III-C1, after Tandon et al.).

    ``w*`` has coordinates in {-1, 1}; ``x ~ 0.5 N(mu, I) + 0.5 N(-mu, I)`` with
    ``mu = 1.5 w* / p``; ``y ~ Ber(1 / (exp(x'w*) + 1))`` mapped to {-1, +1}.
    """
    w = rng.choice([-1.0, 1.0], size=n_features)
    sign = rng.choice([-1.0, 1.0], size=(n_rows, 1))
    X = rng.normal(size=(n_rows, n_features)) + sign * (1.5 / n_features) * w
    kappa = 1.0 / (np.exp(np.clip(X @ w, -500, 500)) + 1.0)
    y = np.where(rng.random(n_rows) < kappa, 1.0, -1.0)
    return X, y


def _method(scheme: str, load: int, rng: int) -> Any:
    from daskstraggle.methods import CodedGD

    params = {"cyclic-repetition": {"n_stragglers": load - 1},
              "bcc": {"batch_size": load}}.get(scheme, {})
    return CodedGD(scheme, rng=rng, nesterov=True, **params)


def summarize(result: Any) -> dict[str, Any]:
    """The paper's breakdown from a run's trace."""
    tr = result.trace
    total = float(tr.wall_time[-1])
    computation = float(np.nansum(tr.max_compute_duration.values))
    return {
        "total_s": total,
        "computation_s": computation,
        "communication_s": total - computation,
        "workers_waited_mean": float(tr.n_fresh.mean()),
        "workers_used_mean": float(tr.n_workers_used.mean()),
        "iterations": int(tr.sizes["iteration"]),
        "final_objective": float(tr.objective[-1]),
        "iterate": np.asarray(result.iterate).ravel(),
    }


def _medians(runs: list[dict[str, Any]]) -> dict[str, float]:
    keys = ("total_s", "computation_s", "communication_s", "workers_waited_mean",
            "workers_used_mean", "final_objective")
    return {k: float(np.median([r[k] for r in runs])) for k in keys}


def _compare_iterates(by_scheme: dict[str, list[dict[str, Any]]]) -> float:
    ref = [r["iterate"] for r in by_scheme["uncoded"]]
    worst = 0.0
    for runs in by_scheme.values():
        for r, x0 in zip(runs, ref, strict=True):
            worst = max(worst, float(np.abs(r["iterate"] - x0).max() / np.abs(x0).max()))
    return worst


def _setting(by_scheme: dict[str, list[dict[str, Any]]], load: int) -> dict[str, Any]:
    """One setting's report: medians, every run (without iterates), iterate agreement."""
    return {
        "compute_load": load,
        "max_rel_iterate_difference": _compare_iterates(by_scheme),
        "median": {s: _medians(r) for s, r in by_scheme.items()},
        "runs": {s: [{k: v for k, v in r.items() if k != "iterate"} for r in runs]
                 for s, runs in by_scheme.items()},
    }


def run_sim(spec: dict[str, Any], quick: bool) -> dict[str, Any]:
    from daskstraggle import open_matrix
    from daskstraggle.api import run_on
    from daskstraggle.problems import Logistic
    from daskstraggle.runtime import SimRuntime, StopRule

    sim, q = spec["simulation"], spec["quick"]
    workers = q["simulation_workers"] if quick else sim["workers"]
    load = q["simulation_compute_load"] if quick else spec["run"]["compute_load"]
    repeats = q["simulation_repeats"] if quick else sim["repeats"]
    n_iter = q["iterations"] if quick else spec["run"]["iterations"]
    out: dict[str, Any] = {}
    for n in workers:
        rows = n * spec["data"]["rows_per_batch"]
        X, y = make_data(rows, sim["features"], np.random.default_rng(spec["data"]["seed"]))
        matrix = open_matrix(X, labels=y, n_partitions=n)
        by_scheme: dict[str, list[dict[str, Any]]] = {s: [] for s in SCHEMES}
        for rep in range(repeats):
            for scheme in SCHEMES:
                t0 = time.perf_counter()
                with SimRuntime(n, latency=sim["latency"], rng=rep,
                                receive_duration=sim["receive_duration"]) as rt:
                    res = run_on(rt, _method(scheme, load, rep), Logistic(), matrix,
                                 stop=StopRule(max_iter=n_iter, tol=None), rng=0)
                by_scheme[scheme].append(summarize(res))
                log(f"  sim n={n} {scheme:18s} repeat {rep}: "
                    f"{by_scheme[scheme][-1]['total_s']:7.3f} s simulated "
                    f"({time.perf_counter() - t0:.1f} s real)")
        out[str(n)] = _setting(by_scheme, load)
    return out


def run_cluster(spec: dict[str, Any], quick: bool) -> dict[str, Any]:
    from daskstraggle import open_matrix
    from daskstraggle.api import run_on
    from daskstraggle.problems import Logistic
    from daskstraggle.runtime import DaskRuntime, StopRule

    cl, q = spec["cluster"], spec["quick"]
    n = q["cluster_workers"] if quick else cl["workers"]
    load = q["cluster_compute_load"] if quick else cl["compute_load"]
    repeats = q["cluster_repeats"] if quick else cl["repeats"]
    n_iter = q["iterations"] if quick else spec["run"]["iterations"]
    X, y = make_data(n * spec["data"]["rows_per_batch"], cl["features"],
                     np.random.default_rng(spec["data"]["seed"]))
    matrix = open_matrix(X, labels=y, n_partitions=n)
    by_scheme: dict[str, list[dict[str, Any]]] = {s: [] for s in SCHEMES}
    with DaskRuntime(n_workers=n, stragglers=cl["latency"], rng=0) as rt:
        for rep in range(repeats):
            for scheme in SCHEMES:
                res = run_on(rt, _method(scheme, load, rep), Logistic(), matrix,
                             stop=StopRule(max_iter=n_iter, tol=None), rng=0)
                by_scheme[scheme].append(summarize(res))
                log(f"  cluster n={n} {scheme:18s} repeat {rep}: "
                    f"{by_scheme[scheme][-1]['total_s']:7.3f} s")
    return {str(n): _setting(by_scheme, load)}


def _table(title: str, section: dict[str, Any], paper: bool) -> None:
    print(title)
    head = f"  {'n':>4s} {'scheme':18s} {'waited':>7s} {'comm s':>8s} {'comp s':>8s} " \
           f"{'total s':>8s} {'vs uncoded':>10s}"
    print(head + ("   paper: waited, total s" if paper else ""))
    for n, block in section.items():
        med = block["median"]
        for s in SCHEMES:
            m = med[s]
            line = (f"  {n:>4s} {s:18s} {m['workers_waited_mean']:7.1f} "
                    f"{m['communication_s']:8.3f} {m['computation_s']:8.3f} "
                    f"{m['total_s']:8.3f} {m['total_s'] / med['uncoded']['total_s']:9.2f}x")
            if paper and int(n) in PAPER:
                w, t = PAPER[int(n)][s]
                line += f"   {w:5d} {t:8.3f}"
            print(line)
        print(f"  {n:>4s} largest relative difference of final iterates across schemes: "
              f"{block['max_rel_iterate_difference']:.1e}")


def _plot(results: dict[str, Any], path: Path) -> Path | None:
    from bench_foundation import pyplot

    plt = pyplot()
    if plt is None:
        return None
    panels = [(f"simulated, n={n}", b) for n, b in results.get("sim", {}).items()]
    panels += [(f"LocalCluster, n={n}", b) for n, b in results.get("cluster", {}).items()]
    if not panels:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.5), squeeze=False)
    for ax, (title, block) in zip(axes[0], panels, strict=True):
        med = block["median"]
        comp = [med[s]["computation_s"] for s in SCHEMES]
        comm = [med[s]["communication_s"] for s in SCHEMES]
        ax.bar(SCHEMES, comp, label="computation")
        ax.bar(SCHEMES, comm, bottom=comp, label="communication")
        ax.set_title(title)
        ax.set_ylabel("seconds, 100 iterations" if not results["quick"] else "seconds")
        ax.tick_params(axis="x", labelrotation=20)
    axes[0][0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", type=Path, default=SPEC, help="experiment spec (TOML)")
    parser.add_argument("--sections", nargs="+", choices=["sim", "cluster"],
                        default=["sim", "cluster"], help="which settings to run")
    parser.add_argument("--quick", action="store_true", help="smoke run (small n, 10 iterations)")
    parser.add_argument("--out", type=Path, default=None, help="JSON file to write")
    args = parser.parse_args(argv)
    spec = tomllib.loads(args.spec.read_text())
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_foundation import machine_info

    results: dict[str, Any] = {"spec": spec, "quick": args.quick, "machine": machine_info()}
    if "sim" in args.sections:
        log("(sim) simulated time, SimRuntime")
        results["sim"] = run_sim(spec, args.quick)
    if "cluster" in args.sections:
        log("(cluster) LocalCluster with injected delays")
        results["cluster"] = run_cluster(spec, args.quick)

    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    out = args.out or REPO / "results" / "bcc_comparison" / f"{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    if "sim" in results:
        _table(f"(sim) SimRuntime, {spec['simulation']['latency']}, receive "
               f"{1e3 * spec['simulation']['receive_duration']:g} ms per message "
               "(medians)", results["sim"], paper=True)
    if "cluster" in results:
        _table(f"(cluster) LocalCluster, injected {spec['cluster']['latency']} (medians)",
               results["cluster"], paper=False)
    figure = _plot(results, out.with_suffix(".png"))
    print(f"raw numbers: {out}" + (f"; figure: {figure}" if figure else ""))
    return results


if __name__ == "__main__":
    main()
