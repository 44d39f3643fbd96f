"""Results of a run: fitted quantities plus a per-iteration trace as an xarray.Dataset,
saved atomically as one Zarr group (:meth:`Result.save`)."""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import xarray as xr

from daskstraggle._output import check_output_path, source_paths, write_atomically
from daskstraggle.engine.recorder import TraceRecorder
from daskstraggle.errors import (
    ConvergenceWarning,
    CorruptDataError,
    DataNotFoundError,
    InvalidDataError,
)

if TYPE_CHECKING:
    from daskstraggle.runtime.lifecycle import Outcome

__all__ = ["Result", "TraceRecorder", "check_output_path", "trace_dataset"]

#: Dimensions of the fitted arrays; "feature" is renamed to the matrix's column dimension.
_FITTED_DIMS: dict[str, tuple[str, ...]] = {
    "components": ("component", "feature"), "explained_variance": ("component",),
    "explained_variance_ratio": ("component",), "singular_values": ("component",),
    "mean": ("feature",), "residuals": ("component",), "coef": ("feature",), "intercept": (),
    "grad_norm": ()}

#: What :attr:`Result.quality_control` reports of the matrix's quality control record.
_QC_COUNTS = ("n_variants", "n_kept", "removed", "n_samples", "n_samples_kept",
              "samples_removed")
#: The trace's variables over ``iteration`` that every row has (:meth:`TraceRecorder.add`),
#: and those of them that are counts.
_ROW_KEYS = ("wall_time", "iteration_duration", "objective", "gap", "n_workers_used",
             "n_fresh", "n_stale", "max_compute_duration", "coverage", "n_dropped")
_INT_KEYS = frozenset({"n_workers_used", "n_fresh", "n_stale", "n_dropped"})
#: The load-balancing events' fields (``balance_*`` over ``balance_event``): their dtype
#: and whether they hold one value per worker.
_BALANCE_VARS = {"iteration": (np.int64, False), "improvement": (np.float64, False),
                 "previous_imbalance": (np.float64, False), "imbalance": (np.float64, False),
                 "previous": (np.int64, True), "subpartitions": (np.int64, True)}
#: Units of the trace's variables.
_UNITS = {"wall_time": "s", "iteration_duration": "s", "max_compute_duration": "s",
          "compute_duration": "s", "latency": "s", "communication_duration": "s",
          "bytes_to_coordinator": "B"}


def trace_dataset(recorder: TraceRecorder) -> xr.Dataset:
    """Return the rows of ``recorder`` as the trace Dataset over ``iteration`` (and
    ``worker``)."""
    n, w = len(recorder.rows), recorder.n_workers
    keys = [*_ROW_KEYS, *sorted(set().union(*recorder.extras))]
    data: dict[str, Any] = {
        key: ("iteration", values.astype(np.int64) if key in _INT_KEYS else values)
        for key, values in ((key, recorder.column(key)) for key in keys)
    }
    for key, values in zip(("compute_duration", "latency", "communication_duration"),
                           recorder.per_worker(), strict=True):
        data[key] = (("iteration", "worker"), values)
    if any(a is not None for a in recorder.ages):
        data["age"] = (("iteration", "partition"), _padded(recorder.ages, np.nan))
    balanced = any(p is not None for p in recorder.subpartitions)
    if balanced:
        data["subpartitions"] = (("iteration", "worker"),
                                 _padded(recorder.subpartitions, -1, width=w).astype(np.int64))
    if balanced or recorder.events:
        for key, (dtype, per_worker) in _BALANCE_VARS.items():
            values = np.array([e[key] for e in recorder.events], dtype=dtype)
            data[f"balance_{key}"] = (
                (("balance_event", "worker"), values.reshape(len(recorder.events), w))
                if per_worker else ("balance_event", values))
    ds = xr.Dataset(data, coords={"iteration": np.arange(n), "worker": np.arange(w)})
    for key in _UNITS.keys() & ds.data_vars.keys():
        ds[key].attrs["units"] = _UNITS[key]
    return ds


