"""``fit_pca``, ``fit_logistic``, ``fit_least_squares``: one call from data to Result.

These are faces: they validate everything they can *before* any cluster work, open the
data, pick a runtime, and hand over to the run's lifecycle
(:func:`daskstraggle.runtime.lifecycle.run`).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import numbers
import os
import re
import textwrap
import warnings
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any, TypeVar, cast

import numpy as np

from daskstraggle._declared_options import Constraint, check_fields, flat_name
from daskstraggle._output import source_paths
from daskstraggle._recovery import recovery
from daskstraggle._validation import _fail, check_bool, check_mapping, check_rng
from daskstraggle.data._opening import is_dataset
from daskstraggle.data.genotypes import (
    GenotypeQC,
    check_not_allele_counts,
    check_qc_applies,
    drop_no_calls,
    filter_variants,
    matrix_after_run,
    parse_qc,
)
from daskstraggle.data.matrix import Matrix, is_plink_path, open_matrix
from daskstraggle.errors import (
    InvalidDataError,
    InvalidParameterError,
    NoCallError,
    SchedulerLostError,
    WorkerLostError,
)
from daskstraggle.latency.faults import term_names
from daskstraggle.latency.spec import parse_stragglers
from daskstraggle.methods import Gram, Method, make_method
from daskstraggle.methods.base import check_oversampling
from daskstraggle.options import RUN_GROUPS, Checkpoint, DataOptions, Report, RuntimeSpec
from daskstraggle.problems import PCA, LeastSquares, Logistic, Problem
from daskstraggle.problems.least_squares import _LinearModel
from daskstraggle.runtime import Runtime, RuntimeOptions, StopRule, get_runtime_class, lifecycle
from daskstraggle.runtime.auto import Choice, measure_and_choose, worth_measuring
from daskstraggle.runtime.checkpoint import check_resume_iterations, check_resume_workers
from daskstraggle.runtime.choice import choose_runtime
from daskstraggle.runtime.dask import MAX_LOCAL_WORKERS
from daskstraggle.trace import Result, check_output_path

F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["GRAM_AUTO_MAX_FEATURES", "MAX_IN_PROCESS_WORKERS", "MAX_LOCAL_WORKERS",
           "check_n_workers", "fit_least_squares", "fit_logistic", "fit_pca", "genotype_pca",
           "solve"]

#: Most workers of the in-process runtimes (``runtime="sim"`` or ``"local"``: a worker is a
#: share of the rows in this process); the Dask runtime's is :data:`MAX_LOCAL_WORKERS`.
MAX_IN_PROCESS_WORKERS = 100_000

#: The one statement of those bounds, in every error about a number of workers.
WORKERS_BOUND = (f"an int in [1, {MAX_LOCAL_WORKERS}] with the Dask runtime (worker processes "
                 f"of a LocalCluster on this machine) or in [1, {MAX_IN_PROCESS_WORKERS}] with "
                 "runtime='sim' or 'local'")


def check_n_workers(value: Any, *, caller: str, runtime: Any,
                    name: str | None = None) -> int:
    """Return ``value``, the workers the run starts, after checking its bound.

    An in-process ``runtime`` allows :data:`MAX_IN_PROCESS_WORKERS` workers, any other
    :data:`MAX_LOCAL_WORKERS`; ``name`` says what the value is (default: ``caller``'s
    ``n_workers``).

    Raises
    ------
    InvalidParameterError
        If ``value`` is not an int within the runtime's bound (the message states both,
        :data:`WORKERS_BOUND`), or no runtime is registered under ``runtime``.
    """
    in_process = _declared(runtime).in_process
    high = MAX_IN_PROCESS_WORKERS if in_process else MAX_LOCAL_WORKERS
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) \
            and 1 <= int(value) <= high:
        return int(value)
    what = name or f"The 'n_workers' parameter of {caller} (CLI: --workers)"
    which = f"runtime={runtime!r}" if in_process else "the Dask runtime"
    raise InvalidParameterError(f"{what} must be {WORKERS_BOUND}. Got {value!r} with {which} "
                                "instead.")

#: ``method="auto"`` solves PCA by the one-round exact Gram method up to this many
#: columns (a 4096 x 4096 float64 matrix is 128 MB per worker and on the coordinator),
#: and by the block Krylov method (``"block"``) above.
GRAM_AUTO_MAX_FEATURES = 4096


def _declared(runtime: Runtime | str | None) -> type[Runtime]:
    """The class whose declarations apply to ``runtime`` (None: the Dask runtime)."""
    if isinstance(runtime, Runtime):
        return type(runtime)
    return get_runtime_class("dask" if runtime is None else runtime)


def _connects(spec: RuntimeSpec) -> bool:
    """Whether the run connects to a cluster (a client, a scheduler address or file)."""
    return (spec.client, spec.scheduler, spec.scheduler_file) != (None, None, None)


def _check_runtime(spec: RuntimeSpec, method: Method, caller: str) -> int | None:
    """Refuse what cannot work; return the run's workers if known before connecting."""
    n_expected = _expected_workers(spec, caller)
    runtime, stragglers = spec.name, spec.stragglers
    if isinstance(runtime, Runtime):
        if _connects(spec) or spec.n_workers is not None:
            raise InvalidParameterError(
                "Pass either runtime=... or client/scheduler/n_workers, not both."
            )
        if stragglers:
            raise InvalidParameterError(
                "Pass stragglers to the runtime you built (DaskRuntime(stragglers=...) or "
                "SimRuntime(latency=...)), not to the fit function."
            )
    else:
        _check_declarations(_declared(runtime), spec)
        if n_expected is not None:
            stragglers.check_n_workers(n_expected)
    if n_expected is not None:
        method.check_n_workers(n_expected)
    if spec.min_workers is not None and (_declared(runtime).in_process or not _connects(spec)):
        raise InvalidParameterError(
            f"The 'min_workers' parameter of {caller} (CLI: --min-workers) waits for the "
            "workers of an existing cluster: pass client or scheduler (CLI: --scheduler) "
            "with it, or drop it."
        )
    _check_runtime_only(spec, caller)
    return n_expected


