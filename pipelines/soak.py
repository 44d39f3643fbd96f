#!/usr/bin/env python
"""Randomized fault soak (issue 15, part 8): runs end correct or in one clear line.

Each trial starts a LocalCluster of 3 single-threaded process workers, picks (seeded) a
method (gd, dsag, coded with cyclic repetition s = 1), a fault and an instant, runs
400 x 10^3-ish data through ``run_on`` a ``DaskRuntime`` and injects the fault with a real signal
or a real cluster call:

- ``kill``: SIGKILL a worker process (its nanny restarts it at a new address);
- ``freeze``: SIGSTOP a worker for 8 s (4 s with ``--quick``), then SIGCONT (its rows move
  after ``frozen_after`` 2 s, or ``stale_after`` 10 rounds for dsag and coded, which go on
  without it);
- ``retire``: ``client.retire_workers`` of one worker (adaptive scale-down; its rows move
  while it retires);
- ``join``: a fourth worker joins (``cluster.scale(4)``) and helps the slowest index;
- ``none``: no fault (the clean reference for the timing).

The fault fires when the run has recorded a seeded number of rounds (the coordinator's
trace), never at a fixed wall time. Every trial is judged: it must end within its bound
(``--bound`` seconds) either with a result or with a daskstraggle error of one line; an
exact method (gd, coded) must end with the iterate of an in-process run of the same
seed (to 1e-9), dsag with a finite objective; afterwards no process of the cluster may
remain. Reported: per fault and method, the trials, the failures, and the median run time
against the fault-free runs (the cost of the fault).

Usage::

    python pipelines/soak.py                  # 30 trials, ~6 minutes here
    python pipelines/soak.py --trials 100 --seed 1
    python pipelines/soak.py --quick          # 3 gd trials of 30 rounds, the test runs this

Results go to ``results/soak/<UTC timestamp>.json`` (every trial, the summary, machine and
load).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import signal  # noqa: E402
import statistics  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

FAULTS = ("none", "kill", "freeze", "retire", "join")
METHODS = ("gd", "dsag", "coded")
SLOW = "gamma(mean=0.03, var=1e-6)"


def _data() -> Any:
    from daskstraggle import open_matrix

    rng = np.random.default_rng(0)
    X = rng.normal(size=(3000, 12)) * np.linspace(3.0, 1.0, 12)
    y = np.where(X[:, 0] + 0.5 * rng.normal(size=3000) > 0, 1.0, -1.0)
    return open_matrix(X, labels=y)


def _method(name: str) -> Any:
    from daskstraggle.methods import DSAG, GD, CodedGD

    return {"gd": GD, "dsag": lambda: DSAG(n_wait=2),
            "coded": lambda: CodedGD("cyclic-repetition", n_stragglers=1, rng=0)}[name]()


def _inject(fault: str, rt: Any, cluster: Any, at_round: int, stop: threading.Event,
            freeze: float) -> None:
    """Wait until the run has recorded ``at_round`` rounds, then inject ``fault``."""
    while not stop.is_set():
        coordinator = getattr(rt, "coordinator", None)
        if coordinator is not None and len(coordinator.session.recorder) >= at_round:
            break
        time.sleep(0.01)
    if stop.is_set() or fault == "none":
        return
    address = rt.worker_names[1]
    if fault == "join":
        cluster.scale(4)
        return
    if fault == "retire":
        rt.client.retire_workers([address], close_workers=True)
        return
    pid = rt.client.run(os.getpid, workers=[address])[address]
    if fault == "kill":
        os.kill(pid, signal.SIGKILL)
        return
    os.kill(pid, signal.SIGSTOP)
    stop.wait(freeze)
    os.kill(pid, signal.SIGCONT)


def trial(method: str, fault: str, at_round: int, *, data: Any, clean: dict[str, Any],
          bound: float, rounds: int = 60, freeze: float = 8.0) -> dict[str, Any]:
    """Run one trial; return its outcome."""
    import psutil
    from distributed import Client, LocalCluster

    from daskstraggle.api import run_on
    from daskstraggle.errors import StraggleError
    from daskstraggle.problems import Logistic
    from daskstraggle.runtime import DaskRuntime, StopRule

    out: dict[str, Any] = {"method": method, "fault": fault, "at_round": at_round}
    stop = threading.Event()
    cluster = LocalCluster(n_workers=3, threads_per_worker=1, processes=True,
                           dashboard_address=None)
    try:
        with Client(cluster, set_as_default=False) as client, \
                DaskRuntime(client, stragglers=SLOW, rng=0, frozen_after=2.0,
                            stale_after=10) as rt:
            rt.engine.coordinator = None
            injector = threading.Thread(target=_inject, daemon=True,
                                        args=(fault, rt, cluster, at_round, stop, freeze))
            injector.start()
            t0 = time.perf_counter()
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    res = run_on(rt, _method(method), Logistic(alpha=0.01), data,
                                 stop=StopRule(max_iter=rounds, tol=None), rng=0)
                out["seconds"] = time.perf_counter() - t0
                out["outcome"] = "result"
                out["warnings"] = [str(w.message) for w in caught][:5]
                out["moves"] = [m.get("reason") for m in res.attrs.get("worker_losses", [])]
                out["joins"] = [{"helps": j["helps"], "split_units": j["split_units"]}
                                for j in res.attrs.get("worker_joins", [])]
                if method in ("gd", "coded"):
                    err = float(np.max(np.abs(res.iterate - clean[method])))
                    out["max_abs_diff"] = err
                    out["ok"] = err <= 1e-9 * max(1.0, float(np.max(np.abs(clean[method]))))
                else:
                    out["ok"] = bool(np.isfinite(res.objective))
            except StraggleError as err:
                out["seconds"] = time.perf_counter() - t0
                out["outcome"] = "error"
                out["error"] = str(err)
                out["ok"] = "\n" not in str(err)
            finally:
                stop.set()
                injector.join(timeout=30)
    finally:
        stop.set()
        cluster.close(timeout=30)
    out["within_bound"] = out.get("seconds", bound + 1) <= bound
    # what is left of the cluster (not multiprocessing's resource tracker, which lives on)
    children = [c for c in psutil.Process().children(recursive=True)
                if "resource_tracker" not in " ".join(c.cmdline())]
    _, alive = psutil.wait_procs(children, timeout=30)
    out["stray_processes"] = len(alive)
    for proc in alive:
        proc.kill()
    out["ok"] = bool(out.get("ok")) and out["within_bound"] and not alive
    return out


def _clean_iterates(data: Any, rounds: int) -> dict[str, np.ndarray]:
    from daskstraggle.api import run_on
    from daskstraggle.problems import Logistic
    from daskstraggle.runtime import LocalRuntime, StopRule

    return {m: run_on(LocalRuntime(3), _method(m), Logistic(alpha=0.01), data,
                                   stop=StopRule(max_iter=rounds, tol=None), rng=0).iterate
            for m in ("gd", "coded")}


def summarise(trials: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (fault, method): trials, failures, median seconds and the ratio to no fault."""
    base = {m: statistics.median([t["seconds"] for t in trials
                                  if t["fault"] == "none" and t["method"] == m and "seconds" in t]
                                 or [float("nan")]) for m in METHODS}
    rows = []
    for fault in FAULTS:
        for method in METHODS:
            mine = [t for t in trials if t["fault"] == fault and t["method"] == method]
            if not mine:
                continue
            seconds = statistics.median([t.get("seconds", float("nan")) for t in mine])
            rows.append({"fault": fault, "method": method, "trials": len(mine),
                         "failures": sum(not t["ok"] for t in mine),
                         "errors": sum(t["outcome"] == "error" for t in mine),
                         "median_s": seconds, "vs_no_fault": seconds / base[method]})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--bound", type=float, default=120.0,
                        help="seconds a trial may take (default 120)")
    parser.add_argument("--quick", action="store_true",
                        help="3 gd trials (none, kill, freeze) of 30 rounds, a 4 s freeze")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    if args.quick:
        # gd waits for the frozen worker: its rows must move for the run to end (dsag goes
        # on without it, and 30 rounds may end before the 2 s bound)
        plan = [("gd", "none", 5), ("gd", "kill", 5), ("gd", "freeze", 5)]
    else:
        plan = [(str(rng.choice(METHODS)), str(rng.choice(FAULTS)), int(rng.integers(3, 40)))
                for _ in range(args.trials)]
    data = _data()
    rounds, freeze = (30, 4.0) if args.quick else (60, 8.0)
    clean = _clean_iterates(data, rounds)
    trials = []
    for n, (method, fault, at_round) in enumerate(plan, 1):
        load = os.getloadavg()[0]
        result = trial(method, fault, at_round, data=data, clean=clean, bound=args.bound,
                       rounds=rounds, freeze=freeze)
        result["load_before"] = load
        trials.append(result)
        print(f"[{n}/{len(plan)}] {method:5s} {fault:6s} at round {at_round:2d}: "
              f"{result['outcome']:6s} {result.get('seconds', float('nan')):6.1f} s "
              f"{'ok' if result['ok'] else 'FAILED'}", flush=True)
    summary = summarise(trials)
    print("\n| fault | method | trials | failures | errors | median s | vs no fault |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for row in summary:
        print(f"| {row['fault']} | {row['method']} | {row['trials']} | {row['failures']} | "
              f"{row['errors']} | {row['median_s']:.1f} | {row['vs_no_fault']:.2f} |")
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    out = args.out or Path("results") / "soak" / f"{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"seed": args.seed, "quick": args.quick, "bound_s": args.bound,
                               "trials": trials, "summary": summary,
                               "cpus": os.cpu_count()}, indent=1, default=str))
    print(f"\nresults: {out}")
    return 0 if all(t["ok"] for t in trials) else 1


if __name__ == "__main__":
    raise SystemExit(main())
