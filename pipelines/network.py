#!/usr/bin/env python
"""Links as stragglers: PCA methods on an emulated cluster with capped links, and simulated.

Issue 46, item 3. An :class:`~_emulated.EmulatedCluster` of ``workers`` hosts (each in its
own network namespace, real ``dask scheduler`` and ``dask worker`` processes; the client
runs in the scheduler's namespace, so the scheduler's link is the coordinator's) runs a
PCA of a Gaussian n x d store by

- ``gram flat`` and ``gram tree``: ``gram`` (one round, each reply the packed d x d upper
  triangle) with ``aggregation`` flat (one reply per worker reaches the client) and tree
  (the replies are summed on a worker first, one message reaches the client);
- ``gram coded``: ``gram`` with cyclic repetition, ``n_stragglers=1`` (waits for all but one);
- ``gram backups``: ``gram`` with speculative backups (``backup_after=1.5``, as ``--method
  auto`` runs it on a cluster): a reply 1.5x the others' median late is computed again on
  another worker, whose own link carries it;
- ``block``: block subspace iteration (replies of d x 2k numbers), ``max_iter`` rounds;
- ``dsag``: DSAG waiting for all but one worker (replies of d x k), ``max_iter`` rounds;
- ``auto``: ``--method auto``, which measures the links (``DaskRuntime.measure_links``)
  and, where they can hold gram's round up, probes gram's compute and runs the fastest of
  gram with backups, coded gram and tree-aggregated gram on them (the store is below
  auto's probing threshold, which the client lowers to 0 here: what is measured is the
  choice on links); its row's "call" includes that probe, and it is simulated by the row
  of the method it chose;

in each link scenario (the caps changed in place with ``tc``, between client runs):

- ``uncapped``: no cap (the calibration: what a round costs without the links);
- ``even``: every link at ``fast``;
- ``slow link``: the last worker's link at ``slow`` (a network straggler), the others at ``fast``;
- ``slow coordinator``: the workers at ``fast``, the scheduler's (and client's) at ``coordinator``.

Reported per scenario and method: the median round time and the median bytes that reached
the client per round (the trace's ``iteration_duration`` and ``bytes_to_coordinator``),
and beside them the simulated prediction of the same run: ``runtime="sim"`` with the
stragglers spec ``constant(compute=[...]) + link(bandwidth=[...], coordinator=...)``, whose
compute part per worker is the median send-to-receive latency of the same method's
``uncapped`` runs on that worker (per share of the rows: a coded task reads two), and whose
link term has the scenario's caps; the
prediction's error is ``simulated / emulated - 1``. ``gram tree`` is simulated with
``aggregation="tree"``: the sums between workers cross their links, the root's the
coordinator's, and each sum is a task of ``sum_duration`` seconds (the uncapped tree's
round beyond flat gram's, per level of sums).

Without root (or without ``ip``/``tc``, bridges or tbf) the emulated half is skipped with
its reason printed, and the simulated half runs on the measured in-process compute time
(a bare ``link(...)`` term).

Usage::

    python pipelines/network.py            # ~10 minutes on 2 cores, as root
    python pipelines/network.py --quick    # a small case, under a minute
    python pipelines/network.py --workers 8

Results go to ``results/network/<UTC timestamp>.json``.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import json  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

FULL = {"workers": 4, "repeats": 3, "shape": (2_000, 512), "n_components": 4,
        "max_iter": 10, "fast": "100mbit", "slow": "10mbit", "coordinator": "50mbit"}
QUICK = {"workers": 3, "repeats": 1, "shape": (1_500, 256), "n_components": 4,
         "max_iter": 4, "fast": "100mbit", "slow": "10mbit", "coordinator": "50mbit"}
#: ``gram backups``' setting, what ``--method auto`` runs gram with on a cluster.
BACKUP_AFTER = 1.5
#: The label of ``--method auto``'s row (not simulated: its choice is another row).
AUTO = "auto"
#: The scenario whose round times calibrate the simulator's compute part.
CALIBRATION = "uncapped"
_HERE = Path(__file__).resolve().parent


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def worker_names(cfg: dict[str, Any]) -> list[str]:
    """The emulated workers' names, ``w0``, ``w1``...; the last one gets the slow link."""
    return [f"w{i}" for i in range(cfg["workers"])]


