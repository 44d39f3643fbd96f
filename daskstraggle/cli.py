"""The ``daskstraggle`` command: demo, solves (pca, logreg, linreg) and datasets.

Bad input prints one line ``error: ...`` on stderr and exits with code 2, before any
cluster work and without writing anything.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from daskstraggle._cli_genotypes import qc_from_params, qc_options
from daskstraggle._cli_lazy import LazyGroup, deferred
from daskstraggle.errors import (
    DivergenceError,
    InputError,
    InvalidParameterError,
    StraggleError,
    StraggleWarning,
    WorkerLostError,
)

if TYPE_CHECKING:
    from daskstraggle._declared_options import CliOption
    from daskstraggle.methods.base import Method

logger = logging.getLogger(__name__)


def _storage_options(ctx: click.Context, param: click.Parameter,
                     value: tuple[str, ...]) -> dict[str, Any] | None:
    """Parse repeated ``--storage-option KEY=VALUE`` into storage options (None: none)."""
    from daskstraggle.data._remote import parse_storage_options

    return parse_storage_options(value)


def _click_option(option: CliOption, **given: Any) -> Callable[..., Any]:
    """The click option of a declared one (``given``: click's keywords set otherwise)."""
    flags = [f"{option.flag}/{option.off_flag}" if option.off_flag else option.flag]
    if option.short:
        flags.insert(0, option.short)
    kind: dict[str, Any] = ({"is_flag": True} if option.is_flag and not option.off_flag
                            else {} if option.is_flag
                            else {"type": click.Choice(option.choices)} if option.choices
                            else {"type": click.Path(path_type=Path)} if option.type is Path
                            else {"type": option.type})
    return click.option(*flags, option.dest, **{
        "default": option.default, "metavar": option.metavar, "multiple": option.multiple,
        "show_default": option.show_default, "help": option.help, **kind, **given})


def _method_options() -> list[Callable[..., Any]]:
    """The methods' declared options, each help prefixed with the methods that take it."""
    from daskstraggle.methods import method_cli_options
    from daskstraggle.methods.options import method_options

    declared = method_cli_options()
    return [_click_option(option, default=None, help=", ".join(
                name for name, opts in declared.items() if option in opts) + f": {option.help}")
            for option in method_options(_method_classes()).values()]


def _problem_cli_options(name: str) -> tuple[CliOption, ...]:
    from daskstraggle.problems import get_problem_class

    return get_problem_class(name).cli_options


def _problem_options(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Problem ``name``'s declared options, made when the command first needs them."""
    return deferred(lambda: [_click_option(option) for option in _problem_cli_options(name)])


def _problem_values(name: str, params: dict[str, Any]) -> dict[str, Any]:
    """Pop the values of problem ``name``'s options from ``params``, by fit keyword."""
    return {option.target: params.pop(option.dest) for option in _problem_cli_options(name)}


def _method_help() -> str:
    """The ``--method`` help: ``auto`` and every registered method with its description."""
    described = [f"{cls.name} ({cls.description})" if cls.description else cls.name
                 for cls in _method_classes()]
    return ("Optimisation method: auto (PCA: gram up to 4096 columns, else block; regression: "
            "gd; on a cluster and for 64 MB or more, measured: a few probe rounds, then "
            "the candidate predicted fastest, its coded variants or dsag, if 1.25x faster; "
            "gram with speculative backups), "
            f"{', '.join(described[:-1])} or {described[-1]}.")


def _method_classes() -> list[type[Method]]:
    from daskstraggle.methods import get_method_class, list_methods

    return [get_method_class(name) for name in list_methods()]


def _solve_option_list() -> list[Callable[..., Any]]:
    """Every option of the solve commands, in their ``--help`` order: the command line's own
    and, by the name the CLI stores each under, the run options declared on the fields of
    the run's option groups (:data:`daskstraggle.options.RUN_GROUPS`); a declared one not
    placed here comes where ``...`` stands, before ``--seed``."""
    from importlib.metadata import entry_points

    from daskstraggle.options import run_groups

    # --runtime offers ours and the entry points' runtimes (none imported)
    advertised = {point.name for point in entry_points(group="daskstraggle.runtimes")}
    runtimes = ["dask", "sim", "local", *sorted(advertised - {"dask", "sim", "local"})]
    declared = {option.dest: _click_option(option, callback=(
                    _storage_options if option.dest == "storage_options" else None))
                for group in run_groups().values() for field in dataclasses.fields(group)
                if (option := field.metadata.get("cli")) is not None}
    path = click.Path(path_type=Path)
    order: list[Any] = [
        "scheduler", "n_workers", "min_workers",
        click.option("--method", default="auto", show_default=True, help=_method_help()),
        *_method_options(),
        click.option(
            "--runtime", type=click.Choice(runtimes), default=None,
            help="dask: a Dask cluster (--scheduler, else a LocalCluster of --workers "
                 "processes); sim: in process, simulated time with --stragglers as the "
                 "latency model; local: in process, threads, no latency; or a runtime an "
                 "installed package registers (entry-point group daskstraggle.runtimes). "
                 "Default: dask with --scheduler, --workers or an option only it takes "
                 "(--stragglers, --backup-after, --aggregation tree, --min-workers); else "
                 "local when the data the run holds take at most a quarter of the memory "
                 "available, else dask (a LocalCluster). The result says which ran and why."),
        "stragglers", "max_iter", "tol", "time_budget",
        click.option(
            "--step-size", type=float, default=None,
            help="Step size (default: GD's 1 for PCA, 1/L estimated for regression; x0.9 "
                 "(PCA) or x min(1, 2/subpartitions) (regression) for sgd, sag and dsag; "
                 "/workers for async)."),
        "n_partitions", "array", "missing_chunks", "storage_options", "reference",
        click.option(
            "--out", type=path, default=None,
            help="Write fitted quantities and the trace to this Zarr store (in an existing "
                 "folder: a missing one is refused, not created; never inside the input or "
                 "another Zarr store)."),
        click.option("--overwrite", is_flag=True,
                     help="Allow --out (and --plot) to replace an existing path."),
        click.option(
            "--plot", type=path, default=None, metavar="PATH.png",
            help="Also draw the run (needs matplotlib): convergence against time (gap with "
                 "--reference, else optimality), with several workers a heatmap of each "
                 "worker's latency per iteration, for PCA PC1 against PC2 of the matrix's "
                 "columns (VCF Zarr: the samples, coloured by population). Format from the "
                 "suffix (.png, .pdf, .svg); refuses an existing path unless --overwrite, and "
                 "a missing folder (as --out: it is not created)."),
        "backup_after", "aggregation", "checkpoint", "checkpoint_interval",
        "checkpoint_iterations", "resume", "replica_divergence", ...,
        click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
                     help="Seed of the starting point and step-size estimate."),
        click.option("--json", "as_json", is_flag=True,
                     help="Print one JSON object instead of a table."),
        click.option("--quiet", is_flag=True, help="No progress bar."),
    ]
    return [option for item in order for option in (
        [declared[item]] if isinstance(item, str) else
        [made for dest, made in declared.items() if dest not in order] if item is ... else [item])]


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="daskstraggle")
@click.option("-v", "--verbose", count=True, help="More logging (-v info, -vv debug).")
def cli(verbose: int) -> None:
    """Straggler-resilient PCA, logistic regression and least squares on Dask."""
    # bio2zarr logs through the root logger, which installs a root handler on first use;
    # distributed's INFO records would then reach the terminal. A NullHandler prevents it.
    logging.getLogger().addHandler(logging.NullHandler())
    if verbose:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        ours = logging.getLogger("daskstraggle")
        ours.addHandler(handler)
        ours.setLevel(logging.INFO if verbose == 1 else logging.DEBUG)


