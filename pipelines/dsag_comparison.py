#!/usr/bin/env python
"""DSAG paper comparison: GD vs SGD vs SAG vs DSAG vs an ideal MDS code, time to accuracy.

Reproduces Fig. 8 (top row) of the DSAG paper (§VII-B, the artificial scenario at
N = 49 workers): PCA (k = 3) and L2-regularised logistic regression solved by

- ``gd``: every worker's whole share each iteration, wait for all N (the power method for
  PCA at eta = 1);
- ``sgd``: the library's SGD, wait for the w fastest; its tasks cover a worker's whole
  share (it has no subpartitions);
- ``sgd-sub``: SGD as in the paper, one subpartition per task (defined here: SAG whose
  cache is emptied after every step, so only the round's fresh results count);
- ``sag``: wait for w fresh results, one subpartition per task, stale results dropped;
- ``dsag``: the same, stale results cached (the paper's method);
- ``ideal-mds``: GD's iterates on the time axis of an MDS code of rate r with free
  decoding: compute x 1/r, each iteration ends at the ceil(rN)-th fastest worker (§VII-A),
  drawn by :func:`daskstraggle.latency.simulate` from the same latency law.

Every run records the exact objective at every round's point (``record_iterates``, outside
the timing) and its gap to an independent exact optimum; reported per method: the time
to reach each target gap, the final gap, iterations, and the ratio of the times to GD's,
all measured side by side in the same process, medians over repeats (latency seeds).

Two settings, each read from ``pipelines/dsag_comparison.toml``:

(sim) simulated time with real numbers (``SimRuntime``) at N = 49: per-worker gamma
      compute times (the paper's Table I) times the artificial ramp, the last 10 workers
      recovering after 1 s (``"gamma(...) + artificial()"``);
(cluster) a real LocalCluster of 4 process workers with a similar law injected as delays
      (``DaskRuntime(stragglers=...)``); the ideal-MDS curve there is simulated from the
      injected law, so it carries none of the cluster's real overheads.

Data: PCA of genotypes simulated by msprime (``make_genotypes``, four islands), read back
Patterson-scaled and held in memory as float64 (rows = variants); logistic regression on
a standardised two-Gaussian mixture generated in memory. Both are small: only the clock
is simulated, so what matters is the number of iterations and the latency law.

Usage::

    python pipelines/dsag_comparison.py            # ~8 minutes on 2 cores
    python pipelines/dsag_comparison.py --quick    # smoke run, ~20 s
    python pipelines/dsag_comparison.py --sections sim --spec my.toml

Results (every repeat's curve, times to target, medians, the spec, machine, versions) go
to ``results/dsag_comparison/<UTC timestamp>.json`` and the gap-vs-time curves to the same
name with ``.png`` (when matplotlib is installed).
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
import tempfile  # noqa: E402
import time  # noqa: E402
import tomllib  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SPEC = Path(__file__).with_suffix(".toml")
PROBLEMS = ("pca", "logistic")
# a gap of exactly 0 (GD at the optimum) is drawn and compared at this floor
GAP_FLOOR = 1e-16


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- data


def make_pca_matrix(cfg: dict[str, Any]) -> np.ndarray:
    """Patterson-scaled msprime genotypes (variants x individuals) as a float64 array.

    The VCF Zarr store is read through ``open_matrix`` (which centres and scales each
    variant) and materialised, so the runs see plain float64 blocks.
    """
    from daskstraggle import open_matrix
    from daskstraggle.data.datasets import make_genotypes

    with tempfile.TemporaryDirectory(prefix="dsag-geno-") as tmp:
        path = make_genotypes(Path(tmp) / "g.vcz", n_variants=cfg["n_variants"],
                              n_samples=cfg["n_samples"], n_populations=cfg["n_populations"],
                              seed=cfg["seed"])
        m = open_matrix(path)
        parts = [np.vstack([t for _, _, t in m.loader(i)().tiles()])
                 for i in range(m.n_partitions)]
    return np.ascontiguousarray(np.vstack(parts), dtype=np.float64)


# --------------------------------------------------------------------------- methods


def _subpartition_sgd(n_wait: int, subpartitions: int) -> Any:
    """SGD over subpartitions (the paper's SGD): SAG whose cache is emptied after each step."""
    from daskstraggle.methods import SAG
    from daskstraggle.methods.cache import GradientCache

    class SubpartitionSGD(SAG):
        name = "sgd-sub"

        def step(self) -> None:
            super().step()
            self._cache = GradientCache(self._total_rows)

    return SubpartitionSGD(n_wait=n_wait, subpartitions=subpartitions)


def method_grid(n_workers: int, waits: list[int], names: list[str] | None
                ) -> list[tuple[str, str, int | None]]:
    """(label, method, w) of every run: stochastic methods at each w (SAG also at w = N)."""
    grid: list[tuple[str, str, int | None]] = [("gd", "gd", None)]
    for name in ("sgd", "sgd-sub", "sag", "dsag"):
        for w in waits:
            if w < n_workers or name == "sag":
                grid.append((f"{name} w={w}", name, w))
    grid.append(("ideal-mds", "ideal-mds", None))
    if names is not None:
        grid = [g for g in grid if g[1] in names]
    return grid


def _make_method(name: str, w: int | None, p: int) -> Any:
    from daskstraggle.methods import DSAG, GD, SAG, SGD

    if name == "gd":
        return GD()
    if name == "sgd":
        return SGD(n_wait=w)
    if name == "sgd-sub":
        return _subpartition_sgd(w, p)
    return (SAG if name == "sag" else DSAG)(n_wait=w, subpartitions=p)


# --------------------------------------------------------------------------- measures


def time_to(times: np.ndarray, gaps: np.ndarray, target: float) -> float:
    """First time the gap is <= target (inf if never)."""
    hit = np.flatnonzero(gaps <= target)
    return float(times[hit[0]]) if hit.size else math.inf


def curve(times: np.ndarray, gaps: np.ndarray, targets: list[float]) -> dict[str, Any]:
    gaps = np.maximum(np.asarray(gaps, dtype=np.float64), 0.0)
    return {
        "wall_time": [float(t) for t in times],
        "gap": [float(g) for g in gaps],
        "time_to": {f"{t:g}": time_to(times, gaps, t) for t in targets},
        "final_gap": float(gaps[-1]),
        "min_gap": float(gaps.min()),
        "iterations": len(gaps),
        "total_s": float(times[-1]),
    }


def ideal_mds(gd: dict[str, Any], latency: str, n_workers: int, rate: float,
              horizon: float, seed: int, targets: list[float]) -> dict[str, Any]:
    """GD's gaps on the time axis of an ideal MDS code of rate ``rate`` (free decoding)."""
    from daskstraggle.latency import simulate
    from daskstraggle.latency.spec import parse_latency

    n_wait = math.ceil(rate * n_workers - 1e-9)
    gaps = np.asarray(gd["gap"])
    sim = simulate(parse_latency(latency), n_workers, n_wait=n_wait, n_iterations=len(gaps),
                   load=1.0 / rate, collect_window=0.0, rng=seed)
    times = np.asarray(sim.iteration_time)
    keep = max(1, int(np.searchsorted(times, horizon, side="right")) + 1)
    out = curve(times[:keep], gaps[:keep], targets)
    out["n_wait"] = n_wait
    return out


def _medians(runs: list[dict[str, Any]], targets: list[float]) -> dict[str, Any]:
    med: dict[str, Any] = {
        "time_to": {f"{t:g}": float(np.median([r["time_to"][f"{t:g}"] for r in runs]))
                    for t in targets},
    }
    for k in ("final_gap", "min_gap", "iterations", "total_s"):
        med[k] = float(np.median([r[k] for r in runs]))
    return med


def _report(by_label: dict[str, list[dict[str, Any]]], targets: list[float]) -> dict[str, Any]:
    median = {label: _medians(runs, targets) for label, runs in by_label.items()}
    for m in median.values():
        m["vs_gd"] = {}
        for t, v in m["time_to"].items():
            ref = median["gd"]["time_to"][t]
            m["vs_gd"][t] = v / ref if math.isfinite(v) and math.isfinite(ref) else None
    return {"median": median, "runs": by_label}


def _json_safe(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_json_safe(v) for v in x]
    return x


# --------------------------------------------------------------------------- runs


def _problem_setup(problem: str, spec: dict[str, Any], quick: bool) -> dict[str, Any]:
    """Data, problem factory, subpartitions, step sizes for one problem."""
    from daskstraggle.problems import PCA, Logistic

    cfg = dict(spec["data"][problem])
    p = spec["run"]["subpartitions"][problem]
    if quick:
        q = spec["quick"][problem]
        cfg.update({k: v for k, v in q.items() if k in cfg})
        p = q["subpartitions"]
    if problem == "pca":
        X, y = make_pca_matrix(cfg), None
        factory = lambda: PCA(n_components=cfg["n_components"], center=False)  # noqa: E731
    else:
        from bench_foundation import make_logistic_data

        X, y = make_logistic_data(cfg)
        factory = Logistic
    return {"X": X, "y": y, "factory": factory, "subpartitions": p,
            "eta": spec["run"]["step_size"][problem],
            "gd_eta": spec["run"]["gd_step_size"][problem], "shape": list(X.shape)}


def _run_one(rt: Any, label: str, name: str, w: int | None, setup: dict[str, Any],
             matrix: Any, horizon: float, max_iter: int, seed: int,
             targets: list[float]) -> dict[str, Any]:
    from daskstraggle.api import run_on
    from daskstraggle.runtime import StopRule

    method = _make_method(name, w, setup["subpartitions"])
    eta = setup["gd_eta"] if name == "gd" else setup["eta"]
    eta = None if eta == "default" else eta
    res = run_on(rt, method, setup["factory"](), matrix,
                 stop=StopRule(max_iter=max_iter, tol=None, time_budget=horizon),
                 step_size=eta, reference=True, rng=seed, record_iterates=True)
    tr = res.trace
    out = curve(tr.wall_time.values, tr.exact_gap.values, targets)
    out["mean_fresh"] = float(tr.n_fresh.mean())
    out["mean_stale"] = float(tr.n_stale.mean())
    return out


def run_section(section: str, spec: dict[str, Any], quick: bool) -> dict[str, Any]:
    from daskstraggle import open_matrix
    from daskstraggle.runtime import DaskRuntime, SimRuntime

    cfg, q = spec["simulation" if section == "sim" else "cluster"], spec["quick"]
    targets = spec["run"]["targets"]
    if section == "sim":
        n = q["workers"] if quick else cfg["workers"]
        names = None
    else:
        n = q["cluster_workers"] if quick else cfg["workers"]
        names = cfg["methods"]
    waits = [min(w, n) for w in (q["n_wait"] if quick else cfg["n_wait"])]
    repeats = q["repeats"] if quick else cfg["repeats"]
    max_iter = q["max_iter"] if quick else cfg["max_iter"]
    rate = spec["run"]["code_rate"]
    out: dict[str, Any] = {"workers": n, "n_wait": waits, "code_rate": rate}
    for problem in PROBLEMS:
        setup = _problem_setup(problem, spec, quick)
        latency = cfg["latency"][problem]
        if quick:
            horizon = q[problem]["horizon"] if section == "sim" else q["cluster_horizon"]
        else:
            horizon = cfg["horizon"][problem]
        matrix = open_matrix(setup["X"], labels=setup["y"], n_partitions=n)
        grid = method_grid(n, waits, names)
        by_label: dict[str, list[dict[str, Any]]] = {label: [] for label, _, _ in grid}
        cluster = None
        if section == "cluster":
            cluster = DaskRuntime(n_workers=n, stragglers=latency, rng=0)
        try:
            for rep in range(repeats):
                for label, name, w in grid:
                    t0 = time.perf_counter()
                    if name == "ideal-mds":
                        r = ideal_mds(by_label["gd"][rep], latency, n, rate, horizon, rep,
                                      targets)
                    elif cluster is not None:
                        r = _run_one(cluster, label, name, w, setup, matrix, horizon,
                                     max_iter, rep, targets)
                    else:
                        with SimRuntime(n, latency=latency, rng=rep) as rt:
                            r = _run_one(rt, label, name, w, setup, matrix, horizon,
                                         max_iter, rep, targets)
                    by_label[label].append(r)
                    log(f"  {section} {problem:8s} {label:14s} repeat {rep}: "
                        f"{r['iterations']:5d} it, {r['total_s']:8.3f} s, final gap "
                        f"{r['final_gap']:.2e} ({time.perf_counter() - t0:.1f} s real)")
        finally:
            if cluster is not None:
                cluster.close()
        block = _report(by_label, targets)
        block.update({"latency": latency, "horizon_s": horizon, "shape": setup["shape"],
                      "subpartitions": setup["subpartitions"], "step_size": setup["eta"],
                      "gd_step_size": setup["gd_eta"]})
        out[problem] = block
    return out


# --------------------------------------------------------------------------- output


def _fmt_t(v: float | None) -> str:
    return "-" if v is None or not math.isfinite(v) else f"{v:.3g}"


def _table(title: str, section: dict[str, Any], targets: list[float]) -> None:
    print(title)
    keys = [f"{t:g}" for t in targets]
    for problem in PROBLEMS:
        if problem not in section:
            continue
        block = section[problem]
        print(f"  {problem}: {block['shape'][0]} x {block['shape'][1]}, "
              f"{block['subpartitions']} subpartitions, eta {block['step_size']:g} "
              f"(GD {block['gd_step_size']}), {block['latency']}")
        head = f"    {'method':14s}" + "".join(f"{'t<=' + k:>10s}" for k in keys)
        head += "".join(f"{'xGD ' + k:>11s}" for k in keys)
        print(head + f" {'final gap':>10s} {'iters':>6s}")
        for label, m in block["median"].items():
            line = f"    {label:14s}" + "".join(f"{_fmt_t(m['time_to'][k]):>10s}" for k in keys)
            line += "".join(f"{_fmt_t(m['vs_gd'][k]):>11s}" for k in keys)
            print(line + f" {m['final_gap']:10.2e} {int(m['iterations']):6d}")
    print("  (seconds to reach each gap, medians over repeats; '-' not reached; "
          "xGD = time / GD's time; ideal-mds: GD's iterates on simulated MDS timing)")


def _plot(results: dict[str, Any], path: Path) -> Path | None:
    from bench_foundation import pyplot

    plt = pyplot()
    if plt is None:
        return None
    panels = [(s, p) for s in ("sim", "cluster") if s in results for p in PROBLEMS]
    if not panels:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), squeeze=False)
    for ax, (section, problem) in zip(axes[0], panels, strict=True):
        block = results[section][problem]
        for label, runs in block["runs"].items():
            r = runs[0]
            style = "--" if label in ("gd", "ideal-mds") else "-"
            ax.semilogy(r["wall_time"], np.maximum(r["gap"], GAP_FLOOR), style, label=label)
        where = "simulated" if section == "sim" else "LocalCluster"
        ax.set_title(f"{problem}, {where}, N={results[section]['workers']}")
        ax.set_xlabel("seconds" + (" (simulated)" if section == "sim" else ""))
        ax.set_ylabel("suboptimality gap")
        ax.set_ylim(bottom=1e-12)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", type=Path, default=SPEC, help="experiment spec (TOML)")
    parser.add_argument("--sections", nargs="+", choices=["sim", "cluster"],
                        default=["sim", "cluster"], help="which settings to run")
    parser.add_argument("--quick", action="store_true", help="smoke run (N = 7, tiny data)")
    parser.add_argument("--out", type=Path, default=None, help="JSON file to write")
    args = parser.parse_args(argv)
    spec = tomllib.loads(args.spec.read_text())
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_foundation import machine_info

    results: dict[str, Any] = {"spec": spec, "quick": args.quick, "machine": machine_info()}
    t0 = time.perf_counter()
    if "sim" in args.sections:
        log("(sim) simulated time, SimRuntime")
        results["sim"] = run_section("sim", spec, args.quick)
    if "cluster" in args.sections:
        log("(cluster) LocalCluster with injected delays")
        results["cluster"] = run_section("cluster", spec, args.quick)
    results["real_duration_s"] = time.perf_counter() - t0

    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    out = args.out or REPO / "results" / "dsag_comparison" / f"{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(_json_safe(results), indent=1))
    targets = spec["run"]["targets"]
    if "sim" in results:
        _table(f"(sim) SimRuntime, N = {results['sim']['workers']}, artificial scenario "
               f"(medians)", results["sim"], targets)
    if "cluster" in results:
        _table(f"(cluster) LocalCluster, N = {results['cluster']['workers']}, injected "
               "delays; ideal-mds simulated from the injected law (medians)",
               results["cluster"], targets)
    figure = _plot(results, out.with_suffix(".png"))
    print(f"raw numbers: {out}" + (f"; figure: {figure}" if figure else ""))
    return results


if __name__ == "__main__":
    main()
