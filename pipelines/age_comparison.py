#!/usr/bin/env python
"""Age-based coded computation: static RCS vs RCS-1 vs RCS-adaptive partial recovery.

Reproduces §IV of the age-based coded computation paper (Fig. 3-5, Table I) with
``PartialRecovery`` in simulated time (``SimRuntime``): least squares on the authors'
synthetic data (2000 training and 400 test rows, d = 1000), K = N = 40 workers and
partitions, RCS codes with degrees (1, 2, 3), multi-message latency (alpha = 0.01,
mu = 10), learning rate 0.1, and three orderings of the workers' lists:

- ``static``: RCS, the order never changes;
- ``shift``: RCS-1, every list shifted by one position per iteration;
- ``age``: RCS-adaptive, the shift that puts the most partitions older than ``A_th`` first
  among the workers that replied in the previous iteration.

Sections (each read from ``pipelines/age_comparison.toml``):

(persistent)    some workers never finish (compute time x 1e6), tolerance q in
                {0, 0.15, 0.3} (Fig. 3, 4 and Table I);
(markov)        two-state Markov stragglers: slow (rate mu_s) or fast (mu_f), switching
                with probability p at the start of each iteration (Fig. 5);
(deterministic) extra, not in the paper: near-deterministic latency and a tolerance such
                that the needed count equals the number of fast workers, where static RCS
                provably recovers the same partitions every iteration.

Reported per ordering and q (medians over seeds): the final and median-of-last-X exact
objective gap, the test error (mean squared error on the held-out rows at the final
iterate), the average age per partition (Fig. 4; the worst one in the table), the largest
age, the partitions never recovered, the eq. (14) objective (fraction of (partition,
iteration) pairs with age > A_th, Table I) and the simulated seconds per iteration.

Usage::

    python pipelines/age_comparison.py            # ~6 minutes on 2 cores
    python pipelines/age_comparison.py --quick    # smoke run, ~15 s
    python pipelines/age_comparison.py --sections persistent --noise 1

Results (every run, medians, median curves, the spec, machine, versions) go to
``results/age_comparison/<UTC timestamp>.json`` and figures to the same name with ``.png``
(when matplotlib is installed).
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
SECTIONS = ("persistent", "markov", "deterministic")
LABELS = {"static": "RCS", "shift": "RCS-1", "age": "RCS-adaptive"}
SCALARS = ("final_gap", "median_last_gap", "test_mse", "worst_average_age", "max_age",
           "never_recovered", "unrecoverable", "max_age_recoverable", "eq14", "coverage_mean",
           "seconds_per_iteration")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def make_data(train: int, test: int, features: int, noise: float, seed: int
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The authors' synthetic regression data (``convergence_linear.m``), plus label noise.

    ``theta ~ U(0, 1)^d``; each row ``N(mu, I) + N(-mu, I)`` with ``mu = 1.5 theta / d``;
    ``y = x' theta + noise * N(0, 1)``. Returns ``X, y, X_test, y_test``.
    """
    rng = np.random.default_rng(seed)
    theta = rng.random(features)
    mu = 1.5 * theta / features

    def rows(n: int) -> np.ndarray:
        return rng.normal(mu, 1.0, size=(n, features)) + rng.normal(-mu, 1.0, size=(n, features))

    X, X_test = rows(train), rows(test)
    y = X @ theta + noise * rng.standard_normal(train)
    y_test = X_test @ theta + noise * rng.standard_normal(test)
    return X, y, X_test, y_test


def every(n_workers: int, count: int) -> tuple[int, ...]:
    """``count`` workers spread evenly over ``0 .. n_workers - 1``."""
    return tuple(int(w) for w in np.linspace(0, n_workers, count, endpoint=False).astype(int))


def persistent_spec(base: str, stragglers: tuple[int, ...], factor: float) -> str:
    return f"{base} + slowdown(workers={list(stragglers)}, factor={factor:g})"


def markov_spec(alpha: float, fast: float, slow: float, p: float,
                initial_slow: tuple[int, ...], n_workers: int) -> str:
    """Every worker on a chain; those in ``initial_slow`` start slow (two chained terms)."""
    slow_model = f"multi_message(alpha={alpha:g}, rate={slow:g})"
    terms = [f"multi-message(alpha={alpha:g}, rate={fast:g})"]
    others = [w for w in range(n_workers) if w not in initial_slow]
    for workers, initial in ((initial_slow, "slow"), (others, "fast")):
        if workers:
            terms.append(f"markov(slow={slow_model}, p_slow={p:g}, initial='{initial}', "
                         f"workers={list(workers)})")
    return " + ".join(terms)