def _plot_path(source: Any, params: dict[str, Any]) -> Path | None:
    """Refuse a bad ``--out`` (also in a missing folder); pop ``--plot``, refuse a bad one."""
    from daskstraggle._cli_plot import check_plot_path
    from daskstraggle._output import check_folder_exists, check_output_path, source_paths

    if params["out"] is not None:  # the fit checks it again; here for the order of messages
        check_output_path(params["out"], overwrite=params["overwrite"],
                          inputs=source_paths(source))
        check_folder_exists(params["out"], what="--out")
    return check_plot_path(params.pop("plot"), overwrite=params["overwrite"],
                           out=params["out"], inputs=source_paths(source))


def _method_params(method: str, values: dict[str, Any]) -> dict[str, Any] | None:
    """The chosen method's parameters from its options (None: none given)."""
    from daskstraggle.methods import get_method_class, method_params_from_cli

    if method != "auto":
        try:
            get_method_class(method)
        except InputError:
            return None  # an unknown method is refused by the fit, naming the known ones
    return method_params_from_cli(method, values)


def _run_solve(kind: str, source: Any, params: dict[str, Any], plot: Path | None = None,
               plink_out: str | None = None, **extra: Any) -> None:
    from daskstraggle import config
    from daskstraggle._output import removed_on_error
    from daskstraggle.api import fit_least_squares, fit_logistic, fit_pca
    from daskstraggle.methods.options import method_options

    as_json, quiet, seed = (params.pop(name) for name in ("as_json", "quiet", "seed"))
    values = {dest: params.pop(dest) for dest in method_options(_method_classes())}
    if (method_params := _method_params(params["method"], values)) is not None:
        params["method_params"] = method_params
    for name, setting, read in (("max_iter", "max-iter", config.count),
                                ("tol", "tol", config.number)):  # unset: the dask config's
        if params.get(name) is None:
            params[name] = read(setting)
    common = dict(params, rng=seed, progress=config.progress() and not quiet and not as_json)
    fit: Callable[..., Any] = (fit_pca if kind == "pca" else fit_logistic if kind == "logreg"
                               else fit_least_squares)
    # an error after the run started writing removes what it wrote (checked before; the
    # plink files are written all or none by write_plink itself)
    with removed_on_error([params.get("out"), plot]):
        result = fit(source, **extra, **common)
        if plot is not None:
            from daskstraggle._cli_plot import save_run_figure

            save_run_figure(result, plot, labels=getattr(source, "column_groups", None),
                            overwrite=params["overwrite"])
        written = [] if plink_out is None else result.to_plink(plink_out, source,
                                                                 overwrite=params["overwrite"])
    _echo_run(result, kind, as_json, out=params.get("out"), plot=plot, plink_out=plink_out,
              written=written)


