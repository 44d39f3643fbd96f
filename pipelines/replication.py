#!/usr/bin/env python
"""Bounded-divergence replication: its cost per round, and the rounds a lost client costs.

Issue 29, part 2. MLfabric keeps a replica of the server's model within ``Div_max`` of it;
here the run publishes its state (as a checkpoint) to the Dask scheduler whenever the
iterate would drift further than ``D`` from the published one (``replica_divergence``).
One LocalCluster of ``workers`` single-threaded process workers; logistic regression with
``gd`` on a two-Gaussian-mixture store, solved to ``tol``. Cases, each ``repeats`` times
in rotated order (medians):

- ``none``: no checkpoint (the baseline);
- ``file every 1`` / ``file every 10``: a checkpoint file every round / every 10 rounds;
- ``replica D`` for each ``D`` in ``divergences``.

Reported per case: seconds per round and its cost against ``none``, states written, the
seconds spent writing them, the bytes of the last one, and the work a lost client costs:
killed after round ``t``, a resume redoes the rounds since the last state written at or
before ``t``; the mean over the run's rounds (a kill at a uniformly random round) and the
maximum. A real kill and resume is the ``cluster`` test
``tests/runtime/test_replica.py::test_a_killed_cli_run_resumes_from_the_replica_to_the_clean_answer``.

Usage::

    python pipelines/replication.py            # ~3 minutes on 2 cores
    python pipelines/replication.py --quick    # smoke run, small data

Results go to ``results/replication/<UTC timestamp>.json``.
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

FULL = {"workers": 4, "repeats": 3, "logistic": (200_000, 50), "tol": 1e-6, "max_iter": 300,
        "divergences": [1e-1, 1e-2, 1e-3, 1e-4]}
QUICK = {"workers": 2, "repeats": 1, "logistic": (5_000, 8), "tol": 1e-6, "max_iter": 100,
         "divergences": [1e-1, 1e-3]}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def cases(cfg: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(label, fit options) of every case; a ``{ck}`` path is filled per run."""
    out: list[tuple[str, dict[str, Any]]] = [
        ("none", {}),
        ("file every 1", {"checkpoint": "{ck}", "checkpoint_iterations": 1}),
        ("file every 10", {"checkpoint": "{ck}", "checkpoint_iterations": 10})]
    out += [(f"replica {d:g}", {"replica_divergence": d}) for d in cfg["divergences"]]
    return out


def lost_rounds(written: list[int], n_rounds: int) -> tuple[float, int]:
    """Mean and largest rounds redone after a kill following round ``t`` (``t`` = 1 ..
    ``n_rounds``), resuming from the last state written at or before ``t`` (none: 0)."""
    lost = []
    for t in range(1, n_rounds + 1):
        last = max((w for w in written if w <= t), default=0)
        lost.append(t - last)
    return statistics.mean(lost), max(lost)


def _history(attrs: dict[str, Any], options: dict[str, Any], n_rounds: int) -> list[int]:
    """The rounds after which a state was written."""
    described = attrs.get("checkpoint", {})
    if "history" in described:
        return list(described["history"])
    every = options.get("checkpoint_iterations")
    if every is None:
        return []
    return sorted({*range(every, n_rounds + 1, every), n_rounds})


def run_case(data: str, options: dict[str, Any], cfg: dict[str, Any], client: Any,
             workdir: Path) -> dict[str, Any]:
    import daskstraggle as ds

    kw = dict(options)
    if kw.get("checkpoint") == "{ck}":
        kw["checkpoint"] = workdir / f"run-{time.perf_counter_ns()}.ckpt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = ds.fit_logistic(data, "y", method="gd", tol=cfg["tol"], max_iter=cfg["max_iter"],
                              client=client, rng=0, **kw)
    described = res.attrs.get("checkpoint", {})
    written = _history(res.attrs, options, res.n_iter)
    mean_lost, max_lost = lost_rounds(written, res.n_iter)
    return {"solve_s": float(res.wall_time), "rounds": int(res.n_iter),
            "per_round_s": float(res.wall_time) / max(res.n_iter, 1),
            "written": len(written), "write_s": float(described.get("write_seconds", 0.0)),
            "bytes": described.get("bytes"), "mean_lost_rounds": mean_lost,
            "max_lost_rounds": max_lost, "converged": bool(res.converged),
            "objective": float(res.objective)}


def run(cfg: dict[str, Any], workdir: Path) -> dict[str, Any]:
    from distributed import Client, LocalCluster

    from daskstraggle.data.datasets import make_logistic

    n, d = cfg["logistic"]
    data = make_logistic(workdir / "logit.zarr", n_samples=n, n_features=d,
                         chunk_rows=max(1, n // (2 * cfg["workers"])), seed=0)
    todo = cases(cfg)
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in todo}
    with LocalCluster(n_workers=cfg["workers"], threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        for repeat in range(cfg["repeats"]):
            order = todo[repeat % len(todo):] + todo[:repeat % len(todo)]
            for label, options in order:
                row = run_case(str(data), options, cfg, client, workdir)
                runs[label].append(row)
                log(f"{label}: {row['per_round_s'] * 1e3:.1f} ms/round, {row['written']} "
                    f"written, {row['mean_lost_rounds']:.1f} rounds lost on average")
    return {"runs": runs, "median": _medians(runs)}


def _medians(runs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    keys = ("per_round_s", "written", "write_s", "mean_lost_rounds", "max_lost_rounds",
            "rounds", "objective")
    med = {label: {k: statistics.median(r[k] for r in rs) for k in keys}
           | {"bytes": rs[-1]["bytes"], "converged": all(r["converged"] for r in rs)}
           for label, rs in runs.items()}
    base = med["none"]["per_round_s"]
    for row in med.values():
        row["cost_vs_none"] = row["per_round_s"] / base
    return med


def report(results: dict[str, Any]) -> list[str]:
    lines = ["\ncase: ms per round (cost against none), states written, seconds writing, "
             "bytes of one, rounds a lost client redoes (mean, max)"]
    for label, row in results["median"].items():
        size = "-" if row["bytes"] is None else f"{row['bytes'] / 1e3:.0f} kB"
        lines.append(f"  {label:16s} {row['per_round_s'] * 1e3:7.2f} ms "
                     f"(x{row['cost_vs_none']:.3f})  {row['written']:5.0f} written  "
                     f"{row['write_s']:6.3f} s  {size:>8s}  "
                     f"lost {row['mean_lost_rounds']:5.1f} / {row['max_lost_rounds']:3.0f}  "
                     f"{row['rounds']:.0f} rounds")
    return lines


def main(argv: list[str] | None = None) -> dict[str, Any]:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_foundation import pipeline_main

    return pipeline_main('replication', __doc__.splitlines()[1], argv, full=FULL, quick=QUICK,
                         run=run, report=report)


if __name__ == "__main__":
    main()
