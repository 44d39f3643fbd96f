#!/usr/bin/env python
"""Time to accuracy: PCA with one worker throttled 4x, DSAG vs GD and the rest vs dask-ml.

On one LocalCluster of 4 single-threaded process workers, every method solves the same
PCA problem (k = 3, a dense float64 matrix in a Zarr store) to the same explained-variance
gap, with worker 1's *process* throttled by a factor 4 (``SIGSTOP``/``SIGCONT`` duty
cycle, :class:`daskstraggle.runtime.throttle.ProcessThrottle`) and without throttle:

- ours (``run_on`` a ``DaskRuntime``): GD (block power method, eta = 1), DSAG (w = 3), SAG (w = 3),
  SGD (w = 3) (eta = 0.9), coded GD (cyclic and fractional repetition, s = 1);
- dask-ml ``PCA(svd_solver="randomized", iterated_power=q)`` with the smallest q that
  reaches the gap, and ``PCA(svd_solver="tsqr")`` (exact), on ``dask.array.from_zarr`` of
  the same store persisted on the same workers, the same throttle acting during the fit.

What each time includes:

- ours: the trace's ``wall_time`` at the end of the first round whose point has an exact
  gap <= target. It starts when the driving loop starts: after the partitions were loaded
  from Zarr onto the workers, the statistics pass, the exact reference and the throttle's
  start; it includes every Dask round trip and client-side step. The exact gap of every
  round's point is evaluated after the run (``record_iterates=True``), outside the timing.
- dask-ml: ``PCA(...).fit(X)`` on the persisted array (column means, centring, the SVD,
  the total variance and the gathering of the results, all inside ``fit``); the throttle
  is started before and stopped after the timed call. The gap of ``components_`` is
  evaluated afterwards.

Every gap (ours and dask-ml's) is also recomputed on the client from the dense centred
Gram matrix accumulated while the data was generated, an independent check of the
library's exact reference.

Usage::

    python pipelines/time_to_accuracy.py            # ~15 minutes on 2 cores
    python pipelines/time_to_accuracy.py --quick    # smoke run (tiny data, no dask-ml)
    python pipelines/time_to_accuracy.py --sections throttled --spec my.toml

Results (every repeat with its gap-vs-time curve, medians, ratios, the spec, machine,
versions) go to ``results/time_to_accuracy/<UTC timestamp>.json`` and a gap-vs-time plot
to the same name with ``.png`` (when matplotlib is installed).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import datetime  # noqa: E402
import importlib.metadata  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import math  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import tomllib  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SPEC = Path(__file__).with_suffix(".toml")
CASES = ("throttled", "unthrottled")
EXACT = ("gd", "coded-cyclic", "coded-fractional")  # exact gradients: stop at the target
LABELS = {"gd": "GD", "dsag": "DSAG", "dsag-eta1": "DSAG, eta=1", "sag": "SAG", "sgd": "SGD",
          "coded-cyclic": "coded GD, cyclic s=1", "coded-fractional": "coded GD, fractional s=1",
          "dask-ml-randomized": "dask-ml randomized", "dask-ml-tsqr": "dask-ml tsqr"}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def settings(spec: dict[str, Any], quick: bool) -> dict[str, Any]:
    """Flatten the spec into one dict of sizes (``[quick]`` overrides with --quick)."""
    out = {**spec["data"], **spec["problem"], **spec["cluster"], **spec["methods"],
           **{f"dask_ml_{k}": v for k, v in spec["dask_ml"].items()}, "dask_ml": True}
    if quick:
        out.update(spec["quick"])
    return out


# ================================================================================ data
def spectrum(cfg: dict[str, Any]) -> np.ndarray:
    """Population variances: the leading values, then a geometric tail."""
    lead = np.asarray(cfg["leading"], dtype=np.float64)
    tail = cfg["tail_start"] * cfg["tail_decay"] ** np.arange(cfg["features"] - lead.size)
    return np.concatenate([lead, tail])


def write_store(cfg: dict[str, Any], path: Path) -> dict[str, Any]:
    """Write X to a Zarr array chunk by chunk; return the centred Gram matrix and facts.

    ``X = G diag(sqrt(lambda)) Q^T + mu``; each chunk has its own generator spawned from
    the seed, so the data does not depend on the chunk order.
    """
    import zarr

    n, d, c = cfg["rows"], cfg["features"], cfg["chunk_rows"]
    root = np.random.SeedSequence(cfg["seed"])
    base_seq, *chunk_seqs = root.spawn(1 + math.ceil(n / c))
    base = np.random.default_rng(base_seq)
    Q, _ = np.linalg.qr(base.standard_normal((d, d)))
    mixing = np.sqrt(spectrum(cfg))[:, None] * Q.T
    mu = base.uniform(-2.0, 2.0, size=d)
    arr = zarr.create_array(store=str(path), shape=(n, d), chunks=(c, d), dtype="float64",
                            compressors=None, overwrite=True)
    gram = np.zeros((d, d))
    colsum = np.zeros(d)
    for j, a in enumerate(range(0, n, c)):
        rows = min(c, n - a)
        block = np.random.default_rng(chunk_seqs[j]).standard_normal((rows, d)) @ mixing + mu
        arr[a:a + rows] = block
        gram += block.T @ block
        colsum += block.sum(axis=0)
    mean = colsum / n
    centred = gram - n * np.outer(mean, mean)
    centred = 0.5 * (centred + centred.T)
    eig = np.linalg.eigvalsh(centred)[::-1]
    k = cfg["components"]
    return {"gram": centred, "total": float(np.trace(centred)),
            "optimum": float(eig[:k].sum() / np.trace(centred)),
            "eigenvalue_ratio_k1_k": float(eig[k] / eig[k - 1]),
            "nbytes": n * d * 8, "n_chunks": math.ceil(n / c)}


def client_gap(V: np.ndarray, data: dict[str, Any]) -> float:
    """Explained-variance gap of the subspace spanned by the columns of ``V``."""
    Q, _ = np.linalg.qr(np.asarray(V, dtype=np.float64))
    captured = float(np.einsum("ij,ij->", Q, data["gram"] @ Q)) / data["total"]
    return data["optimum"] - captured


def solo_kernel(store: Path, cfg: dict[str, Any]) -> dict[str, float]:
    """Seconds of one worker's kernel alone: ``PCA.kernel`` on n/N rows, in this process.

    The uncontended compute of one work unit (GD, DSAG with one subpartition), next to
    which the cluster's iteration times show the cost of 4 workers sharing the cores.
    """
    import zarr

    from daskstraggle.problems import PCA, Block, block_stats

    rows = cfg["rows"] // cfg["workers"]
    block = Block(np.asarray(zarr.open_array(str(store), mode="r")[:rows]))
    pca = PCA(n_components=cfg["components"]).bind(block_stats(block))
    V = pca.init_iterate(np.random.default_rng(0))
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        pca.kernel(block, V)
        times.append(time.perf_counter() - t0)
    return {"rows": rows, "best_s": min(times), "median_s": float(np.median(times))}


# ================================================================================ ours
def make_method(name: str, cfg: dict[str, Any]) -> tuple[Any, float]:
    from daskstraggle.methods import DSAG, GD, SAG, SGD, CodedGD

    w, eta = cfg["n_wait"], cfg["stochastic_step"]
    if name == "gd":
        return GD(), cfg["gd_step"]
    if name == "dsag":
        return DSAG(n_wait=w, subpartitions=cfg["dsag_subpartitions"]), eta
    if name == "dsag-eta1":  # the same policy with GD's step (not the paper's eta)
        return DSAG(n_wait=w, subpartitions=cfg["dsag_subpartitions"]), cfg["gd_step"]
    if name == "sag":
        return SAG(n_wait=w), eta
    if name == "sgd":
        return SGD(n_wait=w), eta
    if name == "coded-cyclic":
        return CodedGD("cyclic-repetition", n_stragglers=1, rng=0), cfg["gd_step"]
    if name == "coded-fractional":
        return CodedGD("fractional-repetition", n_stragglers=1), cfg["gd_step"]
    raise ValueError(f"unknown method {name!r}")


def time_to_target(wall: np.ndarray, gap: np.ndarray, target: float) -> tuple[float, int | None]:
    """First ``wall_time`` whose round's point has gap <= target (inf, None: never)."""
    hit = np.flatnonzero(gap <= target)
    if hit.size == 0:
        return math.inf, None
    return float(wall[hit[0]]), int(hit[0]) + 1