def _echo_run(result: Any, kind: str, as_json: bool, *, out: Any, plot: Path | None,
              plink_out: str | None, written: list[Path]) -> None:
    """Print a finished run: its table, or with ``--json`` one JSON object."""
    from daskstraggle._cli_format import format_result

    ran = {"runtime": str(result.attrs["runtime"])}  # and, when chosen by default, why
    if result.attrs.get("runtime_reason"):
        ran["runtime_reason"] = str(result.attrs["runtime_reason"])
    if as_json:
        summary = {**result.summary(), **ran, **{
            key: str(path) for key, path in (("out", out), ("plot", plot)) if path is not None}}
        if written:
            summary["plink"] = [str(path) for path in written]
        _echo_json(summary, what=f"the {kind} run")
        return
    click.echo(format_result(result, out=out)
               + (f"\nruntime     {ran['runtime']} ({ran['runtime_reason']})"
                  if "runtime_reason" in ran else "")
               + ("" if plot is None else f"\nfigure      {plot}")
               + ("" if not written else f"\nplink       {plink_out}.eigenvec, "
                  ".eigenval, .eigenvec.allele, .afreq"))


@cli.command()
@click.argument("source")
@_problem_options("pca")
@click.option("--packed-genotypes", is_flag=True,
              help="Genotypes (VCF Zarr, .bed): workers hold the dosages as 2-bit codes "
                   "(4 calls per byte, a quarter of the int8 memory); ploidy 1 or 2 only.")
@click.option("--plink-out", metavar="PREFIX", default=None,
              help="Genotypes: also write plink2's PREFIX.eigenvec, .eigenval, "
                   ".eigenvec.allele (--pca allele-wts layout) and .afreq, for plink2 --score "
                   "and --covar (one more pass over the variants, in this process; quality "
                   "control then runs here before the fit).")
