"""Pictures of runs: convergence, per-worker latency and the PCA scatter, each drawn on a
matplotlib ``Axes`` (a new figure's when ``ax`` is None), and :func:`plot_run` (the CLI's
``--plot``). matplotlib is imported on first use; without it an ImportError says
``pip install 'daskstraggle[plot]'``. Examples assume ``import numpy as np``.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import xarray as xr

from daskstraggle._validation import _fail, check_bool, check_choice
from daskstraggle.errors import InvalidDataError, InvalidParameterError, InvalidTypeError
from daskstraggle.trace import Result

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["INSTALL_HINT", "plot_convergence", "plot_latency", "plot_pca", "plot_run"]

#: How to get matplotlib, named by every "needs matplotlib" error.
INSTALL_HINT = "pip install 'daskstraggle[plot]'"
#: Trace variables drawn on a log scale by default (non-negative, falling towards 0).
LOG_VARIABLES = ("gap", "exact_gap", "optimality")
#: Smallest value drawn on a log scale: an exact method's gap of 0 stays visible.
LOG_FLOOR = 1e-16
#: Most label values that :func:`plot_pca` tells apart by colour (numbers beyond: a scale).
MAX_CATEGORIES = 20
#: Axis names of the trace variables over ``iteration``.
_Y_NAMES = {"gap": "gap to the exact optimum", "exact_gap": "exact gap to the optimum",
            "optimality": "optimality (relative)", "objective": "objective",
            "exact_objective": "exact objective"}


def _pyplot() -> Any:
    """Return ``matplotlib.pyplot``, or raise one ImportError line saying how to install it."""
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError(f"daskstraggle.plot needs matplotlib: {INSTALL_HINT}") from None
    return plt


def _type_error(param: str, caller: str, must: str, value: object) -> InvalidTypeError:
    return InvalidTypeError(f"The {param!r} parameter of {caller} must {must}. Got "
                            f"{type(value).__name__} instead.")


def _axes(ax: Axes | None) -> Axes:
    """``ax``, or the axes of a new pyplot figure."""
    if ax is None:
        _, ax = _pyplot().subplots()
    return ax


def plot_convergence(
    results: Result | Sequence[Result] | Mapping[str, Result],
    *,
    x: str = "time",
    y: str = "gap",
    labels: Sequence[str] | None = None,
    log: bool | None = None,
    ax: Axes | None = None,
) -> Axes:
    """Draw how one or several runs converged, one line per run on one axis.

    Parameters
    ----------
    results : Result, sequence of Result or mapping of str to Result
        The runs; a mapping's keys are their labels.
    x : {"time", "iteration"}, default="time"
        Horizontal axis: ``wall_time`` in seconds (simulated seconds for the simulated
        runtime) or the iteration.
    y : str, default="gap"
        A trace variable over ``iteration``: ``"gap"`` (needs ``reference=True``, CLI
        ``--reference``), ``"objective"``, ``"optimality"``, ``"exact_gap"`` (needs
        ``record_iterates=True`` too), ...
    labels : sequence of str or None, default=None
        One legend entry per run. None: the mapping's keys, else each run's method name
        (numbered when methods repeat).
    log : bool or None, default=None
        Logarithmic vertical axis. None: for ``gap``, ``exact_gap`` and ``optimality``,
        whose values at or below 0 (an exact method's gap) are drawn at ``1e-16``.
    ax : matplotlib.axes.Axes or None, default=None
        Where to draw (None: a new pyplot figure).

    Returns
    -------
    ax : matplotlib.axes.Axes
        The axes drawn on; ``ax.get_lines()`` holds one line per run, in order.

    Raises
    ------
    InvalidParameterError
        If ``x`` or ``labels`` is invalid, or a run's trace has no variable ``y`` over
        ``iteration``.
    InvalidDataError
        If a run's ``y`` has no finite value (e.g. ``gap`` of a run without reference).
    InvalidTypeError
        If ``results`` holds something other than Results.

    Examples
    --------
    >>> from matplotlib.figure import Figure
    >>> from daskstraggle import fit_least_squares
    >>> X = np.random.default_rng(0).normal(size=(200, 4))
    >>> y = X @ [1.0, 2.0, 3.0, 4.0]
    >>> gd = fit_least_squares(X, y, method="gd", runtime="local", reference=True, rng=0)
    >>> nag = fit_least_squares(X, y, method="nag", runtime="local", reference=True, rng=0)
    >>> ax = plot_convergence([gd, nag], ax=Figure().subplots())
    >>> [line.get_label() for line in ax.get_lines()], ax.get_xlabel()
    (['gd', 'nag'], 'time (s)')
    """
    caller = "plot_convergence"
    runs = _named_runs(results, labels, caller=caller)
    x = check_choice(x, name="x", caller=caller, choices=("time", "iteration"))
    log = y in LOG_VARIABLES if log is None else check_bool(log, name="log", caller=caller)
    hint = {"gap": " (the run had no reference: pass reference=True, CLI --reference, "
                   "or y='objective')",
            "exact_gap": " (pass reference=True and record_iterates=True)"}.get(str(y), "")
    lines = [(label, np.asarray(res.trace["wall_time" if x == "time" else "iteration"].values),
              _drawable(res.trace, y, ndim=1, param="y", caller=caller,
                        among=f"; the trace of {label!r} has ",
                        empty=f"{label!r} has no finite {y!r} in its trace{hint}."))
             for label, res in runs]
    ax = _axes(ax)
    for label, xs, ys in lines:
        if log:
            ys = np.where(np.isfinite(ys), np.maximum(ys, LOG_FLOOR), np.nan)
        ax.plot(xs, ys, label=label, marker="o" if xs.size == 1 else None)
    if log:
        ax.set_yscale("log")
    simulated = all(res.attrs.get("runtime") == "sim" for _, res in runs)
    ax.set_xlabel(("simulated time (s)" if simulated else "time (s)") if x == "time"
                  else "iteration")
    ax.set_ylabel(_Y_NAMES.get(y, y))
    ax.legend()
    return ax


def _named_runs(results: Any, labels: Any, *, caller: str) -> list[tuple[str, Result]]:
    """``(label, result)`` pairs from a Result, a sequence of them or a label mapping."""
    if isinstance(results, Mapping):
        if labels is not None:
            raise InvalidParameterError(
                f"The 'labels' parameter of {caller} must be None when results is a mapping "
                "(its keys are the labels). Pass a list of results with labels, or the mapping "
                "alone."
            )
        labels, results = [str(k) for k in results], list(results.values())
    runs = [results] if isinstance(results, Result) else results
    if not _is_sequence(runs):
        raise _type_error("results", caller, "be a Result, a sequence of Results or a mapping "
                          "of labels to Results", results)
    if not runs:
        raise InvalidParameterError(f"The 'results' parameter of {caller} holds no Result.")
    if wrong := [r for r in runs if not isinstance(r, Result)]:
        raise _type_error("results", caller, "hold Results (a fit's return value or "
                          "Result.load(path))", wrong[0])
    labels = _method_labels(runs) if labels is None else labels
    if not _is_sequence(labels) or len(labels) != len(runs):
        _fail("labels", caller, f"a sequence of {len(runs)} strings, one per result", labels)
    return [(str(label), run) for label, run in zip(labels, runs, strict=True)]


def _method_labels(runs: list[Result]) -> list[str]:
    """Each run's method name, numbered where methods repeat (``"gd (1)"``, ``"gd (2)"``)."""
    methods = [r.method for r in runs]
    return [m if methods.count(m) == 1 else f"{m} ({methods[:i + 1].count(m)})"
            for i, m in enumerate(methods)]


def _is_sequence(value: Any) -> bool:
    """Whether ``value`` is a sequence other than a string."""
    return isinstance(value, Sequence) and not isinstance(value, str)


def _drawable(trace: xr.Dataset, name: object, *, ndim: int, param: str, caller: str,
              among: str, empty: str) -> np.ndarray:
    """The float values of trace variable ``name`` over ``iteration`` (``ndim`` dims), or
    InvalidParameterError (no such variable), InvalidDataError ``empty`` (none finite)."""
    names = sorted(str(v) for v in trace.data_vars
                   if trace[v].ndim == ndim and trace[v].dims[0] == "iteration")
    if not isinstance(name, str) or name not in names:
        _fail(param, caller, f"a trace variable over iteration{among}{names}", name)
    values = np.asarray(trace[name].values, dtype=np.float64)
    if not np.isfinite(values).any():
        raise InvalidDataError(empty)
    return values


def plot_latency(result: Result | xr.Dataset, *, variable: str = "latency",
                 ax: Axes | None = None) -> Axes:
    """Draw a per-worker trace variable as an iteration × worker heatmap.

    Parameters
    ----------
    result : Result or xarray.Dataset
        A run, or its trace (``Result.load(path).trace``).
    variable : str, default="latency"
        A trace variable over ``(iteration, worker)`` (or another second dimension):
        ``"latency"`` (send to receive, seconds), ``"compute_duration"``,
        ``"communication_duration"``, ``"subpartitions"``, or ``"age"`` over
        ``(iteration, partition)``.
    ax : matplotlib.axes.Axes or None, default=None
        Where to draw (None: a new pyplot figure).

    Returns
    -------
    ax : matplotlib.axes.Axes
        Its only image holds the values, shape ``(n_iterations, n_workers)``, iterations
        upwards; cells where a worker delivered nothing (NaN) are grey. The colour bar
        is ``ax.images[0].colorbar``.

    Raises
    ------
    InvalidParameterError
        If the trace has no such variable over ``iteration`` and one other dimension.
    InvalidDataError
        If it has no finite value.
    InvalidTypeError
        If ``result`` is neither a Result nor a Dataset.

    Examples
    --------
    >>> from matplotlib.figure import Figure
    >>> from daskstraggle import fit_least_squares
    >>> X = np.random.default_rng(0).normal(size=(200, 4))
    >>> res = fit_least_squares(X, X @ [1.0, 2.0, 3.0, 4.0], runtime="sim", n_workers=3,
    ...                         stragglers="gamma(mean=0.05, var=1e-4)", rng=0)
    >>> ax = plot_latency(res, ax=Figure().subplots())
    >>> ax.images[0].get_array().shape == (res.n_iter, 3)
    True
    """
    caller = "plot_latency"
    if not isinstance(result, Result | xr.Dataset):
        raise _type_error("result", caller, "be a Result or its trace (an xarray.Dataset)",
                          result)
    trace = result.trace if isinstance(result, Result) else result
    values = _drawable(trace, variable, ndim=2, param="variable", caller=caller,
                       among=" and one other dimension, one of ",
                       empty=f"The trace's {variable!r} has no finite value to draw.")
    from matplotlib import colormaps
    from matplotlib.ticker import MaxNLocator

    ax = _axes(ax)
    n_rows, n_cols = values.shape
    image = ax.imshow(np.ma.masked_invalid(values), aspect="auto", origin="lower",
                      interpolation="nearest", cmap=colormaps["viridis"].with_extremes(bad="0.85"),
                      extent=(-0.5, n_cols - 0.5, -0.5, n_rows - 0.5))
    units = trace[variable].attrs.get("units")
    ax.figure.colorbar(image, ax=ax, label=variable + (f" ({units})" if units else ""))
    ax.set_xlabel(str(trace[variable].dims[1]))
    ax.set_ylabel("iteration")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    return ax


def plot_pca(data: Result | xr.Dataset | Any, *, labels: Any = None,
             components: tuple[int, int] = (0, 1), ax: Axes | None = None) -> Axes:
    """Scatter two principal components, one point per sample, coloured by a label.

    Parameters
    ----------
    data : Result, xarray.Dataset or array-like of shape (n_samples, n_components)
        A PCA result (or ``Result.to_dataset()``, or a saved result opened with
        xarray): one point per column of the matrix, its loadings in ``components``,
        which for VCF Zarr genotypes (rows = variants) are the samples. Or the samples'
        scores, e.g. ``daskstraggle.PCA(n_components=2).fit_transform(X)`` when the
        matrix's rows are the samples.
    labels : array-like of shape (n_samples,) or None, default=None
        A label per point (e.g. ``matrix.column_groups``, the population of each
        simulated sample): up to 20 distinct values get a colour and a legend entry
        each; more numbers a colour scale. None: one colour.
    components : tuple of two int, default=(0, 1)
        The components on the horizontal and vertical axes (0 is PC1).
    ax : matplotlib.axes.Axes or None, default=None
        Where to draw (None: a new pyplot figure).

    Returns
    -------
    ax : matplotlib.axes.Axes
        One collection per label value (in sorted order, legend in the same order), or
        one for all points.

    Raises
    ------
    InvalidParameterError
        If ``data`` is not a PCA result, ``components`` are not two distinct components
        of it, or ``labels`` does not have one entry per point.
    InvalidTypeError
        If ``data`` or ``labels`` has the wrong type.

    Examples
    --------
    >>> from matplotlib.figure import Figure
    >>> rng = np.random.default_rng(0)
    >>> scores = rng.normal(size=(6, 2))
    >>> ax = plot_pca(scores, labels=["a", "b", "a", "b", "a", "b"], ax=Figure().subplots())
    >>> [len(c.get_offsets()) for c in ax.collections], ax.get_xlabel()
    ([3, 3], 'PC1')
    """
    caller = "plot_pca"
    points, ratio, what = _pca_points(data, caller=caller)
    i, j = _check_components(components, points.shape[1], caller=caller)
    values = _check_labels(labels, points.shape[0], caller=caller)
    ax = _axes(ax)
    xs, ys = points[:, i], points[:, j]
    size = 12 if points.shape[0] > 200 else 24
    if values is None:
        ax.scatter(xs, ys, s=size)
    elif values.dtype.kind in "biuf" and np.unique(values).size > MAX_CATEGORIES:
        dots = ax.scatter(xs, ys, s=size, c=values, cmap="viridis")
        ax.figure.colorbar(dots, ax=ax, label="label")
    else:
        groups = np.unique(values)
        if groups.size > MAX_CATEGORIES:
            raise InvalidParameterError(
                f"The 'labels' parameter of {caller} has {groups.size} distinct values; at "
                f"most {MAX_CATEGORIES} can be told apart by colour (numbers beyond get a "
                "colour scale). Group them first."
            )
        from matplotlib import colormaps

        palette = colormaps["tab10" if groups.size <= 10 else "tab20"]
        for k, group in enumerate(groups):
            sel = values == group
            ax.scatter(xs[sel], ys[sel], s=size, color=palette(k), label=str(group))
        ax.legend(title=what if what != "sample" else None)
    for set_label, c in ((ax.set_xlabel, i), (ax.set_ylabel, j)):
        set_label(f"PC{c + 1}" + ("" if ratio is None else f" ({ratio[c]:.1%})"))
    return ax


def _pca_points(data: Any, *, caller: str) -> tuple[np.ndarray, np.ndarray | None, str]:
    """``(points (n, k), explained variance ratios or None, name of a point)``."""
    if isinstance(data, Result):
        if data.problem != "pca" or "components" not in data.fitted:
            raise InvalidParameterError(
                f"The 'data' parameter of {caller} must be a PCA result; got a "
                f"{data.problem!r} result (fit_pca or the CLI's pca command make one)."
            )
        ratio = data.fitted.get("explained_variance_ratio")
        return np.asarray(data.fitted["components"]).T, ratio, data.feature_dim
    if isinstance(data, xr.Dataset):
        if "components" not in data or data["components"].ndim != 2:
            raise InvalidParameterError(
                f"The 'data' parameter of {caller} must hold a 2-D 'components' variable (a "
                f"saved PCA result); it has {sorted(map(str, data.data_vars))}."
            )
        ratio = (data["explained_variance_ratio"].values
                 if "explained_variance_ratio" in data else None)
        return data["components"].values.T, ratio, str(data["components"].dims[1])
    try:
        points = np.asarray(data, dtype=np.float64)
    except (TypeError, ValueError):
        raise _type_error("data", caller, "be a PCA Result, a Dataset or an array of scores "
                          "(n_samples, n_components)", data) from None
    if points.ndim != 2:
        raise InvalidParameterError(
            f"The 'data' parameter of {caller} must be scores of shape (n_samples, "
            f"n_components). Got an array of shape {points.shape} instead."
        )
    return points, None, "sample"


def _check_components(components: Any, n: int, *, caller: str) -> tuple[int, int]:
    ok = (isinstance(components, Sequence) and len(components) == 2
          and all(isinstance(c, numbers.Integral) and not isinstance(c, bool)
                  and 0 <= int(c) < n for c in components)
          and components[0] != components[1])
    if not ok:
        _fail("components", caller, f"two distinct component indices in [0, {n}) (0 is PC1; "
              f"the data has {n} components)", components)
    return int(components[0]), int(components[1])


def _check_labels(labels: Any, n: int, *, caller: str) -> np.ndarray | None:
    if labels is None:
        return None
    if isinstance(labels, str) or np.ndim(labels) != 1:
        raise _type_error("labels", caller, "be a 1-D array-like with one label per point",
                          labels)
    values = np.asarray(labels)
    if values.dtype.kind == "O":
        values = values.astype(str)
    if values.shape[0] != n:
        raise InvalidParameterError(
            f"The 'labels' parameter of {caller} must have one label per point ({n}). Got "
            f"{values.shape[0]} labels instead."
        )
    return values


def plot_run(result: Result, *, labels: Any = None, fig: Figure | None = None) -> Figure:
    """Draw one run's pictures side by side: convergence, latency, PCA scatter.

    Parameters
    ----------
    result : Result
        The run.
    labels : array-like or None, default=None
        For a PCA result, a label per column of the matrix to colour the scatter (see
        :func:`plot_pca`).
    fig : matplotlib.figure.Figure or None, default=None
        Where to draw (None: a new pyplot figure); its size is set to fit the panels.

    Returns
    -------
    fig : matplotlib.figure.Figure
        Panels, left to right: the convergence (``gap`` when the run has a reference,
        else ``optimality``, else ``objective``, against time); with several workers the
        per-worker latency heatmap; for PCA with two components or more, PC1 against PC2.

    Raises
    ------
    InvalidTypeError
        If ``result`` is not a Result.
    InvalidParameterError
        If ``labels`` does not have one entry per column of a PCA result.

    Examples
    --------
    >>> from matplotlib.figure import Figure
    >>> from daskstraggle import fit_pca
    >>> X = np.random.default_rng(0).normal(size=(300, 6)) * [5, 3, 1, 1, 1, 1]
    >>> fig = plot_run(fit_pca(X, 2, runtime="local", rng=0), fig=Figure())
    >>> [ax.get_title() for ax in fig.axes if ax.get_label() != "<colorbar>"]
    ['pca by gram', 'per-worker latency', 'PC1 and PC2 of 6 features']
    """
    if not isinstance(result, Result):
        raise _type_error("result", "plot_run", "be a Result", result)
    trace, title = result.trace, f"{result.problem} by {result.method}"
    y = next((v for v in ("gap", "optimality", "objective") if _finite(trace, v)), None)
    panels: list[tuple[str, Callable[..., Axes] | None]] = (
        [] if y is None else [(title, partial(plot_convergence, result, y=y))])
    if trace.sizes.get("worker", 0) > 1 and _finite(trace, "latency"):
        panels.append(("per-worker latency", partial(plot_latency, result)))
    if result.problem == "pca" and np.shape(result.fitted.get("components", ()))[0] >= 2:
        n, dim = np.shape(result.fitted["components"])[1], result.feature_dim
        _check_labels(labels, n, caller="plot_run")
        panels.append((f"PC1 and PC2 of {n} {dim if dim.endswith('s') else dim + 's'}",
                       partial(plot_pca, result, labels=labels)))
    panels = panels or [(f"{title}: no finite trace values", None)]
    if fig is None:
        fig = _pyplot().figure(layout="constrained")
    fig.set_size_inches(4.8 * len(panels), 4.0)
    for ax, (name, draw) in zip(fig.subplots(1, len(panels), squeeze=False)[0], panels,
                                strict=True):
        if draw is not None:
            draw(ax=ax)
        ax.set_title(name)
    return fig


def _finite(trace: xr.Dataset, name: str) -> bool:
    """Whether the trace has a variable ``name`` with a finite value."""
    return name in trace and bool(np.isfinite(trace[name].values).any())
