#!/usr/bin/env python
"""The straggler table: plain GD against the straggler-resilient methods, with repeats.

Issue 29, part 4 (the ``links`` section: issue 46, item 5). One table, three settings, the
same policy code:

- ``cluster``: a LocalCluster of ``workers`` single-threaded process workers (4 by default).
  A *sleep-based* straggler (``slowdown(workers=1, factor=8)``: each of worker 1's tasks
  sleeps 7 times its compute time after computing, which costs no CPU, so the 2-core host
  does not hide it), a ``markov`` one (workers turn slow and back at random) and DSAG's
  ``artificial`` ramp (worker i of N slowed ``1 + 3 (i + 1) / N`` times, the slowest back
  to normal after 5 s; the paper's spread of 0.4 over 49 workers barely slows 4). Jobs:
  logistic regression on a two-Gaussian-mixture store solved to ``tol``, and a genotype PCA
  (``gram``, exact in one round) of a simulated VCF Zarr store. For each job: plain GD
  without a straggler ("clean"), plain GD with it, coded GD (cyclic repetition, s = 1) and
  DSAG (w = workers - 1) with it; for the PCA, gram uncoded clean and with the straggler and
  gram coded (cyclic repetition, s = 1) with it. Each run is one ``fit_*`` call on the
  same cluster; its solve time is ``result.wall_time`` (after the load, as the paper's
  timings). ``repeats`` rounds, the order of the cases rotated each round; medians.
- ``links``: the same jobs on an emulated cluster of ``workers`` hosts (network namespaces,
  ``pipelines/_emulated.py``; root only, else skipped with its reason) whose links are
  uncapped for the clean runs, and for the ``slow link`` straggler all at ``fast_link``
  but the last worker's, at ``slow_link``: the link is the straggler, nothing is injected.
  Cases: gram, coded gram and auto for the PCA; gd, coded GD, DSAG and auto for the
  logistic regression; each job's clean runs on the uncapped links.
- ``sim``: the logistic cases at ``sim_workers`` (100) simulated workers
  (``runtime="sim"``, latency ``gamma(mean=0.05, var=1e-4)`` plus the same ``slowdown`` on
  a tenth of the workers, the ``markov`` one, or DSAG's ramp; coded with s = that tenth),
  the same policy code in simulated time, a fixed number of rounds (``sim_rounds``):
  simulated time and final objective.

Each row reports the median solve time, the iterations, ``converged``, and the speed-up
against plain GD with the straggler (``gd_straggler / case``) and the cost against the
clean run (``case / gd_clean``).

Usage::

    python pipelines/straggler_table.py              # ~10 minutes on 2 cores
    python pipelines/straggler_table.py --quick      # smoke run, small data, one straggler
    python pipelines/straggler_table.py --sections sim
    python pipelines/straggler_table.py --workers 8 --stragglers slowdown artificial
    python pipelines/straggler_table.py --sections cluster --jobs pca
    python pipelines/straggler_table.py --sections links     # as root: an emulated cluster

Results (every run, medians, ratios, machine, versions) go to
``results/straggler_table/<UTC timestamp>.json``.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

SECTIONS = ("cluster", "links", "sim")
JOBS = ("logistic", "pca")

FULL = {"workers": 4, "repeats": 3, "logistic": (400_000, 100), "genotypes": (60_000, 1_500),
        "tol": 1e-6, "max_iter": 300, "sim_workers": 100, "sim_rows": 20_000, "sim_rounds": 100,
        "fast_link": "1gbit", "slow_link": "10mbit"}
#: A smoke run of every path (both jobs, auto's rows, every section) in seconds: one
#: straggler, 2 workers, a few rounds (the data are below auto's probing threshold).
QUICK = {"workers": 2, "repeats": 1, "logistic": (2_000, 5), "genotypes": (400, 40),
         "tol": 1e-6, "max_iter": 10, "sim_workers": 20, "sim_rows": 2_000, "sim_rounds": 30,
         "stragglers": ["slowdown"], "fast_link": "1gbit", "slow_link": "10mbit"}

STRAGGLERS = {"slowdown": "slowdown(workers=1, factor=8)",
              "markov": "markov(p_slow=0.1, p_fast=0.3, slow_factor=8)",
              "artificial": "artificial(spread=3, n_recover=1, recover_time=5)"}
#: The ``links`` section's straggler: the last worker's link capped at ``slow_link``.
SLOW_LINK = "slow link"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def regression_cases(workers: int, stragglers: list[str] | None = None
                     ) -> list[tuple[str, str, dict[str, Any], str | None]]:
    """(label, method, method_params, straggler name or None) of the logistic job, for
    ``stragglers`` (names of :data:`STRAGGLERS`; None: all)."""
    cases: list[tuple[str, str, dict[str, Any], str | None]] = [
        ("gd clean", "gd", {}, None), ("auto clean", "auto", {}, None)]
    for name in stragglers or list(STRAGGLERS):
        cases += [(f"gd {name}", "gd", {}, name),
                  (f"coded s=1 {name}", "coded",
                   {"scheme": "cyclic-repetition", "n_stragglers": 1}, name),
                  (f"dsag w={workers - 1} {name}", "dsag", {"n_wait": workers - 1}, name),
                  (f"auto {name}", "auto", {}, name)]
    return cases


def pca_cases(stragglers: list[str] | None = None
              ) -> list[tuple[str, str, dict[str, Any], str | None]]:
    """(label, method, method_params, straggler name or None) of the genotype PCA job."""
    cases: list[tuple[str, str, dict[str, Any], str | None]] = [
        ("gram clean", "gram", {}, None), ("auto clean", "auto", {}, None)]
    for name in stragglers or list(STRAGGLERS):
        cases += [(f"gram {name}", "gram", {}, name),
                  (f"gram coded s=1 {name}", "gram",
                   {"scheme": "cyclic-repetition", "n_stragglers": 1}, name),
                  (f"auto {name}", "auto", {}, name)]
    return cases


def _solve(job: str, data: Any, method: str, params: dict[str, Any], straggler: str | None,
           cfg: dict[str, Any], **where: Any) -> dict[str, Any]:
    import daskstraggle as ds

    kw = dict(method=method, method_params=params or None, rng=0,
              stragglers=STRAGGLERS.get(straggler or ""), **where)  # a slow link: none
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if job == "logistic":
            res = ds.fit_logistic(data, "y", tol=cfg["tol"], max_iter=cfg["max_iter"], **kw)
        else:
            res = ds.fit_pca(data, 10, **kw)
    row = {"solve_s": float(res.wall_time), "iterations": int(res.n_iter),
           "converged": bool(res.converged), "objective": float(res.objective),
           "call_s": time.perf_counter() - start}  # as a user sees it: load and all
    if method == "auto":  # its time includes its probe (a data load and 8 rounds), if any
        row.update(_auto_row(res.attrs.get("auto"), res.method, row["solve_s"]))
    return row


def _auto_row(choice: dict[str, Any] | None, ran: str, solve_s: float) -> dict[str, Any]:
    """auto's columns of a run: what it ran, its probe and its prediction for it. A run
    that did not probe (data below auto's probing threshold: ``choice`` None, the rule
    chose ``ran``) has no prediction."""
    choice = choice or {}
    probe_s = float(choice.get("probe_seconds", 0.0))
    predicted = choice.get("predicted") or {}
    label = choice.get("choice", ran)
    return {"solve_s": solve_s + probe_s, "run_s": solve_s, "probe_s": probe_s,
            "choice": label, "backup_after": choice.get("backup_after"),
            "predicted": predicted.get(label),
            "predicted_plain": predicted.get(choice.get("plain")),
            "achieved": choice.get("achieved")}


def _table(runs: dict[str, list[dict[str, Any]]], base: str,
           straggled: dict[str, str]) -> dict[str, Any]:
    """Medians per case and the two ratios (against GD or gram with the same straggler,
    and against the clean run)."""
    med = {label: {"solve_s": statistics.median(r["solve_s"] for r in rs),
                   "iterations": statistics.median(r["iterations"] for r in rs),
                   "objective": statistics.median(r["objective"] for r in rs),
                   "converged": all(r["converged"] for r in rs),
                   "call_s": _median_of_known(r.get("call_s") for r in rs)}
           for label, rs in runs.items()}
    clean = med[f"{base} clean"]["solve_s"]
    for label, row in med.items():
        plain = med.get(straggled.get(label, ""), row)["solve_s"]
        row["speedup_vs_plain_with_straggler"] = plain / row["solve_s"]
        row["vs_clean"] = row["solve_s"] / clean
        if label.startswith("auto "):
            _auto_columns(row, runs[label], med, label.split(" ", 1)[1])
    return med


def _auto_columns(row: dict[str, Any], runs: list[dict[str, Any]],
                  med: dict[str, dict[str, Any]], straggler: str) -> None:
    """auto's row: its choices, predicted against achieved seconds per gd round, and its
    time (probe included) against the best hand pick with the same straggler, solve times
    and whole calls (``vs_best_call``: load, probe and final pass included, the case
    fastest end to end)."""
    picks = {label: r["solve_s"] for label, r in med.items()
             if label.endswith(f" {straggler}") and not label.startswith("auto ")}
    best = min(picks, key=picks.__getitem__)
    calls = {label: med[label]["call_s"] for label in picks if med[label]["call_s"]}
    if calls and row["call_s"]:
        fastest = min(calls, key=calls.__getitem__)
        row.update(best_call=fastest, vs_best_call=row["call_s"] / calls[fastest])
    row.update(choices=[r["choice"] for r in runs], backup_after=runs[0].get("backup_after"),
               probe_s=statistics.median(r["probe_s"] for r in runs),
               predicted=_median_of_known(r["predicted"] for r in runs),
               achieved=_median_of_known(r["achieved"] for r in runs),
               best_hand_pick=best, vs_best_hand_pick=row["solve_s"] / picks[best])


def _median_of_known(values: Any) -> float | None:
    """The median of the values that are not None (None: none is)."""
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _plain_of(labels: list[str], base: str) -> dict[str, str]:
    """Each case's plain run with the same straggler (``gd markov`` for ``dsag w=3 markov``)."""
    names = [*STRAGGLERS, SLOW_LINK]
    return {label: f"{base} {name}" for label in labels for name in names
            if label.endswith(f" {name}")}