@qc_options
@deferred(_solve_option_list)
def pca(source: str, packed_genotypes: bool, plink_out: str | None, **params: Any) -> None:
    """PCA of the matrix at SOURCE (Zarr array/group, VCF Zarr store, PLINK .bed or .pgen, BGEN)."""
    qc = qc_from_params(params)
    data: Any = source
    plot = _plot_path(source, params)
    if plink_out is not None:
        from daskstraggle._output import source_paths
        from daskstraggle._plink_out import check_prefix

        check_prefix(plink_out, overwrite=params["overwrite"], inputs=source_paths(source),
                     others=_other_outputs(params, plot))
    if packed_genotypes or plot is not None or plink_out is not None:
        from daskstraggle.data import open_matrix

        data = open_matrix(source, array=params["array"], missing_chunks=params["missing_chunks"],
                           genotype_storage="packed" if packed_genotypes else "int8",
                           storage_options=params.pop("storage_options"),
                           qc=None if plink_out is None else qc)
        if plink_out is not None:  # the files need the variants the fit used
            qc = None
            if not data.genotypes:
                raise InvalidParameterError(
                    f"--plink-out writes a genotype PCA; {source!r} is a {data.kind} matrix, "
                    "not genotypes (VCF Zarr, .bed). Drop --plink-out (--out saves any run)."
                )
            from daskstraggle._plink_out import check_variants

            check_variants(data)  # a malformed .bim or .pvar: refused before the fit
    _run_solve("pca", data, params, plot=plot, plink_out=plink_out, qc=qc,
               **_problem_values("pca", params))


def _other_outputs(params: dict[str, Any], plot: Path | None) -> dict[str, Any]:
    """The run's outputs besides ``--plink-out``, by role (None: not given)."""
    resume = params["resume"]
    return {"the --out store": params["out"], "the --plot figure": plot,
            "the --checkpoint file": params["checkpoint"],
            "the --resume checkpoint": None if str(resume) == "replica" else resume}


def _default_labels(source: str, labels: str | None,
                    storage_options: dict[str, Any] | None = None) -> str | None:
    if labels is not None:
        return labels
    from daskstraggle.data._remote import is_url, member_exists

    if is_url(source) and not source.startswith("file:"):
        return "y" if member_exists(source, "y", storage_options or {}) else None
    return "y" if (Path(source.removeprefix("file://")) / "y").exists() else None


def _regression_command(kind: str, problem: str, summary: str) -> click.Command:
    """The solve command ``kind`` of a regression ``problem`` (help: ``summary``)."""

    @cli.command(kind, help=f"{summary} on the Zarr group at SOURCE.")
    @click.argument("source")
    @click.option("--labels", default=None,
                  help="Name of the labels array in the Zarr group (default: 'y' when present).")
    @_problem_options(problem)
    @deferred(_solve_option_list)
    def command(source: str, labels: str | None, **params: Any) -> None:
        _run_solve(kind, source, params, plot=_plot_path(source, params),
                   labels=_default_labels(source, labels, params["storage_options"]),
                   **_problem_values(problem, params))

    return command


logreg = _regression_command("logreg", "logistic", "L2-regularised logistic regression")
linreg = _regression_command("linreg", "least-squares", "Least-squares regression")


# ------------------------------------------------------------------------------ datasets
@cli.group()
def datasets() -> None:
    """Generate synthetic datasets (genotypes, logistic, linear).

    genotypes: an msprime island model written as VCF Zarr by bio2zarr (needs
    pip install 'daskstraggle[genomics]'); logistic: a two-Gaussian mixture with labels
    -1/+1 in 'y'; linear: y = X w + b + noise in 'y'. Seeded, written chunk by chunk,
    and an existing store is replaced only with --overwrite.
    """


@datasets.command("make")
@click.argument("name")
@click.option("--out", type=click.Path(path_type=Path), required=True,
              help="Store to write (genotypes: a path ending in .bed writes the calls as a "
                   "PLINK 1 fileset, OUT with .bim and .fam beside it).")
@click.option("--size", type=int, default=None,
              help="Rows: variants for genotypes, examples for logistic/linear.")
@click.option("--features", type=int, default=None,
              help="Columns: samples (individuals) for genotypes, features otherwise.")
@click.option("--populations", type=int, default=None, help="genotypes: number of populations.")
@click.option("--missing-rate", type=float, default=None,
              help="genotypes: fraction of missing calls.")