def _check_declarations(declared: type[Runtime], spec: RuntimeSpec) -> None:
    """Refuse what the runtime's declarations say it cannot do."""
    name, stragglers = declared.name, spec.stragglers
    if declared.in_process and _connects(spec):
        raise InvalidParameterError(
            f"runtime={name!r} runs in this process; drop client/scheduler (or use the "
            "Dask runtime)."
        )
    if declared.latency_kind == "none" and stragglers:
        raise InvalidParameterError(
            f"runtime={name!r} has no latency to slow down; use runtime='sim' (simulated "
            "stragglers) or the Dask runtime (injected stragglers)."
        )
    if declared.latency_kind != "simulated" and stragglers.faults:
        raise InvalidParameterError(
            f"The {term_names(stragglers.faults)} terms of stragglers are simulated faults: use "
            "runtime='sim' (CLI: --runtime sim); on a cluster, stop, kill or retire real "
            "workers instead."
        )
    if declared.latency_kind != "injected" and stragglers.throttle is not None:
        raise InvalidParameterError(
            "The throttle straggler slows real worker processes; it needs the Dask runtime, "
            f"not runtime={name!r}."
        )


def _expected_workers(spec: RuntimeSpec, caller: str) -> int | None:
    """The workers the run starts or a built Runtime has (None: ask the cluster)."""
    if spec.n_workers is not None:
        return check_n_workers(spec.n_workers, caller=caller, runtime=spec.name)
    if isinstance(spec.name, Runtime):
        return spec.name.n_workers
    if _connects(spec):
        return None
    from daskstraggle import config  # the runtimes' and the LocalCluster's default

    return check_n_workers(config.workers(), caller=caller, runtime=spec.name,
                           name="The daskstraggle.workers setting (the default of --workers)")


def _resolve_runtime(runtime: Runtime | str | None, spec: RuntimeSpec, rng: Any
                     ) -> AbstractContextManager[Runtime]:
    """The runtime to use (``runtime``, else one made from ``spec``, closed after)."""
    if isinstance(runtime, Runtime):
        return nullcontext(runtime)
    seed = int(rng) if isinstance(rng, int | np.integer) else None
    return _declared(runtime).from_options(RuntimeOptions(**_asked(spec), seed=seed))


def _asked(spec: RuntimeSpec) -> dict[str, Any]:
    """``spec``'s fields but the runtime's name."""
    return {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec) if f.name != "name"}


#: The checks of :func:`_run`'s own keywords (the groups' fields declare theirs), with the
#: command line's option of each that has one.
_OWN_CONSTRAINTS = {"step_size": (Constraint(float), "--step-size"),
                    "out": (Constraint(Path, example="run.zarr"), "--out"),
                    "overwrite": (Constraint(bool, none=False), None),
                    "progress": (Constraint(bool, none=False), None)}


def _run(
    problem: Problem,
    X: Any,
    *,
    labels: Any = None,
    method: str | Method = "auto",
    method_params: dict[str, Any] | None = None,
    step_size: float | None = None,
    rng: int | np.random.Generator | None = None,
    out: str | os.PathLike[str] | None = None,
    overwrite: bool = False,
    progress: bool = False,
    stop: StopRule | None = None,
    runtime: Any = None,  # a RuntimeSpec
    data: DataOptions | None = None,
    checkpoint: Checkpoint | None = None,
    report: Report | None = None,
    caller: str | None = None,
) -> Result:
    """:func:`solve`'s body: everything checked before any cluster work."""
    caller = caller or f"fit_{problem.name.replace('-', '_')}"
    given = locals()  # each keyword checked by its constraint, a group's None: its defaults
    step_size, out, _, _ = (constraint.check(given[name], name=name, caller=caller, flag=flag)
                            for name, (constraint, flag) in _OWN_CONSTRAINTS.items())
    stop, report, spec, data, ckpt = (
        check_fields(cls() if given[name] is None else given[name], caller=caller)
        for name, cls in RUN_GROUPS.items())
    runtime = spec.name
    if stop.gap_tol is not None and not report.reference:
        raise InvalidParameterError(
            f"The 'gap_tol' parameter of {caller} needs reference=True (CLI: --reference)."
        )
    check_rng(rng, caller=caller)
    meth, auto = _method_for(problem, method, method_params, rng, caller)
    spec = dataclasses.replace(spec, stragglers=parse_stragglers(spec.stragglers))
    asked = _asked(spec)
    choice = choose_runtime(runtime, **asked)  # None: the data's size decides, once open
    spec = dataclasses.replace(spec, client=choice.client)
    n_expected = _check_runtime(spec, meth, caller)
    qc = parse_qc(data.qc, caller=caller)
    # never the input store, nor inside or around it (even with overwrite)
    out_path = check_output_path(out, overwrite=overwrite, inputs=source_paths(X))
    rec = recovery(ckpt.path, ckpt.interval, ckpt.iterations, ckpt.resume,
                   ckpt.replica_divergence, inputs=source_paths(X), out=out_path, caller=caller,
                   replica_ok=_outlives_this_process(spec))
    state = rec.state
    if state is not None:
        check_resume_iterations(state, stop.max_iter)
        # the worker count, when known before connecting: refused before a cluster starts
        check_resume_workers(state, n_expected)
    matrix = _open_for(problem, X, labels=labels, qc=qc, caller=caller, data=data)
    meth = _auto_for_data(meth, auto=auto, state=state, matrix=matrix)
    meth.check_shape(matrix.n_rows, matrix.n_columns)
    if choice.runtime is None:
        choice = choose_runtime(runtime, **asked, data_bytes=matrix.n_rows * matrix.row_nbytes)
    with _resolve_runtime(choice.runtime, spec, rng) as rt:
        if rec.uses_replica:  # read and written on the connected scheduler
            state = rec.connect(rt, problem=problem.name, sources=source_paths(X),
                                max_iter=stop.max_iter)
            meth = _auto_for_data(meth, auto=auto, state=state, matrix=matrix)
        if qc is not None and qc.needs_counts:  # one counting pass, on the run's workers
            matrix = filter_variants(matrix, qc.count_steps(), client=getattr(rt, "client", None))
            problem.check_shape(matrix.n_rows, matrix.n_columns)
            meth.check_shape(matrix.n_rows, matrix.n_columns)
        choices: list[Choice] = []  # what auto measured, predicted and chose
        run = functools.partial(_measured_run, rt, meth, problem, rng=rng, choices=choices,
                      measure=auto and state is None and type(rt).measures_workers
                      and worth_measuring(matrix.n_rows, matrix.n_columns),
                      stop=stop, step_size=step_size, reference=report.reference,
                      progress=progress, record_iterates=report.record_iterates,
                      checkpoint=rec.writer, resume=state)
        with _resume_hint(rec):
            result = _run_without_no_calls(run, _as_resumed(matrix, state), problem, meth)
        rec.finished()
    result.attrs.update(_choices_made(result, choices, choice.reason))
    if out_path is not None:
        result.save(out_path, overwrite=overwrite)
    return result


