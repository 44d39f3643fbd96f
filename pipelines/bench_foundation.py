#!/usr/bin/env python
"""Foundation benchmark: kernel throughput, per-iteration overhead, GD vs dask-glm.

Three measurements, side by side in one run, each the median of several repeats
(``pipelines/README.md`` explains what they mean and lists measured numbers):

(a) kernel throughput as a fraction of this machine's roofline, single-threaded:
    ``max(bytes / read bandwidth, flops / peak GEMM flops) / kernel time``, the read of the
    block's stored bytes and a float64 1000^3 GEMM timed in the same repeat as the kernel.
    PCA k = 2, 5, 10, 20 on a float64 block, an int8 genotype-dosage block with Patterson
    centre/scale and 2 % missing calls, the same genotypes packed in 2 bits, and a wide
    packed block (1200 variants x 50 000 samples: ``V`` and ``G`` outgrow the cache); the Gram
    kernel (d = 1000 samples) on int8 and float64 blocks; the logistic and least-squares
    kernels on the float64 block. Each with the numba and the numpy kernels
    (``DASKSTRAGGLE_NUMBA``), plus the numba start-up cost of a fresh process (cold
    compile, cached). With ``--base`` another checkout's numba kernels are timed
    alternately with ours in the same run and reported as speed-ups;
(b) per-iteration overhead of synchronous GD (PCA) on LocalClusters of 2, 4 and 8
    single-threaded process workers: iteration time minus the slowest worker's kernel
    time, next to a no-op round-trip floor, the in-process driver cost and the
    uncontended kernel time;
(c) our synchronous GD vs dask-glm's ``gradient_descent`` on the same logistic data and
    the same LocalCluster: time per iteration, per pass over the data, and the objective
    reached after the same number of iterations and after the same wall time.

The script only composes public pieces of daskstraggle (``open_matrix``, problems and
their kernels, ``Block``, ``DaskRuntime``, ``LocalRuntime``, ``GD``, ``StopRule``, the
dataset recipe; ``pack_dosages`` to pack the genotype block as ``genotype_storage="packed"``
workers hold it); it holds no library logic. Results go to
``results/bench_foundation/<UTC timestamp>.json``.

Usage::

    python pipelines/bench_foundation.py            # default sizes, ~9 minutes
    python pipelines/bench_foundation.py --quick    # smoke run, < 1 minute
    flock /tmp/daskstraggle-bench.lock python pipelines/bench_foundation.py --sections kernel
    git worktree add /tmp/base 5f225a0    # then, the same kernels of both in one run:
    python pipelines/bench_foundation.py --sections kernel --base /tmp/base
"""

from __future__ import annotations

import os

# Workers run single-threaded BLAS; the in-process kernel timings must too. This has to
# happen before numpy is imported (also in the spawned worker processes, which re-import
# this module as __mp_main__).
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import datetime  # noqa: E402
import gc  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import math  # noqa: E402
import pickle  # noqa: E402
import platform  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

#: Sizes of a full run (the defaults of the command-line options).
DEFAULTS: dict[str, Any] = {
    "repeats": 5,
    "inner": 3,
    "float_rows": 200_000,
    "float_cols": 100,
    "geno_rows": 200_000,
    "geno_samples": 300,
    "geno_missing": 0.02,
    "wide_rows": 1200,
    "wide_samples": 50_000,
    "components": [2, 5, 10, 20],
    "gram_rows": 20_000,
    "gram_samples": 1000,
    "gemm_size": 1000,
    "store_rows": 400_000,
    "store_cols": 50,
    "chunk_rows": 25_000,
    "workers": [2, 4, 8],
    "pca_components": 4,
    "max_iter": 30,
    "glm_workers": 4,
    "glm_iter": 15,
}
#: Sizes of ``--quick`` (a smoke run of every section in well under a minute).
QUICK: dict[str, Any] = {
    "repeats": 2,
    "inner": 1,
    "float_rows": 20_000,
    "float_cols": 100,
    "geno_rows": 20_000,
    "geno_samples": 300,
    "wide_rows": 64,
    "wide_samples": 20_000,
    "components": [2, 10],
    "gram_rows": 2_000,
    "gram_samples": 1000,
    "gemm_size": 500,
    "store_rows": 40_000,
    "store_cols": 20,
    "chunk_rows": 5_000,
    "workers": [2],
    "pca_components": 2,
    "max_iter": 5,
    "glm_workers": 2,
    "glm_iter": 3,
}
SECTIONS = ("kernel", "overhead", "glm")
#: The block and problem whose cold compile ``--quick`` measures (a full run: every one).
QUICK_STARTUP = ("LeastSquares", "float64")
#: The blocks of (a) (``--blocks``; the first word of each block's name).
KERNEL_BLOCKS = ("float64", "int8", "packed", "wide", "gram")


# ============================================================================ helpers
def summarize(values: Sequence[float]) -> dict[str, float]:
    """Median, quartiles, extremes and count of finite values."""
    a = np.asarray([v for v in values if v is not None and np.isfinite(v)], dtype=np.float64)
    if a.size == 0:
        return {"median": math.nan, "q25": math.nan, "q75": math.nan, "min": math.nan,
                "max": math.nan, "n": 0}
    q25, med, q75 = np.percentile(a, [25, 50, 75])
    return {"median": float(med), "q25": float(q25), "q75": float(q75),
            "min": float(a.min()), "max": float(a.max()), "n": int(a.size)}


def best_of(fn: Callable[[], Any], inner: int) -> float:
    """Seconds of the fastest of ``inner`` consecutive calls (filters preemptions)."""
    best = math.inf
    for _ in range(max(1, inner)):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def read_every_byte(a: np.ndarray) -> int:
    """Read every byte of ``a`` once: bitwise-OR reduction over its 64-bit words.

    The baseline "plain read": no arithmetic beyond one integer OR per 8 bytes, no
    conversion, no temporary; the same operation for any dtype.
    """
    flat = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
    n8 = flat.size - flat.size % 8
    words = flat[:n8].view(np.uint64)
    return int(np.bitwise_or.reduce(words)) | int(np.bitwise_or.reduce(flat[n8:], initial=0))


def fmt_stats(s: dict[str, float], scale: float = 1.0, digits: int = 1) -> str:
    """``median [min-max]`` of a summary, scaled."""
    if not s or s.get("n", 0) == 0:
        return "n/a"
    return (f"{s['median'] * scale:.{digits}f} "
            f"[{s['min'] * scale:.{digits}f}-{s['max'] * scale:.{digits}f}]")


def fmt_iqr(s: dict[str, float], scale: float = 1.0, digits: int = 1) -> str:
    """``median (IQR q25-q75)`` of a summary, scaled."""
    if not s or s.get("n", 0) == 0:
        return "n/a"
    return (f"{s['median'] * scale:.{digits}f} "
            f"({s['q25'] * scale:.{digits}f}-{s['q75'] * scale:.{digits}f})")