@click.option("--chunk-rows", type=int, default=None, help="Rows per Zarr chunk.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--overwrite", is_flag=True, help="Replace an existing store.")
def make(name: str, out: Path, size: int | None, features: int | None, populations: int | None,
         missing_rate: float | None, chunk_rows: int | None, seed: int, overwrite: bool) -> None:
    """Generate dataset NAME (genotypes, logistic, linear) into OUT."""
    from daskstraggle.data.datasets import DATASETS, make_dataset

    if name not in DATASETS:
        raise click.BadParameter(f"unknown dataset {name!r}; choose one of {sorted(DATASETS)}",
                                 param_hint="NAME")
    params: dict[str, Any] = {"seed": seed, "overwrite": overwrite, "progress": True}
    rows_key, cols_key = (("n_variants", "n_samples") if name == "genotypes"
                          else ("n_samples", "n_features"))
    for key, value in ((rows_key, size), (cols_key, features), ("chunk_rows", chunk_rows),
                       ("n_populations", populations), ("missing_rate", missing_rate)):
        if value is not None:
            if name != "genotypes" and key in ("n_populations", "missing_rate"):
                raise click.BadParameter(f"only for genotypes, not {name}",
                                         param_hint=f"--{key.replace('n_', '').replace('_', '-')}")
            params[key] = value
    t0 = time.perf_counter()
    path = make_dataset(name, out, **params)
    click.echo(f"wrote {name} to {path} in {time.perf_counter() - t0:.1f} s")


# ------------------------------------------------------------------------------ simulate
#: Methods whose tasks do not carry equal 1/N shares of the rows (coded replicas, one
#: round): their traced latency cannot be rescaled to another number of workers.
_UNEQUAL_SHARES = frozenset({"coded", "partial", "gram"})
#: An example of a spec with fault terms, for the error lines.
_FAULT_EXAMPLE = "'gamma(mean=0.05, var=1e-4) + loss(workers=0, at=1)'"


@cli.command()
@click.option("--workers", "n_workers", type=int, default=None,
              help="Number of workers N (default: as many as the trace has, else 100). "
                   "Gamma, shifted-exponential, multi-message and constant models (and "
                   "slowdowns of them) are simulated vectorised: 10 million workers with "
                   "--iterations 1 --samples 1 take seconds.")
@click.option("--wait", "n_wait", type=int, default=None,
              help="Results waited for each iteration, w (default: N).")
@click.option("--latency", "latency", metavar="SPEC", default=None,
              help="Latency model, e.g. 'gamma(mean=0.05, var=1e-4)' or "
                   "'shifted_exponential(shift=0.01, rate=50) + slowdown(workers=0, factor=3)'. "
                   "Times are seconds, at most 1e15. Fault terms may follow the model: "
                   "'loss(workers=0, at=1)', 'freeze(workers=1, at=2, for=5)', "
                   "'join(count=1, at=3)', 'retire(workers=2, at=4)' (at simulated seconds; "
                   "joining workers are named N, N+1, ...). With faults, DSAG itself runs "
                   "in the simulated runtime (as --runtime sim) on a small least-squares "
                   "problem, and the engine's moves of worker indices are listed; about "
                   "0.5 ms per worker and iteration, more with many workers (at most about "
                   "60 s).")
@click.option("--from-trace", type=click.Path(path_type=Path), default=None,
              help="Fit per-worker gamma latency to a result saved with --out instead. "
                   "With --workers M other than the trace's N, worker j follows traced "
                   "worker j mod N with its compute time scaled by N/M (the same rows "
                   "shared by M workers).")
@click.option("--iid", is_flag=True,
              help="With --from-trace: fit one gamma to all workers (the i.i.d. baseline).")
@click.option("--iterations", "n_iterations", type=int, default=100, show_default=True,
              help="Iterations to simulate; --workers x --iterations is at most 5e7 (memory), "
                   "and 1e6 for a model with state over time (markov, bursts, artificial, "
                   "schedule, replay: simulated event by event); with fault terms, what "
                   "takes about 60 s (see --latency).")
@click.option("--samples", "n_samples", type=int, default=10_000, show_default=True,
              help="Monte Carlo samples for the order statistics; --workers x --samples is at "
                   "most 5e7 (memory).")
@click.option("--collect-window", type=float, default=0.02, show_default=True,
              help="Fraction of an iteration's time to keep collecting after the w-th result.")
