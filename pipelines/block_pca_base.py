#!/usr/bin/env python
"""Block PCA end to end against another checkout: what the kernels cost a whole fit.

A kernel benchmark (``bench_foundation.py --sections kernel --base``) times one pass over a
block; this pipeline times what a user waits for: ``fit_pca(..., method="block",
runtime="local")`` on a genotype VCF Zarr store (simulated with msprime, written with
bio2zarr), from the first read of the store to the result, ``rounds`` rounds at a
tolerance no run reaches before them. Each case runs in a fresh process of ours and one
of the other checkout (``--base``, e.g. made by ``git worktree add /tmp/base 5f225a0``),
the two alternating, ``repeats`` times; reported are the medians and ``ours / base``
(above 1: ours is slower), with the rounds each run made (equal, or the comparison says
so). Cases: every ``--storage`` (int8 dosages, packed 2-bit codes) times every
``--components`` k (``block`` carries ``2k`` columns). Without ``--base`` only ours run.

Usage::

    git worktree add /tmp/base 5f225a0
    flock /tmp/daskstraggle-bench.lock python pipelines/block_pca_base.py --base /tmp/base
    python pipelines/block_pca_base.py --quick          # smoke run, ours only

Results go to ``results/block_pca_base/<UTC timestamp>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_foundation import machine_info, print_table, write_results

FULL = {"variants": 100_000, "samples": 1000, "components": [2, 10], "rounds": 30,
        "repeats": 3, "storage": ["int8", "packed"]}
QUICK = {"variants": 2_000, "samples": 60, "components": [2], "rounds": 5, "repeats": 1,
         "storage": ["int8"]}

#: One fit in a fresh process: open the store, then time the fit (its load, its rounds,
#: its exact passes). Prints ``{"seconds", "rounds", "package"}`` as JSON.
CHILD = """
import json, os, sys, time, warnings
for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[name] = "1"
warnings.simplefilter("ignore")
import daskstraggle
from daskstraggle.data import open_matrix
store, storage, k, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
X = open_matrix(store, genotype_storage=storage)
start = time.perf_counter()
result = daskstraggle.fit_pca(X, k, method="block", runtime="local", max_iter=rounds,
                              tol=1e-14, rng=0)
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "rounds": int(result.n_iter),
                  "package": os.path.dirname(daskstraggle.__file__)}))
"""


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small data, one repeat, ours only")
    p.add_argument("--base", type=Path, default=None,
                   help="a checkout of another commit, timed alternately with ours")
    for key, value in FULL.items():
        many = isinstance(value, list)
        p.add_argument(f"--{key}", nargs="+" if many else None, default=None,
                       type=type(value[0]) if many else type(value),
                       help=f"default {value} (with --quick {QUICK[key]})")
    p.add_argument("--out", type=Path, default=None, help="the JSON result's path")
    args = p.parse_args(argv)
    if args.base is not None and not (args.base / "daskstraggle" / "__init__.py").is_file():
        p.error(f"--base {args.base} holds no daskstraggle package: give a checkout's root")
    return args


def fit_once(store: Path, storage: str, k: int, rounds: int, base: Path | None) -> dict[str, Any]:
    """One fit in a fresh process of ours (``base`` None) or of the checkout ``base``."""
    env = dict(os.environ)
    if base is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(base), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-c", CHILD, str(store), storage, str(k), str(rounds)],
                          capture_output=True, text=True, env=env, timeout=1800,
                          cwd=str(base) if base is not None else None)
    if proc.returncode != 0:
        raise RuntimeError(f"a fit of {'the base' if base else 'ours'} failed: "
                           f"{proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure(cfg: dict[str, Any], store: Path, base: Path | None) -> list[dict[str, Any]]:
    """Every case, ``repeats`` times, ours and the base alternating (a warm-up fit each
    first: numba's cache, page cache)."""
    sides = [None] if base is None else [None, base]
    rows = []
    for storage in cfg["storage"]:
        for k in cfg["components"]:
            for side in sides:
                fit_once(store, storage, k, cfg["rounds"], side)
            runs: dict[str, list[dict[str, Any]]] = {"ours": [], "base": []}
            for r in range(cfg["repeats"]):
                for side in (sides if r % 2 == 0 else sides[::-1]):
                    runs["ours" if side is None else "base"].append(
                        fit_once(store, storage, k, cfg["rounds"], side))
            row = {"storage": storage, "k": k, "runs": runs}
            for name, got in runs.items():
                if got:
                    row[name] = statistics.median(run["seconds"] for run in got)
                    row[f"{name}_rounds"] = sorted({run["rounds"] for run in got})
            if base is not None:
                row["ratio"] = row["ours"] / row["base"]
            log(f"{storage} k={k}: ours {row['ours']:.2f} s"
                + (f", base {row['base']:.2f} s, ours/base {row['ratio']:.2f}" if base else ""))
            rows.append(row)
    return rows


def report(results: dict[str, Any]) -> str:
    """Print and return the table of medians."""
    lines = []
    for row in results["rows"]:
        spread = [run["seconds"] for run in row["runs"]["ours"]]
        line = [row["storage"], str(row["k"]), f"{row['ours']:.2f} [{min(spread):.2f}-"
                f"{max(spread):.2f}]", str(row["ours_rounds"])]
        if "base" in row:
            bs = [run["seconds"] for run in row["runs"]["base"]]
            line += [f"{row['base']:.2f} [{min(bs):.2f}-{max(bs):.2f}]", str(row["base_rounds"]),
                     f"{row['ratio']:.2f}"]
        lines.append(line)
    header = ["storage", "k", "ours s", "rounds"]
    if results["base"] is not None:
        header += ["base s", "rounds", "ours / base"]
    cfg, machine = results["config"], results["machine"]
    family, model = machine["cpu_family_model"]
    title = (f"block PCA end to end (fit_pca, runtime local), {cfg['variants']} variants x "
             f"{cfg['samples']} samples VCF Zarr, {cfg['rounds']} rounds, median [min-max] of "
             f"{cfg['repeats']}; {machine['cpu']}, family {family} model {model} "
             f"({' '.join(machine['cpu_simd'])})")
    return print_table(title, header, lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    cfg = dict(QUICK if args.quick else FULL)
    for key in FULL:
        if getattr(args, key) is not None:
            cfg[key] = getattr(args, key)
    base = args.base.resolve() if args.base is not None else None
    results: dict[str, Any] = {"config": cfg, "quick": args.quick, "machine": machine_info(),
                               "base": str(base) if base else None}
    t0 = time.perf_counter()
    from daskstraggle.data.datasets import make_genotypes

    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "genotypes.vcz"
        log(f"writing {cfg['variants']} x {cfg['samples']} genotypes")
        make_genotypes(store, n_variants=cfg["variants"], n_samples=cfg["samples"],
                       n_populations=4, missing_rate=0.01, chunk_rows=5_000, seed=0)
        results["rows"] = measure(cfg, store, base)
    results["elapsed_s"] = time.perf_counter() - t0
    results["table"] = report(results)
    write_results(results, "block_pca_base", args.out)
    return results


if __name__ == "__main__":
    main()