@dataclass
class Result:
    """The outcome of a run.

    Attributes
    ----------
    problem : str
        Problem name (``"pca"``, ``"logistic"``, ``"least-squares"``).
    method : str
        Method name.
    fitted : dict of str to ndarray
        Fitted quantities (``components``, ``explained_variance``,
        ``explained_variance_ratio``... for PCA; ``coef`` and ``intercept`` otherwise).
    trace : xarray.Dataset
        One row per iteration: ``wall_time``, ``iteration_duration``, ``objective``,
        ``gap`` (NaN without a reference), ``n_workers_used``, ``n_fresh``, ``n_stale``,
        ``max_compute_duration`` (slowest used worker), ``bytes_to_coordinator`` (the
        arrays of the results that reached the coordinator in the round: one per worker,
        or the one sum with ``aggregation="tree"``), and per ``(iteration, worker)``
        for the last result each worker delivered in the round: ``compute_duration`` (on
        the worker; the scheduler's measurement when recorded), ``latency`` (send to
        receive, seen by the coordinator) and ``communication_duration`` (their
        difference); NaN where a worker delivered nothing. Times are simulated seconds
        for the simulated runtime.
    iterate : ndarray
        The final iterate. Everything in :attr:`fitted`, :attr:`objective` and
        :attr:`optimality` comes from one exact pass over the data at this point, made
        after the run, whatever the method estimated while it ran.
    objective : float
        Objective at the final iterate (lower is better; for PCA the unexplained variance
        fraction ``1 - sum(explained_variance_ratio)``).
    stop_reason : str
        ``"tol"`` (converged), ``"gap"`` (within ``gap_tol`` of the reference),
        ``"max_iter"``, ``"time_budget"`` or ``"stalled"`` (a stochastic method whose
        iterate stopped moving before the tolerance held).
    converged : bool
        Whether the optimality measure, evaluated exactly at :attr:`iterate`, is at most
        the run's ``tol`` (see :mod:`daskstraggle.engine.convergence`); without ``tol``,
        whether the run stopped within ``gap_tol`` of the reference. When False, the run
        warned with a :class:`~daskstraggle.errors.ConvergenceWarning`.
    optimality : float
        The relative optimality measure at :attr:`iterate`, exact: for PCA the largest
        relative eigen-residual of the components, for regression the gradient norm over
        its value at the start.
    reference_objective : float or None
        Objective of the exact optimum, when it was computed.
    distance : float or None
        Distance to the exact optimum (PCA: sine of the largest principal angle;
        regression: relative coefficient error), when it was computed.
    attrs : dict
        Run metadata (runtime, workers, matrix description, parameters).
    """

    problem: str
    method: str
    fitted: dict[str, np.ndarray]
    trace: xr.Dataset
    iterate: np.ndarray
    objective: float
    stop_reason: str
    converged: bool = False
    optimality: float = math.nan
    reference_objective: float | None = None
    distance: float | None = None
    attrs: dict[str, Any] = field(default_factory=dict)
    feature_dim: str = "feature"
    feature_coords: np.ndarray | None = None

    @classmethod
    def from_outcome(cls, outcome: Outcome) -> Result:
        """The result of a finished run (:func:`daskstraggle.runtime.lifecycle.run`): its
        trace as a Dataset (with ``exact_objective`` and ``exact_gap`` when the run
        recorded its iterates).

        Warns with a :class:`~daskstraggle.errors.ConvergenceWarning` if the stop rule had
        ``tol`` or ``gap_tol`` and the run ended without meeting it.
        """
        session, stop = outcome.session, outcome.stop
        bound, ref = session.problem, session.reference
        trace = trace_dataset(outcome.rows)
        if outcome.exact_objectives is not None:
            trace["exact_objective"] = ("iteration", outcome.exact_objectives)
            if ref is not None:
                trace["exact_gap"] = ("iteration", outcome.exact_objectives - ref.objective)
        result = cls(
            problem=bound.name, method=outcome.method.name, fitted=outcome.fitted,
            trace=trace, iterate=outcome.iterate, objective=outcome.objective,
            stop_reason=outcome.reason, converged=outcome.converged,
            optimality=outcome.optimality,
            reference_objective=None if ref is None else ref.objective,
            distance=None if ref is None else bound.distance(outcome.iterate, ref),
            attrs=dict(outcome.attrs),
            feature_dim=outcome.matrix.dims[1],
            feature_coords=outcome.matrix.columns,
        )
        if not result.converged and (stop.tol is not None or stop.gap_tol is not None):
            warnings.warn(result.convergence_message(), ConvergenceWarning, stacklevel=3)
        return result

    @property
    def n_iter(self) -> int:
        """Number of iterations (rounds over the data)."""
        return int(self.trace.sizes["iteration"])

    @property
    def wall_time(self) -> float:
        """Seconds from the first dispatch to the last result."""
        return float(self.trace["wall_time"].values[-1]) if self.n_iter else 0.0

    @property
    def gap(self) -> float | None:
        """Objective minus the reference objective, when a reference was computed."""
        ref = self.reference_objective
        return None if ref is None else self.objective - ref

    @property
    def determined(self) -> list[str] | None:
        """What each PCA component's result determines, or None (regression, or a PCA
        run with no exact round judged).

        ``"vector"``: an eigenvector (eigen-residual at most ``tol`` when converged);
        ``"subspace i-j"``: one of components ``i .. j`` whose eigenvalues lie closer than
        the separating eigengap (only their span is determined); ``"variance"``: in a bulk
        without such a gap that runs past the last requested component: its variance
        converged, its direction is one of many equally good ones
        (:mod:`daskstraggle.problems.separation`).
        """
        labels = self.attrs.get("convergence", {}).get("components")
        return None if labels is None else list(labels)

    @property
    def quality_control(self) -> dict[str, Any] | None:
        """What genotype quality control kept and removed, or None (no quality control).

        ``n_variants``, ``n_kept`` and ``removed`` (the variants each step removed, in the
        order applied); with a sample filter also ``n_samples``, ``n_samples_kept`` and
        ``samples_removed``. The CLI's table and ``--json`` both print it.
        """
        qc = self.attrs.get("matrix", {}).get("qc")
        return {key: qc[key] for key in _QC_COUNTS if key in qc} if qc else None

    def convergence_message(self) -> str:
        """Return one line saying whether and why the run converged (or did not)."""
        tol = self.attrs.get("stop", {}).get("tol")
        what = ("largest relative eigen-residual of the components" if self.problem == "pca"
                else "relative gradient norm")
        if variance := [j + 1 for j, d in enumerate(self.determined or ()) if d == "variance"]:
            what = (f"{what} (PC{variance[0]}-PC{variance[-1]}: relative variance error; "
                    "their bulk has no eigengap, so only their variance is determined)")
        if self.converged:
            return f"{self.problem} with {self.method} converged: {what} {self.optimality:.3g}."
        hidden = [j + 1 for j, d in enumerate(self.determined or ()) if d == "unresolved"]
        if hidden:  # no iteration can resolve them: say why, not "raise max_iter"
            return (f"{self.problem} with {self.method} did not converge: PC{hidden[0]}"
                    + (f"-PC{hidden[-1]}" if len(hidden) > 1 else "")
                    + " lie below float64's working precision next to PC1 (unresolved, "
                    "variance NaN); standardise the columns, or ask for fewer components.")
        bound = "no tolerance was set (tol=None)" if tol is None else f"above tol {tol:g}"
        stalled = ("the iterate stopped moving and the exact measure is not falling fast "
                   "enough to reach tol within max_iter (a noise floor); wait for more "
                   "workers (--wait)" + (" or raise max_iter (--max-iter)"
                                         if self.method == "dsag" else " or use dsag"))
        fix = {"stalled": stalled, "time_budget": "raise the time budget (--time-budget)"}.get(
            self.stop_reason, "raise max_iter (--max-iter) or tol (--tol)")
        return (f"{self.problem} with {self.method} did not converge in {self.n_iter} "
                f"iterations (stopped by {self.stop_reason}): {what} {self.optimality:.3g}, "
                f"{bound}; {fix}.")

    def __repr__(self) -> str:
        """A few lines, xarray style: what was solved, how it ended, what it holds."""
        head = f"<daskstraggle.Result> {self.problem} by {self.method}: {self.n_iter} iterations, "
        head += f"stopped by {self.stop_reason}, converged: {self.converged}"
        objective = f"objective:  {self.objective:.10g}"
        if self.reference_objective is not None:
            distance = "" if self.distance is None else f", distance {self.distance:.3g}"
            objective += f"  (exact {self.reference_objective:.10g}, gap {self.gap:.3g}{distance})"
        run = f"time:       {self.wall_time:.3f} s solve"
        if "runtime" in self.attrs:
            run += f", {self.attrs['runtime']} runtime"
            run += f" with {len(self.attrs.get('workers', ()))} workers"
        lines = [head, objective, run]
        matrix = self.attrs.get("matrix", {})
        if "shape" in matrix:
            lines.append(f"matrix:     {matrix['shape'][0]} x {matrix['shape'][1]} "
                         f"({matrix.get('kind', '?')}), {matrix.get('n_partitions', '?')} "
                         "partitions")
        lines.append("fitted:     " + ", ".join(
            f"{name} {np.shape(value)}" for name, value in self.fitted.items()))
        names = [str(name) for name in self.trace.data_vars]
        shown = ", ".join(names[:6]) + (", ..." if len(names) > 6 else "")
        sizes = ", ".join(f"{dim}: {n}" for dim, n in self.trace.sizes.items())
        lines.append(f"trace:      ({sizes}) {len(names)} variables: {shown}")
        return "\n".join(lines)

    def summary(self) -> dict[str, Any]:
        """Return a JSON-serialisable summary (what ``--json`` prints).

        Besides the run's outcome and fitted quantities: ``quality_control`` (see
        :attr:`quality_control`) for genotypes filtered, and ``worker_losses`` /
        ``worker_joins`` (as in :attr:`attrs`) when workers were lost, moved or joined;
        the CLI's table prints its lines from the same entries.
        """
        out: dict[str, Any] = {key: getattr(self, key.removesuffix("_s")) for key in (
            "problem", "method", "n_iter", "wall_time_s", "objective", "converged",
            "stop_reason", "optimality")}
        shown = (("explained_variance", "explained_variance_ratio", "residuals")
                 if self.problem == "pca" else ("coef", "intercept", "grad_norm"))
        out.update({key: self.fitted[key] for key in shown if key in self.fitted})
        if self.determined is not None:
            out["determined"] = self.determined
        if self.reference_objective is not None:
            out.update(reference_objective=self.reference_objective, gap=self.gap,
                       distance=self.distance)
        if "staleness" in self.trace:  # sag, dsag: iterations behind of the oldest cache entry
            staleness = self.trace["staleness"].values
            out["max_staleness"] = int(np.nanmax(staleness)) if staleness.size else 0
            out["final_staleness"] = int(staleness[-1]) if staleness.size else 0
        if "balance_event" in self.trace.dims:
            events = self.trace["balance_iteration"].values.tolist()
            out["balance_events"] = [
                {"iteration": int(it), "subpartitions": new, "improvement": imp}
                for it, new, imp in zip(events,
                                        self.trace["balance_subpartitions"].values.tolist(),
                                        self.trace["balance_improvement"].values.tolist(),
                                        strict=True)
            ]
        if self.quality_control is not None:
            out["quality_control"] = self.quality_control
        out.update({key: self.attrs[key] for key in ("worker_losses", "worker_joins")
                    if self.attrs.get(key)})
        return {k: _jsonable(v) for k, v in out.items()}

    def to_dataset(self) -> xr.Dataset:
        """Return fitted quantities and trace in one Dataset."""
        ds = self.trace.copy()
        for name, value in self.fitted.items():
            dims = _FITTED_DIMS.get(name, tuple(f"{name}_dim_{i}" for i in range(np.ndim(value))))
            ds[name] = (tuple(self.feature_dim if d == "feature" else d for d in dims),
                        np.asarray(value))
        ds["iterate"] = (tuple(f"iterate_dim_{i}" for i in range(self.iterate.ndim)), self.iterate)
        if self.feature_coords is not None and self.feature_dim in ds.dims:
            coords = np.asarray(self.feature_coords)
            if coords.dtype.kind in "USTO":  # variable-length strings: stable in Zarr v3
                coords = np.array([str(c) for c in coords], dtype=object)
            ds = ds.assign_coords({self.feature_dim: coords})
        ds.attrs.update(  # None as "none"
            {name: "none" if (v := getattr(self, name)) is None else v
             for name in _RESULT_ATTRS[:-1]},
            optimality=self.optimality if math.isfinite(self.optimality) else "none",
            converged=int(self.converged), run=json.dumps(_jsonable(self.attrs)))
        return ds

    def to_plink(self, prefix: str | os.PathLike[str], matrix: Any = None, *,
                 client: Any = None, overwrite: bool = False) -> list[Path]:
        """Write a genotype PCA as plink2's ``--pca`` files (``.eigenvec``, ``.eigenval``).

        With ``matrix``, the genotypes the result was fitted on (after quality control),
        also ``.eigenvec.allele`` (``--pca allele-wts``' layout) and ``.afreq``, whose
        weights ``plink2 --read-freq PREFIX.afreq --score PREFIX.eigenvec.allele 2 5
        header-read no-mean-imputation variance-standardize cols=+scoresums`` turns into
        the scores :meth:`daskstraggle.PCA.transform` gives (``PC*_SUM``). See
        :mod:`daskstraggle._plink_out` for the layouts and scalings.

        Parameters
        ----------
        prefix : str or path
            The files' common prefix (its folder must exist).
        matrix : Matrix or None, default=None
            The fitted genotypes, after quality control (the samples and variants the run
            removed for having no call are removed here too), for the allele weights (one
            pass over the variants).
        client : distributed.Client or None, default=None
            Where that pass runs (None: in this process).
        overwrite : bool, default=False
            Replace existing files (else one is refused before anything is written).

        Returns
        -------
        paths : list of Path
            The files written.

        Raises
        ------
        InvalidParameterError
            If the result is not a genotype PCA, or ``matrix`` has another shape; or the
            prefix has no file name, or a file would be, lie in or contain an input (the
            result's or ``matrix``'s) or lie in a Zarr store.
        OutputExistsError
            If a file exists and ``overwrite`` is False, or is a folder.
        OutputNotWritableError
            If the prefix's folder does not exist or cannot be written, or writing a file
            fails (then the files this call created are removed).
        """
        from daskstraggle._plink_out import write_plink

        return write_plink(self, prefix, matrix, client=client, overwrite=overwrite)

    def save(
        self,
        path: str | os.PathLike[str],
        *,
        overwrite: bool = False,
        protect: Iterable[str | os.PathLike[str]] = (),
    ) -> Path:
        """Write the result as a Zarr store, atomically.

        Parameters
        ----------
        path : str or path
            Destination directory (conventionally ``*.zarr``).
        overwrite : bool, default=False
            Replace an existing store (only once the new one is complete).
        protect : iterable of str or path, default=()
            Stores that ``path`` must neither be, lie inside, nor contain, besides the
            matrix's source recorded in ``attrs["matrix"]["path"]``.

        Returns
        -------
        path : Path
            Where the result was written.

        Raises
        ------
        OutputExistsError
            If ``path`` exists and ``overwrite`` is False.
        InvalidParameterError
            If ``path`` is, is inside or contains the input data, or lies inside any
            existing Zarr store (a folder above it holds ``zarr.json``, ``.zgroup``,
            ``.zarray`` or ``.zattrs``), even with ``overwrite``; or is a URL
            (``s3://...``: results are written locally).
        OutputNotWritableError
            If the folder of ``path`` cannot be created or written (missing folders above
            it are created).
        """
        inputs = [*protect, *source_paths(self.attrs.get("matrix", {}))]
        out = check_output_path(path, overwrite=overwrite, inputs=inputs)
        assert out is not None
        ds = self.to_dataset()
        ds.attrs["arrays"] = json.dumps(sorted(str(name) for name in ds.variables))
        return write_atomically(  # every array and chunk written: an absent one was lost
            out, lambda tmp: ds.to_zarr(tmp, mode="w", consolidated=False, zarr_format=3,
                                        write_empty_chunks=True)
        )

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, missing_chunks: str = "error") -> Result:
        """Read a result written by :meth:`save`.

        Its arrays are checked as an input's are (:func:`~daskstraggle.open_matrix`): an
        absent chunk is refused, never read as the fill value (NaN), and so are an absent
        array and a chunk that does not decode.

        Parameters
        ----------
        path : str or path
            The store.
        missing_chunks : {"error", "fill"}, default="error"
            ``"fill"`` reads absent chunks as the fill value, for a store written without
            them (``write_empty_chunks=False``; :meth:`save` writes every chunk, and
            records its arrays: a store without that record is read with ``"fill"``).

        Returns
        -------
        result : Result
            The result as saved.

        Raises
        ------
        DataNotFoundError
            If there is no result at ``path``.
        InvalidDataError
            If ``path`` is not a result (another Zarr store, a plain file or folder).
        MissingChunksError
            If a chunk of the result is absent (unless ``missing_chunks="fill"``).
        CorruptDataError
            If an array the result was saved with is absent, or a chunk does not decode.
        """
        from daskstraggle._validation import check_choice
        from daskstraggle.data._zarr import MISSING_CHUNKS

        check_choice(missing_chunks, name="missing_chunks", caller="Result.load",
                     choices=MISSING_CHUNKS)
        ds = _read_result(path, missing_chunks)
        attrs, dim = ds.attrs, ds.attrs["feature_dim"]
        numbers: dict[str, Any] = {
            key: None if (value := attrs.get(key, "none")) == "none" else float(value)
            for key in ("objective", "reference_objective", "distance", "optimality")}
        if numbers["optimality"] is None:
            numbers["optimality"] = math.nan
        trace = ds[[v for v in ds.data_vars if "iteration" in ds[v].dims]]
        return cls(
            **{key: attrs[key] for key in ("problem", "method", "stop_reason")},
            fitted={n: ds[n].values for n in _FITTED_DIMS if n in ds},
            trace=trace.drop_vars([c for c in trace.coords if c not in ("iteration", "worker")]),
            iterate=ds["iterate"].values, converged=bool(attrs.get("converged", 0)),
            **numbers,
            attrs=json.loads(attrs["run"]), feature_dim=dim,
            feature_coords=ds[dim].values if dim in ds.coords else None)


