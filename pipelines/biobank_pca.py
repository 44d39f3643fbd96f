#!/usr/bin/env python
"""Biobank-size genotype PCA and the whole genotype workflow: ours against plink2 on the
same PLINK 1 ``.bed``.

A Balding-Nichols cohort (``--populations`` populations of equal size, F_ST ``--fst``,
ancestral allele frequencies ``U(0.05, 0.5)``, ``--missing`` of the calls missing at
random, the last ``--relatives`` samples children of pairs of the first ones) is written
straight to a ``.bed``/``.bim``/``.fam`` fileset chunk by chunk (bounded memory, one forked
process per core, cached in ``--workdir`` by size and seed). Then, one at a time:

- ``plink2 --bfile ... --pca approx K`` (and ``--pca K``, exact, with ``--exact``), with
  OpenBLAS when ``/usr/lib/x86_64-linux-gnu/openblas-pthread`` exists, ``--threads`` the
  machine's cores;
- ``daskstraggle pca ... --packed-genotypes --method block --runtime local`` (our command
  line, one process) once per ``--tol`` (default: the command's own), ``--ours-args``
  adding options; with ``--gram`` also ``--method gram`` (exact, the largest case it fits:
  its Gram matrix is samples^2 x 8 bytes).

With ``--workflow``, instead: the whole workflow (QC with ``--maf --geno --mind --hwe``,
``--king-cutoff``, LD pruning, ``--pca``; settings in :data:`WORKFLOW`) as a user types it,
one ``daskstraggle pca FILE.bed -k K --min-maf ... --plink-out ...`` with the default
runtime and method, against plink2's staged runs of the same steps (``--make-pgen`` after
QC, ``--king-cutoff``, ``--indep-pairwise`` on the unrelated samples, ``--pca approx`` and,
with ``--exact``, ``--pca`` on the kept samples and variants): wall time from launch to
exit, peak memory of the whole process tree, the kept samples and variants (Jaccard index
against plink2's) and the |cosine| of each PC against plink2's exact ``--pca`` (else its
``approx``).

Reported per run: wall time, peak RSS of the process tree, rounds, convergence and what
each component determines (``vector``/``variance``), and against plink2 approx: the
|cosine| of each PC and the ratio of the variances each captures (our eigenvalues over
plink2's, both as fractions of the same total). Every number comes with the CPU model.

Usage::

    apt-get install plink2 libopenblas0-pthread
    flock /tmp/daskstraggle-bench.lock python pipelines/biobank_pca.py \\
        --samples 100000 --variants 50000 --tol default 1e-2 1e-3   # 10^5 x 5 10^4
    python pipelines/biobank_pca.py --samples 20000 --variants 20000 --gram --exact --no-approx
    python pipelines/biobank_pca.py --samples 50000 --variants 20000 --tol default 1e-3
    python pipelines/biobank_pca.py --quick        # smoke run (< 1 minute)
    python pipelines/biobank_pca.py --workflow --exact --samples 5000 --variants 20000 \\
        --relatives 50 --populations 3 --fst 0.05 --missing 0.01 --seed 1
    python pipelines/biobank_pca.py --workflow --samples 50000 --variants 20000 --relatives 50

Results go to ``results/biobank_pca/<UTC timestamp>.json``; the fileset stays in
``--workdir`` (default ``results/biobank_pca/data``, git-ignored) for the next run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _process_tree import check_ok, run_command  # this folder
from bench_foundation import machine_info, print_table, write_results

from daskstraggle.data._bed_writer import _encode
from daskstraggle.data.plink import MAGIC, VARIANT_MAJOR

ROOT = Path(__file__).resolve().parents[1]
OPENBLAS = Path("/usr/lib/x86_64-linux-gnu/openblas-pthread")
#: Variants simulated and encoded at a time.
CHUNK = 2000


def log(msg: str) -> None:
    print(f"[biobank] {msg}", flush=True)


# ================================================================================ data
def _chunk(args: tuple[int, int, int, float, float, int, Any]) -> bytes:
    """Encoded .bed rows of one chunk of variants (its own seeded generator).

    The last ``relatives`` samples are children: at each variant one of the two haplotypes
    of parent ``2 j n_pops`` and one of parent ``(2 j + 1) n_pops`` (same population), so
    each child's kinship with each parent is 1/4 (plink2's ``--king-cutoff 0.177`` removes
    one sample of each such pair).
    """
    rows, n_samples, n_pops, fst, missing, relatives, seed = args
    rng = np.random.default_rng(seed)
    pops = np.arange(n_samples) % n_pops
    p = rng.uniform(0.05, 0.5, size=rows)
    alpha, beta = p * (1 - fst) / fst, (1 - p) * (1 - fst) / fst
    pk = rng.beta(alpha[:, None], beta[:, None], size=(rows, n_pops))
    threshold = np.round(pk * 256).clip(0, 256).astype(np.uint16)[:, pops]
    haplotypes = [rng.integers(0, 256, size=(rows, n_samples), dtype=np.uint8) < threshold
                  for _ in range(2)]
    for j, child in enumerate(range(n_samples - relatives, n_samples)):
        for h, parent in enumerate((2 * j * n_pops, (2 * j + 1) * n_pops)):
            pick = rng.integers(0, 2, size=rows).astype(bool)
            haplotypes[h][:, child] = np.where(pick, haplotypes[0][:, parent],
                                               haplotypes[1][:, parent])
    dosage = haplotypes[0].astype(np.int8) + haplotypes[1].astype(np.int8)
    if missing > 0:
        dosage[rng.random((rows, n_samples), dtype=np.float32) < missing] = -1
    return _encode(dosage).tobytes()


def _write_part(path: str, jobs: list[tuple[Any, ...]]) -> None:
    """Encode ``jobs`` (chunks of variants) in order into the file ``path``."""
    with open(path, "wb") as f:
        for job in jobs:
            f.write(_chunk(job))


def write_cohort(prefix: Path, cfg: dict[str, Any]) -> dict[str, Any]:
    """Write the Balding-Nichols fileset ``prefix``.bed/.bim/.fam (see the module doc).

    The chunks are split into one contiguous range per core, each written to a part file by
    a forked process (nothing is pickled), then the parts are joined in order.
    """
    import multiprocessing

    n, s = cfg["variants"], cfg["samples"]
    seeds = np.random.SeedSequence(cfg["seed"]).spawn(math.ceil(n / CHUNK))
    relatives = cfg.get("relatives", 0)
    if 2 * relatives * cfg["populations"] > s - relatives:
        raise SystemExit(f"--relatives {relatives} needs more than "
                         f"{(2 * cfg['populations'] + 1) * relatives} samples")
    jobs = [(min(CHUNK, n - a), s, cfg["populations"], cfg["fst"], cfg["missing"], relatives,
             seeds[j]) for j, a in enumerate(range(0, n, CHUNK))]
    t0 = time.perf_counter()
    n_parts = max(1, min(os.cpu_count() or 1, len(jobs)))
    bounds = np.linspace(0, len(jobs), n_parts + 1).astype(int)
    parts = [f"{prefix}.part{i}" for i in range(n_parts)]
    context = multiprocessing.get_context("fork")
    procs = [context.Process(target=_write_part, args=(part, jobs[a:b]))
             for part, a, b in zip(parts, bounds[:-1], bounds[1:], strict=True)]
    for proc in procs:
        proc.start()
    limit = cfg.get("timeout_s", 7200)
    deadline = time.monotonic() + limit
    for proc in procs:
        proc.join(max(deadline - time.monotonic(), 0.0))
    if any(proc.is_alive() or proc.exitcode != 0 for proc in procs):
        for proc in procs:
            proc.kill()
            proc.join()
        for part in parts:
            Path(part).unlink(missing_ok=True)
        raise RuntimeError(f"writing the cohort failed or took over {limit:g} s (--timeout) "
                           "in a child process")
    partial = Path(f"{prefix}.bed.partial")
    with open(partial, "wb") as f:
        f.write(MAGIC + bytes([VARIANT_MAJOR]))
        for part in parts:
            with open(part, "rb") as src:
                shutil.copyfileobj(src, f, 1 << 24)
            os.remove(part)
    Path(f"{prefix}.bim").write_text("".join(
        f"1\t1:{i + 1}:A:T\t0\t{i + 1}\tT\tA\n" for i in range(n)))
    Path(f"{prefix}.fam").write_text("".join(
        f"p{i % cfg['populations']} s{i} 0 0 0 -9\n" for i in range(s)))
    os.replace(partial, f"{prefix}.bed")
    return {"write_s": time.perf_counter() - t0,
            "bed_bytes": Path(f"{prefix}.bed").stat().st_size}


def cohort(cfg: dict[str, Any], workdir: Path) -> Path:
    """The cached fileset of these settings (written when missing)."""
    name = (f"bn_{cfg['variants']}x{cfg['samples']}_k{cfg['populations']}_fst{cfg['fst']}"
            f"_miss{cfg['missing']}_seed{cfg['seed']}"
            + (f"_rel{cfg['relatives']}" if cfg.get("relatives") else ""))
    prefix = workdir / name
    stamp = workdir / f"{name}.json"
    if not stamp.exists():
        workdir.mkdir(parents=True, exist_ok=True)
        free = shutil.disk_usage(workdir).free
        need = cfg["variants"] * math.ceil(cfg["samples"] / 4)
        if free < 2 * need:
            raise SystemExit(f"not enough free disk in {workdir}: {free / 1e9:.1f} GB free, "
                             f"the .bed needs {need / 1e9:.1f} GB")
        log(f"writing {cfg['variants']} variants x {cfg['samples']} samples to {prefix}.bed")
        stamp.write_text(json.dumps(write_cohort(prefix, cfg)))
    return prefix


# ================================================================================ runs
def run_plink2(prefix: Path, cfg: dict[str, Any], tmp: Path, *, approx: bool) -> dict[str, Any]:
    out = tmp / ("plink2_approx" if approx else "plink2_exact")
    cmd = [cfg["plink2"], "--bfile", str(prefix), "--pca", *(["approx"] if approx else []),
           str(cfg["components"]), "--threads", str(cfg["threads"]), "--out", str(out)]
    env = {**os.environ, "LD_LIBRARY_PATH": str(OPENBLAS)} if OPENBLAS.exists() else None
    log(" ".join(cmd))
    run = run_command(cmd, cfg=cfg, gnu_time=True, env=env)
    check_ok(run, "plink2")
    rows = [line.split() for line in Path(f"{out}.eigenvec").read_text().splitlines()]
    k = cfg["components"]
    run["components"] = np.array([[float(v) for v in r[-k:]] for r in rows[1:]]).T
    run["eigenvalues"] = [float(v) for v in Path(f"{out}.eigenval").read_text().split()]
    run["blas"] = "openblas" if env else "default"
    return run


def run_ours(prefix: Path, cfg: dict[str, Any], tmp: Path, method: str,
             tol: float | None = None) -> dict[str, Any]:
    store = tmp / f"ours_{method}.zarr"
    cmd = [sys.executable, "-m", "daskstraggle.cli", "pca", f"{prefix}.bed", "-k",
           str(cfg["components"]), "--packed-genotypes", "--method", method, "--runtime",
           "local", "--json", "--quiet", "--out", str(store),
           *([] if tol is None else ["--tol", str(tol)]), *cfg["ours_args"]]
    log(" ".join(cmd[2:]))
    run = run_command(cmd, cfg=cfg, gnu_time=True)
    check_ok(run, f"ours {method}")
    summary = json.loads(run["stdout"].strip().splitlines()[-1])
    import xarray as xr

    with xr.open_zarr(store, consolidated=False) as fitted:
        names = [v for v in fitted.data_vars if "components" in v]
        run["components"] = np.asarray(fitted[names[0]].values, dtype=np.float64)
    run["summary"] = {key: summary.get(key) for key in
                      ("n_iter", "wall_time_s", "converged", "stop_reason", "optimality",
                       "explained_variance_ratio", "residuals", "determined")}
    shutil.rmtree(store, ignore_errors=True)
    return run


# ================================================================================ workflow
#: The whole genotype workflow (``--workflow``): our options and plink2's, step by step.
WORKFLOW = {"maf": 0.01, "geno": 0.05, "mind": 0.05, "hwe": 1e-6, "king": 0.177,
            "ld": (50, 5, 0.2)}


def _ours_qc(w: dict[str, Any]) -> list[str]:
    return ["--min-maf", str(w["maf"]), "--max-missing", str(w["geno"]), "--mind",
            str(w["mind"]), "--hwe", str(w["hwe"]), "--king-cutoff", str(w["king"]),
            "--ld-prune", ",".join(map(str, w["ld"]))]


def _read_eigenvec(path: str, k: int) -> tuple[list[str], np.ndarray]:
    """Sample ids (``FID IID``, or ``IID``) and the k x samples components of an .eigenvec."""
    rows = [line.split() for line in Path(path).read_text().splitlines()[1:]]
    return [" ".join(r[:-k]) for r in rows], np.array([[float(v) for v in r[-k:]] for r in rows]).T


def run_plink2_workflow(prefix: Path, cfg: dict[str, Any], tmp: Path, *,
                        approx: bool) -> dict[str, Any]:
    """plink2's staged runs of the workflow (QC, ``--king-cutoff``, ``--indep-pairwise``,
    ``--pca``): wall time summed, peak memory the largest stage's."""
    w, out = WORKFLOW, tmp / ("plink2_wf_approx" if approx else "plink2_wf")
    base = [cfg["plink2"], "--threads", str(cfg["threads"])]
    stages = [
        ["--bfile", str(prefix), "--maf", str(w["maf"]), "--geno", str(w["geno"]), "--mind",
         str(w["mind"]), "--hwe", str(w["hwe"]), "--make-pgen", "--out", f"{out}_qc"],
        ["--pfile", f"{out}_qc", "--king-cutoff", str(w["king"]), "--out", f"{out}_king"],
        ["--pfile", f"{out}_qc", "--keep", f"{out}_king.king.cutoff.in.id",
         "--indep-pairwise", *map(str, w["ld"]), "--out", f"{out}_ld"],
        ["--pfile", f"{out}_qc", "--keep", f"{out}_king.king.cutoff.in.id", "--extract",
         f"{out}_ld.prune.in", "--pca", *(["approx"] if approx else []),
         str(cfg["components"]), "--out", str(out)]]
    env = {**os.environ, "LD_LIBRARY_PATH": str(OPENBLAS)} if OPENBLAS.exists() else None
    runs = []
    for stage in stages:
        log(" ".join(["plink2", *stage]))
        runs.append(run_command([*base, *stage], cfg=cfg, gnu_time=True, env=env))
        check_ok(runs[-1], "plink2")
    samples, components = _read_eigenvec(f"{out}.eigenvec", cfg["components"])
    return {"cmd": [r["cmd"] for r in runs], "wall_s": sum(r["wall_s"] for r in runs),
            "stage_s": [r["wall_s"] for r in runs], "returncode": 0,
            "memory": {"time_max_rss_mb": max(r["memory"].get("time_max_rss_mb")
                                              or r["memory"]["tree_total_mb"] for r in runs),
                       "tree_total_mb": max(r["memory"]["tree_total_mb"] for r in runs)},
            "components": components, "samples": samples,
            "variants": Path(f"{out}_ld.prune.in").read_text().split(),
            "eigenvalues": [float(v) for v in Path(f"{out}.eigenval").read_text().split()],
            "blas": "openblas" if env else "default"}