def _method_for(problem: Problem, method: str | Method, method_params: Any, rng: Any,
                caller: str) -> tuple[Method, bool]:
    """The run's method, checked against ``problem``, and whether ``method`` was "auto"."""
    method_params = check_mapping(method_params, name="method_params", caller=caller)
    auto = isinstance(method, str) and method == "auto"
    if auto and method_params:
        raise InvalidParameterError(
            f"The 'method_params' parameter of {caller} needs an explicit method (CLI: "
            "--method); with method='auto' the method is chosen from the data."
        )
    # auto before the data is open (see _auto_for_data)
    name = method if not auto else "gd" if not isinstance(problem, PCA) else (
        "gram" if problem.oversample is None else "block")
    meth = make_method(name, **_seeded(name, method_params, rng))
    meth.check_problem(problem)
    check_oversampling(meth, problem)
    return meth, auto


def _choices_made(result: Result, choices: list[Choice], reason: str | None
                  ) -> dict[str, Any]:
    """What ``auto`` chose (``"auto"``) and why the runtime ran, those that apply."""
    made = {"auto": choices[-1].as_attrs(result) if choices else None,
            "runtime_reason": reason}
    return {key: value for key, value in made.items() if value is not None}


@contextmanager
def _resume_hint(rec: Any) -> Iterator[None]:
    """A lost scheduler or worker: the error says how to resume from the checkpoint."""
    try:
        yield
    except (SchedulerLostError, WorkerLostError) as err:
        hint = rec.resume_hint(err)
        if hint is None or rec.writer is None:
            raise
        then = str(err).removesuffix(" and run again.").removesuffix(".")
        raise type(err)(
            f"{then} and continue from the last checkpoint (after iteration "
            f"{rec.writer.written}): --resume {hint!r} (API: resume=)."
        ) from err


def _open_for(problem: Problem, X: Any, *, labels: Any, qc: GenotypeQC | None, caller: str,
              data: DataOptions) -> Matrix:
    """Open ``X`` for ``problem`` before any cluster work (logistic's labels as -1/+1)."""
    if labels is not None and not problem.needs_labels:
        raise InvalidParameterError(
            f"The 'labels' parameter of {caller} applies to a problem fitted to labels "
            f"(logistic, least-squares); {problem.name} takes none. Drop it."
        )
    open_kw = {f.name: getattr(data, f.name) for f in dataclasses.fields(data) if f.name != "qc"}
    matrix = open_matrix(X, labels=labels, qc=None if qc is None else qc.site_steps(),
                         **open_kw)
    check_qc_applies(matrix, qc)  # the steps counted on the workers too, before a cluster
    problem.check_shape(matrix.n_rows, matrix.n_columns)
    if problem.needs_labels and matrix.labels is None:
        raise InvalidParameterError(
            f"{caller} needs labels: pass labels=... (an array, or the name of an array "
            "in the Zarr group; CLI: --labels)."
        )
    if isinstance(problem, Logistic) and matrix.labels is not None:
        return matrix.with_labels(to_plus_minus_one(matrix.labels))
    return matrix


def _measured_run(rt: Runtime, meth: Method, problem: Problem, matrix: Matrix, *,
                  rng: Any, measure: bool, choices: list[Choice], **run: Any) -> Result:
    """:func:`run_on`; with ``measure``, by the method ``auto`` measured (to ``choices``)."""
    if not measure:
        return run_on(rt, meth, problem, matrix, rng=rng, **run)
    choices.append(measure_and_choose(rt, problem, matrix, meth, rng=np.random.default_rng(rng)))
    with choices[-1].applied(rt):
        return run_on(rt, choices[-1].method, problem, matrix, rng=rng, **run)


#: The options only some runtimes take: the runtime class's attribute that allows each, the
#: runtimes that do, how a Runtime you built takes it, and why another refuses it.
_RUNTIME_ONLY = {
    "backup_after": ("backups", "Dask or simulated runtime",
                     "DaskRuntime(backup_after=...) or SimRuntime(backup_after=...)",
                     "has no workers to back up"),
    "aggregation": ("aggregates", "Dask or simulated runtime",
                    "DaskRuntime(aggregation='tree') or SimRuntime(aggregation='tree')",
                    "sums its results in this process already")}