def summarize(result: Any, method: Any, data: tuple[np.ndarray, ...], *, slow: tuple[int, ...],
              threshold: int, last: int) -> dict[str, Any]:
    """One run's numbers from its trace (ages are 0 in the iterations a partition is recovered)."""
    tr = result.trace
    ages = np.asarray(tr.age.values, dtype=float)  # (iteration, partition)
    gap = np.asarray(tr.exact_gap.values, dtype=float)
    X_test, y_test = data[2], data[3]
    residual = X_test @ np.asarray(result.iterate, dtype=float) - y_test
    placement = method.assignment.placement
    held_fast = np.zeros(ages.shape[1], dtype=bool)
    for worker, parts in enumerate(placement):
        if worker not in slow:
            held_fast[list(parts)] = True
    recovered_ever = (ages == 0).any(axis=0)
    average_age = ages.mean(axis=0)
    return {
        "final_gap": float(gap[-1]),
        "median_last_gap": float(np.median(gap[-last:])),
        "test_mse": float(residual @ residual / len(y_test)),
        "worst_average_age": float(average_age.max()),
        "max_age": float(ages.max()),
        "never_recovered": int((~recovered_ever).sum()),
        # partitions whose every holder is a (persistent or initially slow) straggler
        "unrecoverable": int((~held_fast).sum()),
        "max_age_recoverable": float(ages[:, held_fast].max()) if held_fast.any() else 0.0,
        "eq14": float((ages > threshold).mean()),
        "coverage_mean": float(tr.coverage.mean()),
        "seconds_per_iteration": float(tr.wall_time[-1]) / int(tr.sizes["iteration"]),
        "average_age_sorted": sorted(average_age.tolist(), reverse=True),
        "gap_curve": gap.tolist(),
        "shift_curve": np.asarray(tr["shift"].values, dtype=float).tolist(),
    }


def _medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {k: float(np.median([r[k] for r in runs])) for k in SCALARS}
    out["average_age_sorted"] = np.median([r["average_age_sorted"] for r in runs],
                                          axis=0).tolist()
    out["gap_curve"] = np.median([r["gap_curve"] for r in runs], axis=0).tolist()
    return out


def _settings(spec: dict[str, Any], section: str, quick: bool) -> list[dict[str, Any]]:
    """(label, latency spec, tolerance, stragglers) of every setting of a section."""
    run, qk, sec = spec["run"], spec["quick"], spec[section]
    n = qk["workers"] if quick else run["workers"]
    out = []
    if section == "persistent":
        slow = every(n, qk["persistent_stragglers"] if quick else sec["stragglers"])
        latency = persistent_spec(sec["latency"], slow, sec["factor"])
        for q in qk["persistent_tolerances"] if quick else sec["tolerances"]:
            out.append({"label": f"S={len(slow)}, q={q:g}", "latency": latency,
                        "tolerance": q, "slow": slow})
    elif section == "markov":
        slow = every(n, qk["markov_initial_slow"] if quick else sec["initial_slow"])
        for p in qk["markov_switch"] if quick else sec["switch"]:
            latency = markov_spec(sec["alpha"], sec["fast_rate"], sec["slow_rate"], p, slow, n)
            for q in sec["tolerances"]:
                out.append({"label": f"p={p:g}, q={q:g}", "latency": latency, "tolerance": q,
                            "slow": slow, "switch": p})
    else:
        slow = every(n, qk["deterministic_stragglers"] if quick else sec["stragglers"])
        latency = persistent_spec(sec["latency"], slow, sec["factor"])
        for q in sec["tolerances"]:
            out.append({"label": f"S={len(slow)}, q={q:g}", "latency": latency,
                        "tolerance": q, "slow": slow})
    return out


def run_section(spec: dict[str, Any], section: str, quick: bool, data: tuple[np.ndarray, ...]
                ) -> dict[str, Any]:
    from daskstraggle import open_matrix
    from daskstraggle.api import run_on
    from daskstraggle.methods import PartialRecovery
    from daskstraggle.problems import LeastSquares
    from daskstraggle.runtime import SimRuntime, StopRule

    run, qk = spec["run"], spec["quick"]
    n = qk["workers"] if quick else run["workers"]
    seeds = qk["seeds"] if quick else run["seeds"]
    n_iter = qk["iterations"] if quick else run["iterations"]
    last = qk["last"] if quick else run["last"]
    threshold = run["age_threshold"]
    matrix = open_matrix(data[0], labels=data[1], n_partitions=n)
    out: dict[str, Any] = {}
    for setting in _settings(spec, section, quick):
        by_order: dict[str, list[dict[str, Any]]] = {o: [] for o in run["orderings"]}
        for seed in seeds:
            for ordering in run["orderings"]:
                t0 = time.perf_counter()
                method = PartialRecovery(degrees=tuple(run["degrees"]),
                                         tolerance=setting["tolerance"], ordering=ordering,
                                         age_threshold=threshold, rng=seed)
                with SimRuntime(n, latency=setting["latency"], rng=seed) as rt:
                    res = run_on(rt, method, LeastSquares(fit_intercept=False), matrix,
                                 stop=StopRule(max_iter=n_iter, tol=None),
                                 step_size=run["step_size"], reference=True, rng=0,
                                 record_iterates=True)
                s = summarize(res, method, data, slow=setting["slow"], threshold=threshold,
                              last=last)
                by_order[ordering].append(s)
                log(f"  {section} {setting['label']:14s} {ordering:6s} seed {seed}: gap "
                    f"{s['final_gap']:.3e}, max age {s['max_age']:3.0f}, never "
                    f"{s['never_recovered']:2d} ({time.perf_counter() - t0:.1f} s real)")
        out[setting["label"]] = {
            "latency": setting["latency"],
            "tolerance": setting["tolerance"],
            "stragglers": list(setting["slow"]),
            "switch": setting.get("switch"),
            "median": {o: _medians(r) for o, r in by_order.items()},
            "runs": by_order,
        }
    return out