def run_ours_workflow(prefix: Path, cfg: dict[str, Any], tmp: Path) -> dict[str, Any]:
    """The workflow as a user types it: one ``daskstraggle pca`` with the QC options, the
    default runtime and method, plink2's files written with ``--plink-out``."""
    out = tmp / "ours_wf"
    for suffix in (".eigenvec", ".eigenval", ".eigenvec.allele", ".afreq"):
        Path(f"{out}{suffix}").unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "daskstraggle.cli", "pca", f"{prefix}.bed", "-k",
           str(cfg["components"]), *_ours_qc(WORKFLOW), "--json", "--quiet", "--plink-out",
           str(out), *cfg["ours_args"]]
    log(" ".join(cmd[2:]))
    run = run_command(cmd, cfg=cfg, gnu_time=True)
    check_ok(run, "ours workflow")
    summary = json.loads(run["stdout"].strip().splitlines()[-1])
    run["samples"], run["components"] = _read_eigenvec(f"{out}.eigenvec", cfg["components"])
    run["variants"] = [line.split()[1] for line in
                       Path(f"{out}.afreq").read_text().splitlines()[1:]]
    run["summary"] = {key: summary.get(key) for key in
                      ("n_iter", "wall_time_s", "converged", "stop_reason", "method",
                       "runtime", "explained_variance_ratio", "determined", "quality_control")}
    return run