def datasets(cfg: dict[str, Any], workdir: Path, stragglers: list[str] | None
             ) -> dict[str, tuple[Any, list[Any], str]]:
    """Each job's store (made in ``workdir``), its cases for ``stragglers`` and its plain
    method."""
    from daskstraggle.data.datasets import make_genotypes, make_logistic

    jobs: dict[str, tuple[Any, list[Any], str]] = {}
    if "logistic" in cfg.get("jobs", JOBS):
        n, d = cfg["logistic"]
        logit = make_logistic(workdir / "logit.zarr", n_samples=n, n_features=d,
                              chunk_rows=max(1, n // (2 * cfg["workers"])), seed=0)
        jobs["logistic"] = (str(logit), regression_cases(cfg["workers"], stragglers), "gd")
    if "pca" in cfg.get("jobs", JOBS):
        m, s = cfg["genotypes"]
        geno = make_genotypes(workdir / "geno.vcz", n_variants=m, n_samples=s,
                              n_populations=3, chunk_rows=max(1, m // (2 * cfg["workers"])),
                              seed=0)
        jobs["pca"] = (str(geno), pca_cases(stragglers), "gram")
    return jobs


def run_cluster(cfg: dict[str, Any], workdir: Path) -> dict[str, Any]:
    """The ``cluster`` section: both jobs on one LocalCluster, ``repeats`` rotated rounds."""
    from distributed import Client, LocalCluster

    jobs = datasets(cfg, workdir, cfg.get("stragglers"))
    out: dict[str, Any] = {}
    with LocalCluster(n_workers=cfg["workers"], threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        for job, (data, cases, base) in jobs.items():
            runs: dict[str, list[dict[str, Any]]] = {label: [] for label, *_ in cases}
            for repeat in range(cfg["repeats"]):
                order = cases[repeat % len(cases):] + cases[:repeat % len(cases)]
                for label, method, params, straggler in order:
                    row = _solve(job, data, method, params, straggler, cfg, client=client)
                    runs[label].append(row)
                    log(f"{job} {label}: {row['solve_s']:.2f} s, {row['iterations']} rounds")
            out[job] = {"runs": runs,
                        "median": _table(runs, base, _plain_of(list(runs), base))}
    return out


def links_client(argv: list[str]) -> None:
    """The client of the ``links`` section, in the scheduler's namespace: ``ADDRESS CONFIG
    JOB DATA LABELS`` (JSON config, comma-separated case labels in the order to run);
    prints one JSON line of rows by label."""
    from distributed import Client

    address, cfg, job, data = argv[0], json.loads(argv[1]), argv[2], argv[3]
    cases = {label: rest for label, *rest in datasets_cases(job, cfg)}
    rows = {}
    with Client(address, timeout="30s") as client:
        client.wait_for_workers(cfg["workers"], timeout=60)
        _warm(client)
        for label in argv[4].split(","):
            rows[label] = _solve(job, data, *cases[label], cfg, client=client)
            log(f"links {job} {label}: {rows[label]['solve_s']:.2f} s")
    print(json.dumps(rows))


def _warm(client: Any) -> None:
    """A tiny fit of each kind through ``client``: this client process's imports and the
    workers' kernels are not timed in the first case."""
    import numpy as np

    import daskstraggle as ds

    X = np.random.default_rng(0).normal(size=(64, 8))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.fit_pca(X, 2, method="gram", client=client, rng=0)
        ds.fit_logistic(X, np.where(X[:, 0] > 0, 1.0, 0.0), client=client, rng=0, max_iter=2)


def datasets_cases(job: str, cfg: dict[str, Any]) -> list[tuple[str, str, dict[str, Any],
                                                                 str | None]]:
    """The ``links`` section's cases of ``job``: clean, and with a :data:`SLOW_LINK`."""
    if job == "pca":
        return pca_cases([SLOW_LINK])
    return regression_cases(cfg["workers"], [SLOW_LINK])


def run_links(cfg: dict[str, Any], workdir: Path) -> dict[str, Any]:
    """The ``links`` section: each job's clean cases on uncapped links and its slow-link
    cases with the last worker's link at ``slow_link``, on one emulated cluster, after a
    discarded warm-up run of each job; ``repeats`` rotated rounds."""
    from _emulated import EmulatedCluster, unavailable

    reason = unavailable()
    if reason is not None:
        log(f"links section skipped: {reason}")
        return {"skipped": reason}
    jobs = datasets(cfg, workdir, [SLOW_LINK])
    names = [f"w{i}" for i in range(cfg["workers"])]
    scenarios = {"clean": dict.fromkeys(["sched", *names]),
                 SLOW_LINK: {"sched": cfg["fast_link"], **dict.fromkeys(names, cfg["fast_link"]),
                             names[-1]: cfg["slow_link"]}}
    env = {**os.environ}
    out: dict[str, Any] = {}
    with EmulatedCluster(dict.fromkeys(names), env=env) as cluster:
        for job, (data, cases, base) in jobs.items():
            runs: dict[str, list[dict[str, Any]]] = {label: [] for label, *_ in cases}
            _links_run(cluster, cfg, job, data, [cases[0][0]], env)  # warm-up, discarded
            for repeat in range(cfg["repeats"]):
                for scenario, rates in scenarios.items():
                    for host, rate in rates.items():
                        cluster.set_rate(host, rate)
                    labels = [label for label, *_, straggler in cases
                              if (straggler or "clean") == scenario]
                    k = repeat % len(labels)
                    for label, row in _links_run(cluster, cfg, job, data,
                                                 labels[k:] + labels[:k], env).items():
                        runs[label].append(row)
            out[job] = {"runs": runs, "median": _table(runs, base, _plain_of(list(runs), base)),
                        "links": {"fast": cfg["fast_link"], "slow": cfg["slow_link"]}}
    return out


def _links_run(cluster: Any, cfg: dict[str, Any], job: str, data: str, labels: list[str],
               env: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Run :func:`links_client` on ``cluster`` for ``labels``; its rows by label."""
    rows: dict[str, dict[str, Any]] = cluster.run_json(
        "straggler_table", "links_client", [json.dumps(cfg), job, data, ",".join(labels)],
        timeout=1800, what="the links client", env=env)
    return rows


def sim_stragglers(n_workers: int) -> dict[str, str]:
    """The latency spec of each straggler of the ``sim`` section at ``n_workers`` simulated
    workers: the same three models as the cluster section, on a gamma base law; a tenth of
    the workers slowed 8x, every worker turning slow at random, or DSAG's ramp (its last
    tenth recovering after 2 simulated seconds); and a :data:`SLOW_LINK` on a tenth of the
    workers, whose replies take 8x the mean compute on it."""
    slow = set(range(0, n_workers, 10))
    base = "gamma(mean=0.05, var=1e-4)"
    # a slow link: the 176-byte replies (20 coefficients and 2 values) of a tenth of the
    # workers take 0.4 s on it, as long as 8x the compute; the others' links are fast
    links = ", ".join("440" if i in slow else "1e9" for i in range(n_workers))
    return {"slowdown": f"{base} + slowdown(workers={sorted(slow)}, factor=8)",
            "markov": f"{base} + markov(p_slow=0.1, p_fast=0.3, slow_factor=8)",
            "artificial": f"{base} + artificial(spread=3, n_recover={len(slow)}, "
                          "recover_time=2)",
            SLOW_LINK: f"{base} + link(bandwidth=[{links}])"}


def sim_cases(n_workers: int) -> list[tuple[str, str, dict[str, Any], str]]:
    """(label, method, method_params, latency spec) of the ``sim`` section: gd clean, then
    gd, coded tolerating a tenth of the workers, and DSAG waiting for the other nine
    tenths under each straggler."""
    tenth = len(range(0, n_workers, 10))
    cases = [("gd clean", "gd", {}, "gamma(mean=0.05, var=1e-4)")]
    for name, spec in sim_stragglers(n_workers).items():
        cases += [(f"gd {name}", "gd", {}, spec),
                  (f"coded s={tenth} {name}", "coded",
                   {"scheme": "cyclic-repetition", "n_stragglers": tenth}, spec),
                  (f"dsag w={n_workers - tenth} {name}", "dsag",
                   {"n_wait": n_workers - tenth}, spec)]
    return cases


def run_sim(cfg: dict[str, Any]) -> dict[str, Any]:
    """The ``sim`` section: the logistic cases at ``sim_workers`` simulated workers."""
    import numpy as np

    n_workers = cfg["sim_workers"]
    rng = np.random.default_rng(0)
    X = rng.normal(size=(cfg["sim_rows"], 20))
    y = np.where(X @ rng.normal(size=20) + 0.5 * rng.normal(size=cfg["sim_rows"]) > 0, 1, -1)
    cases = sim_cases(n_workers)
    latency = sim_stragglers(n_workers)
    import daskstraggle as ds

    runs: dict[str, list[dict[str, Any]]] = {}
    for label, method, params, spec in cases:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = ds.fit_logistic(X, y, method=method, method_params=params or None,
                                  runtime="sim", n_workers=n_workers, stragglers=spec,
                                  n_partitions=n_workers, tol=None,
                                  max_iter=cfg["sim_rounds"], rng=0)
        runs[label] = [{"solve_s": float(res.wall_time), "iterations": int(res.n_iter),
                        "converged": bool(res.converged), "objective": float(res.objective)}]
        log(f"sim {label}: {res.wall_time:.2f} simulated s, {res.n_iter} rounds")
    return {"n_workers": n_workers, "latency": latency, "runs": runs,
            "median": _table(runs, "gd", _plain_of(list(runs), "gd"))}


def report(results: dict[str, Any]) -> list[str]:
    """The tables as text."""
    lines = []
    links = {f"{job} (emulated links)": block for job, block in results.get("links", {}).items()
             if isinstance(block, dict) and "median" in block}
    if "skipped" in results.get("links", {}):
        lines.append(f"\nlinks section skipped: {results['links']['skipped']}")
    for name, block in [*results.get("cluster", {}).items(), *links.items(),
                        *([("sim", results["sim"])] if "sim" in results else [])]:
        lines.append(f"\n{name}: median solve time, rounds, speed-up against the plain method "
                     "with the same straggler, cost against the clean run")
        for label, row in block["median"].items():
            call = f"call {row['call_s']:6.2f} s  " if row.get("call_s") else ""
            lines.append(f"  {label:28s} {row['solve_s']:8.2f} s  {call}{row['iterations']:6.0f}  "
                         f"x{row['speedup_vs_plain_with_straggler']:5.2f}  "
                         f"{row['vs_clean']:5.2f} of clean  objective {row['objective']:.6g}  "
                         f"{'converged' if row['converged'] else 'not converged'}")
            if "choices" in row:
                achieved = "-" if row["achieved"] is None else f"{row['achieved']:.3g}"
                backups = (f" with backups after {row['backup_after']:g}x the median"
                           if row.get("backup_after") else "")
                predicted = (f"not probed: its rule chose{backups}"
                             if row["predicted"] is None else
                             f"probe {row['probe_s']:.2f} s; predicted {row['predicted']:.3g}"
                             f" s per gd round, achieved {achieved}")
                whole = (f"; end to end {row['vs_best_call']:.2f} x the fastest call "
                         f"({row['best_call']})" if "vs_best_call" in row else "")
                lines.append(f"  {'':28s} ran {', '.join(row['choices'])}; {predicted}; "
                             f"{row['vs_best_hand_pick']:.2f} x the best hand pick "
                             f"({row['best_hand_pick']}){whole}")
    return lines


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--quick", action="store_true", help="small data, one repeat")
    parser.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    parser.add_argument("--out", type=Path, default=None, help="the JSON result's path")
    parser.add_argument("--workers", type=int, default=None,
                        help="process workers of the cluster section (default 4)")
    parser.add_argument("--stragglers", nargs="+", choices=list(STRAGGLERS), default=None,
                        help="the cluster section's stragglers (default: all; --quick: slowdown)")
    parser.add_argument("--jobs", nargs="+", choices=JOBS, default=list(JOBS),
                        help="the cluster section's jobs (default: both)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_foundation import machine_info, write_results

    cfg = dict(QUICK if args.quick else FULL)
    if args.workers is not None:
        cfg["workers"] = args.workers
    if args.stragglers is not None:
        cfg["stragglers"] = args.stragglers
    cfg["jobs"] = args.jobs
    results: dict[str, Any] = {"config": cfg, "quick": args.quick, "stragglers": STRAGGLERS,
                               "machine": machine_info()}
    t0 = time.perf_counter()
    if "cluster" in args.sections:
        with tempfile.TemporaryDirectory() as tmp:
            results["cluster"] = run_cluster(cfg, Path(tmp))
    if "links" in args.sections:
        with tempfile.TemporaryDirectory() as tmp:
            results["links"] = run_links(cfg, Path(tmp))
    if "sim" in args.sections:
        results["sim"] = run_sim(cfg)
    results["elapsed_s"] = time.perf_counter() - t0
    for line in report(results):
        print(line)
    write_results(results, "straggler_table", args.out)
    return results


if __name__ == "__main__":
    main()