def _check_runtime_only(spec: RuntimeSpec, caller: str) -> None:
    """Refuse the options of ``_RUNTIME_ONLY`` but for a runtime that takes them."""
    runtime = spec.name
    for name, (allows, which, built, why) in _RUNTIME_ONLY.items():
        if getattr(spec, name) in (None, "flat") or (
                not isinstance(runtime, Runtime) and getattr(_declared(runtime), allows)):
            continue
        raise InvalidParameterError(
            f"The {name!r} parameter of {caller} (CLI: --{name.replace('_', '-')}) applies "
            f"to the {which} it starts or connects to; "
            + (f"pass it to {built}." if isinstance(runtime, Runtime)
               else f"runtime={runtime!r} {why}.")
        )


def _outlives_this_process(spec: RuntimeSpec) -> bool:
    """Whether the run's cluster outlives this process (the Dask runtime connected)."""
    return _connects(spec) and not isinstance(spec.name, Runtime) and (
        spec.name in (None, "dask"))


def _auto_for_data(meth: Method, *, auto: bool, state: dict[str, Any] | None,
                   matrix: Matrix) -> Method:
    """``method="auto"`` once the data is open: the resumed run's method, else block
    instead of gram above ``GRAM_AUTO_MAX_FEATURES`` columns."""
    if not auto:
        return meth
    if state is not None:
        return cast(Method, state["run"]["method"])
    if isinstance(meth, Gram) and matrix.n_columns > GRAM_AUTO_MAX_FEATURES:
        return make_method("block")
    return meth


def _as_resumed(matrix: Matrix, state: dict[str, Any] | None) -> Matrix:
    """``matrix`` without the no-call samples and variants the resumed run removed."""
    recorded = None if state is None else state["settings"].get("no_call")
    if not recorded or "no call" in matrix.describe().get("qc", {}).get("removed", {}):
        return matrix
    return drop_no_calls(matrix, np.asarray(recorded["samples"], dtype=np.int64),
                         np.asarray(recorded["variants"], dtype=np.int64))


def _run_without_no_calls(run: Callable[[Matrix], Result], matrix: Matrix, problem: Any,
                          meth: Any) -> Result:
    """``run(matrix)``; on a NoCallError, again without those samples and variants
    (listed in ``result.attrs["no_call"]``, see :func:`matrix_after_run`)."""
    try:
        return run(matrix)
    except NoCallError as err:
        if err.samples.size == matrix.n_columns or err.variants.size == matrix.n_rows:
            raise
        matrix = drop_no_calls(matrix, err.samples, err.variants)
        problem.check_shape(matrix.n_rows, matrix.n_columns)
        meth.check_shape(matrix.n_rows, matrix.n_columns)
        result = run(matrix)
        result.attrs["no_call"] = {"samples": err.samples.tolist(),
                                   "variants": err.variants.tolist()}
        return result


#: The ``fit_*`` functions' options in their signatures' order: :func:`_run`'s own
#: keywords, and where a group of :data:`~daskstraggle.options.RUN_GROUPS` is named, the
#: flat keywords of its fields.
_FLAT_ORDER = ("method", "method_params", "step_size", "stop", "report", "runtime", "rng",
               "data", "checkpoint", "out", "overwrite", "progress")


#: Each ``fit_*`` option: ``(solve's parameter, group, field)``, None for ``_run``'s.
_GROUPED: dict[str, tuple[str, type, dataclasses.Field[Any]] | None] = {
    option: where for name in _FLAT_ORDER for option, where in (
        [(name, None)] if name not in RUN_GROUPS else
        [(flat_name(field), (name, RUN_GROUPS[name], field))
         for field in dataclasses.fields(RUN_GROUPS[name])])}
_FIT_OPTIONS = tuple(_GROUPED)

#: The run options described otherwise than by :func:`solve`'s docstring or their group's
#: (:func:`_options_doc`).
_OPTIONS_DOC = """    method_params : dict or None, default=None
        Extra parameters of the method, e.g. ``{"n_wait": 3}`` for ``"dsag"``.
"""


def _with_run_options(fn: F) -> F:
    """``fn`` with every run option as a keyword-only parameter, documented at ``<options>``;
    ``fn`` gets every option, defaults filled."""
    own, run = inspect.signature(fn), inspect.signature(_run).parameters
    params = [p for p in own.parameters.values() if p.kind is not p.VAR_KEYWORD] + [
        run[name].replace(kind=inspect.Parameter.KEYWORD_ONLY) if where is None else
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=where[2].default,
                          annotation=where[2].type)  # the field's default, else _run's
        for name, where in _GROUPED.items()]
    signature = own.replace(parameters=params)

    @functools.wraps(fn)
    def with_options(*args: Any, **kwargs: Any) -> Any:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as err:
            raise TypeError(f"{fn.__name__}() {err}") from None
        bound.apply_defaults()
        return fn(*bound.args, **bound.kwargs)

    assert fn.__doc__ is not None and "    <options>\n" in fn.__doc__
    with_options.__doc__ = fn.__doc__.replace("    <options>\n", _options_doc())
    with_options.__signature__ = signature  # type: ignore[attr-defined]
    return cast(F, with_options)


def _options_doc() -> str:
    """The run options' numpydoc entries: solve's, the groups' (flat names) or CLI help."""
    written, solves = _doc_entries(_OPTIONS_DOC), _doc_entries(solve.__doc__)
    entries = []
    for name, where in _GROUPED.items():
        if name in written or where is None:
            entries.append(written.get(name) or solves[name])
            continue
        field = where[2]
        if (entry := _doc_entries(where[1].__doc__).get(field.name)) is not None:
            for other in dataclasses.fields(where[1]):  # the group's names as fit_* keywords
                entry = entry.replace(f"``{other.name}``", f"``{flat_name(other)}``")
            entries.append(entry.replace(f"    {field.name} : ", f"    {name} : ", 1))
            continue
        cli = field.metadata.get("cli")
        text = cli.help if cli is not None else ""
        entries.append(f"    {name} : {field.type}, default={field.default!r}\n"
                       + textwrap.fill(text, 92, initial_indent=" " * 8,
                                       subsequent_indent=" " * 8) + "\n")
    return "".join(entries)