def same_sets(ours: dict[str, Any], plink: dict[str, Any]) -> dict[str, Any]:
    """Whether both kept the same samples and variants (Jaccard index of each)."""
    out = {}
    for what in ("samples", "variants"):
        a, b = set(ours[what]), set(plink[what])
        out[f"{what}_kept"] = [len(a), len(b)]
        out[f"{what}_jaccard"] = len(a & b) / max(1, len(a | b))
    return out


def compare(ours: dict[str, Any], plink: dict[str, Any]) -> dict[str, Any]:
    """|cos| per PC and our captured variance over plink2's (same total variance)."""
    a, b = ours["components"], plink["components"]
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    cos = np.abs(np.sum(a * b, axis=1))
    ratio = np.array(ours["summary"]["explained_variance_ratio"])
    plink_ev = np.array(plink["eigenvalues"])
    # plink2's eigenvalues are ours times a constant (its GRM scaling): compare the shapes
    return {"cosine": cos.round(6).tolist(),
            "variance_over_plink2": (ratio / ratio[0] / (plink_ev / plink_ev[0])).tolist()}


def _spectrum(run: dict[str, Any]) -> np.ndarray:
    """Eigenvalues over the first one (plink2 scales its eigenvalues by a constant)."""
    values = np.asarray(run["summary"]["explained_variance_ratio"] if "summary" in run
                        else run["eigenvalues"], dtype=np.float64)
    return values / values[0]