def run_ours(rt: Any, name: str, matrix: Any, cfg: dict[str, Any], data: dict[str, Any],
             budget: float | None) -> dict[str, Any]:
    from daskstraggle.api import run_on
    from daskstraggle.problems import PCA
    from daskstraggle.runtime import StopRule

    method, step = make_method(name, cfg)
    target = cfg["target_gap"]
    if name in EXACT:
        stop = StopRule(max_iter=cfg["gd_max_iter"], tol=None, gap_tol=target)
    else:
        stop = StopRule(max_iter=cfg["stochastic_max_iter"], tol=None, gap_tol=target,
                        time_budget=budget)
    from daskstraggle.errors import ConvergenceWarning

    t0 = time.perf_counter()
    with warnings.catch_warnings():  # a method missing the target is a result here
        warnings.simplefilter("ignore", ConvergenceWarning)
        res = run_on(rt, method, PCA(n_components=cfg["components"]), matrix, stop=stop,
                     step_size=step, reference=True, rng=0, record_iterates=True)
    total = time.perf_counter() - t0
    tr = res.trace
    wall = tr.wall_time.values.astype(float)
    gap = tr.exact_gap.values.astype(float)
    t_hit, it_hit = time_to_target(wall, gap, target)
    upto = slice(None, it_hit)
    return {
        "method": name,
        "time_to_target_s": t_hit,
        "iterations_to_target": it_hit,
        "reached": it_hit is not None,
        "iterations": int(tr.sizes["iteration"]),
        "wall_time_s": float(wall[-1]),
        "stop_reason": res.stop_reason,
        "median_iteration_s": float(np.median(tr.iteration_duration.values[upto])),
        "median_max_compute_s": float(np.nanmedian(tr.max_compute_duration.values[upto])),
        "mean_fresh": float(tr.n_fresh.values[upto].mean()),
        "mean_stale": float(tr.n_stale.values[upto].mean()),
        "load_s": float(res.attrs["load_duration_s"]),
        "call_s": total,
        "final_gap": float(gap[-1]),
        "final_gap_client": client_gap(res.iterate, data),
        "reference_objective": float(res.reference_objective),
        "curve": {"wall_time": wall.tolist(), "exact_gap": gap.tolist()},
    }


