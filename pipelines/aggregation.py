#!/usr/bin/env python
"""Aggregation on the workers: the client's inbound bytes and the round time, flat vs tree.

Issue 29, part 1. MLfabric sums updates on intermediate nodes before they reach the
server; here ``aggregation="tree"`` keeps each worker's result on the worker and sums them
there, :data:`~daskstraggle.runtime.aggregate.FAN_IN` at a time, when the method reads the
sum, so one message reaches the client instead of one per worker. One LocalCluster of
``workers`` single-threaded process workers on this machine (its loopback is the
"network": no link is slower than memory, so this measures the cost of the extra hops
as much as the saving). Cases, each ``repeats`` times in rotated order (medians), every
one with ``aggregation`` flat and tree, without and with a sleep-based straggler
(``slowdown(workers=1, factor=4)``, which costs no CPU):

- ``gram d=...``: PCA by ``gram`` (one round whose message is the d x d upper triangle,
  67 MB at d = 4096) of a Gaussian n x d store;
- ``least squares``: ``gd`` to ``tol`` on a linear-regression store (messages of d + 2
  numbers: what aggregation costs when there is nothing to save).

Reported per case: the bytes that reached the client per round, the round time (the
first round's for gram: its only one; the median round for gd), the solve's seconds, and
the largest difference between the flat and tree answers (the same iterates to rounding).

Usage::

    python pipelines/aggregation.py            # ~10 minutes on 2 cores
    python pipelines/aggregation.py --quick    # smoke run, small data
    python pipelines/aggregation.py --workers 16

Results go to ``results/aggregation/<UTC timestamp>.json``.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

FULL = {"workers": 8, "repeats": 3, "gram": [(16_000, 2_000), (16_000, 4_096)],
        "regression": (400_000, 100), "tol": 1e-6, "max_iter": 200,
        "straggler": "slowdown(workers=1, factor=4)"}
QUICK = {"workers": 3, "repeats": 1, "gram": [(1_200, 64)], "regression": (6_000, 8),
         "tol": 1e-6, "max_iter": 100, "straggler": "slowdown(workers=1, factor=4)"}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def cases(cfg: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(job, label, fit options) of every case: each job flat and tree, without and with
    the straggler."""
    jobs = [f"gram d={d}" for _, d in cfg["gram"]] + ["least squares"]
    out = []
    for job in jobs:
        for straggler in (None, cfg["straggler"]):
            for aggregation in ("flat", "tree"):
                label = f"{aggregation}{' + straggler' if straggler else ''}"
                out.append((job, label, {"aggregation": aggregation, "stragglers": straggler}))
    return out


def difference(a: np.ndarray, b: np.ndarray, *, subspace: bool) -> float:
    """Largest difference of two answers: of the projectors onto two bases' spans (PCA),
    else of the coefficients."""
    if subspace:
        return float(np.max(np.abs(a @ a.T - b @ b.T)))
    return float(np.max(np.abs(a - b)))


def run_case(job: str, data: dict[str, str], options: dict[str, Any], cfg: dict[str, Any],
             client: Any) -> tuple[dict[str, Any], np.ndarray]:
    import daskstraggle as ds

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if job.startswith("gram"):
            res = ds.fit_pca(data[job], n_components=10, method="gram", array="X",
                             client=client, rng=0, **options)
        else:
            res = ds.fit_least_squares(data[job], "y", method="gd", tol=cfg["tol"],
                                       max_iter=cfg["max_iter"], client=client, rng=0,
                                       **options)
    trace = res.trace
    inbound = trace["bytes_to_coordinator"].values
    rounds = trace["iteration_duration"].values
    row = {"solve_s": float(res.wall_time), "rounds": int(res.n_iter),
           "round_s": float(np.median(rounds)),
           "bytes_per_round": float(np.median(inbound)), "bytes_total": float(inbound.sum()),
           "converged": bool(res.converged)}
    return row, np.asarray(res.iterate)


def run(cfg: dict[str, Any], workdir: Path) -> dict[str, Any]:
    from distributed import Client, LocalCluster

    from daskstraggle.data.datasets import make_linear

    data: dict[str, str] = {}
    for n, d in cfg["gram"]:
        data[f"gram d={d}"] = str(make_linear(workdir / f"gram{d}.zarr", n_samples=n,
                                              n_features=d, chunk_rows=max(1, n // 16),
                                              seed=0))
    n, d = cfg["regression"]
    data["least squares"] = str(make_linear(workdir / "linear.zarr", n_samples=n,
                                            n_features=d, chunk_rows=max(1, n // 16), seed=0))
    todo = cases(cfg)
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {}
    answers: dict[tuple[str, str], np.ndarray] = {}
    with LocalCluster(n_workers=cfg["workers"], threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        for repeat in range(cfg["repeats"]):
            order = todo[repeat % len(todo):] + todo[:repeat % len(todo)]
            for job, label, options in order:
                row, answer = run_case(job, data, options, cfg, client)
                runs.setdefault(job, {}).setdefault(label, []).append(row)
                answers[job, label] = answer
                log(f"{job}, {label}: {row['bytes_per_round'] / 1e6:.3f} MB/round to the "
                    f"client, round {row['round_s'] * 1e3:.1f} ms, solve {row['solve_s']:.2f} s")
    agreement = {job: max(difference(answers[job, "flat"], answers[job, label],
                                     subspace=job.startswith("gram"))
                          for label in labels)
                 for job, labels in runs.items()}
    return {"runs": runs, "median": _medians(runs), "flat_vs_tree": agreement}


def _medians(runs: dict[str, dict[str, list[dict[str, Any]]]]) -> dict[str, Any]:
    keys = ("solve_s", "round_s", "bytes_per_round", "bytes_total", "rounds")
    med: dict[str, Any] = {}
    for job, labels in runs.items():
        med[job] = {label: {k: statistics.median(r[k] for r in rs) for k in keys}
                    | {"converged": all(r["converged"] for r in rs)}
                    for label, rs in labels.items()}
        for label, row in med[job].items():
            flat = med[job][label.replace("tree", "flat")]
            row["round_vs_flat"] = row["round_s"] / flat["round_s"]
            row["bytes_vs_flat"] = row["bytes_per_round"] / max(flat["bytes_per_round"], 1.0)
    return med


def report(results: dict[str, Any]) -> list[str]:
    lines = ["\njob, case: MB per round to the client (against flat), round time (against "
             "flat), solve seconds, rounds"]
    for job, labels in results["median"].items():
        lines.append(f"  {job} (flat vs tree: {results['flat_vs_tree'][job]:.1e})")
        for label, row in labels.items():
            lines.append(f"    {label:18s} {row['bytes_per_round'] / 1e6:9.3f} MB "
                         f"(x{row['bytes_vs_flat']:.3f})  {row['round_s'] * 1e3:8.1f} ms "
                         f"(x{row['round_vs_flat']:.2f})  {row['solve_s']:7.2f} s  "
                         f"{row['rounds']:.0f}")
    return lines


def main(argv: list[str] | None = None) -> dict[str, Any]:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_foundation import pipeline_main

    return pipeline_main('aggregation', __doc__.splitlines()[1], argv, full=FULL, quick=QUICK,
                         run=run, report=report, workers=True)


if __name__ == "__main__":
    main()
