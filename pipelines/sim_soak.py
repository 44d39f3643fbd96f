#!/usr/bin/env python
"""Simulated fault soak at scale (issue 26, part 6): exact runs end on the clean answer.

Each trial runs an exact method (``gd``, or ``coded`` with fractional repetition s = 1:
cyclic repetition's decoder is a least-squares solve over every responder, slow and
poorly conditioned at a thousand workers) on
``--workers`` simulated workers (``SimRuntime``) for ``--rounds`` rounds, with a seeded,
random fault spec of losses, freezes, joins and retirements spread over the run's
simulated time: the engine's worker pool takes the same decisions it takes on a cluster.
Every trial is judged against the fault-free run of the same seed: the iterate must agree
to 1e-9 (relative, the coded decoder answers to rounding) and the run must take every
round. Reported per trial: the faults, the moves and joins the pool made, the simulated
time against the clean run's (the faults' cost) and the real seconds.

Usage::

    python pipelines/sim_soak.py                      # 1000 workers, 10^4 rounds, 4 trials
    python pipelines/sim_soak.py --methods gd --trials 1   # one gd trial at that scale
    python pipelines/sim_soak.py --workers 200 --rounds 2000 --trials 8 --seed 1
    python pipelines/sim_soak.py --quick              # 60 workers, 40 rounds: the test

Results go to ``results/sim_soak/<UTC timestamp>.json`` (or ``--out``), with the machine's
CPU model, the faults each trial played (those before its run ended) and its real and
CPU seconds.

The process raises Python's garbage-collection threshold (and freezes what exists before
the trials): a run allocates about twenty small objects a unit, nearly all freed at once,
and with the default threshold (700) the collector scanned the round's live results every
few dozen units, about a tenth of the time of a 1000-worker run. Nothing a run computes
depends on it.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import datetime  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

LATENCY = "gamma(mean=0.01, var=1e-6)"  # rounds of about 10 ms of simulated time
METHODS = ("gd", "coded")
FAULT_KINDS = ("loss", "retire", "freeze", "join")


def cpu_model() -> str:
    """The CPU model name (``/proc/cpuinfo``), else the platform's processor string."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def fault_spec(rng: np.random.Generator, n_workers: int, horizon: float) -> str:
    """A random mix of losses, freezes, joins and retirements within ``horizon`` seconds.

    About one fault per 100 workers of each kind (at least one): losses and retirements
    of distinct workers, freezes of 5 to 50 rounds' length, and as many joins as workers
    leave, so the cluster keeps its size on average.
    """
    k = max(1, n_workers // 100)
    order = rng.permutation(n_workers)
    lost, retired, frozen = order[:k], order[k:2 * k], order[2 * k:3 * k]
    terms = []

    def at() -> float:
        return round(float(rng.uniform(0.05, 0.9) * horizon), 4)

    terms += [f"loss(workers={int(w)}, at={at()})" for w in lost]
    terms += [f"retire(workers={int(w)}, at={at()})" for w in retired]
    terms += [f"freeze(workers={int(w)}, at={at()}, "
              f"for={round(float(rng.uniform(5, 50)) * 0.01, 4)})" for w in frozen]
    terms += [f"join(count=1, at={at()})" for _ in range(2 * k)]
    return " + ".join(terms)


def faults_played(spec: str, until: float) -> dict[str, int]:
    """How many faults of each kind ``spec`` places at or before ``until`` seconds."""
    from daskstraggle.latency.spec import parse_stragglers

    counts = dict.fromkeys(FAULT_KINDS, 0)
    for fault in parse_stragglers(spec).faults:
        if fault.at <= until:
            kind = type(fault).__name__.lower()
            counts[kind] = counts.get(kind, 0) + 1
    return counts


def run(method: str, X: np.ndarray, n_workers: int, n_rounds: int, seed: int,
        faults: str | None) -> tuple[Any, float, float]:
    """One simulated run; return the result, and the real and CPU seconds it took."""
    from daskstraggle import open_matrix
    from daskstraggle.api import run_on
    from daskstraggle.methods import make_method
    from daskstraggle.problems import PCA
    from daskstraggle.runtime import SimRuntime, StopRule

    params = {"scheme": "fractional-repetition", "n_stragglers": 1, "rng": seed} \
        if method == "coded" else {}
    t0, cpu0 = time.perf_counter(), time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the moves are recorded in the result
        with SimRuntime(n_workers, latency=LATENCY, faults=faults, rng=seed,
                        frozen_after=0.1) as rt:
            result = run_on(rt, make_method(method, **params), PCA(n_components=3),
                            open_matrix(X), stop=StopRule(max_iter=n_rounds, tol=None),
                            rng=seed)
    return result, time.perf_counter() - t0, time.process_time() - cpu0


def trial(k: int, args: argparse.Namespace, X: np.ndarray) -> dict[str, Any]:
    """Trial ``k``: a method, a fault spec, the clean run and the faulty one, judged."""
    rng = np.random.default_rng([args.seed, k])
    method = args.methods[k % len(args.methods)]
    clean, clean_s, clean_cpu = run(method, X, args.workers, args.rounds, args.seed + k, None)
    horizon = float(clean.trace.wall_time[-1])
    spec = fault_spec(rng, args.workers, horizon)
    faulty, faulty_s, faulty_cpu = run(method, X, args.workers, args.rounds, args.seed + k,
                                       spec)
    scale = float(np.max(np.abs(clean.iterate)))
    diff = float(np.max(np.abs(faulty.iterate - clean.iterate))) / scale
    moves = faulty.attrs.get("worker_losses", [])
    kinds: dict[str, int] = {}
    for move in moves:
        kinds[move["kind"]] = kinds.get(move["kind"], 0) + 1
    ok = diff <= 1e-9 and faulty.n_iter == args.rounds
    simulated = float(faulty.trace.wall_time[-1])
    return {
        "trial": k, "method": method, "faults": spec,
        "faults_played": faults_played(spec, simulated), "ok": ok,
        "max_rel_diff": diff, "rounds": faulty.n_iter,
        "moves": kinds, "joins_helping": len(faulty.attrs.get("worker_joins", [])),
        "simulated_s": simulated, "clean_simulated_s": horizon,
        "real_s": faulty_s, "clean_real_s": clean_s,
        "cpu_s": faulty_cpu, "clean_cpu_s": clean_cpu,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=10_000)
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--rows-per-worker", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--methods", default=",".join(METHODS),
                        help="comma-separated exact methods, taken in turn by the trials "
                             f"(default: {','.join(METHODS)})")
    parser.add_argument("--quick", action="store_true",
                        help="60 workers, 40 rounds, 2 trials (gd and coded)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.quick:
        args.workers, args.rounds, args.trials, args.methods = 60, 40, 2, ",".join(METHODS)
    args.methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    if not args.methods or set(args.methods) - set(METHODS):
        parser.error(f"--methods takes some of {', '.join(METHODS)}; got {args.methods}")
    if args.workers % 2:
        parser.error("--workers must be even (coded: fractional repetition with s = 1)")
    rng = np.random.default_rng(args.seed)
    X = rng.normal(size=(args.workers * args.rows_per_worker, 8)) * np.linspace(3, 1, 8)
    gc.freeze()  # what exists now lives through every trial: never scan it again
    gc.set_threshold(50_000, 20, 100)
    started = datetime.datetime.now(datetime.UTC)
    trials = []
    for k in range(args.trials):
        trials.append(trial(k, args, X))
        t = trials[-1]
        print(f"trial {k} {t['method']}: ok={t['ok']} diff={t['max_rel_diff']:.1e} "
              f"moves={t['moves']} helpers={t['joins_helping']} "
              f"simulated {t['simulated_s']:.2f} s (clean {t['clean_simulated_s']:.2f}), "
              f"real {t['real_s']:.0f} s (clean {t['clean_real_s']:.0f} s), "
              f"faults played {t['faults_played']}", flush=True)
    report = {
        "pipeline": "sim_soak", "started": started.isoformat(), "cpu": cpu_model(),
        "command": " ".join(["python", "pipelines/sim_soak.py", *(argv or sys.argv[1:])]),
        "workers": args.workers, "rounds": args.rounds, "latency": LATENCY,
        "trials": trials, "all_ok": all(t["ok"] for t in trials),
    }
    out = args.out or Path("results") / "sim_soak" / f"{started:%Y%m%dT%H%M%SZ}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    print(f"{'all trials ok' if report['all_ok'] else 'FAILED'}; wrote {out}")
    return 0 if report["all_ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