# ============================================================================= dask-ml
def dask_ml_version() -> str | None:
    try:
        return importlib.metadata.version("dask-ml")
    except importlib.metadata.PackageNotFoundError:
        return None


def fit_dask_ml(client: Any, X: Any, solver: str, q: int, seed: int, k: int,
                throttle: Any, data: dict[str, Any]) -> dict[str, Any]:
    """Time one ``dask_ml.decomposition.PCA.fit`` (throttle active if given)."""
    from dask_ml.decomposition import PCA as DaskPCA

    params = {"n_components": k, "svd_solver": solver}
    if solver == "randomized":
        params.update(iterated_power=q, random_state=seed)
    model = DaskPCA(**params)
    if throttle is not None:
        throttle.start()
    try:
        with client.as_current(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t0 = time.perf_counter()
            model.fit(X)
            elapsed = time.perf_counter() - t0
    finally:
        if throttle is not None:
            throttle.stop()
    return {"solver": solver, "iterated_power": q if solver == "randomized" else None,
            "time_s": elapsed, "gap": client_gap(np.asarray(model.components_).T, data)}


def run_dask_ml(client: Any, X: Any, cfg: dict[str, Any], data: dict[str, Any],
                throttle: Any, rep: int, state: dict[str, Any]) -> dict[str, Any]:
    """One repeat of both solvers. ``state`` keeps the smallest power found (first repeat)."""
    target, k = cfg["target_gap"], cfg["components"]
    out: dict[str, Any] = {}
    if "randomized" in cfg["dask_ml_solvers"]:
        q_min = state.get("q_min")
        tried = []
        qs = range(cfg["dask_ml_max_power"] + 1) if q_min is None else [q_min]
        for q in qs:
            fit = fit_dask_ml(client, X, "randomized", q, rep, k, throttle, data)
            tried.append(fit)
            log(f"    dask-ml randomized q={q}: {fit['time_s']:.2f} s, gap {fit['gap']:.2e}")
            if fit["gap"] <= target:
                state.setdefault("q_min", q)
                break
        last = tried[-1]
        out["dask-ml-randomized"] = {
            "method": "dask-ml-randomized", "iterated_power": last["iterated_power"],
            "reached": last["gap"] <= target,
            "time_to_target_s": last["time_s"] if last["gap"] <= target else math.inf,
            "search_s": float(sum(f["time_s"] for f in tried)),
            "final_gap": last["gap"], "tried": tried,
        }
    if "tsqr" in cfg["dask_ml_solvers"]:
        fit = fit_dask_ml(client, X, "tsqr", 0, rep, k, throttle, data)
        log(f"    dask-ml tsqr: {fit['time_s']:.2f} s, gap {fit['gap']:.2e}")
        out["dask-ml-tsqr"] = {
            "method": "dask-ml-tsqr", "reached": fit["gap"] <= target,
            "time_to_target_s": fit["time_s"] if fit["gap"] <= target else math.inf,
            "final_gap": fit["gap"], "tried": [fit],
        }
    return out


# ================================================================================ runs
def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    def med(key: str) -> float | None:
        vals = [r[key] for r in runs if r.get(key) is not None]
        return float(np.median(vals)) if vals else None

    keys = ("time_to_target_s", "iterations_to_target", "iterations", "median_iteration_s",
            "median_max_compute_s", "mean_fresh", "mean_stale", "final_gap", "iterated_power",
            "search_s")
    out = {k: med(k) for k in keys if any(k in r for r in runs)}
    out["reached"] = f"{sum(r['reached'] for r in runs)}/{len(runs)}"
    return out


def run_case(client: Any, case: str, matrix: Any, X: Any, cfg: dict[str, Any],
             data: dict[str, Any]) -> dict[str, Any]:
    from daskstraggle.latency.spec import parse_stragglers
    from daskstraggle.runtime import DaskRuntime
    from daskstraggle.runtime.throttle import ProcessThrottle

    throttled = case == "throttled"
    stragglers = cfg["throttle"] if throttled else None
    order = list(cfg["order"])
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in order}
    peer_runs: dict[str, list[dict[str, Any]]] = {}
    peer_state: dict[str, Any] = {}
    with DaskRuntime(client=client, stragglers=stragglers, rng=0) as rt:
        throttle = None
        if throttled and X is not None:
            spec = parse_stragglers(cfg["throttle"]).throttle
            throttle = ProcessThrottle(client, [rt.worker_names[i] for i in spec.workers],
                                       spec.factor, period=spec.period)
        for rep in range(cfg["repeats"]):
            log(f"({case}) repeat {rep + 1}/{cfg['repeats']}")
            gd = run_ours(rt, "gd", matrix, cfg, data, None)
            runs["gd"].append(gd)
            log(f"    {'gd':16s} {gd['time_to_target_s']:7.3f} s to target "
                f"({gd['iterations_to_target']} it)")
            budget = (None if not cfg["budget_factor"]  # 0: the iteration cap only
                      else max(cfg["min_budget_s"], cfg["budget_factor"] * gd["wall_time_s"]))
            rest = [m for m in order if m != "gd"]
            rest = rest[rep % len(rest):] + rest[:rep % len(rest)]  # rotate the order
            for name in rest:
                r = run_ours(rt, name, matrix, cfg, data, budget)
                runs[name].append(r)
                log(f"    {name:16s} {r['time_to_target_s']:7.3f} s to target "
                    f"({r['iterations_to_target']} it of {r['iterations']}, "
                    f"final gap {r['final_gap']:.1e})")
            if X is not None:
                for key, r in run_dask_ml(client, X, cfg, data, throttle, rep,
                                          peer_state).items():
                    peer_runs.setdefault(key, []).append(r)
    out: dict[str, Any] = {
        "stragglers": stragglers,
        "median": {m: median_of(r) for m, r in {**runs, **peer_runs}.items()},
        "runs": {**runs, **peer_runs},
    }
    if X is None:
        out["dask_ml_skipped"] = cfg.get("dask_ml_skip_reason", "skipped")
    out["ratios"] = ratios(out["median"])
    out["checks"] = checks(runs, cfg)
    return out