@click.option("--update-duration", type=float, default=0.0, show_default=True,
              help="Seconds the coordinator spends on each update.")
@click.option("--load", type=float, default=1.0, show_default=True,
              help="Work per task relative to an equal 1/N share of the rows (1 with faults).")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of a table.")
def simulate(n_workers: int | None, n_wait: int | None, latency: str | None,
             from_trace: Path | None, iid: bool, n_iterations: int, n_samples: int,
             collect_window: float, update_duration: float, load: float, seed: int,
             as_json: bool) -> None:
    """Predict latency: order statistics and per-iteration times of waiting for w of N.

    Prints the expected latency of the w-th fastest of N workers (Monte Carlo) and
    simulates N workers iterating while the coordinator waits for the w fastest fresh
    results (DSAG semantics: stale workers are re-tasked at once). With fault terms in
    --latency, DSAG runs in the simulated runtime and the faults are played by the same
    engine as --runtime sim; the events are listed.
    """
    import numpy as np

    from daskstraggle._cli_simulate import check_simulate_size, simulate_summary, simulate_table
    from daskstraggle.latency.order import order_statistics
    from daskstraggle.latency.simulator import simulate as run_simulation

    _check_simulate_sources(latency, from_trace, iid, n_workers)
    model, faults, source, n_workers = _simulated_model(latency, from_trace, iid, n_workers)
    n_wait = n_workers if n_wait is None else n_wait
    if faults:
        _simulate_faults(model, faults, source, n_workers, n_wait, n_iterations, load=load,
                         collect_window=collect_window, update_duration=update_duration,
                         seed=seed, as_json=as_json)
        return
    stateful = not model.sampler(n_workers, rng=0).stateless
    check_simulate_size(n_workers, n_samples, n_iterations, stateful=stateful)
    sim_seed, order_seed = np.random.SeedSequence(seed).spawn(2)  # independent draws
    sim = run_simulation(model, n_workers, n_wait, n_iterations, load=load,
                         collect_window=collect_window, update_duration=update_duration,
                         rng=sim_seed)
    order = None if stateful else order_statistics(model, n_workers, n_samples=n_samples,
                                                   load=load, rng=order_seed)
    if as_json:
        _echo_json(simulate_summary(model, source, sim, order), what="the simulation")
        return
    click.echo(simulate_table(source, load, collect_window, sim, order))


def _check_simulate_sources(latency: str | None, from_trace: Path | None, iid: bool,
                            n_workers: int | None) -> None:
    """Refuse a missing or doubled latency source, and options that do not fit it."""
    from daskstraggle.latency.faults import term_names
    from daskstraggle.latency.spec import parse_stragglers

    if latency is not None and from_trace is not None and (
            faults := parse_stragglers(latency).faults):  # a bad spec: its own error
        raise InputError(
            f"--from-trace takes no fault terms ({term_names(faults)}); give "
            f"them after a latency model in --latency instead, e.g. --latency {_FAULT_EXAMPLE}"
        )
    if (latency is None) == (from_trace is None):
        raise InputError("give exactly one of --latency SPEC and --from-trace RESULT")
    if iid and from_trace is None:
        raise InputError("--iid applies to --from-trace")
    if n_workers is not None and n_workers < 1:
        raise InputError(f"--workers must be >= 1, got {n_workers}")