def _doc_entries(doc: str | None) -> dict[str, str]:
    """The entries of the Parameters section of ``doc`` (or of a list of entries)."""
    head, header, tail = (doc or "").partition("Parameters\n    ----------\n")
    section = (tail if header else head).split("\n\n")[0]
    return {entry.split(" : ", 1)[0].strip(): entry.rstrip() + "\n"
            for entry in re.split(r"(?m)^(?=    \S)", section + "\n") if entry.strip()}


def _grouped(flat: dict[str, Any]) -> dict[str, Any]:
    """:func:`_run`'s keywords from the flat run options (groups built from fields)."""
    fields: dict[str, dict[str, Any]] = {param: {} for param in RUN_GROUPS}
    for name, value in flat.items():
        if (where := _GROUPED[name]) is not None:
            fields[where[0]][where[2].name] = value
    return {name: value for name, value in flat.items() if _GROUPED[name] is None} | {
        param: RUN_GROUPS[param](**given) for param, given in fields.items()}


#: The flat keywords ``solve`` took before its options were grouped, and where each went.
_MOVED_KEYWORDS = {
    name: f"{where[0]}={where[1].__name__}({where[2].name}=...)"
    for name, where in _GROUPED.items()
    if where is not None and where[2].name not in ("name", "path")
} | {"method_params": "a method object, e.g. method=DSAG(n_wait=3), or make_method(name, ...)"}


def solve(
    problem: Problem | str,
    X: Any,
    *,
    labels: Any = None,
    method: str | Method = "auto",
    step_size: float | None = None,
    stop: StopRule | None = None,
    runtime: Runtime | RuntimeSpec | str | Any = None,
    data: DataOptions | None = None,
    checkpoint: Checkpoint | str | os.PathLike[str] | None = None,
    report: Report | None = None,
    out: str | os.PathLike[str] | None = None,
    overwrite: bool = False,
    progress: bool = False,
    rng: int | np.random.Generator | None = None,
    **moved: Any,
) -> Result:
    """Fit ``problem`` on ``X``: the engine behind the ``fit_*`` functions, options grouped.

    Parameters
    ----------
    problem : Problem or str
        Unbound problem, e.g. ``daskstraggle.problems.PCA(n_components=3)``, or a
        registered name (``"pca"``, ``"logistic"``, ``"least-squares"``) for its defaults.
    X : str, path, array-like, xarray.Dataset or Matrix
        Anything :func:`~daskstraggle.open_matrix` accepts.
    labels : str, array-like or None, default=None
        Labels or targets: an array, or the name of an array in the Zarr group.
    method : str or Method, default="auto"
        A method object carrying its parameters (``DSAG(n_wait=3)``,
        :func:`daskstraggle.methods.make_method`), a registered name
        (:func:`daskstraggle.methods.list_methods`) with its defaults: ``"gd"`` (the power
        method for PCA), ``"nag"`` (regression), ``"sgd"``, ``"sag"``, ``"dsag"`` (waits
        for the fastest ``n_wait`` workers), ``"coded"``, ``"gram"`` (PCA: exact in one
        round), ``"block"`` (PCA: block Krylov), ``"ignore-stragglers"``, ``"partial"``
        (RCS partial recovery), ``"async"`` (bounded delay); or ``"auto"``: for PCA
        ``"gram"`` up to 4096 columns, else ``"block"``, for regression ``"gd"``; on a
        cluster, for a matrix of at least 64 MB as float64, the candidate predicted
        fastest (by 1.25 times over the plain method) from a short probe of the workers,
        and ``"gram"`` with speculative backups (no probe: its one round is the job)
        (:mod:`daskstraggle.runtime.auto`; ``result.attrs["auto"]``). A resumed run
        takes its checkpoint's method.
    step_size : float or None, default=None
        None: the problem's safe default (1 for PCA, ``1/L`` estimated by power iteration
        for regression) times the method's factor: with sgd, sag and dsag 0.9 for PCA and
        ``min(1, 2 / p)`` for regression (``p`` the subpartitions, doubled with
        ``balance``), ``1 / n_workers`` with async, else 1.
    stop : StopRule or None, default=None
        When the run ends (None: ``StopRule()``, 100 iterations or ``tol=1e-6``).
    runtime : RuntimeSpec, str, Runtime, distributed.Client or None, default=None
        Where the run happens: a :class:`~daskstraggle.options.RuntimeSpec` (runtime name,
        client or scheduler, workers, stragglers, backups), a registered runtime's name
        (``"dask"``, ``"local"``, ``"sim"``), a Runtime you built, or a Client to run on.
        None: chosen as Dask does (see :class:`~daskstraggle.options.RuntimeSpec`).
    data : DataOptions or None, default=None
        How ``X`` is opened (:class:`~daskstraggle.options.DataOptions`: Zarr member,
        partitions, missing chunks, a URL's storage options, allele counts, genotype QC).
    checkpoint : Checkpoint, str, path or None, default=None
        A file to checkpoint to, or a :class:`~daskstraggle.options.Checkpoint` (interval,
        iterations, the checkpoint to resume from).
    report : Report or None, default=None
        Also compute the reference optimum or the exact objective at every iteration
        (:class:`~daskstraggle.options.Report`).
    out : str, path or None, default=None
        Also save the result as a Zarr store here (checked before any cluster work).
    overwrite : bool, default=False
        Allow ``out`` to replace an existing path.
    progress : bool, default=False
        Show a progress bar on stderr, and the Dask dashboard's address once the
        first round starts.
    rng : int, Generator or None, default=None
        Seed of the starting point and step-size estimate (an int also seeds the method's
        and the stragglers' draws), so a seeded run is reproducible bit for bit.
    **moved
        The flat keywords ``solve`` took before (``max_iter``, ``n_workers``, ...) still
        work, with a ``DeprecationWarning`` naming the group each moved to; the ``fit_*``
        functions take them all as keywords.

    Returns
    -------
    result : Result

    Raises
    ------
    InvalidParameterError, InvalidDataError, DataNotFoundError, OutputExistsError,
    OutputNotWritableError, ClusterConnectionError, NonFiniteDataError, CorruptDataError,
    MissingChunksError
        Bad input, reported before cluster work starts (as for the ``fit_*`` functions).

    Examples
    --------
    >>> import numpy as np
    >>> from daskstraggle import StopRule, solve
    >>> from daskstraggle.options import RuntimeSpec
    >>> from daskstraggle.problems import LeastSquares
    >>> X = np.random.default_rng(0).normal(size=(200, 3))
    >>> res = solve(LeastSquares(), X, labels=X @ [1.0, 2.0, 3.0], method="gd",
    ...             stop=StopRule(max_iter=500, tol=1e-9), runtime=RuntimeSpec("local"))
    >>> res.fitted["coef"].round(6)
    array([1., 2., 3.])
    """
    passed = locals()  # the groups as given
    groups = {name: _as_group(name, cls, passed[name]) for name, cls in RUN_GROUPS.items()}
    wheres = []
    for name, value in moved.items():
        if name not in _MOVED_KEYWORDS:
            raise TypeError(f"solve() got an unexpected keyword argument {name!r}")
        where, group = _MOVED_KEYWORDS[name], _GROUPED[name]
        if group is None:
            groups[name] = value
        elif isinstance(passed[group[0]], group[1]):  # the group was given too
            raise InvalidParameterError(
                f"solve got {name}= and a group that sets it too; pass it once, as {where}."
            )
        else:
            groups[group[0]] = dataclasses.replace(groups[group[0]], **{group[2].name: value})
        wheres.append(f"{name!r}: pass {where}")
    if wheres:
        warnings.warn(f"solve's flat keywords moved into groups ({'; '.join(wheres)}); the "
                      "fit_* functions keep them as keywords.", DeprecationWarning,
                      stacklevel=2)
    return _run(_as_problem(problem), X, labels=labels, method=method, step_size=step_size,
                out=out, overwrite=overwrite, progress=progress, rng=rng, caller="solve",
                **groups)