def ratios(med: dict[str, dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """Per method: other's median time to target / this method's (> 1: this is faster)."""
    def t(name: str) -> float | None:
        m = med.get(name)
        return None if m is None else m["time_to_target_s"]

    peers = [p for p in ("dask-ml-randomized", "dask-ml-tsqr") if p in med]
    out: dict[str, dict[str, float | None]] = {}
    for name, m in med.items():
        mine = m["time_to_target_s"]
        row: dict[str, float | None] = {}
        for other in ["gd", *peers]:
            theirs = t(other)
            row[f"{other}_over_this"] = (None if theirs is None or not math.isfinite(mine)
                                         else theirs / mine)
        if peers:
            best = min(t(p) for p in peers)
            row["best_dask_ml_over_this"] = best / mine if math.isfinite(mine) else 0.0
        out[name] = row
    return out


def checks(runs: dict[str, list[dict[str, Any]]], cfg: dict[str, Any]) -> dict[str, Any]:
    """Agreement that must hold whatever the timings (exact gradients, one reference)."""
    out: dict[str, Any] = {}
    gd = runs["gd"]
    for name in ("coded-cyclic", "coded-fractional"):
        if name not in runs:
            continue
        worst, same_len = 0.0, True
        for a, b in zip(gd, runs[name], strict=True):
            ga, gb = np.asarray(a["curve"]["exact_gap"]), np.asarray(b["curve"]["exact_gap"])
            same_len &= ga.size == gb.size
            n = min(ga.size, gb.size)
            worst = max(worst, float(np.max(np.abs(ga[:n] - gb[:n]))))
        out[f"{name}_vs_gd_max_gap_difference"] = worst
        out[f"{name}_vs_gd_same_iterations"] = bool(same_len)
    every = [r for rs in runs.values() for r in rs]
    refs = [r["reference_objective"] for r in every]
    out["reference_spread"] = float(max(refs) - min(refs))
    out["max_final_gap_vs_client_gap"] = float(max(abs(r["final_gap"] - r["final_gap_client"])
                                                  for r in every))
    return out


# ============================================================================== report
def fmt_s(v: float | None) -> str:
    if v is None:
        return "-"
    return "not reached" if not math.isfinite(v) else f"{v:.3f}"


def fmt_ms(v: float | None) -> str:
    return "-" if v is None else f"{1e3 * v:.0f}"


def fmt_x(v: float | None) -> str:
    return "-" if v is None else ("never" if v == 0 else f"{v:.2f}x")


def table(case: str, block: dict[str, Any], cfg: dict[str, Any], data: dict[str, Any]) -> str:
    med, rat = block["median"], block["ratios"]
    head = ["method", "reached", "time to target s", "iterations", "ms / it",
            "slowest kernel ms", "GD / this"]
    peers = [p for p in ("dask-ml-randomized", "dask-ml-tsqr") if p in med]
    head += [f"{LABELS[p]} / this" for p in peers]
    rows = []
    for name, m in med.items():
        it = m.get("iterations_to_target")
        row = [LABELS[name] + (f" (q={m['iterated_power']:.0f})"
                               if m.get("iterated_power") is not None else ""),
               m["reached"], fmt_s(m["time_to_target_s"]),
               "-" if it is None else f"{it:.0f}",
               fmt_ms(m.get("median_iteration_s")), fmt_ms(m.get("median_max_compute_s")),
               fmt_x(rat[name]["gd_over_this"])]
        rows += [row + [fmt_x(rat[name][f"{p}_over_this"]) for p in peers]]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True))  # noqa: E731
    title = (f"({case}) PCA k={cfg['components']}, {cfg['rows']}x{cfg['features']} float64 "
             f"({data['nbytes'] / 1e6:.0f} MB, {data['n_chunks']} chunks), "
             f"{cfg['workers']} workers, {block['stragglers'] or 'no throttle'}; target gap "
             f"{cfg['target_gap']:g}; medians of {cfg['repeats']} repeats")
    text = "\n".join([title, line(head), line(["-" * w for w in widths]), *map(line, rows)])
    if "dask_ml_skipped" in block:
        text += f"\n  dask-ml rows skipped: {block['dask_ml_skipped']}"
    return text