def _table(title: str, block: dict[str, Any]) -> None:
    print(title)
    print(f"  {'setting':14s} {'ordering':13s} {'final gap':>10s} {'last-X gap':>10s} "
          f"{'test MSE':>9s} {'worst avg':>9s} {'max age':>7s} {'never':>5s} {'eq14':>6s} "
          f"{'s/iter':>8s}")
    for label, setting in block.items():
        for o, m in setting["median"].items():
            print(f"  {label:14s} {LABELS[o]:13s} {m['final_gap']:10.3e} "
                  f"{m['median_last_gap']:10.3e} {m['test_mse']:9.3e} "
                  f"{m['worst_average_age']:9.2f} {m['max_age']:7.0f} "
                  f"{m['never_recovered']:5.0f} {m['eq14']:6.3f} "
                  f"{m['seconds_per_iteration']:8.3g}")
        unrec = {m["unrecoverable"] for m in setting["median"].values()}
        print(f"  {label:14s} partitions held only by initial stragglers (median): "
              f"{', '.join(f'{u:g}' for u in sorted(unrec))}")


def _plot(results: dict[str, Any], path: Path) -> Path | None:
    from bench_foundation import pyplot

    plt = pyplot()
    if plt is None:
        return None
    panels = [(s, label, block) for s in SECTIONS for label, block in results.get(s, {}).items()]
    if not panels:
        return None
    fig, axes = plt.subplots(2, len(panels), figsize=(4 * len(panels), 6.5), squeeze=False)
    for col, (section, label, block) in enumerate(panels):
        top, bottom = axes[0][col], axes[1][col]
        for o, m in block["median"].items():
            curve = np.maximum(np.asarray(m["gap_curve"]), 1e-16)
            top.semilogy(np.arange(1, len(curve) + 1), curve, label=LABELS[o])
            ages = m["average_age_sorted"]
            bottom.plot(np.arange(1, len(ages) + 1), ages, marker=".", label=LABELS[o])
        top.set_title(f"{section}: {label}", fontsize=9)
        top.set_xlabel("iteration")
        bottom.set_xlabel("partition (sorted by average age)")
    axes[0][0].set_ylabel("exact objective gap (median)")
    axes[1][0].set_ylabel("average age (median)")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", type=Path, default=SPEC, help="experiment spec (TOML)")
    parser.add_argument("--sections", nargs="+", choices=list(SECTIONS),
                        default=list(SECTIONS), help="which scenarios to run")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run (12 workers, 20 iterations)")
    parser.add_argument("--noise", type=float, default=None,
                        help="std of the label noise (overrides [data] noise; 0 = the paper)")
    parser.add_argument("--out", type=Path, default=None, help="JSON file to write")
    args = parser.parse_args(argv)
    spec = tomllib.loads(args.spec.read_text())
    if args.noise is not None:
        spec["data"]["noise"] = args.noise
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_foundation import machine_info

    d, qk = spec["data"], spec["quick"]
    data = make_data(qk["train_rows"] if args.quick else d["train_rows"],
                     qk["test_rows"] if args.quick else d["test_rows"],
                     qk["features"] if args.quick else d["features"], d["noise"], d["seed"])
    results: dict[str, Any] = {"spec": spec, "quick": args.quick, "machine": machine_info()}
    started = time.perf_counter()
    for section in SECTIONS:
        if section in args.sections:
            log(f"({section}) SimRuntime")
            results[section] = run_section(spec, section, args.quick, data)
    results["real_duration_s"] = time.perf_counter() - started

    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    out = args.out or REPO / "results" / "age_comparison" / f"{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    n = qk["workers"] if args.quick else spec["run"]["workers"]
    head = (f"N = K = {n}, degrees {tuple(spec['run']['degrees'])}, A_th = "
            f"{spec['run']['age_threshold']}, label noise {d['noise']:g} (medians over "
            f"{len(qk['seeds'] if args.quick else spec['run']['seeds'])} seeds)")
    titles = {"persistent": "(persistent) persistent stragglers",
              "markov": "(markov) two-state Markov stragglers",
              "deterministic": "(deterministic) extra: near-deterministic latency"}
    for section in SECTIONS:
        if section in results:
            _table(f"{titles[section]}; {head}", results[section])
    figure = _plot(results, out.with_suffix(".png"))
    print(f"raw numbers: {out}" + (f"; figure: {figure}" if figure else ""))
    return results


if __name__ == "__main__":
    main()