def _simulated_model(latency: str | None, from_trace: Path | None, iid: bool,
                     n_workers: int | None) -> tuple[Any, tuple[Any, ...], str, int]:
    """Return the latency model, fault terms, model's description and number of workers."""
    if from_trace is None:
        from daskstraggle.latency.spec import parse_latency, parse_stragglers

        n_workers = 100 if n_workers is None else n_workers
        spec = parse_stragglers(latency)
        if not spec.faults:
            model = parse_latency(latency)  # type: ignore[arg-type]
            return model, (), model.to_spec(), n_workers
        if spec.throttle is not None:
            raise InputError(f"--latency {latency!r}: the throttle term slows real worker "
                             "processes, which simulate has none of; drop it")
        if spec.model is None:
            raise InputError(f"--latency {latency!r}: fault terms need a latency model "
                             f"before them, e.g. {_FAULT_EXAMPLE}")
        spec.check_n_workers(n_workers)
        return spec.model, spec.faults, spec.model.to_spec(), n_workers
    from daskstraggle.latency.fit import fit_trace
    from daskstraggle.trace import Result

    traced = Result.load(from_trace)
    n_trace = traced.trace.sizes["worker"]
    resized = n_workers is not None and n_workers != n_trace
    if resized and traced.method in _UNEQUAL_SHARES:
        raise InputError(
            f"--workers {n_workers} differs from the {n_trace} workers of the trace, and "
            f"a {traced.method} run's tasks do not carry equal shares of the rows, so its "
            "latency cannot be rescaled; drop --workers, or calibrate with --method gd"
        )
    model = fit_trace(traced.trace, iid=iid, n_workers=n_workers if resized else None)
    source = f"fitted to {from_trace}" + (" (i.i.d.)" if iid else " (per worker)")
    if resized:
        source += f", rescaled from {n_trace} to {n_workers} workers sharing the same rows"
    return model, (), source, n_trace if n_workers is None else n_workers


def _simulate_faults(model: Any, faults: tuple[Any, ...], source: str, n_workers: int,
                     n_wait: int, n_iterations: int, *, load: float, collect_window: float,
                     update_duration: float, seed: int, as_json: bool) -> None:
    """Run ``simulate`` for a spec with fault terms and print what it found."""
    from daskstraggle import config
    from daskstraggle._cli_simulate import check_fault_size, fault_summary, fault_table
    from daskstraggle.runtime.fault_simulation import simulate_faults

    if load != 1.0:
        raise InputError(
            f"--load {load:g} applies without fault terms; with faults each worker index "
            "computes its equal share of the rows of the simulated problem (drop --load)"
        )
    check_fault_size(n_workers, n_iterations)
    try:
        sim = simulate_faults(model, faults, n_workers, n_wait, n_iterations,
                              collect_window=collect_window, update_duration=update_duration,
                              rng=seed)
    except WorkerLostError as err:  # the spec leaves nobody to compute: an input mistake
        raise InputError(
            "the faults leave no worker in the simulated run and none joins within "
            f"{config.seconds('timeouts.no-worker'):g} s (the daskstraggle.timeouts.no-worker "
            "setting), so it cannot go on; lose fewer workers or add a join(count=..., at=...) "
            "term"
        ) from err
    if as_json:
        _echo_json(fault_summary(model, source, sim), what="the simulation")
        return
    click.echo(fault_table(source, collect_window, sim))


def _echo_json(summary: dict[str, Any], *, what: str) -> None:
    """Print ``summary`` as strict JSON; refuse a NaN or an infinity (JSON has neither)."""
    try:
        text = json.dumps(summary, allow_nan=False)
    except ValueError:
        key, value = _non_finite(summary) or ("a value", None)
        raise InputError(f"{what} gave {key} = {value!r}, not a finite number, which JSON "
                         "cannot hold; use smaller inputs (times, loads, sizes)") from None
    click.echo(text)


def _non_finite(value: Any, key: str = "") -> tuple[str, Any] | None:
    """Return the key path (``a.b[2]``) and value of the first NaN or infinite float."""
    if isinstance(value, float) and not math.isfinite(value):
        return key, value
    if isinstance(value, dict):
        items: Any = ((f"{key}.{k}" if key else str(k), v) for k, v in value.items())
    else:  # a list's items, nothing of any other value
        items = ((f"{key}[{i}]", v) for i, v in enumerate(value if isinstance(value, list) else ()))
    return next(filter(None, (_non_finite(sub, sub_key) for sub_key, sub in items)), None)


# ---------------------------------------------------------------------------------- demo
@cli.command()
@click.option("--workers", "n_workers", type=int, default=None,
              show_default="the daskstraggle.workers setting, 4",
              help="Process workers of the LocalCluster (at most 256).")
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="Folder for data and results (default: OUTPUT/demo-TIMESTAMP, OUTPUT the "
                   "daskstraggle.output-dir setting, 'results').")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of a table.")