def print_table(title: str, header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Print (and return) a fixed-width table."""
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(header)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    text = "\n".join([f"\n{title}", line(header), line(["-" * w for w in widths]),
                      *(line(r) for r in rows)])
    print(text, flush=True)
    return text


def quiet(cfg: argparse.Namespace, client: Any = None) -> None:
    """Silence distributed's shutdown warnings and dask-glm's benign overflow warnings.

    LocalCluster resets the ``distributed`` log level when it starts, so this runs after
    every cluster start. With a client, RuntimeWarnings are also ignored on its workers
    (dask-glm's first line-search trial overflows ``exp``; the trial is then rejected).
    """
    if cfg.verbose:
        return
    logging.getLogger("distributed").setLevel(logging.ERROR)
    if client is not None:
        client.run(_ignore_runtime_warnings)


def _ignore_runtime_warnings() -> None:
    warnings.filterwarnings("ignore", category=RuntimeWarning)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def pyplot() -> Any | None:
    """Return ``matplotlib.pyplot`` on the Agg backend, or None (logged) without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib not installed: no figure (pip install '.[plot]')")
        return None
    return plt


def make_logistic_data(cfg: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """Two-Gaussian mixture ``x ~ N(y mu, I)``, ``|mu| = separation``, labels +-1, standardised.

    ``cfg`` holds ``n_rows``, ``n_features``, ``separation`` and ``seed`` (the ``[data]``
    tables of ``dsag_comparison.toml`` and ``load_balancing.toml``).
    """
    rng = np.random.default_rng(cfg["seed"])
    g = rng.normal(size=cfg["n_features"])
    mu = cfg["separation"] * g / np.linalg.norm(g)
    y = rng.choice([-1.0, 1.0], size=cfg["n_rows"])
    X = rng.normal(size=(cfg["n_rows"], cfg["n_features"])) + y[:, None] * mu
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    return X, y


def pipeline_main(pipeline: str, description: str, argv: list[str] | None, *,
                  full: dict[str, Any], quick: dict[str, Any],
                  run: Callable[[dict[str, Any], Path], dict[str, Any]],
                  report: Callable[[dict[str, Any]], list[str]],
                  workers: bool = False) -> dict[str, Any]:
    """The command line of a pipeline that runs once in a temporary folder.

    Parses ``--quick`` (``quick`` instead of ``full``), ``--out`` and, with ``workers``,
    ``--workers N`` (overrides the config's ``"workers"``); runs ``run(cfg, folder)``;
    prints ``report(results)``; writes the results with :func:`write_results` under
    ``pipeline``; returns them (config, machine, elapsed seconds and what ``run`` gave).
    """
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="small data, one repeat")
    parser.add_argument("--out", type=Path, default=None, help="the JSON result's path")
    if workers:
        parser.add_argument("--workers", type=int, default=None,
                            help=f"process workers of the cluster (default {full['workers']})")
    args = parser.parse_args(argv)
    cfg = dict(quick if args.quick else full)
    if workers and args.workers is not None:
        cfg["workers"] = args.workers
    results: dict[str, Any] = {"config": cfg, "quick": args.quick, "machine": machine_info()}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        results.update(run(cfg, Path(tmp)))
    results["elapsed_s"] = time.perf_counter() - t0
    for line in report(results):
        print(line)
    write_results(results, pipeline, args.out)
    return results


def write_results(results: dict[str, Any], pipeline: str, out: Path | None) -> Path:
    """Write a pipeline's results as JSON to ``out`` (None:
    ``results/<pipeline>/<UTC timestamp>.json``), print its elapsed time and path, and
    return the path."""
    out = out or (Path(__file__).resolve().parents[1] / "results" / pipeline
                  / f"{datetime.datetime.now(datetime.UTC):%Y%m%dT%H%M%SZ}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1, default=str))
    print(f"elapsed {results['elapsed_s']:.0f} s; raw numbers: {out}")
    return out


def machine_info() -> dict[str, Any]:
    """Machine, load, git state and library versions (None for a library not installed)."""
    import dask
    import distributed
    import scipy
    import zarr

    import daskstraggle

    mem_gib = None
    try:
        with open("/proc/meminfo") as f:
            for row in f:
                if row.startswith("MemTotal:"):
                    mem_gib = round(int(row.split()[1]) / 2**20, 1)
    except OSError:
        pass
    cpu = platform.processor() or None
    cpu_fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for row in f:
                key, _, value = row.partition(":")
                key = key.strip()
                if key in ("model name", "cpu family", "model", "flags") and key not in cpu_fields:
                    cpu_fields[key] = value.strip()
                if not row.strip():
                    break  # the first processor only
    except OSError:
        pass
    cpu = cpu_fields.get("model name", cpu)
    simd = sorted(set(cpu_fields.get("flags", "").split()) & _SIMD_FLAGS)

    def git(*args: str) -> str | None:  # read-only queries
        try:
            return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True,
                                  timeout=10, check=True).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None

    status = git("status", "--porcelain")
    return {
        "date_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "host": platform.node(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu": cpu,
        "cpu_family_model": [cpu_fields.get("cpu family"), cpu_fields.get("model")],
        "cpu_simd": simd,
        "cpu_count": os.cpu_count(),
        "mem_gib": mem_gib,
        "load_avg_start": list(os.getloadavg()),
        "git_commit": git("rev-parse", "HEAD"),
        "git_dirty": None if status is None else bool(status),
        "versions": {"numpy": np.__version__, "scipy": scipy.__version__,
                     "dask": dask.__version__, "distributed": distributed.__version__,
                     "zarr": zarr.__version__, "dask_glm": _installed_version("dask-glm"),
                     "daskstraggle": daskstraggle.__version__},
        "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
    }


#: CPU flags worth naming next to kernel numbers (the vector extensions LLVM may use).
_SIMD_FLAGS = {"sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "asimd",
               "sve"}


def _installed_version(dist: str) -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


# ============================================ (a) kernel throughput vs this machine's roofline
def float_block(n: int, d: int, rng: np.random.Generator) -> Any:
    from daskstraggle.problems import Block

    X = rng.standard_normal((n, d))
    y = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    return Block(X, y=y)


def genotype_block(n: int, m: int, missing: float, rng: np.random.Generator, *,
                   packed: bool = False) -> Any:
    """int8 dosages with Patterson centre/scale, made by the data layer's genotype_rows.

    Diploid calls with a per-variant allele frequency ``p ~ U(0.05, 0.5)``; a fraction
    ``missing`` of calls is missing (-1), imputed with the variant's mean dosage. With
    ``packed`` the dosages are stored as 2-bit codes, as ``genotype_storage="packed"``
    workers hold them.
    """
    from daskstraggle.data.sources import genotype_rows
    from daskstraggle.problems import Block
    from daskstraggle.problems._packing import pack_dosages

    parts = []
    for a in range(0, n, 20_000):
        c = min(20_000, n - a)
        p = rng.uniform(0.05, 0.5, size=c)
        calls = (rng.random((c, m, 2)) < p[:, None, None]).astype(np.int8)
        if missing > 0:
            calls[rng.random((c, m)) < missing] = -1
        parts.append(genotype_rows(calls, missing="mean", scaling="patterson"))
        del calls
    has_fill = any(part.fill is not None for part in parts)
    values = np.concatenate([part.values for part in parts])
    return Block(
        pack_dosages(values) if packed else values,
        fill=np.concatenate([part.fill if part.fill is not None else part.center
                             for part in parts]) if has_fill else None,
        center=np.concatenate([part.center for part in parts]),
        scale=np.concatenate([part.scale for part in parts]),
        packed_columns=m if packed else None,
    )


def run_ops(ops: dict[str, Callable[[], Any]], repeats: int, inner: int,
            base: BaseKernels | None = None, compared: Sequence[str] = ()
            ) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Time every op once per repeat (best of ``inner``), rotating the order each repeat.

    With ``base``, each op named in ``compared`` is also timed by the base process right
    before (odd repeats) or after (even repeats) ours; returns our times and the base's.
    """
    names = list(ops)
    for name in names:  # warm-up: page in, BLAS init, numba compile or cache load
        ops[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    base_times: dict[str, list[float]] = {name: [] for name in compared} if base else {}
    for r in range(repeats):
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            theirs = base is not None and name in base_times
            if theirs and r % 2:
                base_times[name].append(base.time(name))  # type: ignore[union-attr]
            times[name].append(best_of(ops[name], inner))
            if theirs and not r % 2:
                base_times[name].append(base.time(name))  # type: ignore[union-attr]
    return times, base_times


class BaseKernels:
    """The kernel cases of (a) run by another checkout's ``daskstraggle`` in a child process.

    The child runs this script with ``--serve-base`` and ``PYTHONPATH`` set to the
    checkout (e.g. ``git worktree add /tmp/base <commit>``): it builds the same blocks from
    the same seed, in the same order, and times one case per request, so our calls and
    its calls alternate in one run and their ratio is not the machine's load of the day.
    """

    def __init__(self, path: Path, cfg: argparse.Namespace) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(path), os.environ.get("PYTHONPATH", "")])}
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--serve-base"], env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=str(path))
        config = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(cfg).items()}
        self.info: dict[str, Any] = json.loads(self._ask(json.dumps(config)))

    def _ask(self, line: str) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        if not answer:
            raise RuntimeError(f"the base process ended (exit {self.proc.wait()})")
        return answer.strip()

    def build(self, block_name: str) -> None:
        """Build (and warm up) the cases of ``block_name`` in the child."""
        self._ask(f"build {block_name}")

    def time(self, key: str) -> float:
        """Seconds of the child's case ``key`` (best of ``--inner`` calls)."""
        return float(self._ask(f"time {key}"))

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.write("quit\n")
            self.proc.stdin.close()
            self.proc.wait(timeout=60)


def serve_base() -> int:
    """The child of :class:`BaseKernels`: one configuration line, then requests."""
    import daskstraggle

    cfg = argparse.Namespace(**json.loads(sys.stdin.readline()))
    rng = np.random.default_rng(cfg.seed)
    gemm_op(cfg.gemm_size, rng)  # the parent's draws, in its order
    print(json.dumps({"package": str(Path(daskstraggle.__file__).resolve().parent),
                      "git_commit": _git_head(Path(daskstraggle.__file__).parents[1])}),
          flush=True)
    ops: dict[str, Callable[[], Any]] = {}
    for line in sys.stdin:
        command, _, argument = line.strip().partition(" ")
        if command == "build":
            ops.clear()
            gc.collect()
            ops.update(kernel_blocks()[argument](cfg, rng)[0])
            for op in ops.values():
                op()
            answer = "ok"
        elif command == "time":
            answer = repr(best_of(ops[argument], cfg.inner))
        else:
            break
        print(answer, flush=True)
    return 0


def _git_head(path: Path) -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=path, capture_output=True,
                              text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


IMPLEMENTATIONS = ("numba", "numpy")


def with_kernels(implementation: str, fn: Callable[[], Any]) -> Callable[[], Any]:
    """Return ``fn`` run with the numba or numpy kernels (``DASKSTRAGGLE_NUMBA``)."""
    flag = "1" if implementation == "numba" else "0"

    def run() -> Any:
        os.environ["DASKSTRAGGLE_NUMBA"] = flag
        return fn()

    return run


def gemm_op(n: int, rng: np.random.Generator) -> tuple[Callable[[], Any], float]:
    """Single-threaded float64 ``A @ B`` of n x n matrices: the peak-flops probe, and its flops."""
    A, B = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    return (lambda: A @ B), 2.0 * n ** 3


# key, kind, label, implementation, bytes, flops
_Case = tuple[str, str, str, str, int, float | None]


def _gram_cases(cfg: argparse.Namespace, rng: np.random.Generator, block: Any, name: str
                ) -> tuple[dict[str, Callable[[], Any]], list[_Case]]:
    from daskstraggle.problems import PCA, block_stats

    pca = PCA(n_components=2).bind(block_stats(block))
    ops: dict[str, Callable[[], Any]] = {}
    cases: list[_Case] = []
    for impl in IMPLEMENTATIONS:
        ops[f"gram-{impl}"] = with_kernels(impl, lambda: pca.gram_kernel(block))
        cases.append((f"gram-{impl}", "kernel", f"PCA.gram_kernel d={block.n_features} "
                      f"({name}, centred)", impl, block.nbytes,
                      float(block.n_rows) * block.n_features * (block.n_features + 1)))
    return ops, cases


def _pca_cases(cfg: argparse.Namespace, rng: np.random.Generator, block: Any, stats: Any
               ) -> tuple[dict[str, Callable[[], Any]], list[_Case]]:
    from daskstraggle.problems import PCA

    n, d = block.n_rows, block.n_features
    ops: dict[str, Callable[[], Any]] = {}
    cases: list[_Case] = []
    for k in cfg.components:
        pca = PCA(n_components=k).bind(stats)
        V = pca.init_iterate(rng)
        for impl in IMPLEMENTATIONS:
            key = f"pca{k}-{impl}"
            ops[key] = with_kernels(impl, lambda pca=pca, V=V: pca.kernel(block, V))
            cases.append((key, "kernel", f"PCA.kernel k={k} (centred)", impl, block.nbytes,
                          4.0 * n * d * k))
    return ops, cases


def _float_cases(cfg: argparse.Namespace, rng: np.random.Generator
                 ) -> tuple[dict[str, Callable[[], Any]], list[_Case], dict[str, Any]]:
    from daskstraggle.problems import LeastSquares, Logistic, block_stats

    n, d = cfg.float_rows, cfg.float_cols
    log(f"(a) float64 block {n} x {d} ({n * d * 8 / 1e6:.0f} MB)")
    block = float_block(n, d, rng)
    X, nbytes = block.values, block.nbytes
    stats = block_stats(block)
    ops: dict[str, Callable[[], Any]] = {"read": lambda: read_every_byte(X),
                                         "sum": lambda: X.sum()}
    cases: list[_Case] = [
        ("read", "baseline", "plain read: OR-reduce of the 64-bit words", "", nbytes, None),
        ("sum", "reference", "numpy X.sum()", "", nbytes, float(n * d)),
    ]
    more_ops, more_cases = _pca_cases(cfg, rng, block, stats)
    ops.update(more_ops)
    cases += more_cases
    for problem, label in ((Logistic(), "Logistic.kernel (labels, intercept)"),
                           (LeastSquares(), "LeastSquares.kernel (intercept)")):
        bound = problem.bind(stats)
        w = 0.1 * rng.standard_normal(bound.n_params)
        for impl in IMPLEMENTATIONS:
            key = f"{bound.name}-{impl}"
            ops[key] = with_kernels(impl, lambda b=bound, w=w: b.kernel(block, w))
            cases.append((key, "kernel", label, impl, nbytes, 4.0 * n * d))
    info = {"shape": [n, d], "dtype": "float64", "nbytes": int(nbytes)}
    return ops, cases, info


def _genotype_cases(cfg: argparse.Namespace, rng: np.random.Generator, *, packed: bool,
                    wide: bool = False
                    ) -> tuple[dict[str, Callable[[], Any]], list[_Case], dict[str, Any]]:
    from daskstraggle.problems import block_stats

    n, m = (cfg.wide_rows, cfg.wide_samples) if wide else (cfg.geno_rows, cfg.geno_samples)
    kind = "packed 2-bit" if packed else "int8"
    log(f"(a) {kind} genotype block {n} x {m}, missing {cfg.geno_missing}")
    block = genotype_block(n, m, cfg.geno_missing, rng, packed=packed)
    stats = block_stats(block)
    ops: dict[str, Callable[[], Any]] = {"read": lambda: read_every_byte(block.values)}
    cases: list[_Case] = [("read", "baseline", f"plain read of the {kind} bytes (OR-reduce)",
                           "", block.nbytes, None)]
    more_ops, more_cases = _pca_cases(cfg, rng, block, stats)
    ops.update(more_ops)
    cases += more_cases
    info = {"shape": [n, m], "dtype": kind, "nbytes": int(block.nbytes),
            "missing_fraction": float(cfg.geno_missing)}
    return ops, cases, info


def _gram_block_cases(cfg: argparse.Namespace, rng: np.random.Generator
                      ) -> tuple[dict[str, Callable[[], Any]], list[_Case], dict[str, Any]]:
    n, m = cfg.gram_rows, cfg.gram_samples
    log(f"(a) Gram: int8 genotype block {n} x {m} and float64 block {n // 2} x {m}")
    geno = genotype_block(n, m, cfg.geno_missing, rng)
    floats = float_block(n // 2, m, rng)
    ops: dict[str, Callable[[], Any]] = {"read": lambda: read_every_byte(geno.values),
                                         "read_f64": lambda: read_every_byte(floats.values)}
    cases: list[_Case] = [
        ("read", "baseline", "plain read of the int8 bytes (OR-reduce)", "", geno.nbytes, None),
        ("read_f64", "baseline", "plain read of the float64 bytes (OR-reduce)", "",
         floats.nbytes, None),
    ]
    for block, name, read in ((geno, "int8 genotypes", "read"), (floats, "float64", "read_f64")):
        more_ops, more_cases = _gram_cases(cfg, rng, block, name)
        suffix = "" if read == "read" else "-f64"
        ops.update({key + suffix: op for key, op in more_ops.items()})
        cases += [(key + suffix, *rest) for key, *rest in more_cases]
    info = {"shape": [n, m], "dtype": "int8 + float64", "nbytes": int(geno.nbytes)}
    return ops, cases, info


#: A fresh process's first calls of every problem's numba kernels (block_stats, the
#: kernel, PCA's Gram kernel) on float64, int8 and packed blocks: what compiling costs.
#: Arguments, if any, name the blocks and problems to call (``--quick``: one of each).
_STARTUP_CODE = """
import json, sys, time
import numpy as np
t0 = time.perf_counter()
from daskstraggle.problems import PCA, Block, LeastSquares, Logistic, block_stats
from daskstraggle.problems._packing import pack_dosages
t1 = time.perf_counter()
rng = np.random.default_rng(0)
n, m = 64, 40
calls = rng.integers(0, 3, size=(n, m)).astype(np.int8)
calls[rng.random((n, m)) < 0.05] = -1
y = np.where(rng.random(n) < 0.5, -1.0, 1.0)
rows = {"fill": rng.uniform(0, 2, n), "center": rng.uniform(0, 2, n),
        "scale": rng.uniform(1, 2, n), "y": y}
blocks = {"float64": Block(rng.normal(size=(n, m)), y=y),
          "int8": Block(calls, **rows),
          "packed": Block(pack_dosages(calls), packed_columns=m, **rows)}
out = {"import_s": t1 - t0}
chosen = set(sys.argv[1:])
for name, block in blocks.items():
    for problem in (PCA(n_components=3), LeastSquares(), Logistic()):
        if chosen and not {name, type(problem).__name__} <= chosen:
            continue
        t = time.perf_counter()
        bound = problem.bind(block_stats(block))
        x = (bound.init_iterate(rng) if isinstance(problem, PCA)
             else 0.1 * rng.normal(size=bound.n_params))
        bound.kernel(block, x)
        if isinstance(problem, PCA):
            bound.gram_kernel(block)
        out[type(problem).__name__ + "/" + name] = time.perf_counter() - t
out["total_s"] = time.perf_counter() - t1
print(json.dumps(out))
"""


def numba_startup(base: Path | None = None, *,
                  only: Sequence[str] = ()) -> dict[str, dict[str, Any]]:
    """Seconds a fresh process spends on its first calls of every problem's kernels.

    For our package (and the base checkout's, when given, alternately): a process with a
    new empty numba cache directory compiles every kernel (what the first worker of a CI
    run or a new install pays), then a second process with the same directory loads them
    from the cache (what every later worker process pays).
    """
    packages = {"ours": REPO} if base is None else {"ours": REPO, "base": Path(base)}
    out: dict[str, dict[str, Any]] = {}
    for label, path in packages.items():
        with tempfile.TemporaryDirectory(prefix="bench-numba-") as cache:
            env = {**os.environ, "NUMBA_CACHE_DIR": cache, "DASKSTRAGGLE_NUMBA": "1",
                   "PYTHONPATH": os.pathsep.join([str(path),
                                                  os.environ.get("PYTHONPATH", "")])}
            runs = {}
            for state in ("cold", "cached"):
                proc = subprocess.run([sys.executable, "-c", _STARTUP_CODE, *only], env=env,
                                      capture_output=True, text=True, timeout=1800,
                                      check=True, cwd=str(path))
                runs[state] = json.loads(proc.stdout.strip().splitlines()[-1])
        out[label] = {"cold_s": runs["cold"]["total_s"], "cached_s": runs["cached"]["total_s"],
                      "import_s": runs["cached"]["import_s"], "cold_calls": runs["cold"]}
    return out


def bench_kernels(cfg: argparse.Namespace, rng: np.random.Generator) -> dict[str, Any]:
    """Time kernels next to a plain read of their block and a peak-GEMM probe.

    Every repeat times, for each block, the plain read of its bytes, a single-threaded
    float64 GEMM (the peak flop rate) and each kernel; a kernel's roofline fraction in that
    repeat is ``max(read time, flops / peak) / kernel time``.
    """
    out: dict[str, Any] = {"cases": [], "gemm_n": cfg.gemm_size}
    gemm, gemm_flops = gemm_op(cfg.gemm_size, rng)
    base = BaseKernels(cfg.base, cfg) if cfg.base else None
    if base is not None:
        out["base"] = {"path": str(cfg.base), **base.info}
    try:
        for block_name, make in kernel_blocks().items():
            if block_name.split()[0] in cfg.blocks:
                _bench_block(cfg, rng, out, block_name, make, gemm, gemm_flops, base)
    finally:
        if base is not None:
            base.close()
    out["gemm_gflop_per_s"] = summarize(out["gemm_gflop_per_s"])
    if cfg.startup:
        log("(a) numba start-up: cold compile and cached load in fresh processes")
        out["numba_startup_only"] = list(QUICK_STARTUP) if cfg.quick else []
        out["numba_startup"] = numba_startup(cfg.base, only=out["numba_startup_only"])
    return out


def kernel_blocks() -> dict[str, Callable[..., Any]]:
    """The blocks of (a), in the order they are built, and what builds each's cases."""
    return {"float64": _float_cases,
            "int8 genotypes": lambda c, r: _genotype_cases(c, r, packed=False),
            "packed genotypes": lambda c, r: _genotype_cases(c, r, packed=True),
            "wide packed genotypes": lambda c, r: _genotype_cases(c, r, packed=True, wide=True),
            "gram": _gram_block_cases}


def _bench_block(cfg: argparse.Namespace, rng: np.random.Generator, out: dict[str, Any],
                 block_name: str, make: Callable[..., Any], gemm: Callable[[], Any],
                 gemm_flops: float, base: BaseKernels | None) -> None:
    """Build one block's cases (ours, and the base's when given), time them, record them."""
    ops, cases, info = make(cfg, rng)
    ops["gemm"] = gemm
    compared = [c[0] for c in cases if c[1] == "kernel" and c[3] == "numba"]
    if base is not None:
        log(f"(a) building the base's {block_name} cases")
        base.build(block_name)
    times, base_times = run_ops(ops, cfg.repeats, cfg.inner, base, compared)
    _record_block(out, block_name, info, cases, times, base_times, gemm_flops)


def _record_block(out: dict[str, Any], block_name: str, info: dict[str, Any],
                  cases: list[_Case], times: dict[str, list[float]],
                  base_times: dict[str, list[float]], gemm_flops: float) -> None:
    """Add one block's cases (time, throughput, roofline; ratio to the base) to ``out``."""
    out.setdefault("blocks", {})[block_name] = info
    peak = [gemm_flops / t for t in times["gemm"]]
    out.setdefault("gemm_gflop_per_s", []).extend(p / 1e9 for p in peak)
    for key, kind, label, impl, nbytes, flops in cases:
        case: dict[str, Any] = {
            "block": block_name, "key": key, "case": label, "kind": kind,
            "implementation": impl, "bytes": nbytes, "time_s": summarize(times[key]),
            "gb_per_s": summarize([nbytes / t / 1e9 for t in times[key]]),
        }
        if flops:
            case["gflop_per_s"] = summarize([flops / t / 1e9 for t in times[key]])
        if kind == "kernel":
            read = times["read_f64" if key.endswith("-f64") else "read"]
            roof = [max(r, flops / p) for r, p in zip(read, peak, strict=True)]
            case["bound"] = "compute" if np.median([flops / p for p in peak]) > \
                np.median(read) else "memory"
            case["roofline"] = summarize(
                [f / t for f, t in zip(roof, times[key], strict=True)])
        if key in base_times:
            case["base"] = _base_case(base_times[key], times[key], roof)
        out["cases"].append(case)
    out[block_name] = {"read_gb_per_s": summarize(
        [cases[0][4] / t / 1e9 for t in times["read"]])}
    gc.collect()


def _base_case(theirs: list[float], ours: list[float], roof: list[float]) -> dict[str, Any]:
    """The base's times of a case, our speed-up over them (base / ours, per repeat) and the
    base's roofline fraction."""
    return {"time_s": summarize(theirs),
            "speedup": summarize([b / t for b, t in zip(theirs, ours, strict=True)]),
            "roofline": summarize([f / b for f, b in zip(roof, theirs, strict=True)])}


def _blocks_text(blocks: dict[str, dict[str, Any]]) -> str:
    """The blocks of (a) that ran, their shapes and sizes, for a table's title."""
    parts = []
    for name, info in blocks.items():
        shape = "x".join(map(str, info["shape"]))
        missing = (f", {100 * info['missing_fraction']:.1f}% missing"
                   if "missing_fraction" in info else "")
        parts.append(f"{name} {shape} ({info['nbytes'] / 1e6:.0f} MB{missing})")
    return ", ".join(parts)


def table_kernels(res: dict[str, Any]) -> str:
    rows = []
    for case in res["cases"]:
        roof = fmt_stats(case["roofline"], digits=2) if "roofline" in case else "-"
        base = case.get("base")
        rows.append([case["block"], case["kind"], case["case"], case["implementation"] or "-",
                     fmt_stats(case["time_s"], 1e3), f"{case['gb_per_s']['median']:.2f}",
                     f"{case['gflop_per_s']['median']:.1f}" if "gflop_per_s" in case else "",
                     case.get("bound", ""), roof,
                     fmt_stats(base["time_s"], 1e3) if base else "",
                     f"{base['roofline']['median']:.2f}" if base else "",
                     fmt_stats(base["speedup"], digits=2) if base else ""])
    peak = res["gemm_gflop_per_s"]
    title = (f"(a) Kernel throughput, 1 thread: {_blocks_text(res['blocks'])}; peak GEMM "
             f"{peak['median']:.1f} GFLOP/s (float64 {res['gemm_n']}^3); roofline = "
             "max(read time, flops / peak) / case time (target >= 0.5)")
    if "base" in res:
        title += (f"; base = {res['base']['path']} (commit {res['base']['git_commit']}), "
                  "each case timed alternately with ours; speed-up = base time / ours")
    text = print_table(title, ["block", "kind", "case", "impl", "ms median [min-max]", "GB/s",
                               "GFLOP/s", "bound", "roofline median [min-max]", "base ms",
                               "base roofline", "speed-up vs base"], rows)
    for label, start in res.get("numba_startup", {}).items():
        only = res.get("numba_startup_only")
        calls = (f"{only[0]}'s kernels on {only[1]} (--quick)" if only else
                 "every problem's kernels")
        line = (f"numba start-up of a fresh process ({label}): first calls of {calls}, "
                f"empty cache {start['cold_s']:.1f} s, from the cache "
                f"{start['cached_s']:.1f} s (import of daskstraggle.problems "
                f"{start['import_s']:.2f} s)")
        print(line, flush=True)
        text += "\n" + line
    return text


# ================================================ shared data: a logistic Zarr store
def write_store(cfg: argparse.Namespace, tmp: Path) -> Path:
    """Two-Gaussian-mixture data (X ~ N(y mu, I), y in {-1,+1}) as a Zarr group X, y."""
    out = tmp / "logistic.zarr"
    try:
        from daskstraggle.data.datasets import make_logistic
    except ImportError:  # recipe not available: write the same mixture directly
        import zarr

        rng = np.random.default_rng(cfg.seed)
        n, d = cfg.store_rows, cfg.store_cols
        mu = rng.standard_normal(d)
        mu /= np.linalg.norm(mu)
        group = zarr.open_group(str(out), mode="w")
        X = group.create_array("X", shape=(n, d), chunks=(cfg.chunk_rows, d), dtype="f8")
        y = group.create_array("y", shape=(n,), chunks=(cfg.chunk_rows,), dtype="f8")
        for a in range(0, n, cfg.chunk_rows):
            b = min(a + cfg.chunk_rows, n)
            yy = np.where(rng.random(b - a) < 0.5, -1.0, 1.0)
            X[a:b] = yy[:, None] * mu + rng.standard_normal((b - a, d))
            y[a:b] = yy
        return out
    return make_logistic(out, n_samples=cfg.store_rows, n_features=cfg.store_cols,
                         chunk_rows=cfg.chunk_rows, seed=cfg.seed)


def load_store(path: Path) -> tuple[np.ndarray, np.ndarray]:
    import zarr

    group = zarr.open_group(str(path), mode="r")
    return np.asarray(group["X"][:]), np.asarray(group["y"][:], dtype=np.float64)


# ============================================= (b) per-iteration overhead of sync GD
def _noop() -> None:
    return None


def noop_floor(client: Any, workers: list[str], rounds: int) -> dict[str, Any]:
    """A pinned no-op submit+result to one worker, and one to every worker per round."""
    from distributed import as_completed

    single, fan = [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        client.submit(_noop, pure=False, workers=[workers[0]], allow_other_workers=False).result()
        single.append(time.perf_counter() - t0)
    for _ in range(rounds):
        t0 = time.perf_counter()
        futures = [client.submit(_noop, pure=False, workers=[w], allow_other_workers=False)
                   for w in workers]
        for future in as_completed(futures, loop=client.loop):
            future.result()
        fan.append(time.perf_counter() - t0)
    return {"single_s": summarize(single), "all_workers_s": summarize(fan)}


def trace_rows(res: Any, *, skip_first: bool = True) -> dict[str, np.ndarray]:
    """Per-iteration arrays of a Result's trace (iteration 0 dropped: one-time costs)."""
    tr = res.trace
    it = tr["iteration_duration"].values
    mx = tr["max_compute_duration"].values
    per_worker = tr["compute_duration"].values
    mn = np.nanmin(per_worker, axis=1)
    total = np.nansum(per_worker, axis=1)
    wall = tr["wall_time"].values
    # the client-side step() runs between iterations and is in neither iteration's duration
    between = np.concatenate([[np.nan], np.diff(wall) - it[1:]])
    s = slice(1, None) if skip_first and len(it) > 1 else slice(None)
    return {"iter": it[s], "max_compute": mx[s], "min_compute": mn[s], "sum_compute": total[s],
            "between": between[s], "objective": tr["objective"].values}


def bench_overhead(cfg: argparse.Namespace, store: Path, X_np: np.ndarray,
                   rng: np.random.Generator) -> dict[str, Any]:
    from daskstraggle import GD, StopRule, open_matrix
    from daskstraggle.api import run_on
    from daskstraggle.problems import PCA, Block, block_stats
    from daskstraggle.runtime import DaskRuntime, LocalRuntime

    matrix = open_matrix(store, array="X")
    k = cfg.pca_components
    stop = StopRule(max_iter=cfg.max_iter, tol=None)
    out: dict[str, Any] = {"problem": f"PCA k={k}", "shape": list(matrix.shape),
                           "n_partitions": matrix.n_partitions, "max_iter": cfg.max_iter,
                           "by_workers": {}}
    for n_workers in cfg.workers:
        log(f"(b) {n_workers} workers: in-process kernel and driver cost")
        # uncontended kernel time of one worker's share, in this process
        rows = X_np[: math.ceil(X_np.shape[0] / n_workers)]
        share = Block(rows)
        bound = PCA(n_components=k).bind(block_stats(share))
        V = bound.init_iterate(rng)
        solo = [best_of(lambda b=bound, x=share, v=V: b.kernel(x, v), cfg.inner)
                for _ in range(cfg.repeats)]
        unit_bytes = len(pickle.dumps((bound, V)))
        result_bytes = len(pickle.dumps(bound.kernel(share, V)))
        # the driver + method cost with zero latency: LocalRuntime, same data and shapes
        with LocalRuntime(n_workers=n_workers) as local:
            lres = run_on(local, GD(), PCA(n_components=k), matrix, stop=stop, rng=cfg.seed)
        lrows = trace_rows(lres)
        driver = lrows["iter"] - lrows["sum_compute"]
        in_process = lrows["iter"]

        log(f"(b) {n_workers} workers: starting LocalCluster")
        t0 = time.perf_counter()
        with DaskRuntime(n_workers=n_workers) as rt:
            startup = time.perf_counter() - t0
            quiet(cfg)
            run_on(rt, GD(), PCA(n_components=k), matrix, stop=StopRule(max_iter=2, tol=None),
                   rng=cfg.seed)  # warm-up: imports and first deserialisation on workers
            floor = noop_floor(rt.client, rt.worker_names, rounds=max(10, 4 * cfg.repeats))
            pooled: dict[str, list[float]] = {key: [] for key in
                                              ("iter", "max_compute", "min_compute", "between")}
            per_repeat, loads, totals = [], [], []
            for r in range(cfg.repeats):
                t1 = time.perf_counter()
                res = run_on(rt, GD(), PCA(n_components=k), matrix, stop=stop, rng=cfg.seed + r)
                totals.append(time.perf_counter() - t1)
                loads.append(res.attrs["load_duration_s"])
                rows_r = trace_rows(res)
                for key in pooled:
                    pooled[key].extend(rows_r[key].tolist())
                per_repeat.append(float(np.median(rows_r["iter"] - rows_r["max_compute"])))
                log(f"    repeat {r}: {res.n_iter} it, median overhead "
                    f"{1e3 * per_repeat[-1]:.1f} ms")
        it = np.asarray(pooled["iter"])
        mx = np.asarray(pooled["max_compute"])
        mn = np.asarray(pooled["min_compute"])
        overhead = it - mx
        out["by_workers"][str(n_workers)] = {
            "cluster_startup_s": startup,
            "load_s": summarize(loads),
            "run_total_s": summarize(totals),
            "iteration_s": summarize(it),
            "max_compute_s": summarize(mx),
            "min_compute_s": summarize(mn),
            "compute_spread_s": summarize(mx - mn),
            "overhead_s": summarize(overhead),
            "overhead_fraction": summarize(overhead / it),
            "overhead_per_repeat_median_s": per_repeat,
            "step_between_iterations_s": summarize(pooled["between"]),
            "solo_kernel_s": summarize(solo),
            "contention_factor": float(np.median(mx) / np.median(solo)),
            "noop_floor": floor,
            "driver_in_process_s": summarize(driver),
            "iteration_in_process_s": summarize(in_process),
            "unit_pickle_bytes": unit_bytes,
            "result_pickle_bytes": result_bytes,
            "rows_per_worker": int(rows.shape[0]),
        }
    return out


def table_overhead(res: dict[str, Any]) -> str:
    rows = []
    for n, r in res["by_workers"].items():
        rows.append([
            n,
            fmt_iqr(r["iteration_s"], 1e3),
            fmt_iqr(r["max_compute_s"], 1e3),
            f"{1e3 * r['solo_kernel_s']['median']:.1f}",
            fmt_iqr(r["overhead_s"], 1e3),
            fmt_iqr(r["overhead_fraction"], 100, 0),
            f"{1e3 * r['noop_floor']['single_s']['median']:.1f} / "
            f"{1e3 * r['noop_floor']['all_workers_s']['median']:.1f}",
            f"{1e3 * r['iteration_in_process_s']['median']:.1f}",
            f"{1e3 * r['driver_in_process_s']['median']:.2f}",
            f"{1e3 * r['step_between_iterations_s']['median']:.2f}",
        ])
    title = (f"(b) Per-iteration overhead of synchronous GD, {res['problem']} on "
             f"{res['shape'][0]}x{res['shape'][1]} float64 Zarr ({res['n_partitions']} "
             f"partitions), {res['max_iter']} iterations x repeats; overhead = iteration - "
             "slowest worker's kernel; median (IQR)")
    return print_table(title, ["workers", "iteration ms", "slowest kernel ms",
                               "solo kernel ms", "overhead ms", "overhead %",
                               "no-op 1 / all ms", "in-process it ms", "driver ms", "step ms"],
                       rows)


# ================================================== (c) our GD vs dask-glm (logistic)
def counting_family() -> tuple[Any, dict[str, int]]:
    """dask-glm's Logistic family, counting (client-side) graph constructions."""
    from dask_glm.families import Logistic as GLMLogistic

    calls = {"loglike": 0, "gradient": 0}

    class CountingLogistic(GLMLogistic):
        @staticmethod
        def loglike(Xbeta: Any, y: Any) -> Any:
            calls["loglike"] += 1
            return GLMLogistic.loglike(Xbeta, y)

        @staticmethod
        def gradient(Xbeta: Any, X: Any, y: Any) -> Any:
            calls["gradient"] += 1
            return GLMLogistic.gradient(Xbeta, X, y)

    return CountingLogistic, calls


def bench_glm(cfg: argparse.Namespace, store: Path, X_np: np.ndarray, y_np: np.ndarray,
              rng: np.random.Generator) -> dict[str, Any]:
    import dask.array as da
    from dask_glm.algorithms import gradient_descent
    from distributed import wait

    from daskstraggle import GD, StopRule, open_matrix
    from daskstraggle.api import run_on
    from daskstraggle.problems import Block, Logistic, block_stats
    from daskstraggle.runtime import DaskRuntime

    T = cfg.glm_iter
    # dask-glm fits sum-of-log-losses without intercept or penalty: solve the same problem
    model = Logistic(alpha=0.0, fit_intercept=False)
    block = Block(X_np, y=y_np)
    bound = model.bind(block_stats(block))

    def objective(beta: np.ndarray) -> float:  # mean log-loss, evaluated in this process
        beta = np.asarray(beta, dtype=np.float64)
        return bound.objective(bound.kernel(block, beta).values, beta)

    log("(c) exact optimum (Newton, in process)")
    ref = bound.reference_solution(lambda fn, *a, combine=None: fn(block, *a))
    f_star = ref.objective
    matrix = open_matrix(store, array="X", labels="y")
    family, calls = counting_family()
    out: dict[str, Any] = {"shape": list(matrix.shape), "n_workers": cfg.glm_workers,
                           "iterations": T, "f_star": f_star, "reference_info":
                           {k: v for k, v in ref.info.items() if np.isscalar(v)}}
    glm_runs: list[dict[str, Any]] = []
    ours_runs: list[dict[str, Any]] = []

    def run_glm(X: Any, y01: Any, n_iter: int) -> dict[str, Any]:
        calls["loglike"] = calls["gradient"] = 0
        t0 = time.perf_counter()
        beta = gradient_descent(X, y01, max_iter=n_iter, tol=0.0, family=family,
                                normalize=False)
        elapsed = time.perf_counter() - t0
        iters = calls["gradient"]
        recalcs = math.ceil(iters / 10)  # X @ beta recomputed every 10 iterations
        evals = calls["loglike"] - recalcs
        f = objective(np.asarray(beta))
        return {
            "time_s": elapsed, "iterations": iters,
            # X^T (p - y) and X @ grad each iteration, plus the recomputations of X @ beta
            "x_passes": 2 * iters + recalcs,
            "line_search_evals": evals,
            # blocking client round trips, from the code: compute(step) and the final
            # compute per iteration, one compute per trial, (beta == obeta).all() per retry,
            # plus one per call (checked against a count of Client.get calls)
            "blocking_computes": 2 * iters + evals + max(0, evals - iters) + 1,
            "objective": f, "gap": f - f_star,
        }

    log(f"(c) starting LocalCluster of {cfg.glm_workers} workers")
    with DaskRuntime(n_workers=cfg.glm_workers) as rt:
        client = rt.client
        quiet(cfg, client)
        with client.as_current():
            t0 = time.perf_counter()
            X = da.from_zarr(str(store), component="X")
            y01 = (da.from_zarr(str(store), component="y") + 1.0) / 2.0  # dask-glm: {0, 1}
            X, y01 = client.persist([X, y01])
            wait([X, y01])
            out["dask_glm_persist_s"] = time.perf_counter() - t0
            layout: dict[str, int] = {}
            for holders in client.who_has(X).values():
                for w in holders:
                    layout[w] = layout.get(w, 0) + 1
            out["dask_glm_chunks"] = {"n_chunks": int(X.npartitions),
                                      "chunks_per_worker": sorted(layout.values())}
            # warm-up both sides (imports, first deserialisation)
            run_glm(X, y01, 2)
            run_on(rt, GD(), model, matrix, stop=StopRule(max_iter=2, tol=None), rng=cfg.seed)
            for r in range(cfg.repeats):
                # dask-glm: T iterations, data persisted on the cluster
                glm = run_glm(X, y01, T)
                # ours: T steps = T + 1 evaluated points (the last point is not stepped from)
                t1 = time.perf_counter()
                res = run_on(rt, GD(), model, matrix, stop=StopRule(max_iter=T + 1, tol=None),
                             rng=cfg.seed + r)
                t_total = time.perf_counter() - t1
                drive = float(res.trace["wall_time"].values[-1])
                ours = {
                    "time_total_s": t_total, "drive_s": drive, "setup_s": t_total - drive,
                    "load_s": res.attrs["load_duration_s"],
                    "iteration_s": float(np.median(res.trace["iteration_duration"].values)),
                    "iterations": T, "x_passes": res.n_iter,
                    "objective": float(res.objective), "gap": float(res.objective) - f_star,
                    "step_size": float(res.attrs["step_size"]),
                }
                # dask-glm for (about) our wall time: as many iterations as fit in it
                k = max(1, round(drive / (glm["time_s"] / max(glm["iterations"], 1))))
                glm["same_time"] = run_glm(X, y01, k) if k < T else dict(glm)
                glm_runs.append(glm)
                ours_runs.append(ours)
                log(f"    repeat {r}: dask-glm {glm['time_s']:.2f} s, gap {glm['gap']:.2e} "
                    f"({glm['line_search_evals']} line-search evals); ours {drive:.2f} s, gap "
                    f"{ours['gap']:.2e}; dask-glm {k} it in {glm['same_time']['time_s']:.2f} s, "
                    f"gap {glm['same_time']['gap']:.2e}")
            # once: ours for as long as dask-glm's T iterations took (time to its gap)
            t_glm = float(np.median([g["time_s"] for g in glm_runs]))
            # dask-glm's gap, or rounding level (1e-12 relative) if it is below that
            target = max(float(np.median([g["gap"] for g in glm_runs])), 1e-12 * abs(f_star))
            res = run_on(rt, GD(), model, matrix,
                         stop=StopRule(max_iter=100 * T, tol=None, time_budget=t_glm),
                         rng=cfg.seed)
            wall = res.trace["wall_time"].values
            gaps = res.trace["objective"].values - f_star
            within = np.flatnonzero(wall <= t_glm)
            reached = np.flatnonzero(gaps <= target)
            out["ours_at_glm_time"] = {
                "time_budget_s": t_glm,
                "iterations": int(within[-1]) if within.size else 0,
                "gap": float(gaps[within[-1]]) if within.size else math.nan,
                "dask_glm_gap": target,
                "time_to_dask_glm_gap_s": float(wall[reached[0]]) if reached.size else None,
                "iterations_to_dask_glm_gap": int(reached[0]) if reached.size else None,
            }
    out["dask_glm_runs"] = glm_runs
    out["ours_runs"] = ours_runs
    per_it = lambda runs, key: summarize([g[key] / g["iterations"] for g in runs])  # noqa: E731
    same = [g["same_time"] for g in glm_runs]
    out["dask_glm"] = {
        "time_s": summarize([g["time_s"] for g in glm_runs]),
        "iteration_s": per_it(glm_runs, "time_s"),
        "pass_s": summarize([g["time_s"] / g["x_passes"] for g in glm_runs]),
        "x_passes_per_iteration": per_it(glm_runs, "x_passes"),
        "line_search_evals_per_iteration": per_it(glm_runs, "line_search_evals"),
        "blocking_computes_per_iteration": per_it(glm_runs, "blocking_computes"),
        "gap": summarize([g["gap"] for g in glm_runs]),
        "same_time_iterations": summarize([g["iterations"] for g in same]),
        "same_time_s": summarize([g["time_s"] for g in same]),
        "same_time_gap": summarize([g["gap"] for g in same]),
    }
    out["ours"] = {
        "drive_s": summarize([o["drive_s"] for o in ours_runs]),
        "setup_s": summarize([o["setup_s"] for o in ours_runs]),
        "load_s": summarize([o["load_s"] for o in ours_runs]),
        "iteration_s": summarize([o["iteration_s"] for o in ours_runs]),
        "pass_s": summarize([o["drive_s"] / o["x_passes"] for o in ours_runs]),
        "gap": summarize([o["gap"] for o in ours_runs]),
    }
    return out


def table_glm(res: dict[str, Any]) -> str:
    g, o, a = res["dask_glm"], res["ours"], res["ours_at_glm_time"]
    T = res["iterations"]
    reach = ("not reached" if a["time_to_dask_glm_gap_s"] is None else
             f"{a['time_to_dask_glm_gap_s']:.2f} s ({a['iterations_to_dask_glm_gap']} it)")
    glm_iters = summarize([run["iterations"] for run in res["dask_glm_runs"]])
    rows = [
        ["dask-glm gradient_descent", f"{glm_iters['median']:.0f}",
         f"{g['time_s']['median']:.2f} (+{res['dask_glm_persist_s']:.2f} persist)",
         fmt_stats(g["iteration_s"], 1e3, 0), f"{g['x_passes_per_iteration']['median']:.1f}",
         fmt_stats(g["pass_s"], 1e3, 0),
         f"{g['line_search_evals_per_iteration']['median']:.1f} / "
         f"{g['blocking_computes_per_iteration']['median']:.1f}",
         f"{g['gap']['median']:.1e}",
         f"{g['same_time_gap']['median']:.1e} after {g['same_time_iterations']['median']:.0f} it "
         f"({g['same_time_s']['median']:.2f} s)"],
        ["daskstraggle GD (step 1/L)", f"{T}",
         f"{o['drive_s']['median']:.2f} (+{o['setup_s']['median']:.2f} setup)",
         fmt_stats(o["iteration_s"], 1e3, 0), "1.0", fmt_stats(o["pass_s"], 1e3, 0), "0 / 1",
         f"{o['gap']['median']:.1e}",
         f"{a['gap']:.1e} after {a['iterations']} it ({a['time_budget_s']:.1f} s); "
         f"reached {a['dask_glm_gap']:.1e} in {reach}"],
    ]
    title = (f"(c) Logistic regression {res['shape'][0]}x{res['shape'][1]} (no intercept, no "
             f"penalty; f* = {res['f_star']:.6f} by Newton), LocalCluster of "
             f"{res['n_workers']} process workers, max {T} iterations (dask-glm stops by itself "
             "at rounding level); median [min-max] over repeats")
    return print_table(title, ["method", "iterations", "s", "ms / iteration", "X passes / it",
                               "ms / X pass", "line-search evals / blocking computes per it",
                               "final gap", "gap at the other's wall time"], rows)


# ============================================================================== main
def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument("--quick", action="store_true",
                   help="tiny sizes, 2 repeats, 2 workers: a smoke run in < 1 minute "
                        "(explicit size options still win)")
    p.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS),
                   help="which measurements to run")
    sizes = [
        ("--repeats", int, "repeats per measurement"),
        ("--inner", int, "(a) calls per repeat, the fastest kept"),
        ("--float-rows", int, "(a) rows of the float64 block"),
        ("--float-cols", int, "(a) columns of the float64 block"),
        ("--geno-rows", int, "(a) variants (rows) of the int8 genotype block"),
        ("--geno-samples", int, "(a) samples (columns) of the int8 genotype block"),
        ("--geno-missing", float, "(a) fraction of missing genotype calls"),
        ("--wide-rows", int, "(a) variants of the wide packed genotype block"),
        ("--wide-samples", int, "(a) samples of the wide packed genotype block (many: V and "
                                "G outgrow the cache)"),
        ("--components", int, "(a) PCA components (several allowed)"),
        ("--gram-rows", int, "(a) variants of the Gram kernel's genotype block (float: half)"),
        ("--gram-samples", int, "(a) samples (columns) of the Gram kernel's blocks"),
        ("--gemm-size", int, "(a) n of the n x n float64 GEMM that measures peak flops"),
        ("--store-rows", int, "(b, c) rows of the logistic Zarr store"),
        ("--store-cols", int, "(b, c) columns of the logistic Zarr store"),
        ("--chunk-rows", int, "(b, c) rows per Zarr chunk"),
        ("--workers", int, "(b) LocalCluster sizes (several allowed)"),
        ("--pca-components", int, "(b) PCA components"),
        ("--max-iter", int, "(b) GD iterations per run"),
        ("--glm-workers", int, "(c) LocalCluster size"),
        ("--glm-iter", int, "(c) iterations of both methods (dask-glm may stop earlier)"),
    ]
    for flag, kind, text in sizes:
        key = flag[2:].replace("-", "_")
        many = isinstance(DEFAULTS[key], list)
        quick = QUICK.get(key, DEFAULTS[key])
        p.add_argument(flag, type=kind, nargs="+" if many else None,
                       help=f"{text} (default {DEFAULTS[key]}; with --quick {quick})")
    p.add_argument("--base", type=Path, default=None,
                   help="(a) a checkout of another commit (e.g. made by git worktree add): "
                        "its numba kernels are timed alternately with ours in one run, and "
                        "its cold compile next to ours")
    p.add_argument("--blocks", nargs="+", choices=KERNEL_BLOCKS, default=list(KERNEL_BLOCKS),
                   help="(a) which blocks' kernels to time")
    p.add_argument("--no-startup", dest="startup", action="store_false",
                   help="(a) skip the cold-compile and cached-load measurement")
    p.add_argument("--serve-base", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help="seed of all random data and starts")
    p.add_argument("--out", type=Path, default=None,
                   help="JSON output (default results/bench_foundation/<UTC timestamp>.json)")
    p.add_argument("--tmpdir", type=Path, default=None,
                   help="where to write the temporary Zarr store")
    p.add_argument("--verbose", action="store_true", help="keep distributed's log warnings")
    cfg = p.parse_args(argv)
    sizes = {**DEFAULTS, **(QUICK if cfg.quick else {})}
    for key, value in sizes.items():
        if getattr(cfg, key, None) is None:
            setattr(cfg, key, value)
    if cfg.repeats < 1 or cfg.inner < 1:
        p.error("--repeats and --inner must be >= 1")
    return cfg


def main(argv: Sequence[str] | None = None) -> int:
    cfg = parse_args(argv)
    if cfg.serve_base:
        return serve_base()
    if not cfg.verbose:
        logging.getLogger("distributed").setLevel(logging.ERROR)
        warnings.filterwarnings("ignore", category=FutureWarning)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    out_path = cfg.out or REPO / "results" / "bench_foundation" / f"{stamp}.json"
    rng = np.random.default_rng(cfg.seed)
    report: dict[str, Any] = {"machine": machine_info(),
                              "config": {k: (str(v) if isinstance(v, Path) else v)
                                         for k, v in vars(cfg).items()}}
    tables: list[str] = []
    t_start = time.perf_counter()
    if "kernel" in cfg.sections:
        report["kernel"] = bench_kernels(cfg, rng)
        tables.append(table_kernels(report["kernel"]))
    if {"overhead", "glm"} & set(cfg.sections):
        with tempfile.TemporaryDirectory(prefix="bench_foundation-", dir=cfg.tmpdir) as tmp:
            log(f"writing the {cfg.store_rows} x {cfg.store_cols} logistic Zarr store")
            store = write_store(cfg, Path(tmp))
            X_np, y_np = load_store(store)
            if "overhead" in cfg.sections:
                report["overhead"] = bench_overhead(cfg, store, X_np, rng)
                tables.append(table_overhead(report["overhead"]))
            if "glm" in cfg.sections and importlib.util.find_spec("dask_glm") is None:
                report["glm"] = {"skipped": "dask-glm is not installed (pip install -e "
                                            "'.[bench]')"}
                tables.append(f"\n(c) dask-glm rows skipped: {report['glm']['skipped']}")
                print(tables[-1], flush=True)
            elif "glm" in cfg.sections:
                report["glm"] = bench_glm(cfg, store, X_np, y_np, rng)
                tables.append(table_glm(report["glm"]))
    report["machine"]["load_avg_end"] = list(os.getloadavg())
    report["elapsed_s"] = time.perf_counter() - t_start
    report["tables"] = tables
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(report, indent=1, default=float))
    load = report["machine"]
    print(f"\nelapsed {report['elapsed_s']:.0f} s; load average "
          f"{load['load_avg_start'][0]:.1f} -> {load['load_avg_end'][0]:.1f}; wrote {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