def variance_errors(runs: dict[str, dict[str, Any]]) -> dict[str, list[float]]:
    """Each run's relative error of every component's variance (over PC1's) against ours at
    the default tol, the most accurate run."""
    best = runs.get("ours block")
    if best is None:
        return {}
    exact = _spectrum(best)
    return {name: np.abs(_spectrum(run) / exact - 1).tolist() for name, run in runs.items()
            if name != "ours block" and ("summary" in run or "eigenvalues" in run)}


# ================================================================================ main
def row(name: str, run: dict[str, Any], versus: dict[str, Any] | None) -> list[str]:
    summary = run.get("summary", {})
    mem = _peak(run)
    determined = summary.get("determined") or []
    kinds = ",".join(f"{d[:3]}" for d in determined) if determined else "-"
    cos = ("-" if versus is None or "cosine" not in versus
           else " ".join(f"{c:.3f}" for c in versus["cosine"][:4]))
    error = (versus or {}).get("variance_error_vs_ours")
    return [name, f"{run['wall_s']:.1f}", f"{mem / 1024:.2f}", str(summary.get("n_iter", "-")),
            str(summary.get("converged", "-")), kinds, cos,
            "-" if error is None else f"{max(error):.1e}"]


def pca_runs(prefix: Path, cfg: dict[str, Any], tmp: Path,
             have_plink2: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """PCA alone: plink2 --pca (approx, exact) against ours (block per tol, gram)."""
    runs: dict[str, dict[str, Any]] = {}
    if have_plink2 and not cfg["no_approx"]:
        runs["plink2 --pca approx"] = run_plink2(prefix, cfg, tmp, approx=True)
    if have_plink2 and cfg["exact"]:
        runs["plink2 --pca (exact)"] = run_plink2(prefix, cfg, tmp, approx=False)
    for tol in cfg["tol"]:
        name = "ours block" if tol is None else f"ours block --tol {tol:g}"
        runs[name] = run_ours(prefix, cfg, tmp, "block", tol)
    if cfg["gram"]:
        runs["ours gram"] = run_ours(prefix, cfg, tmp, "gram")
    reference = runs.get("plink2 --pca approx") or runs.get("plink2 --pca (exact)")
    versus = {name: compare(run, reference) for name, run in runs.items()
              if reference is not None and "summary" in run}
    for name, error in variance_errors(runs).items():
        versus.setdefault(name, {})["variance_error_vs_ours"] = error
    return runs, versus


def workflow_runs(prefix: Path, cfg: dict[str, Any], tmp: Path,
                  have_plink2: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """The whole workflow: ours as typed against plink2's staged runs (``--pca approx``
    unless ``--no-approx``, exact ``--pca`` with ``--exact``); same kept sets and |cos| per
    PC against the exact run if there is one, else the approx one."""
    runs: dict[str, dict[str, Any]] = {}
    if have_plink2 and cfg["exact"]:
        runs["plink2 staged, --pca"] = run_plink2_workflow(prefix, cfg, tmp, approx=False)
    if have_plink2 and not cfg["no_approx"]:
        runs["plink2 staged, --pca approx"] = run_plink2_workflow(prefix, cfg, tmp,
                                                                  approx=True)
    runs["ours (as typed)"] = run_ours_workflow(prefix, cfg, tmp)
    reference = runs.get("plink2 staged, --pca") or runs.get("plink2 staged, --pca approx")
    versus = {}
    if reference is not None:
        versus["ours (as typed)"] = {**compare(runs["ours (as typed)"], reference),
                                     **same_sets(runs["ours (as typed)"], reference),
                                     "time_over_plink2": runs["ours (as typed)"]["wall_s"]
                                     / reference["wall_s"],
                                     "memory_over_plink2": _peak(runs["ours (as typed)"])
                                     / _peak(reference)}
    for run in runs.values():
        run.pop("samples", None)
        run.pop("variants", None)
    return runs, versus


def _peak(run: dict[str, Any]) -> float:
    """Peak resident memory in MB: of the largest process (GNU time) or of the whole process
    tree (sampled), whichever is larger."""
    return max(run["memory"].get("time_max_rss_mb") or 0.0, run["memory"]["tree_total_mb"])


def _tol(text: str) -> float | None:
    return None if text == "default" else float(text)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=20_000)
    parser.add_argument("--variants", type=int, default=20_000)
    parser.add_argument("--components", type=int, default=10)
    parser.add_argument("--populations", type=int, default=4)
    parser.add_argument("--fst", type=float, default=0.02)
    parser.add_argument("--missing", type=float, default=0.005)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                        help="plink2 --threads (default: the machine's cores)")
    parser.add_argument("--plink2", default=shutil.which("plink2") or "plink2")
    parser.add_argument("--exact", action="store_true", help="also plink2 --pca (exact)")
    parser.add_argument("--gram", action="store_true", help="also ours --method gram (exact)")
    parser.add_argument("--no-approx", action="store_true", help="skip plink2 --pca approx")
    parser.add_argument("--tol", type=_tol, nargs="+", default=[None],
                        help="ours block once per value ('default': the command's 1e-6)")
    parser.add_argument("--ours-args", nargs=argparse.REMAINDER, default=[],
                        help="more options of `daskstraggle pca` (last on the line)")
    parser.add_argument("--relatives", type=int, default=0,
                        help="children of pairs of the first samples (see _chunk)")
    parser.add_argument("--workflow", action="store_true",
                        help="the whole workflow (QC, KING cutoff, LD prune, PCA) as a user "
                             "types it, against plink2's staged runs")
    parser.add_argument("--timeout", type=float, default=7200)
    parser.add_argument("--workdir", type=Path, default=ROOT / "results" / "biobank_pca" / "data")
    parser.add_argument("--quick", action="store_true", help="smoke run (< 1 minute)")
    parser.add_argument("--out", type=Path, default=None, help="JSON file to write")
    args = parser.parse_args(argv)
    if args.quick:
        args.samples, args.variants, args.components = 2000, 1000, 5
    cfg = {**vars(args), "workdir": str(args.workdir), "timeout_s": args.timeout,
           "sample_interval_s": 0.2}
    start = time.perf_counter()
    prefix = cohort(cfg, args.workdir)
    tmp = args.workdir / "runs"
    tmp.mkdir(parents=True, exist_ok=True)
    have_plink2 = shutil.which(args.plink2) is not None
    if args.workflow:
        runs, versus = workflow_runs(prefix, cfg, tmp, have_plink2)
    else:
        runs, versus = pca_runs(prefix, cfg, tmp, have_plink2)
    machine = machine_info()
    table = print_table(
        f"{args.variants} variants x {args.samples} samples, k = {args.components} "
        f"({machine['cpu']}, family/model {'/'.join(map(str, machine['cpu_family_model']))}, "
        f"{machine['cpu_count']} cores)",
        ["run", "wall s", "peak GB", "rounds", "converged", "determined",
         "|cos| PC1-4 vs plink2", "max variance error vs ours"],
        [row(name, run, versus.get(name)) for name, run in runs.items()])
    if not have_plink2:
        print(f"(no {args.plink2}: plink2 rows skipped)")
    for run in runs.values():
        run.pop("components", None)
        run.pop("stdout", None)
    results = {"settings": cfg, "machine": machine, "runs": runs, "versus": versus,
               "table": table, "elapsed_s": time.perf_counter() - start}
    write_results(results, "biobank_pca", args.out)
    return results


if __name__ == "__main__":
    main()