def _as_problem(problem: Any) -> Problem:
    """``solve``'s problem: a Problem, or a registered name (its defaults)."""
    if isinstance(problem, Problem):
        return problem
    if isinstance(problem, str):
        from daskstraggle.problems import list_problems, make_problem

        if problem.replace("_", "-") not in list_problems():
            _fail("problem", "solve", f"a Problem or one of {list_problems()}", problem)
        return make_problem(problem)
    raise InvalidParameterError(
        "The 'problem' parameter of solve must be a Problem (e.g. "
        "daskstraggle.problems.PCA(n_components=3)) or a registered name such as 'pca'. Got "
        f"{type(problem).__name__} instead."
    )


def _as_group(name: str, cls: type, value: Any) -> Any:
    """``solve``'s group ``name`` (also from a runtime, client or checkpoint path)."""
    if value is None or isinstance(value, cls):
        return cls() if value is None else value
    if name == "runtime":  # a Runtime or a name is checked (or refused) by _run
        client = not isinstance(value, Runtime | str) and hasattr(
            value, "scheduler_info") and hasattr(value, "submit")
        return cls(client=value) if client else cls(name=value)
    if name == "checkpoint":
        return cls(path=value)
    raise InvalidParameterError(
        f"The {name!r} parameter of solve must be a {cls.__name__} or None. Got "
        f"{type(value).__name__} instead."
    )


def to_plus_minus_one(labels: np.ndarray) -> np.ndarray:
    """Map binary labels {0, 1} or {-1, +1} to {-1.0, +1.0}.

    Raises
    ------
    InvalidDataError
        If the labels do not take exactly two values of one of these sets.
    """
    values = np.unique(labels)
    if len(values) == 2 and set(values.tolist()) in ({0.0, 1.0}, {-1.0, 1.0}):
        return np.where(labels > 0, 1.0, -1.0)
    shown = values[:5].tolist() + (["..."] if len(values) > 5 else [])
    raise InvalidDataError(
        "The labels of logistic regression must take exactly two values, {-1, +1} or "
        f"{{0, 1}}; got {len(values)} distinct value(s): {shown}."
    )


def _seeded(name: Any, params: dict[str, Any], rng: Any) -> dict[str, Any]:
    """A random method's ``rng`` defaults to the run's integer seed (bit-for-bit reruns)."""
    if (isinstance(rng, int | np.integer) and params.get("rng") is None
            and isinstance(name, str) and "rng" in make_method(name, **params).get_params()):
        return {**params, "rng": int(rng)}
    return params