def targets(results: dict[str, Any]) -> list[str]:
    """The issue's benchmark targets, stated with the measured ratios."""
    cases = results["cases"]
    out = []
    for name in ("dsag", "dsag-eta1"):
        if "throttled" not in cases or name not in cases["throttled"]["ratios"]:
            continue
        r = cases["throttled"]["ratios"][name]
        out.append(f"throttled: GD time / {LABELS[name]} time = {fmt_x(r['gd_over_this'])} "
                   "(target >= 2x)")
        if "best_dask_ml_over_this" in r:
            out.append(f"throttled: best dask-ml time / {LABELS[name]} time = "
                       f"{fmt_x(r['best_dask_ml_over_this'])} (target >= 2x)")
    if "unthrottled" in cases:
        m = cases["unthrottled"]["median"]
        for name in ("dsag", "dsag-eta1"):
            if name in m:
                ratio = m[name]["time_to_target_s"] / m["gd"]["time_to_target_s"]
                out.append(f"unthrottled: {LABELS[name]} time / GD time = {ratio:.2f} "
                           "(target <= 1.2)")
    return out


def plot(results: dict[str, Any], path: Path) -> Path | None:
    from bench_foundation import pyplot

    plt = pyplot()
    if plt is None:
        return None
    cases = results["cases"]
    if not cases:
        return None
    target = results["settings"]["target_gap"]
    fig, axes = plt.subplots(1, len(cases), figsize=(6 * len(cases), 4.2), squeeze=False)
    for ax, (case, block) in zip(axes[0], cases.items(), strict=True):
        for name, runs in block["runs"].items():
            if name.startswith("dask-ml"):
                for r in runs:
                    ax.scatter([r["tried"][-1]["time_s"]], [max(r["final_gap"], 1e-16)],
                               marker="x" if name.endswith("tsqr") else "^",
                               color="tab:gray" if name.endswith("tsqr") else "tab:olive",
                               label=f"{LABELS[name]} (each repeat)" if r is runs[0] else None,
                               zorder=3)
                continue
            c = runs[0]["curve"]
            style = {"color": "k", "lw": 2.0, "zorder": 4} if name == "gd" else {}
            ax.semilogy(c["wall_time"], np.maximum(c["exact_gap"], 1e-16), label=LABELS[name],
                        **style)
        ax.axhline(target, color="k", lw=0.8, ls="--")
        ax.set_yscale("log")
        ax.set_title(f"{case} ({block['stragglers'] or 'no throttle'})")
        ax.set_xlabel("wall time, s (first repeat)")
        ax.set_ylabel("explained-variance gap")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# ================================================================================ main
