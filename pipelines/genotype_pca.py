#!/usr/bin/env python
"""Genotype PCA: daskstraggle vs plink2 --pca vs sgkit-style dask-ml SVDs, same calls.

Issue 14, parts 5 and 6. For each size (variants x samples) read from
``pipelines/genotype_pca.toml``:

1. **Same calls for every tool.** msprime simulates an island model as daskstraggle's
   ``datasets make genotypes`` recipe does (``daskstraggle.data.datasets._simulate``);
   tskit writes the VCF (alleles renamed A/T: plink reads an allele "0" as missing),
   bgzip + tabix (a plain VCF without those binaries); bio2zarr's ``vcf2zarr convert``
   makes the VCF Zarr store that ours and dask-ml read, ``plink2 --vcf ... --make-pgen``
   the pgen that plink2 reads, ``plink2 --pfile ... --make-bed`` the PLINK 1 .bed that the
   ``.bed`` rows of ours read (A1 = ALT). Each step is timed once (the conversions are not
   part of any tool's time).
2. **Exact reference.** The Patterson-scaled matrix Z (per variant: dosage centred at its
   mean, missing calls filled with the mean, divided by ``sqrt(p (1 - p))``,
   ``p = mean / 2``; daskstraggle's convention, ``daskstraggle/data/sources.py``) is
   built in numpy from ``call_genotype`` independently of the library; the eigenvectors
   of ``Z^T Z`` (samples x samples, accumulated chunk by chunk, ``numpy.linalg.eigh``)
   are the exact right singular vectors of Z, its eigenvalues the squared singular values.
3. **Tools**, each one command run as a user would (a fresh process that reads its own
   input from disk), timed from launch to exit, with the RSS of every process of its
   tree sampled by psutil (and ``/usr/bin/time -v``'s max RSS for single-process ones):
   plink2 ``--pca 10`` (exact) and ``--pca approx 10`` on the pgen; dask-ml
   ``TruncatedSVD`` (tsqr and randomized, sgkit's ``pca``) on the Patterson-scaled dask
   array of the VCF Zarr on a 2-worker LocalCluster; ours, ``daskstraggle pca <vcz> -k 10``
   with the methods and runtimes of the spec (local runtime, a 2-worker LocalCluster, one
   worker throttled 4x). One untimed run of each on a small dataset first; then
   ``repeats`` interleaved rounds (the order rotated), medians reported.
4. **Accuracy**: per component ``|cos|`` between the tool's sample vector and the exact
   one; a component is correct at ``|cos| >= 0.9999``. **Agreement with plink2**: the
   ratio of each tool's eigenvalues to plink2's ``.eigenval`` and the ``|cos|`` between
   eigenvectors. plink2's eigenvalues are those of its variance-standardised relationship
   matrix ``Z_p^T Z_p / M`` with ``Z_p = (x - 2p) / sqrt(2p(1-p))`` = ``Z / sqrt(2)``, so
   ``s^2 = 2 M plink_eigenval`` and ours (``explained_variance = s^2 / (M - 1)``) is
   ``2 M / (M - 1)`` times plink2's: checked numerically.
5. **Scale** (part 6): a synthetic VCF Zarr store of ``n_variants x n_samples`` written
   chunk by chunk (Balding-Nichols populations; bounded memory), ``daskstraggle pca``
   (default method) on a 2-worker LocalCluster: wall time and peak RSS per worker against
   its share of the int8 dosages (target <= 1.5x).
6. **Through plink2** (with a plink2 binary): ``score`` passes our ``.eigenvec.allele`` to
   ``plink2 --score``; ``qc``, ``ld`` and ``king`` compare the variants or samples our
   ``GenotypeQC`` keeps with plink2's ``--hwe``/``--maf``/``--snps-only``,
   ``--indep-pairwise`` (both ``--indep-order`` modes when the binary has them) and
   ``--king-cutoff`` on the same ``.bed``.

Usage::

    python pipelines/genotype_pca.py                       # 10^4 and 10^5 x 10^3, 3 repeats
    python pipelines/genotype_pca.py --quick               # smoke run, < 1 minute
    python pipelines/genotype_pca.py --sizes 1000000x1000 --repeats 1 --sections tools
    python pipelines/genotype_pca.py --sections scale --scale-variants 10000000
    python pipelines/genotype_pca.py --plink2 /opt/plink2   # another binary ('' or a
                                                            # missing path: no plink2 rows)

Results (every run, medians, accuracies, eigenvalue ratios, machine, versions, load) go to
``results/genotype_pca/<UTC timestamp>.json``; the datasets are cached under
``results/genotype_pca/data`` (``--workdir``).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _process_tree import check_ok, run_command  # this folder

REPO = Path(__file__).resolve().parents[1]
SPEC = Path(__file__).with_suffix(".toml")
SECTIONS = ("tools", "scale", "score", "qc", "ld", "king")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def settings(spec: dict[str, Any], quick: bool) -> dict[str, Any]:
    """The spec flattened into one dict (``[quick]`` overrides with --quick)."""
    cfg: dict[str, Any] = {
        **spec["data"], **spec["accuracy"], **spec["run"],
        "plink2_threads": spec["plink2"]["threads"],
        "plink2_tools": dict(spec["plink2"]["tools"]),
        "dask_ml_workers": spec["dask_ml"]["workers"],
        "dask_ml_tools": dict(spec["dask_ml"]["tools"]),
        "ours_tools": dict(spec["ours"]["tools"]),
        "ours_inputs": dict(spec["ours"].get("inputs", {})),
        "scale": dict(spec["scale"]),
        "warmup": True,
    }
    if quick:
        q = spec["quick"]
        cfg["sizes"] = q["sizes"]
        cfg["repeats"] = q["repeats"]
        cfg["warmup"] = q["warmup"]
        cfg["dask_ml_tools"] = {k: cfg["dask_ml_tools"][k] for k in q["dask_ml_tools"]}
        cfg["ours_tools"] = {k: cfg["ours_tools"][k] for k in q["ours_tools"]}
        cfg["scale"].update(q["scale"])
    return cfg


def parse_size(text: str) -> list[int]:
    """``"100000x1000"`` -> ``[100000, 1000]``."""
    variants, samples = text.lower().split("x")
    return [int(variants), int(samples)]


def size_name(size: list[int]) -> str:
    return f"{size[0]}x{size[1]}"


# ================================================================================ data
def simulate_to_vcf(size: list[int], cfg: dict[str, Any], vcf: Path) -> dict[str, Any]:
    """msprime (daskstraggle's island model) -> tskit VCF -> bgzip -> tabix; timed."""
    import tskit

    from daskstraggle.data.datasets import _simulate

    params = {"n_variants": size[0], "n_samples": size[1],
              "n_populations": cfg["n_populations"],
              "migration_rate": cfg["migration_rate"], "ploidy": 2}
    root = np.random.SeedSequence(cfg["seed"])
    t0 = time.perf_counter()
    ts, info = _simulate(params, np.random.default_rng(root.spawn(1)[0]))
    t_sim = time.perf_counter() - t0
    # binary mutations are "0"/"1"; plink reads allele "0" as missing, so rename to A/T
    tables = ts.dump_tables()
    tables.sites.packset_ancestral_state(["A"] * tables.sites.num_rows)
    states = tskit.unpack_strings(tables.mutations.derived_state,
                                  tables.mutations.derived_state_offset)
    tables.mutations.packset_derived_state(["A" if s == "0" else "T" for s in states])
    ts = tables.tree_sequence()
    t0 = time.perf_counter()
    if shutil.which("bgzip") and shutil.which("tabix"):  # streamed, no uncompressed copy
        tmp = vcf.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            bgzip = subprocess.Popen(["bgzip", "-c"], stdin=subprocess.PIPE, stdout=f,
                                     text=True)
            assert bgzip.stdin is not None
            ts.write_vcf(bgzip.stdin, contig_id="1")
            bgzip.stdin.close()
            if bgzip.wait() != 0:
                raise RuntimeError("bgzip failed")
        tmp.replace(vcf)
        subprocess.run(["tabix", "-f", "-p", "vcf", str(vcf)], check=True)
    else:  # plain VCF: plink2 and vcf2zarr read it too (vcf2zarr in one partition)
        vcf = vcf.with_suffix("")  # calls.vcf
        with open(vcf, "w") as f:
            ts.write_vcf(f, contig_id="1")
    t_vcf = time.perf_counter() - t0
    return {"simulate_s": t_sim, "write_vcf_bgzip_tabix_s": t_vcf, "simulation": info,
            "path": str(vcf),
            "n_sites": int(ts.num_sites), "n_individuals": int(ts.num_individuals),
            "vcf_bytes": vcf.stat().st_size}


def prepare(size: list[int], cfg: dict[str, Any], workdir: Path,
            plink2: str | None) -> dict[str, Any]:
    """Write (or reuse) the VCF, VCF Zarr, pgen and bed of one size; return paths, timings."""
    folder = workdir / f"{size_name(size)}_pop{cfg['n_populations']}_seed{cfg['seed']}"
    folder.mkdir(parents=True, exist_ok=True)
    stamp_path = folder / "prepared.json"
    stamp = json.loads(stamp_path.read_text()) if stamp_path.exists() else {}
    vcz, pgen = folder / "calls.vcz", folder / "calls"
    if "vcf_step" not in stamp:
        log(f"{size_name(size)}: simulating (msprime) and writing the VCF")
        stamp["vcf_step"] = simulate_to_vcf(size, cfg, folder / "calls.vcf.gz")
        stamp.pop("vcz_step", None), stamp.pop("pgen_step", None), stamp.pop("bed_step", None)
        stamp_path.write_text(json.dumps(stamp, indent=1))
    vcf = Path(stamp["vcf_step"].get("path", folder / "calls.vcf.gz"))  # or calls.vcf
    if "vcz_step" not in stamp:
        log(f"{size_name(size)}: vcf2zarr convert")
        shutil.rmtree(vcz, ignore_errors=True)
        vcf2zarr = Path(sys.executable).with_name("vcf2zarr")
        cmd = [str(vcf2zarr) if vcf2zarr.exists() else "vcf2zarr", "convert", "-Q",
               "-l", str(min(cfg["chunk_rows"], size[0])), "-p",
               "2" if size[0] * size[1] >= 10**7 else "0", str(vcf), str(vcz)]
        run = run_command(cmd, cfg=cfg)
        check_ok(run, "vcf2zarr convert")
        stamp["vcz_step"] = {"vcf2zarr_s": run["wall_s"], "peak_mb": run["memory"]}
        stamp_path.write_text(json.dumps(stamp, indent=1))
    if plink2 is not None and "pgen_step" not in stamp:
        log(f"{size_name(size)}: plink2 --make-pgen")
        run = run_command([plink2, "--vcf", str(vcf), "--make-pgen", "--threads",
                           str(cfg["plink2_threads"]), "--out", str(pgen)], cfg=cfg)
        check_ok(run, "plink2 --make-pgen")
        stamp["pgen_step"] = {"make_pgen_s": run["wall_s"]}
        stamp.pop("bed_step", None)
        stamp_path.write_text(json.dumps(stamp, indent=1))
    if plink2 is not None and "bed_step" not in stamp:
        log(f"{size_name(size)}: plink2 --make-bed")
        run = run_command([plink2, "--pfile", str(pgen), "--make-bed", "--threads",
                           str(cfg["plink2_threads"]), "--out", str(pgen)], cfg=cfg)
        check_ok(run, "plink2 --make-bed")
        stamp["bed_step"] = {"make_bed_s": run["wall_s"]}
        stamp_path.write_text(json.dumps(stamp, indent=1))
    return {"folder": str(folder), "vcf": str(vcf), "vcz": str(vcz), "pgen": str(pgen),
            "bed": f"{pgen}.bed", **stamp}


def reference(vcz: str, k: int) -> dict[str, Any]:
    """Exact top-k right singular vectors and squared singular values of the Patterson Z.

    Written in numpy from ``call_genotype`` (not through daskstraggle): dosage = number of
    non-reference alleles, missing calls (any allele < 0) take the variant's mean dosage,
    ``Z = (x - mean) / sqrt(p (1 - p))`` with ``p = mean / ploidy``, rows with p in {0, 1}
    dropped. ``Z^T Z`` is summed chunk by chunk and diagonalised (``eigh``).
    """
    import zarr

    calls_arr = zarr.open_group(vcz, mode="r")["call_genotype"]
    n_variants, n_samples, ploidy = calls_arr.shape
    step = max(1, int(2e8 // (8 * n_samples)))  # ~200 MB of float64 per block
    gram = np.zeros((n_samples, n_samples))
    monomorphic = 0
    sample_ids = zarr.open_group(vcz, mode="r")["sample_id"][:]
    t0 = time.perf_counter()
    for a in range(0, n_variants, step):
        calls = calls_arr[a:a + step]
        missing = (calls < 0).any(axis=2)
        x = (calls > 0).sum(axis=2).astype(np.float64)
        counted = (~missing).sum(axis=1)
        mean = np.where(missing, 0.0, x).sum(axis=1) / np.maximum(counted, 1)
        x = np.where(missing, mean[:, None], x)
        p = mean / ploidy
        var = p * (1 - p)
        keep = var > 1e-12
        monomorphic += int((~keep).sum())
        z = (x[keep] - mean[keep, None]) / np.sqrt(var[keep])[:, None]
        gram += z.T @ z
    eigvals, eigvecs = np.linalg.eigh(gram)
    order = np.argsort(eigvals)[::-1][: k + 1]
    return {"s2": eigvals[order[:k]], "vectors": eigvecs[:, order[:k]].T,
            "s2_next": float(eigvals[order[k]]), "n_variants": int(n_variants),
            "n_samples": int(n_samples), "monomorphic": monomorphic,
            "sample_ids": [str(s) for s in sample_ids], "seconds": time.perf_counter() - t0}


def cosines(vectors: np.ndarray, ref: np.ndarray) -> list[float]:
    """``|cos|`` between row i of ``vectors`` and row i of ``ref``."""
    k = min(len(vectors), len(ref))
    a, b = np.asarray(vectors[:k], dtype=np.float64), ref[:k]
    num = np.abs(np.sum(a * b, axis=1))
    den = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return (num / np.where(den > 0, den, 1.0)).tolist()


# ================================================================================ tools
def ours_methods() -> set[str]:
    """The --method values ``daskstraggle pca --help`` lists."""
    out = subprocess.run([sys.executable, "-m", "daskstraggle.cli", "pca", "--help"],
                         capture_output=True, text=True, check=True).stdout
    start = out.find("--method TEXT")
    end = out.find("\n  -", start)  # the next option (the help itself names --wait)
    segment = " ".join(out[start:end].split())
    for mark in ",;().":
        segment = segment.replace(mark, " ")
    known = ("auto", "gd", "nag", "sgd", "sag", "dsag", "coded", "gram", "partial", "async",
             "ignore-stragglers", "block", "krylov", "lanczos")
    return {m for m in known if f" {m} " in f" {segment} "}


def method_of(args: list[str]) -> str:
    return args[args.index("--method") + 1] if "--method" in args else "auto"


def run_ours(name: str, args: list[str], data: dict[str, Any], cfg: dict[str, Any],
             tmp: Path) -> dict[str, Any]:
    import xarray as xr

    out = tmp / "ours.zarr"
    shutil.rmtree(out, ignore_errors=True)
    # one process (GNU time's max RSS applies) unless the command starts a LocalCluster
    local = "--workers" not in args and "dask" not in args
    source = data[cfg["ours_inputs"].get(name, "vcz")]  # "bed": the .bed of plink2
    cmd = [sys.executable, "-m", "daskstraggle.cli", "pca", source,
           "-k", str(cfg["components"]), *args, "--json", "--quiet", "--out", str(out)]
    run = run_command(cmd, cfg=cfg, gnu_time=local)
    check_ok(run, name)
    summary = json.loads(run["stdout"].strip().splitlines()[-1])
    ds = xr.open_zarr(str(out), consolidated=False)
    run["components"] = ds["components"].values
    run["sample_ids"] = [str(s) for s in ds["samples"].values]
    run["inner_s"] = summary["wall_time_s"]
    run["eigenvalues"] = np.asarray(summary["explained_variance"])  # s^2 / (M - 1)
    run["s2_from_tool"] = run["eigenvalues"] * (data["reference"]["n_variants"] - 1)
    run["summary"] = {k: summary.get(k) for k in ("method", "n_iter", "converged",
                                                  "stop_reason", "optimality")}
    shutil.rmtree(out, ignore_errors=True)
    return run


def run_plink2(name: str, params: dict[str, Any], data: dict[str, Any], cfg: dict[str, Any],
               tmp: Path, plink2: str) -> dict[str, Any]:
    prefix = tmp / "plink_pca"
    cmd = [plink2, "--pfile", data["pgen"], "--pca", *params["modifiers"],
           str(cfg["components"]), "--threads", str(cfg["plink2_threads"]), "--out",
           str(prefix)]
    env = None
    if params["library_path"]:  # e.g. Debian's plink2 with OpenBLAS instead of netlib BLAS
        env = {**os.environ, "LD_LIBRARY_PATH": params["library_path"]}
    run = run_command(cmd, cfg=cfg, gnu_time=True, env=env)
    run["library_path"] = params["library_path"]
    check_ok(run, name)
    rows = [line.split() for line in Path(f"{prefix}.eigenvec").read_text().splitlines()]
    k = cfg["components"]
    run["sample_ids"] = [r[-k - 1] for r in rows[1:]]  # IID is the column before PC1
    run["components"] = np.array([[float(v) for v in r[-k:]] for r in rows[1:]]).T
    run["eigenvalues"] = np.array([float(v) for v in
                                   Path(f"{prefix}.eigenval").read_text().split()])
    run["s2_from_tool"] = run["eigenvalues"] * 2 * data["reference"]["n_variants"]
    run["inner_s"] = None
    log_text = Path(f"{prefix}.log").read_text() if Path(f"{prefix}.log").exists() else ""
    run["plink_log"] = [ln for ln in log_text.splitlines()
                        if "thread" in ln or "MiB" in ln or "MB" in ln][:4]
    return run


def run_score_check(size: list[int], cfg: dict[str, Any], workdir: Path,
                    plink2: str) -> dict[str, Any]:
    """plink2 ``--score`` with our ``.eigenvec.allele`` against ``PCA.transform``.

    Our PCA of plink2's ``.bed`` (gram, exact), written with ``Result.to_plink``; plink2
    scores the same samples with ``--read-freq PREFIX.afreq --score PREFIX.eigenvec.allele
    2 5 header-read no-mean-imputation variance-standardize cols=+scoresums`` (our file keeps
    the .bim's variant ids, unique here); its ``PC*_SUM`` columns must equal
    ``PCA(k).fit(bed).transform(bed)`` to plink2's printed precision (6 significant digits).
    """
    import tempfile

    import daskstraggle as ds

    data = prepare(size, cfg, workdir, plink2)
    k = cfg["components"]
    with tempfile.TemporaryDirectory() as tmp:
        matrix = ds.open_matrix(data["bed"])
        result = ds.fit_pca(matrix, k, method="gram", runtime="local", rng=0)
        paths = result.to_plink(Path(tmp) / "ours", matrix)
        transformed = ds.PCA(k, method="gram", runtime="local", random_state=0).fit(
            data["bed"]).transform(data["bed"])
        cmd = [plink2, "--bfile", data["pgen"], "--read-freq", str(paths[3]),
               "--score", str(paths[2]), "2", "5", "header-read", "no-mean-imputation",
               "variance-standardize", "cols=+scoresums", "--score-col-nums", f"6-{5 + k}",
               "--threads", str(cfg["plink2_threads"]), "--out", str(Path(tmp) / "score")]
        run = run_command(cmd, cfg=cfg)
        check_ok(run, "plink2 --score")
        rows = [line.split() for line in (Path(tmp) / "score.sscore").read_text().splitlines()]
    header = rows[0]
    sums = np.array([[float(r[header.index(f"PC{i + 1}_SUM")]) for i in range(k)]
                     for r in rows[1:]])
    diff = np.abs(sums - transformed)
    largest = float(np.abs(transformed).max())
    per_value = diff / np.maximum(np.abs(transformed), 1e-3 * largest)
    return {"size": size_name(size), "components": k, "samples": int(sums.shape[0]),
            "max_abs_diff": float(diff.max()), "max_diff_over_largest": float(diff.max()
                                                                             / largest),
            "max_relative_diff": float(per_value.max()),
            "ok": bool(per_value.max() <= 1e-5),  # 6 printed digits: <= 5e-6 each
            "command": " ".join([*cmd[:2], "PREFIX", *cmd[3:]])}


#: Quality-control steps compared with plink2's on the same .bed: (ours, plink2's flags).
QC_CASES = (
    ({"hwe": 1e-2}, ["--hwe", "1e-2"]),
    ({"hwe": 1e-4}, ["--hwe", "1e-4"]),
    ({"hwe": 1e-6}, ["--hwe", "1e-6"]),
    ({"min_maf": 0.05}, ["--maf", "0.05"]),
    ({"snps_only": True, "max_alleles": 2}, ["--snps-only", "--max-alleles", "2"]),
    ({"hwe": 1e-4, "min_maf": 0.01}, ["--hwe", "1e-4", "--maf", "0.01"]),
)


def run_qc_check(size: list[int], cfg: dict[str, Any], workdir: Path,
                 plink2: str) -> list[dict[str, Any]]:
    """Our quality control's kept variants against plink2's on the same .bed.

    For each case of :data:`QC_CASES`: ``open_matrix(bed, qc=...)``'s kept variants (by the
    .bim's ids) against ``plink2 --bfile ... FLAGS --write-snplist``'s.
    """
    import tempfile

    import daskstraggle as ds

    data = prepare(size, cfg, workdir, plink2)
    ids = np.array([line.split()[1] for line in
                    Path(data["pgen"] + ".bim").read_text().splitlines()])
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for ours, flags in QC_CASES:
            out = Path(tmp) / "kept"
            cmd = [plink2, "--bfile", data["pgen"], *flags, "--write-snplist", "--threads",
                   str(cfg["plink2_threads"]), "--out", str(out)]
            run = run_command(cmd, cfg=cfg)
            check_ok(run, "plink2 --write-snplist")
            theirs = set(Path(f"{out}.snplist").read_text().split())
            kept = set(ids[ds.open_matrix(data["bed"], qc=ours).attrs["qc"].kept])
            rows.append({"ours": ours, "plink2": " ".join(flags), "n_variants": len(ids),
                         "kept_ours": len(kept), "kept_plink2": len(theirs),
                         "differ": len(kept ^ theirs)})
    return rows


#: LD pruning cases: our ``ld_prune`` (plink2's --indep-pairwise WINDOW STEP R2), after the
#: QC flags that come with it.
LD_CASES = (
    ({}, "50 5 0.2"),
    ({}, "50 1 0.5"),
    ({}, "200 10 0.1"),
    ({"min_maf": 0.05}, "50 5 0.2"),
    ({"hwe": 1e-6, "min_maf": 0.01}, "100 20 0.1"),
)


def _indep_orders(plink2: str) -> list[int]:
    """The --indep-order modes this plink2 has (alpha 5 on: 1 and 2; before: 1 only)."""
    text = subprocess.run([plink2, "--help", "indep-order"], capture_output=True,
                          text=True).stdout
    return [1, 2] if "--indep-order" in text else [1]


def run_ld_check(size: list[int], cfg: dict[str, Any], workdir: Path,
                 plink2: str) -> list[dict[str, Any]]:
    """Our LD pruning's kept variants and time against plink2 --indep-pairwise's.

    For each case of :data:`LD_CASES` and each scan order the binary has: plink2's
    ``.prune.in`` (after its QC flags) against ``open_matrix(bed, qc=...)``'s kept
    variants, both timed from the call (ours in this process, plink2 as a command).
    """
    import daskstraggle as ds

    flag = {"min_maf": "--maf", "hwe": "--hwe"}
    data = prepare(size, cfg, workdir, plink2)
    ids = np.array([line.split()[1] for line in
                    Path(data["pgen"] + ".bim").read_text().splitlines()])
    orders = _indep_orders(plink2)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for qc, case in LD_CASES:
            for order in orders:
                out = Path(tmp) / "ld"
                flags = [x for k, v in qc.items() for x in (flag[k], str(v))]
                extra = ["--indep-order", str(order)] if len(orders) == 2 else []
                cmd = [plink2, "--bfile", data["pgen"], *flags, "--indep-pairwise",
                       *case.split(), *extra, "--threads", str(cfg["plink2_threads"]),
                       "--out", str(out)]
                run = run_command(cmd, cfg=cfg)
                check_ok(run, "plink2 --indep-pairwise")
                theirs = set(Path(f"{out}.prune.in").read_text().split())
                t0 = time.perf_counter()
                matrix = ds.open_matrix(data["bed"], qc={
                    **qc, "ld_prune": case.replace(" ", ",") + f",order={order}"})
                ours_s = time.perf_counter() - t0
                kept = set(ids[matrix.attrs["qc"].kept])
                rows.append({"qc": qc, "indep_pairwise": case, "order": order,
                             "n_variants": len(ids), "kept_ours": len(kept),
                             "kept_plink2": len(theirs), "differ": len(kept ^ theirs),
                             "ours_s": ours_s, "plink2_s": run["wall_s"]})
    return rows


KING_CUTOFFS = (0.0884, 0.177, 0.354)


def run_king_check(size: list[int], cfg: dict[str, Any], workdir: Path,
                   plink2: str) -> list[dict[str, Any]]:
    """Our ``king_cutoff``'s kept samples and time against plink2 --king-cutoff's."""
    import daskstraggle as ds

    data = prepare(size, cfg, workdir, plink2)
    ids = np.array([line.split()[1] for line in
                    Path(data["pgen"] + ".fam").read_text().splitlines()])
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for cutoff in KING_CUTOFFS:
            out = Path(tmp) / "king"
            run = run_command([plink2, "--bfile", data["pgen"], "--king-cutoff", str(cutoff),
                               "--threads", str(cfg["plink2_threads"]), "--out", str(out)],
                              cfg=cfg)
            check_ok(run, "plink2 --king-cutoff")
            lines = Path(f"{out}.king.cutoff.in.id").read_text().splitlines()
            theirs = {line.split()[-1] for line in lines if not line.startswith("#")}
            t0 = time.perf_counter()
            matrix = ds.open_matrix(data["bed"], qc={"king_cutoff": cutoff})
            ours_s = time.perf_counter() - t0
            kept = set(ids[matrix.attrs["qc"].samples_kept])
            rows.append({"king_cutoff": cutoff, "n_samples": len(ids),
                         "kept_ours": len(kept), "kept_plink2": len(theirs),
                         "differ": len(kept ^ theirs), "ours_s": ours_s,
                         "plink2_s": run["wall_s"]})
    return rows


#: The set checks: the log's title, the check, and one log line per row.
_SET_CHECKS: dict[str, tuple[str, Any, Any]] = {
    "qc": ("quality control: our kept variants against plink2's", run_qc_check,
           lambda r: f"qc {r['plink2']}: ours {r['kept_ours']}, plink2 {r['kept_plink2']}, "
                     f"{r['differ']} differ"),
    "ld": ("LD pruning: our kept variants against plink2 --indep-pairwise's", run_ld_check,
           lambda r: f"ld {r['qc']} {r['indep_pairwise']} order {r['order']}: ours "
                     f"{r['kept_ours']} ({r['ours_s']:.2f} s), plink2 {r['kept_plink2']} "
                     f"({r['plink2_s']:.2f} s), {r['differ']} differ"),
    "king": ("kinship: our --king-cutoff samples against plink2's", run_king_check,
             lambda r: f"king {r['king_cutoff']}: ours {r['kept_ours']} ({r['ours_s']:.2f} "
                       f"s), plink2 {r['kept_plink2']} ({r['plink2_s']:.2f} s), "
                       f"{r['differ']} differ"),
}


def run_plink2_checks(sections: list[str], cfg: dict[str, Any], workdir: Path,
                      plink2: str) -> dict[str, Any]:
    """The ``score``, ``qc``, ``ld`` and ``king`` sections: our files and filters through
    the real plink2."""
    out: dict[str, Any] = {}
    if "score" in sections:
        log("plink2 --score with our .eigenvec.allele against PCA.transform")
        out["score"] = run_score_check(cfg["sizes"][0], cfg, workdir, plink2)
        log(f"score: max relative difference {out['score']['max_relative_diff']:.2g} "
            f"({'ok' if out['score']['ok'] else 'NOT OK'})")
    for section in ("qc", "ld", "king"):
        if section in sections:
            title, check, line = _SET_CHECKS[section]
            log(title)
            out[section] = check(cfg["sizes"][0], cfg, workdir, plink2)
            for row in out[section]:
                log(line(row))
    return out


def run_dask_ml(name: str, params: dict[str, Any], data: dict[str, Any], cfg: dict[str, Any],
                tmp: Path) -> dict[str, Any]:
    out = tmp / "dask_ml.npz"
    job = {"vcz": data["vcz"], "k": cfg["components"], "workers": cfg["dask_ml_workers"],
           "out": str(out), **params}
    run = run_command([sys.executable, str(Path(__file__).resolve()), "--child-dask-ml",
                       json.dumps(job)], cfg=cfg)
    check_ok(run, name)
    with np.load(out) as z:
        run["components"] = z["components"]
        run["s2_from_tool"] = z["singular_values"] ** 2
        run["inner_s"] = float(z["fit_s"])
        run["cluster_start_s"] = float(z["cluster_s"])
    run["eigenvalues"] = run["s2_from_tool"]
    run["sample_ids"] = data["reference"]["sample_ids"]
    out.unlink()
    return run


def child_dask_ml(job: dict[str, Any]) -> None:
    """sgkit's pca in a fresh process: Patterson-scaled dask array -> TruncatedSVD."""
    import logging

    import dask.array as da
    from dask_ml.decomposition import TruncatedSVD
    from distributed import Client, LocalCluster

    logging.getLogger("distributed").setLevel(logging.ERROR)
    t0 = time.perf_counter()
    cluster = LocalCluster(n_workers=job["workers"], threads_per_worker=1,
                           dashboard_address=None)
    client = Client(cluster)
    t1 = time.perf_counter()
    calls = da.from_zarr(job["vcz"], component="call_genotype")
    ploidy = calls.shape[2]
    missing = (calls < 0).any(axis=2)
    dosage = (calls > 0).sum(axis=2).astype("float64")
    counted = (~missing).sum(axis=1)
    mean = da.where(missing, 0.0, dosage).sum(axis=1) / da.maximum(counted, 1)
    dosage = da.where(missing, mean[:, None], dosage)
    p = mean / ploidy
    sd = da.sqrt(p * (1 - p))
    z = (dosage - mean[:, None]) / da.where(sd > 0, sd, 1.0)[:, None]  # variants x samples
    svd = TruncatedSVD(n_components=job["k"], algorithm=job["algorithm"],
                       n_iter=job.get("n_iter", 5), random_state=0)
    svd.fit(z)
    t2 = time.perf_counter()
    np.savez(job["out"], components=np.asarray(svd.components_),
             singular_values=np.asarray(svd.singular_values_), fit_s=t2 - t1,
             cluster_s=t1 - t0)
    client.close()
    cluster.close()


def tool_table(cfg: dict[str, Any], plink2: str | None, dask_ml: bool,
               methods: set[str]) -> tuple[dict[str, tuple[str, Any]], dict[str, str]]:
    """name -> (kind, params) of the tools to run, and name -> reason of those skipped."""
    tools: dict[str, tuple[str, Any]] = {}
    skipped: dict[str, str] = {}
    for name, mods in cfg["plink2_tools"].items():
        if plink2 is None:
            skipped[name] = "plink2 binary not found"
            continue
        if not cfg.get("plink2_blas_only"):
            tools[name] = ("plink2", {"modifiers": mods, "library_path": None})
        for lib in cfg.get("plink2_blas", []):  # the same binary with another BLAS/LAPACK
            tools[f"{name}, {Path(lib).name}"] = ("plink2", {"modifiers": mods,
                                                            "library_path": lib})
    for name, params in cfg["dask_ml_tools"].items():
        if not dask_ml:
            skipped[name] = "dask-ml is not installed"
        else:
            tools[name] = ("dask-ml", params)
    for name, args in cfg["ours_tools"].items():
        if method_of(args) not in methods:
            skipped[name] = f"--method {method_of(args)} not in `daskstraggle pca --help`"
        elif cfg["ours_inputs"].get(name) == "bed" and plink2 is None:
            skipped[name] = "plink2 binary not found (it writes the .bed)"
        else:
            tools[name] = ("ours", args)
    return tools, skipped


def run_tool(name: str, tool: tuple[str, Any], data: dict[str, Any], cfg: dict[str, Any],
             tmp: Path, plink2: str | None) -> dict[str, Any]:
    kind, params = tool
    if kind == "plink2":
        assert plink2 is not None
        return run_plink2(name, params, data, cfg, tmp, plink2)
    if kind == "dask-ml":
        return run_dask_ml(name, params, data, cfg, tmp)
    return run_ours(name, params, data, cfg, tmp)


def score(run: dict[str, Any], ref: dict[str, Any], cfg: dict[str, Any]) -> dict[str, Any]:
    """Accuracy of one run against the exact reference (sample order checked)."""
    comps = np.asarray(run["components"], dtype=np.float64)
    if run["sample_ids"] != ref["sample_ids"]:
        index = {s: i for i, s in enumerate(run["sample_ids"])}
        comps = comps[:, [index[s] for s in ref["sample_ids"]]]
    cos = cosines(comps, ref["vectors"])
    s2 = np.asarray(run["s2_from_tool"], dtype=np.float64)
    rel = np.abs(s2[: len(ref["s2"])] / ref["s2"] - 1.0)
    return {"cosines": cos, "n_correct": int(sum(c >= cfg["min_cosine"] for c in cos)),
            "n_leading_correct": next((i for i, c in enumerate(cos) if c < cfg["min_cosine"]),
                                      len(cos)),
            "min_cosine": float(min(cos)), "s2_max_rel_error": float(rel.max()),
            "components_aligned": comps}


def run_size(size: list[int], cfg: dict[str, Any], workdir: Path, plink2: str | None,
             tools: dict[str, tuple[str, Any]], *, warmup: dict[str, Any] | None
             ) -> dict[str, Any]:
    data = prepare(size, cfg, workdir, plink2)
    log(f"{size_name(size)}: exact reference (numpy eigh of Z^T Z)")
    ref = reference(data["vcz"], cfg["components"])
    data["reference"] = ref
    m = ref["n_variants"]
    block: dict[str, Any] = {
        "size": size, "prepare": {k: v for k, v in data.items() if k != "reference"},
        "reference": {"s2": ref["s2"].tolist(), "s2_next": ref["s2_next"],
                      "seconds": ref["seconds"], "monomorphic": ref["monomorphic"],
                      "eigengap_k": float(ref["s2"][-1] / ref["s2_next"])},
        "runs": {name: [] for name in tools},
        "load_avg_start": list(os.getloadavg()),
    }
    with tempfile.TemporaryDirectory(prefix="genotype_pca-") as tmp_name:
        tmp = Path(tmp_name)
        if warmup is not None:
            log("warm-up: one untimed run of every tool on the warm-up size")
            for name, tool in tools.items():
                run_tool(name, tool, warmup, cfg, tmp, plink2)
        names = list(tools)
        for r in range(cfg["repeats"]):
            shift = r % max(len(names), 1)
            order = names[shift:] + names[:shift]
            for name in order:
                load = os.getloadavg()[0]
                run = run_tool(name, tools[name], data, cfg, tmp, plink2)
                acc = score(run, ref, cfg)
                run["load_1min_before"] = load
                run.update({k: v for k, v in acc.items() if k != "components_aligned"})
                run["components_aligned"] = acc["components_aligned"]
                log(f"{size_name(size)} r{r} {name}: {run['wall_s']:.2f} s, "
                    f"{acc['n_correct']}/{cfg['components']} components >= "
                    f"{cfg['min_cosine']}, min |cos| {acc['min_cosine']:.6f}, load {load:.2f}")
                block["runs"][name].append(run)
    block["load_avg_end"] = list(os.getloadavg())
    block["median"] = {name: medians(runs) for name, runs in block["runs"].items()}
    block["vs_plink2"] = versus_plink2(block, m, cfg)
    for runs in block["runs"].values():
        for run in runs:  # arrays out of the JSON (kept: cosines, eigenvalues)
            run.pop("components", None), run.pop("components_aligned", None)
            run["eigenvalues"] = np.asarray(run["eigenvalues"]).tolist()
            run["s2_from_tool"] = np.asarray(run["s2_from_tool"]).tolist()
            run.pop("sample_ids", None)
    return block


def medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    def med(key: str, getter: Any = None) -> float | None:
        vals = [getter(r) if getter else r.get(key) for r in runs]
        vals = [v for v in vals if v is not None]
        return statistics.median(vals) if vals else None

    walls = [r["wall_s"] for r in runs]
    return {
        "repeats": len(runs), "wall_s": statistics.median(walls),
        "wall_min_s": min(walls), "wall_max_s": max(walls),
        "inner_s": med("inner_s"),
        "n_correct": min(r["n_correct"] for r in runs),
        "n_correct_max": max(r["n_correct"] for r in runs),
        "min_cosine": min(r["min_cosine"] for r in runs),
        "main_mb": med("", lambda r: r["memory"]["main_mb"]),
        "worker_max_mb": med("", lambda r: r["memory"]["worker_max_mb"]),
        "time_max_rss_mb": med("", lambda r: r["memory"].get("time_max_rss_mb")),
        "s2_max_rel_error": max(r["s2_max_rel_error"] for r in runs),
        "load_1min": med("load_1min_before"),
    }


def versus_plink2(block: dict[str, Any], m: int, cfg: dict[str, Any]) -> dict[str, Any]:
    """Eigenvalue ratios and eigenvector |cos| of every tool against plink2 --pca (exact)."""
    exact = [n for n in block["runs"] if n.startswith("plink2 exact") and block["runs"][n]]
    if not exact:
        return {"skipped": "no plink2 exact run"}
    plink = block["runs"][exact[0]][-1]
    out: dict[str, Any] = {"plink2_run": exact[0],
                           "predicted_ours_over_plink": 2 * m / (m - 1),
                           "predicted_s2_over_plink": 2 * m,
                           "reference_s2_over_plink": (np.asarray(block["reference"]["s2"])
                                                       / plink["eigenvalues"]).tolist(),
                           "tools": {}}
    for name, tool_runs in block["runs"].items():
        run = tool_runs[-1]
        ratio = np.asarray(run["eigenvalues"]) / plink["eigenvalues"]
        s2_ratio = np.asarray(run["s2_from_tool"]) / plink["eigenvalues"]
        cos = cosines(run["components_aligned"], plink["components_aligned"])
        out["tools"][name] = {"eigenvalue_ratio": ratio.tolist(),
                              "s2_over_plink": s2_ratio.tolist(),
                              "cosine_with_plink2": cos}
    return out


# ================================================================================ scale
def write_synthetic(path: Path, cfg: dict[str, Any]) -> dict[str, Any]:
    """A VCF Zarr-like store (call_genotype, sample_id) written chunk by chunk.

    Balding-Nichols: ancestral frequency ``p ~ U(0.05, 0.5)`` per variant, population
    frequencies ``Beta(p (1 - F) / F, (1 - p) (1 - F) / F)``, haplotypes Bernoulli; each
    chunk has its own generator spawned from the seed. Only one chunk is in memory.
    """
    import numcodecs
    import zarr

    n, s, c = cfg["n_variants"], cfg["n_samples"], cfg["chunk_rows"]
    pops = np.arange(s) % cfg["n_populations"]
    f = cfg["fst"]
    shutil.rmtree(path, ignore_errors=True)
    group = zarr.open_group(str(path), mode="w", zarr_format=2)
    compressor = numcodecs.Blosc(cname="zstd", clevel=1, shuffle=numcodecs.Blosc.BITSHUFFLE)
    gt = group.create_array("call_genotype", shape=(n, s, 2), chunks=(c, s, 2), dtype="i1",
                            compressors=compressor)
    gt.attrs["_ARRAY_DIMENSIONS"] = ["variants", "samples", "ploidy"]
    ids = group.create_array("sample_id", data=np.array([f"s{i}" for i in range(s)],
                                                        dtype=np.dtypes.StringDType()))
    ids.attrs["_ARRAY_DIMENSIONS"] = ["samples"]
    seqs = np.random.SeedSequence(cfg["seed"]).spawn(math.ceil(n / c))
    t0 = time.perf_counter()
    for j, a in enumerate(range(0, n, c)):
        rows = min(c, n - a)
        rng = np.random.default_rng(seqs[j])
        p = rng.uniform(0.05, 0.5, size=rows)
        alpha, beta = p * (1 - f) / f, (1 - p) * (1 - f) / f
        pk = rng.beta(alpha[:, None], beta[:, None], size=(rows, cfg["n_populations"]))
        threshold = np.round(pk * 256).clip(0, 256)[:, pops]  # (rows, samples)
        draws = rng.integers(0, 256, size=(rows, s, 2), dtype=np.uint8)
        gt[a:a + rows] = (draws < threshold[:, :, None]).astype(np.int8)
    stored = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return {"write_s": time.perf_counter() - t0, "stored_bytes": stored,
            "int8_dosage_bytes": n * s, "call_genotype_bytes": 2 * n * s}


def run_scale(cfg: dict[str, Any], workdir: Path, methods: set[str]) -> dict[str, Any]:
    sc = cfg["scale"]
    path = workdir / f"synthetic_{sc['n_variants']}x{sc['n_samples']}_seed{sc['seed']}.vcz"
    free = shutil.disk_usage(workdir).free
    need = sc["n_variants"] * sc["n_samples"] * 2 * 0.5  # zstd+bitshuffle: ~2 bits a call
    if free < 2 * need:
        return {"skipped": f"not enough free disk: {free / 1e9:.1f} GB free, need "
                f"~{2 * need / 1e9:.1f} GB"}
    stamp = path / "written.json"
    if stamp.exists():
        written = json.loads(stamp.read_text())
        log(f"scale: reusing {path}")
    else:
        log(f"scale: writing {sc['n_variants']} x {sc['n_samples']} to {path}")
        written = write_synthetic(path, sc)
        stamp.write_text(json.dumps(written))

    def pca(store: Path) -> tuple[list[str], dict[str, Any]]:
        cmd = [sys.executable, "-m", "daskstraggle.cli", "pca", str(store), "-k",
               str(sc["components"]), "--workers", str(sc["workers"]), "--json", "--quiet"]
        log(f"scale: {' '.join(cmd[2:])}")
        run = run_command(cmd, cfg={**cfg, "sample_interval_s": 0.2})
        check_ok(run, "scale PCA")
        return cmd, run

    # the same command on one chunk per worker: a worker's RSS without the data
    # (``baseline = false``, as --quick sets: not run)
    base_mb = None
    if sc.get("baseline", True):
        tiny = workdir / f"synthetic_baseline_{sc['n_samples']}.vcz"
        if not tiny.exists():
            write_synthetic(tiny, {**sc, "n_variants": sc["workers"] * 1000,
                                   "chunk_rows": 1000})
        _, baseline = pca(tiny)
        base_mb = baseline["memory"]["worker_max_mb"]
    load = list(os.getloadavg())
    cmd, run = pca(path)
    summary = json.loads(run["stdout"].strip().splitlines()[-1])
    share = sc["n_variants"] / sc["workers"] * sc["n_samples"]
    worker = run["memory"]["worker_max_mb"]
    return {"settings": sc, "path": str(path), "written": written, "cmd": cmd,
            "wall_s": run["wall_s"], "inner_s": summary["wall_time_s"],
            "method": summary["method"], "converged": summary["converged"],
            "memory": run["memory"], "share_mb": share / 2**20,
            "worker_over_share": worker * 2**20 / share if worker else None,
            "baseline_worker_mb": base_mb,
            "worker_minus_baseline_over_share": (
                (worker - base_mb) * 2**20 / share if worker and base_mb else None),
            "target_ratio": sc["target_ratio"], "load_avg_before": load,
            "load_avg_after": list(os.getloadavg())}


# ================================================================================ report
def fmt(x: float | None, spec: str = ".2f") -> str:
    return "-" if x is None else format(x, spec)


def report(results: dict[str, Any], cfg: dict[str, Any]) -> list[str]:
    lines = []
    k = cfg["components"]
    for name, reason in results["skipped"].items():
        lines.append(f"skipped: {name} ({reason})")
    for size, block in results["sizes"].items():
        ref = block["reference"]
        lines.append(
            f"\n({size}) PCA k={k} of the Patterson-scaled matrix; exact s^2 top "
            f"{ref['s2'][0]:.4g} .. {ref['s2'][-1]:.4g}, s2_{k}/s2_{k + 1} = "
            f"{ref['eigengap_k']:.4f}; medians of {cfg['repeats']} interleaved repeats; "
            f"load {block['load_avg_start'][0]:.2f} -> {block['load_avg_end'][0]:.2f}")
        prep = block["prepare"]
        lines.append(
            "   prepare (once, untimed by the tools): simulate "
            f"{prep['vcf_step']['simulate_s']:.1f} s, VCF+bgzip+tabix "
            f"{prep['vcf_step']['write_vcf_bgzip_tabix_s']:.1f} s, vcf2zarr "
            f"{prep['vcz_step']['vcf2zarr_s']:.1f} s"
            + (f", plink2 --make-pgen {prep['pgen_step']['make_pgen_s']:.1f} s"
               if "pgen_step" in prep else "")
            + (f", --make-bed {prep['bed_step']['make_bed_s']:.1f} s"
               if "bed_step" in prep else ""))
        header = (f"{'tool':50s} {'wall s [min-max]':>20s} {'inner s':>8s} "
                  f"{'>=' + str(cfg['min_cosine']):>9s} {'min |cos|':>10s} "
                  f"{'main MB':>8s} {'worker MB':>9s} {'s2 rel err':>10s}")
        lines.append(header)
        lines.append("-" * len(header))
        for name, med in block["median"].items():
            main = med["time_max_rss_mb"] or med["main_mb"]
            lines.append(
                f"{name:50s} {med['wall_s']:8.2f} [{med['wall_min_s']:.2f}-"
                f"{med['wall_max_s']:.2f}]".ljust(71) +
                f" {fmt(med['inner_s']):>8s} {med['n_correct']:>5d}/{k:<3d} "
                f"{med['min_cosine']:10.6f} {fmt(main, '.0f'):>8s} "
                f"{fmt(med['worker_max_mb'], '.0f'):>9s} {med['s2_max_rel_error']:10.1e}")
        vs = block["vs_plink2"]
        if "skipped" not in vs:
            lines.append(f"   vs plink2 --pca (exact): predicted ours/plink2 eigenvalue = "
                         f"2M/(M-1) = {vs['predicted_ours_over_plink']:.6f}, s^2/plink2 = 2M "
                         f"= {vs['predicted_s2_over_plink']}")
            r = np.asarray(vs["reference_s2_over_plink"])
            lines.append(f"   exact s^2 / plink2 eigenval: {r.min():.4f} .. {r.max():.4f}")
            for name, t in vs["tools"].items():
                ratio = np.asarray(t["eigenvalue_ratio"])
                lines.append(f"   {name:50s} eigenvalue ratio {ratio.min():.6f} .. "
                             f"{ratio.max():.6f}; |cos| with plink2 min "
                             f"{min(t['cosine_with_plink2']):.6f}")
    sc = results.get("scale")
    if sc and "skipped" not in sc:
        s = sc["settings"]
        lines.append(
            f"\n(scale) {s['n_variants']} x {s['n_samples']} synthetic (stored "
            f"{sc['written']['stored_bytes'] / 1e9:.2f} GB, int8 dosages "
            f"{sc['written']['int8_dosage_bytes'] / 1e9:.2f} GB), daskstraggle pca -k "
            f"{s['components']} --workers {s['workers']} (method {sc['method']}): "
            f"{sc['wall_s']:.1f} s ({sc['inner_s']:.1f} s solve); peak worker RSS "
            f"{fmt(sc['memory']['worker_max_mb'], '.0f')} MB vs share "
            f"{sc['share_mb']:.0f} MB = {fmt(sc['worker_over_share'])}x (target <= "
            f"{sc['target_ratio']}x); without a worker's baseline "
            f"{fmt(sc['baseline_worker_mb'], '.0f')} MB (same command on 1000 variants a "
            f"worker): {fmt(sc['worker_minus_baseline_over_share'])}x; write "
            f"{sc['written']['write_s']:.0f} s; load {sc['load_avg_before'][0]:.2f}")
    elif sc:
        lines.append(f"\n(scale) skipped: {sc['skipped']}")
    return lines


def _tool_versions(plink2: str | None) -> dict[str, str | None]:
    """Versions of the tools compared and of the data libraries (None: not installed)."""
    versions: dict[str, str | None] = {}
    for key, lib in (("dask_ml", "dask-ml"), ("msprime", "msprime"), ("tskit", "tskit"),
                     ("bio2zarr", "bio2zarr"), ("psutil", "psutil")):
        try:
            versions[key] = importlib.metadata.version(lib)
        except importlib.metadata.PackageNotFoundError:
            versions[key] = None
    versions["plink2"] = (subprocess.run([plink2, "--version"], capture_output=True,
                                         text=True).stdout.strip() if plink2 else None)
    return versions


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", type=Path, default=SPEC, help="experiment spec (TOML)")
    parser.add_argument("--quick", action="store_true", help="smoke run (< 1 minute)")
    parser.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    parser.add_argument("--sizes", nargs="+", type=parse_size, default=None,
                        help="sizes VARIANTSxSAMPLES (default: the spec's)")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--tools", nargs="+", default=None,
                        help="run only these tool names (default: all of the spec)")
    parser.add_argument("--plink2", default="plink2",
                        help="plink2 binary (a missing one skips the plink2 rows)")
    parser.add_argument("--plink2-blas", nargs="+", default=[], metavar="DIR",
                        help="also run plink2 with LD_LIBRARY_PATH=DIR (another BLAS/LAPACK, "
                        "e.g. /usr/lib/x86_64-linux-gnu/openblas-pthread)")
    parser.add_argument("--plink2-blas-only", action="store_true",
                        help="with --plink2-blas: skip plink2 with its default libraries")
    parser.add_argument("--no-warmup", action="store_true")
    parser.add_argument("--scale-variants", type=int, default=None)
    parser.add_argument("--workdir", type=Path, default=None,
                        help="dataset cache (default results/genotype_pca/data)")
    parser.add_argument("--out", type=Path, default=None, help="JSON file to write")
    parser.add_argument("--child-dask-ml", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child_dask_ml is not None:
        child_dask_ml(json.loads(args.child_dask_ml))
        return {}
    spec = tomllib.loads(args.spec.read_text())
    cfg = settings(spec, args.quick)
    if args.sizes is not None:
        cfg["sizes"] = args.sizes
    if args.repeats is not None:
        cfg["repeats"] = args.repeats
    if args.scale_variants is not None:
        cfg["scale"]["n_variants"] = args.scale_variants
    if args.no_warmup:
        cfg["warmup"] = False
    cfg["plink2_blas"] = args.plink2_blas
    cfg["plink2_blas_only"] = args.plink2_blas_only
    workdir = (args.workdir or REPO / "results" / "genotype_pca" / "data").resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_foundation import machine_info

    t_start = time.perf_counter()
    machine = machine_info()
    plink2 = shutil.which(args.plink2) if args.plink2 else None
    machine["versions"].update(_tool_versions(plink2))
    methods = ours_methods()
    tools, skipped = tool_table(cfg, plink2, machine["versions"]["dask_ml"] is not None,
                                methods)
    if args.tools is not None:
        tools = {n: t for n, t in tools.items() if n in args.tools}
    if plink2 is None:
        log(f"plink2 binary {args.plink2!r} not found: the plink2 rows are skipped")
    else:
        out = subprocess.run(["ldd", os.path.realpath(plink2)], capture_output=True, text=True)
        machine["plink2_ldd"] = out.stdout  # a dispatch script has none: see the README
    results: dict[str, Any] = {"spec": spec, "quick": args.quick, "settings": cfg,
                               "machine": machine, "methods_listed": sorted(methods),
                               "skipped": skipped, "tools": {n: list(t) for n, t in
                                                             tools.items()},
                               "sizes": {}}
    if "tools" in args.sections:
        warm = None
        if cfg["warmup"]:
            warm = prepare(cfg["warmup_size"], cfg, workdir, plink2)
            warm["reference"] = reference(warm["vcz"], cfg["components"])
        for size in cfg["sizes"]:
            results["sizes"][size_name(size)] = run_size(size, cfg, workdir, plink2, tools,
                                                         warmup=warm)
            warm = None  # one warm-up per run
    if "scale" in args.sections:
        results["scale"] = run_scale(cfg, workdir, methods)
    if plink2 is not None:
        results.update(run_plink2_checks(args.sections, cfg, workdir, plink2))
    results["machine"]["load_avg_end"] = list(os.getloadavg())
    results["elapsed_s"] = time.perf_counter() - t_start
    results["report"] = report(results, cfg)

    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    out = args.out or REPO / "results" / "genotype_pca" / f"{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = out.with_suffix(".json.tmp")
    tmp_out.write_text(json.dumps(results, indent=1, default=_jsonable))
    tmp_out.replace(out)
    for line in results["report"]:
        print(line)
    print(f"elapsed {results['elapsed_s']:.0f} s; raw numbers: {out}")
    return results


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return str(value)


if __name__ == "__main__":
    main()