@_with_run_options
def fit_pca(
    X: Any,
    n_components: int = 2,
    *,
    center: bool | None = None,
    oversample: int | None = None,
    min_eigengap: float | None = None,
    **options: Any,
) -> Result:
    """Fit a PCA of ``X`` (rows = samples) with a straggler-aware method.

    Parameters
    ----------
    X : str, path, array-like, xarray.Dataset or Matrix
        Data; a VCF Zarr path or an ``xarray.Dataset`` in its layout (also a filtered
        view) gives genotype PCA (rows = variants, columns = samples). A 2-D integer
        array that looks like allele counts is refused unless ``genotype_dims`` gives
        its orientation.
    n_components : int, default=2
        Number of principal components.
    center : bool or None, default=None
        Subtract the column means (implicitly, no dense centred copy). None: True,
        except for Patterson-scaled genotypes whose rows are already centred.
    oversample : int or None, default=None
        Extra columns ``p`` carried beyond the ``k`` components by the methods whose
        rounds are exact (subspace iteration with Rayleigh-Ritz for gd, nag and coded;
        the block size ``k + p`` of ``"block"``). None: 0, the power method, except
        ``p = k`` for ``"block"``. Refused with ``"gram"`` (exact anyway) and with the
        methods that step from partial sums or caches (sgd, sag, dsag, partial, async):
        their extra columns would never settle.
    min_eigengap : float or None, default=None
        Relative eigengap in ``[0, 1)`` that separates two components. With ``"block"``
        (or an oversampled block), components in a bulk that runs past the ``k``-th
        without such a gap converge in variance only: the run stops when their Ritz
        values have settled to ``tol`` instead of resolving eigenvectors the data do not
        determine, and ``result.determined`` names them ``"variance"``. None: North's
        rule, ``sqrt(2 / n_rows)``; 0: every component converges as an eigenvector.
    <options>

    Returns
    -------
    result : Result
        ``result.fitted`` holds ``components`` (k, n_features), ``explained_variance``,
        ``explained_variance_ratio``, ``singular_values`` and ``mean``.

    Raises
    ------
    InvalidDataError
        If ``X`` looks like allele counts and ``genotype_dims`` is not given (see
        :func:`~daskstraggle.data.genotypes.check_not_allele_counts`); and see
        :func:`solve`.

    Examples
    --------
    >>> import numpy as np
    >>> from daskstraggle import fit_pca
    >>> X = np.random.default_rng(0).normal(size=(300, 6)) * [5, 3, 1, 1, 1, 1]
    >>> res = fit_pca(X, 2, runtime="local", rng=0)
    >>> res.fitted["explained_variance_ratio"].round(2)
    array([0.67, 0.23])
    """
    dims = options["genotype_dims"]
    if dims is None:
        check_not_allele_counts(X, caller="fit_pca")
    if center is None:
        if isinstance(X, str | os.PathLike) or is_dataset(X) or dims is not None:
            # open once here; _run takes the Matrix
            X = open_matrix(X, **{k: options[k] for k in (*_OPEN_KEYS, "genotype_dims")})
            if dims is None:
                check_not_allele_counts(X, caller="fit_pca")  # a 2-D integer Zarr array
            options.update(array=None, storage_options=None, genotype_dims=None)
        center = not (isinstance(X, Matrix) and X.rows_standardized)
    return _run(PCA(n_components=n_components, center=center, oversample=oversample,
                    min_eigengap=min_eigengap), X, **_grouped(options))


#: The run options that say how to open the data.
_OPEN_KEYS = ("array", "missing_chunks", "storage_options")


@_with_run_options
def genotype_pca(
    ds: Any,
    n_components: int = 10,
    *,
    merge: bool = True,
    **options: Any,
) -> Any:
    """Run a genotype PCA and return it in sgkit's terms (``sgkit.pca``'s variables).

    The same fit as :func:`fit_pca` on a VCF Zarr store or Dataset (rows = variants,
    Patterson-scaled), then one pass over the variants for their axes. The output follows
    ``sgkit.pca`` exactly (``docs/genotype-pca.md`` sets the conventions beside
    scikit-learn's and plink2's): ``sample_pca_projection`` (samples, components) the
    samples' scores ``U S``; ``sample_pca_component`` (variants, components) the unit
    variant axes ``V``; ``sample_pca_explained_variance`` ``var(U S)`` with ddof 0
    (``s² / n_samples``); ``sample_pca_explained_variance_ratio`` (``s² / ‖Z‖²``);
    ``sample_pca_loading`` ``V * sqrt(explained_variance)``. Signs as dask's
    ``svd_flip``: each component's ``sample_pca_component`` sums to >= 0. Unlike sgkit,
    missing calls are imputed (the variant's mean, so they contribute 0) and monomorphic
    variants contribute nothing instead of failing the fit.

    Parameters
    ----------
    ds : xarray.Dataset, str, path or Matrix
        A Dataset in VCF Zarr layout (also a view from ``ds.sel``/``ds.isel``/a boolean
        variant mask, read on the workers from its store), a VCF Zarr path, a PLINK
        ``.bed`` path (with ``merge=False``), or a genotype Matrix.
    n_components : int, default=10
        Number of components (sgkit's default).
    merge : bool, default=True
        Return ``ds`` with the PCA variables added, as sgkit's ``merge=True`` (a path is
        opened with ``xarray.open_zarr``; variants removed by ``qc`` get NaN); False: the
        PCA variables alone, with ``sample_id``, ``variant_contig`` and
        ``variant_position`` coordinates.
    <options>

    Returns
    -------
    ds : xarray.Dataset
        The ``sample_pca_*`` variables (float64), merged into ``ds`` if ``merge``.

    Raises
    ------
    InvalidDataError
        If ``ds`` is not genotypes.
    InvalidParameterError
        If ``merge`` is not a bool, or is True for a Matrix or a PLINK ``.bed``/``.pgen`` fileset
        (which have no Dataset to merge into); and as :func:`fit_pca`.

    Examples
    --------
    >>> import daskstraggle as ds
    >>> out = ds.genotype_pca(xr.open_zarr("g.vcz"), 4, qc={"min_maf": 0.01})  # doctest: +SKIP
    >>> out.sample_pca_projection.shape  # doctest: +SKIP
    (300, 4)
    """
    from daskstraggle import _sgkit
    from daskstraggle._plink_out import variant_axes

    merge = _check_merge(merge, ds)
    client = choose_runtime(**{k: options[k] for k in (  # the variant pass's too
        "runtime", "client", "scheduler", "scheduler_file", "n_workers")}).client
    open_kw = {k: options.pop(k) for k in _OPEN_KEYS}
    matrix = open_matrix(ds, qc=options["qc"], client=client, **open_kw)
    if not matrix.genotypes or not matrix.rows_standardized:
        raise InvalidDataError(
            f"genotype_pca needs genotypes (a VCF Zarr store or Dataset); got {matrix.kind}. "
            "Use fit_pca for another matrix."
        )
    result = fit_pca(matrix, n_components, **{**options, "qc": None})
    matrix = matrix_after_run(matrix, result)
    fitted = result.fitted
    s = fitted["singular_values"]
    axes = variant_axes(matrix, fitted["components"], s, client)[1]
    table = matrix.variants
    coords = {} if table is None else {
        name: values for name in ("variant_contig", "variant_position")
        if (values := table.get(name)) is not None}
    out = _sgkit.pca_dataset(fitted["components"], s, fitted["explained_variance_ratio"],
                             axes, sample_id=matrix.columns, variant_coords=coords)
    if not merge:
        return out
    if not is_dataset(ds):
        import xarray as xr

        with warnings.catch_warnings():  # a store without consolidated metadata is fine
            warnings.filterwarnings("ignore", "Failed to open Zarr store with consolidated",
                                    RuntimeWarning)
            ds = xr.open_zarr(os.fspath(ds), storage_options=open_kw["storage_options"])
    report = matrix.attrs.get("qc")
    return _sgkit.merge_into(ds, out, None if report is None else report.kept,
                             None if report is None else report.samples_kept)