def demo(n_workers: int | None, out: Path | None, as_json: bool) -> None:
    """Genotype PCA on a LocalCluster with simulated data; prints a result table."""
    import numpy as np

    from daskstraggle import config
    from daskstraggle._cli_format import format_result
    from daskstraggle.api import fit_pca
    from daskstraggle.data import open_matrix

    try:
        from daskstraggle.data.datasets import make_genotypes
    except ImportError as err:
        raise InputError(
            f"the demo simulates genotypes with msprime and bio2zarr ({err}); install them with "
            "pip install 'daskstraggle[genomics]'"
        ) from err
    n_workers = config.workers() if n_workers is None else n_workers
    folder = _check_demo_options(n_workers, out)
    data_path = folder / "genotypes.vcz"
    result_path = folder / "pca.zarr"
    note = (lambda msg: None) if as_json else (lambda msg: click.echo(msg, err=True))
    note("simulating genotypes (msprime, 3 populations) and writing VCF Zarr (bio2zarr)...")
    t0 = time.perf_counter()
    make_genotypes(data_path)
    t_data = time.perf_counter() - t0
    matrix = open_matrix(data_path)
    note(f"PCA on a LocalCluster with {n_workers} process workers...")
    # K populations give K - 1 structure components with a clear eigengap; further
    # components are noise-level (tiny eigengap, slow power iteration and meaningless)
    n_populations = len(np.unique(matrix.column_groups)) if matrix.column_groups is not None else 3
    n_components = max(1, n_populations - 1)
    result = fit_pca(matrix, n_components, n_workers=n_workers, reference=True, rng=0,
                     progress=not as_json, out=result_path)
    if as_json:
        summary = result.summary()
        summary.update(data=str(data_path), out=str(result_path), data_time_s=t_data)
        _echo_json(summary, what="the demo")
        return
    click.echo(format_result(result, out=result_path, matrix=matrix, data_path=data_path))


def _check_demo_options(n_workers: int, out: Path | None) -> Path:
    """Refuse bad demo options before the data is simulated; return the output folder."""
    from daskstraggle import config
    from daskstraggle._output import check_not_in_zarr, check_writable_folder
    from daskstraggle.api import check_n_workers

    check_n_workers(n_workers, caller="demo", runtime="dask")  # the text of every solve
    folder = out or Path(config.output_dir()) / time.strftime("demo-%Y%m%d-%H%M%S")
    if folder.exists() and not folder.is_dir():
        raise InputError(f"--out {str(folder)!r} is a file; choose a new folder")
    if folder.exists() and any(folder.iterdir()):
        raise InputError(f"--out {str(folder)!r} exists and is not empty; choose a new folder")
    check_not_in_zarr(folder, what="The demo's folder (CLI: --out)")
    check_writable_folder(folder.absolute(), out=folder)
    return folder


# --------------------------------------------------------------------------------- main
def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; exit 2 with one line on bad input, 3 on divergence, 130 on Ctrl-C,
    1 on other library errors.

    Our warnings (e.g. a run that did not converge) are printed as one ``warning:`` line.
    """
    try:
        with _one_line_warnings():
            cli.main(args=list(argv) if argv is not None else None, standalone_mode=False)
    except click.exceptions.Abort:  # Ctrl-C (the cluster's workers ignore it)
        click.echo("aborted", err=True)
        return 130  # 128 + SIGINT, what shells report for an interrupted command
    except click.ClickException as err:
        err.show()
        return err.exit_code
    except StraggleError as err:
        click.echo(f"error: {err}", err=True)
        return 2 if isinstance(err, InputError) else 3 if isinstance(err, DivergenceError) else 1
    return 0


@contextlib.contextmanager
def _one_line_warnings() -> Iterator[None]:
    """Show each of our warnings as one line ``warning: ...`` on stderr; others as usual."""
    original = warnings.showwarning

    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
             file: Any = None, line: str | None = None) -> None:
        if issubclass(category, StraggleWarning):
            click.echo(f"warning: {message}", err=True)
        else:
            original(message, category, filename, lineno, file, line)

    with warnings.catch_warnings():  # restores the filters and showwarning on exit
        warnings.simplefilter("default", StraggleWarning)
        warnings.showwarning = show
        yield


if __name__ == "__main__":  # pragma: no cover - python -m daskstraggle.cli, as the script
    from daskstraggle._entry import ended, install_interrupt_handling

    install_interrupt_handling()
    exit_code = main()
    ended()
    sys.exit(exit_code)