def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", type=Path, default=SPEC, help="experiment spec (TOML)")
    parser.add_argument("--sections", nargs="+", choices=list(CASES), default=None,
                        help="which cases to run (default: the spec's cases)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run (tiny data, one repeat, no dask-ml)")
    parser.add_argument("--out", type=Path, default=None, help="JSON file to write")
    parser.add_argument("--repeats", type=int, default=None, help="repeats per case")
    parser.add_argument("--rows", type=int, default=None, help="rows of the matrix")
    parser.add_argument("--workers", type=int, default=None, help="LocalCluster workers")
    parser.add_argument("--n-wait", type=int, default=None, help="w of DSAG, SAG and SGD")
    parser.add_argument("--subpartitions", type=int, default=None,
                        help="subpartitions per worker of DSAG")
    parser.add_argument("--methods", nargs="+", default=None, choices=list(LABELS)[:7],
                        help="our methods to run (default: the spec's order; gd always)")
    parser.add_argument("--no-dask-ml", action="store_true", help="skip the dask-ml rows")
    parser.add_argument("--tmpdir", type=Path, default=None,
                        help="where to write the temporary Zarr store")
    args = parser.parse_args(argv)
    spec = tomllib.loads(args.spec.read_text())
    cfg = settings(spec, args.quick)
    for key, value in (("repeats", args.repeats), ("rows", args.rows), ("n_wait", args.n_wait),
                       ("workers", args.workers),
                       ("dsag_subpartitions", args.subpartitions)):
        if value is not None:
            cfg[key] = value
    if args.methods is not None:
        cfg["order"] = ["gd", *(m for m in args.methods if m != "gd")]
    cases = args.sections or list(cfg["cases"])
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_foundation import machine_info

    from daskstraggle import open_matrix
    from daskstraggle.runtime import connect

    t_start = time.perf_counter()
    machine = machine_info()
    machine["versions"]["dask_ml"] = dask_ml_version()
    results: dict[str, Any] = {"spec": spec, "quick": args.quick, "settings": cfg,
                               "machine": machine, "cases": {}}
    cfg["dask_ml"] = cfg["dask_ml"] and not args.no_dask_ml
    use_dask_ml = cfg["dask_ml"] and machine["versions"]["dask_ml"] is not None
    if not use_dask_ml:
        cfg["dask_ml_skip_reason"] = ("--quick or --no-dask-ml" if not cfg["dask_ml"]
                                      else "dask-ml is not installed")
    with tempfile.TemporaryDirectory(prefix="time_to_accuracy-", dir=args.tmpdir) as tmp:
        store = Path(tmp) / "X.zarr"
        log(f"writing {cfg['rows']} x {cfg['features']} float64 to {store}")
        data = write_store(cfg, store)
        results["data"] = {k: v for k, v in data.items() if k != "gram"}
        log(f"optimum captured fraction {data['optimum']:.4f}; "
            f"lambda_{cfg['components'] + 1}/lambda_{cfg['components']} "
            f"{data['eigenvalue_ratio_k1_k']:.3f}")
        results["solo_kernel"] = solo_kernel(store, cfg)
        log(f"one worker's kernel alone ({results['solo_kernel']['rows']} rows): "
            f"{1e3 * results['solo_kernel']['best_s']:.1f} ms")
        matrix = open_matrix(str(store))
        client, closeables = connect(n_workers=cfg["workers"])
        logging.getLogger("distributed").setLevel(logging.ERROR)
        try:
            X = None
            if use_dask_ml:
                import dask.array as da

                t0 = time.perf_counter()
                X = client.persist(da.from_zarr(str(store)))
                client.wait_for_workers(cfg["workers"])
                X.sum().compute(scheduler=client.get)  # every chunk in memory
                results["dask_ml_persist_s"] = time.perf_counter() - t0
                results["dask_ml_chunks_per_worker"] = sorted(
                    len(v) for v in client.has_what().values())
            for case in cases:
                results["cases"][case] = run_case(client, case, matrix, X, cfg, data)
        finally:
            for obj in closeables:
                obj.close()
    results["machine"]["load_avg_end"] = list(os.getloadavg())
    results["elapsed_s"] = time.perf_counter() - t_start
    results["tables"] = [table(c, b, cfg, data) for c, b in results["cases"].items()]
    results["targets"] = targets(results)

    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    out = args.out or REPO / "results" / "time_to_accuracy" / f"{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = out.with_suffix(".json.tmp")
    tmp_out.write_text(json.dumps(results, indent=1, default=float))
    tmp_out.replace(out)
    for text in results["tables"]:
        print("\n" + text)
    print()
    for line in results["targets"]:
        print(line)
    figure = plot(results, out.with_suffix(".png"))
    print(f"elapsed {results['elapsed_s']:.0f} s; raw numbers: {out}"
          + (f"; figure: {figure}" if figure else ""))
    return results


if __name__ == "__main__":
    main()