def _check_merge(merge: Any, ds: Any) -> bool:
    """``genotype_pca``'s ``merge``: False for what has no Dataset to merge into."""
    merge = check_bool(merge, name="merge", caller="genotype_pca")
    what = (None if not merge else "a Matrix" if isinstance(ds, Matrix) else
            "a PLINK .bed or .pgen fileset or a .bgen file" if is_plink_path(ds) else None)
    if what is not None:
        raise InvalidParameterError(
            f"The 'merge' parameter of genotype_pca must be False for {what} (there is no "
            "Dataset to merge into). Got True instead; pass merge=False"
            + (" or the Dataset." if isinstance(ds, Matrix) else ".")
        )
    return merge


def _regression_face(problem: type[_LinearModel], summary: str, labels: str,
                     alpha: float | None, alpha_doc: str) -> Callable[..., Result]:
    """The ``fit_*`` function of a regression ``problem`` (``alpha``: its default)."""

    def fit(X: Any, labels: Any, *, alpha: float | None = alpha, fit_intercept: bool = True,
            **options: Any) -> Result:
        return _run(problem(alpha=alpha, fit_intercept=fit_intercept), X, labels=labels,
                    **_grouped(options))

    fit.__name__ = fit.__qualname__ = f"fit_{problem.name.replace('-', '_')}"
    fit.__annotations__["alpha"] = "float | None" if alpha is None else "float"
    fit.__doc__ = f"""Fit {summary} with a straggler-aware method.

    Parameters
    ----------
    X : str, path, array-like or Matrix
        Features (rows = examples).
    labels : str or array-like
        {labels}, or the name of such an array in the Zarr group.
    alpha : {alpha_doc}
    fit_intercept : bool, default=True
        Fit an intercept.
    <options>

    Returns
    -------
    result : Result
        ``result.fitted`` holds ``coef`` and ``intercept``.
    """
    return _with_run_options(fit)


fit_logistic = _regression_face(
    Logistic, "L2-regularised logistic regression", "Labels in {0, 1} or {-1, +1}", None,
    "float or None, default=None\n        L2 penalty ``alpha/2 |w|^2`` (None: "
    "``1/n_samples``); the intercept is not penalised.")
fit_least_squares = _regression_face(
    LeastSquares, "(ridge) least-squares regression", "Targets", 0.0,
    "float, default=0.0\n        L2 penalty ``alpha/2 |w|^2``.")


def run_on(runtime: Runtime, method: Method, problem: Problem, matrix: Matrix,
           **options: Any) -> Result:
    """Run ``method`` on ``problem`` and ``matrix`` on a runtime you built, with the
    engine's own objects: the face over :func:`daskstraggle.runtime.lifecycle.run`,
    which takes the same ``options`` (``stop``, ``step_size``, ``reference``, ``rng``,
    ``progress``, ``record_iterates``, ``checkpoint``, ``resume``) and documents them.

    :func:`solve` does the same from names and grouped options, checked before any work,
    and starts (and stops) the runtime itself.

    Returns
    -------
    result : Result
        Built from the run's outcome (:meth:`Result.from_outcome`).

    Warns
    -----
    ConvergenceWarning
        If the stop rule has ``tol`` or ``gap_tol`` and the run ended without meeting it.

    Examples
    --------
    >>> import numpy as np
    >>> import daskstraggle as ds
    >>> from daskstraggle.api import run_on  # imports daskstraggle.problems and .runtime
    >>> X = np.random.default_rng(0).normal(size=(200, 4))
    >>> data = ds.open_matrix(X, labels=X @ [1.0, 2.0, 0.0, -1.0])
    >>> with ds.runtime.LocalRuntime(2) as rt:
    ...     res = run_on(rt, ds.GD(), ds.problems.LeastSquares(), data, rng=0)
    >>> res.converged, np.round(res.fitted["coef"], 3).tolist()
    (True, [1.0, 2.0, 0.0, -1.0])
    """
    return Result.from_outcome(lifecycle.run(runtime, method, problem, matrix, **options))