#: The attributes a saved result needs to load (besides ``converged`` and ``optimality``).
_RESULT_ATTRS = ("problem", "method", "objective", "stop_reason", "feature_dim",
                 "reference_objective", "distance", "run")


def _read_result(path: str | os.PathLike[str], missing_chunks: str) -> xr.Dataset:
    """Read the result saved at ``path`` into memory with the inputs' integrity rules
    (``data/_zarr.py``), raising as :meth:`Result.load` says; absent arrays and chunks are
    refused before anything is read."""
    import zarr

    from daskstraggle.data._zarr import check_chunks, describe, read

    if not Path(path).exists():
        raise DataNotFoundError(f"No result at {str(path)!r}.")
    not_result = (f"{str(path)!r} is not a daskstraggle result (a store written by "
                  "Result.save or the CLI's --out)")
    try:
        arrays = dict(sorted(zarr.open_group(path, mode="r").arrays()))
        ds = xr.open_zarr(path, consolidated=False)
    except Exception as err:  # any unreadable store is the same mistake
        reason = (str(err).splitlines() or [""])[0]
        raise InvalidDataError(f"{not_result}: {type(err).__name__}: {reason}") from None
    if missing := [k for k in _RESULT_ATTRS if k not in ds.attrs] + sorted(
            {"iterate"} - set(ds.variables)):
        raise InvalidDataError(f"{not_result}: it has no {missing}.")
    if "arrays" not in ds.attrs:  # saved before every chunk was written: absent ones
        missing_chunks = "fill"   # equal to the fill value cannot be told from lost ones
    saved = json.loads(ds.attrs.get("arrays", "[]"))
    if lost := sorted(set(saved) - set(arrays)):
        raise CorruptDataError(
            f"{len(lost)} of {len(saved)} arrays of the result {str(path)!r} are missing "
            f"(first: {lost[0]!r}): the store is damaged. Restore it from a good copy or "
            "write it again."
        )
    for name, array in arrays.items():
        check_chunks(array, 0, array.shape[0] if array.ndim else 1,
                     what=describe(str(path), name), missing_chunks=missing_chunks)
    try:
        return ds.load()
    except (OSError, MemoryError):
        raise
    except Exception:  # a codec's error: say which array, in the inputs' words
        for name, array in arrays.items():
            read(array, ..., what=describe(str(path), name))
        raise


def _padded(rows: list[Any], fill: float, *, width: int | None = None) -> np.ndarray:
    """Stack ``rows`` (None: a missing row) into a float array padded with ``fill``, as wide
    as ``width`` (None: the longest row)."""
    sized = [np.asarray(row) for row in rows if row is not None]
    out = np.full((len(rows), max(r.size for r in sized) if width is None else width), fill)
    for i, row in enumerate(rows):
        if row is not None:
            out[i, : len(row)] = row
    return out


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return _jsonable(value.tolist())
    if isinstance(value, np.generic):
        return _jsonable(value.item())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Path):
        return str(value)
    return value