def scenarios(cfg: dict[str, Any]) -> dict[str, dict[str, str | None]]:
    """Each scenario's link rate per host (``sched`` and every worker; None: uncapped)."""
    names = worker_names(cfg)
    fast = dict.fromkeys(names, cfg["fast"])
    return {CALIBRATION: dict.fromkeys(["sched", *names]),
            "even": {"sched": cfg["fast"], **fast},
            "slow link": {"sched": cfg["fast"], **fast, names[-1]: cfg["slow"]},
            "slow coordinator": {"sched": cfg["coordinator"], **fast}}


def methods(cfg: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each method's label and its ``fit_pca`` options (beyond the data and the runtime)."""
    rounds = {"max_iter": cfg["max_iter"], "tol": None}
    return {"gram flat": {"method": "gram", "aggregation": "flat"},
            "gram tree": {"method": "gram", "aggregation": "tree"},
            "gram coded": {"method": "gram", "method_params": {
                "scheme": "cyclic-repetition", "n_stragglers": 1}},
            "gram backups": {"method": "gram", "backup_after": BACKUP_AFTER},
            "block": {"method": "block", **rounds},
            "dsag": {"method": "dsag", "method_params": {"n_wait": cfg["workers"] - 1},
                     **rounds},
            AUTO: {"method": "auto"}}


def fit(data: str, options: dict[str, Any], cfg: dict[str, Any], **where: Any) -> Any:
    """One ``fit_pca`` of the store (warnings of runs stopped at ``max_iter`` silenced)."""
    import daskstraggle as ds

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ds.fit_pca(data, n_components=cfg["n_components"], array="X", rng=0,
                          **options, **where)


def summarise(result: Any, names: list[str]) -> dict[str, Any]:
    """A run's row: median round time and bytes to the client, and per worker index its
    name and the median send-to-receive latency of its replies."""
    trace = result.trace
    latency = [np.median(column[np.isfinite(column)]) if np.isfinite(column).any() else np.nan
               for column in trace["latency"].values.T]  # NaN: never waited for
    return {"round_s": float(np.median(trace["iteration_duration"].values)),
            "bytes_per_round": float(np.median(trace["bytes_to_coordinator"].values)),
            "rounds": int(result.n_iter), "objective": float(result.objective),
            "load_s": float(result.attrs.get("load_duration_s") or 0.0),
            "workers": names, "latency_s": [float(v) for v in latency],
            "choice": (result.attrs.get("auto") or {}).get("choice"),
            "auto": _described(result.attrs.get("auto")),
            "links": (result.attrs.get("auto") or {}).get("link")}


def _described(report: dict[str, Any] | None) -> str | None:
    """What ``auto`` ran and why (None: not auto)."""
    from daskstraggle.runtime.auto import describe

    return None if report is None else describe(report)


def client_run(argv: list[str]) -> None:
    """The client on the emulated cluster: ``ADDRESS DATA CONFIG LABELS`` (JSON config,
    comma-separated labels in the order to run); prints one JSON line of rows by label."""
    from distributed import Client

    from daskstraggle.runtime import auto

    auto.MEASURE_MIN_BYTES = 0  # these stores are small: measure the choice on links anyway
    address, data, cfg, labels = argv[0], argv[1], json.loads(argv[2]), argv[3].split(",")
    todo = methods(cfg)
    rows = {}
    with Client(address, timeout="30s") as client:
        client.wait_for_workers(cfg["workers"], timeout=60)
        by_address = {a: w["name"] for a, w in client.scheduler_info()["workers"].items()}
        for label in labels:
            start = time.perf_counter()
            result = fit(data, todo[label], cfg, client=client)
            call = time.perf_counter() - start
            names = [by_address.get(w, str(w)) for w in result.attrs["workers"]]
            rows[label] = {**summarise(result, names), "call_s": call}
            if label == AUTO:
                log(f"auto: {auto.describe(result.attrs['auto'])}")
    print(json.dumps(rows))


def _client(cluster: Any, data: str, cfg: dict[str, Any], labels: list[str], env: dict[str, str],
            scenario: str) -> dict[str, dict[str, Any]]:
    """Run :func:`client_run` on ``cluster`` for ``labels``; its rows by label."""
    rows: dict[str, dict[str, Any]] = cluster.run_json(
        "network", "client_run", [data, json.dumps(cfg), ",".join(labels)], timeout=300,
        what=f"the client in {scenario!r}", env=env)
    return rows


def run_emulated(cfg: dict[str, Any], data: str) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """Every scenario and method on one emulated cluster, ``repeats`` times in rotated
    order, after one uncapped warm-up run of every method (discarded: the workers' first
    tasks import the library); the rows by scenario and label."""
    from _emulated import EmulatedCluster

    labels = list(methods(cfg))
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {}
    env = {**os.environ}
    with EmulatedCluster(dict.fromkeys(worker_names(cfg)), env=env) as cluster:
        _client(cluster, data, cfg, labels, env, "warm-up")
        for repeat in range(cfg["repeats"]):
            order = labels[repeat % len(labels):] + labels[:repeat % len(labels)]
            for scenario, rates in scenarios(cfg).items():
                for host, rate in rates.items():
                    cluster.set_rate(host, rate)
                for label, row in _client(cluster, data, cfg, order, env, scenario).items():
                    runs.setdefault(scenario, {}).setdefault(label, []).append(row)
                    log(f"{scenario}, {label}: round {row['round_s'] * 1e3:.0f} ms, "
                        f"{row['bytes_per_round'] / 1e6:.3f} MB/round to the client")
    return runs


def calibration(runs: dict[str, dict[str, list[dict[str, Any]]]], cfg: dict[str, Any]
                ) -> dict[str, dict[str, float]]:
    """Per method, each worker's median send-to-receive latency in the uncapped runs, per
    share of the rows its tasks read (a coded task reads ``n_stragglers + 1`` shares: the
    simulated runtime charges it that many times the compute given)."""
    out: dict[str, dict[str, float]] = {}
    for label, rows in runs[CALIBRATION].items():
        if label == AUTO:
            continue
        load = 1 + methods(cfg)[label].get("method_params", {}).get("n_stragglers", 0)
        seen: dict[str, list[float]] = {}
        for row in rows:
            for name, value in zip(row["workers"], row["latency_s"], strict=True):
                if np.isfinite(value):
                    seen.setdefault(name, []).append(value)
        out[label] = {name: statistics.median(values) / load for name, values in seen.items()}
    return out


def spec(rates: dict[str, str | None], names: list[str],
         compute: dict[str, float] | None) -> str:
    """The stragglers spec of a scenario: per worker index ``names[i]``'s compute (None:
    the measured in-process compute) and link."""
    def rate(host: str) -> str:
        return "1e12" if rates[host] is None else repr(rates[host])

    link = (f"link(bandwidth=[{', '.join(rate(n) for n in names)}], "
            f"coordinator={rate('sched')})")
    if compute is None:
        return link
    slowest = max(compute.values())
    return (f"constant(compute=[{', '.join(repr(compute.get(n, slowest)) for n in names)}])"
            f" + {link}")


def run_simulated(cfg: dict[str, Any], data: str,
                  emulated: dict[str, dict[str, list[dict[str, Any]]]] | None
                  ) -> dict[str, dict[str, dict[str, Any]]]:
    """The simulated run of every scenario (but the calibration) and method: on the
    emulated runs' calibration and worker order when there are some, else on the
    measured compute."""
    from daskstraggle.runtime import SimRuntime

    calibrated = None if emulated is None else calibration(emulated, cfg)
    sums = 0.0 if emulated is None else sum_duration(emulated, cfg)
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for scenario, rates in scenarios(cfg).items():
        if scenario == CALIBRATION and emulated is not None:
            continue
        for label, options in methods(cfg).items():
            if label == AUTO:
                continue
            names = (worker_names(cfg) if emulated is None
                     else emulated[scenario][label][0]["workers"])
            model = spec(rates, names, None if calibrated is None else calibrated[label])
            settings = {key: options[key] for key in ("aggregation", "backup_after")
                        if key in options}
            runtime = SimRuntime(cfg["workers"], latency=model, sum_duration=sums, **settings)
            result = fit(data, {k: v for k, v in options.items() if k not in settings}, cfg,
                         runtime=runtime)
            out.setdefault(scenario, {})[label] = {**summarise(result, names), "spec": model,
                                                   "sum_duration_s": sums}
    return out


def sum_duration(runs: dict[str, dict[str, list[dict[str, Any]]]], cfg: dict[str, Any]
                 ) -> float:
    """Seconds a sum of tree aggregation costs as a task of its own, from the uncapped
    runs: the tree's median round beyond flat gram's, per level of sums (the simulated
    runtime's ``sum_duration``; at least 0)."""
    from daskstraggle.runtime.aggregate import FAN_IN

    levels = max(1, math.ceil(math.log(cfg["workers"]) / math.log(FAN_IN)))
    rounds = {label: statistics.median(row["round_s"] for row in runs[CALIBRATION][label])
              for label in ("gram tree", "gram flat")}
    return max(0.0, rounds["gram tree"] - rounds["gram flat"]) / levels


_KEYS = ("round_s", "bytes_per_round", "rounds", "load_s", "call_s")


def _medians(runs: dict[str, dict[str, list[dict[str, Any]]]]) -> dict[str, Any]:
    """Per scenario and label the median of each of :data:`_KEYS`, and auto's choices."""
    return {scenario: {label: {**{key: statistics.median(r[key] for r in rows) for key in _KEYS},
                               "choices": sorted({str(r.get("choice")) for r in rows})}
                       for label, rows in labels.items()}
            for scenario, labels in runs.items()}


def table(emulated: dict[str, Any] | None, simulated: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per scenario and method: emulated (median) and simulated round time and
    bytes to the client per round, and the prediction's error."""
    rows = []
    for scenario, labels in (emulated or simulated).items():
        for label, measured in labels.items():
            sim = simulated.get(scenario, {}).get(label)
            row: dict[str, Any] = {"scenario": scenario, "method": label}
            if emulated is not None:
                row |= {"emulated_round_s": measured["round_s"],
                        "emulated_bytes": measured["bytes_per_round"],
                        "emulated_call_s": measured["call_s"], "load_s": measured["load_s"]}
            if sim is not None:
                row |= {"simulated_round_s": sim["round_s"],
                        "simulated_bytes": sim["bytes_per_round"]}
            else:
                row["not_simulated"] = ("its choice's row" if label == AUTO
                                        else "the calibration scenario")
            if label == AUTO and emulated is not None:
                row["choices"] = measured["choices"]
            if emulated is not None and sim is not None:
                row["error"] = sim["round_s"] / measured["round_s"] - 1
            rows.append(row)
    return rows


def run(cfg: dict[str, Any], workdir: Path) -> dict[str, Any]:
    sys.path.insert(0, str(_HERE))
    from _emulated import unavailable

    from daskstraggle.data.datasets import make_linear

    n, d = cfg["shape"]
    data = str(make_linear(workdir / "pca.zarr", n_samples=n, n_features=d,
                           chunk_rows=max(1, n // 16), seed=0))
    reason = unavailable()
    runs = None
    if reason is None:
        runs = run_emulated(cfg, data)
    else:
        log(f"no emulated cluster ({reason}): the simulated half only, on the measured "
            f"in-process compute")
    simulated = run_simulated(cfg, data, runs)
    emulated = None if runs is None else _medians(runs)
    return {"emulated_skipped": reason, "runs": runs, "emulated": emulated,
            "simulated": simulated, "table": table(emulated, simulated)}


def _cell(row: dict[str, Any], key: str, scale: float, fmt: str) -> str:
    return format(row[key] * scale, fmt) if key in row else "-"


def report(results: dict[str, Any]) -> list[str]:
    lines = []
    if results["emulated_skipped"]:
        lines.append(f"\nemulated cluster skipped: {results['emulated_skipped']}")
    lines.append("\nscenario, method: round ms emulated / simulated (error), MB per round to "
                 "the client emulated / simulated")
    for row in results["table"]:
        error = f"{row['error']:+.0%}" if "error" in row else "-"
        chose = f"  ran {', '.join(row['choices'])}" if "choices" in row else ""
        lines.append(f"  {row['scenario']:17s} {row['method']:12s} "
                     f"{_cell(row, 'emulated_round_s', 1e3, '8.0f')} / "
                     f"{_cell(row, 'simulated_round_s', 1e3, '8.0f')} ms ({error:>5s})  "
                     f"{_cell(row, 'emulated_bytes', 1e-6, '7.3f')} / "
                     f"{_cell(row, 'simulated_bytes', 1e-6, '7.3f')} MB{chose}")
    return lines


def main(argv: list[str] | None = None) -> dict[str, Any]:
    sys.path.insert(0, str(_HERE))
    from bench_foundation import pipeline_main

    return pipeline_main("network", __doc__.splitlines()[1], argv, full=FULL, quick=QUICK,
                         run=run, report=report, workers=True)


if __name__ == "__main__":
    main()
