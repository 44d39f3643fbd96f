"""The command line's result table (``format_result``): what a run found, in words."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from daskstraggle._cli_genotypes import qc_line

__all__ = ["format_result"]


def format_result(result: Any, *, out: Path | None = None, matrix: Any = None,
                  data_path: Path | None = None) -> str:
    """Return a human-readable table of a Result."""
    attrs = result.attrs
    shape = attrs["matrix"]["shape"]
    summary = result.summary()  # what --json prints: the table says the same
    lines = [
        f"{result.problem} of a {shape[0]} x {shape[1]} matrix ({attrs['matrix']['kind']}), "
        f"method {result.method}, {attrs['runtime']} runtime with {len(attrs['workers'])} workers, "
        f"{attrs['matrix']['n_partitions']} partitions",
        "",
        *(_pca_table(result) if result.problem == "pca" else _coef_lines(result)),
        "",
        f"objective   {result.objective:.10g}",
    ]
    if result.reference_objective is not None:
        lines.append(f"exact       {result.reference_objective:.10g}   gap {result.gap:.3g}   "
                     f"distance {result.distance:.3g}")
    per_iter = result.wall_time / max(result.n_iter, 1)
    lines += [
        f"iterations  {result.n_iter} (stopped by {result.stop_reason})",
        f"converged   {'yes' if result.converged else 'NO'} ({_optimality_name(result)} "
        f"{result.optimality:.3g}, tol {attrs.get('stop', {}).get('tol')})",
        f"time        {result.wall_time:.3f} s solve ({per_iter * 1e3:.1f} ms/iteration), "
        f"{attrs['load_duration_s']:.3f} s load",
    ]
    if attrs.get("auto") is not None:
        from daskstraggle.runtime.auto import describe

        lines.append(f"auto        {describe(attrs['auto'])}")
    if "max_staleness" in summary and result.n_iter:
        lines.append(f"staleness   cache entries up to {summary['max_staleness']} iterations "
                     f"old ({summary['final_staleness']} at the last)")
    lines += _cluster_lines(summary)
    if matrix is not None and matrix.column_groups is not None and result.problem == "pca":
        lines.append("\n" + _population_table(result, matrix))
    if (qc := qc_line(result)) is not None:
        lines.append(qc)
    if data_path is not None:
        lines.append(f"data        {data_path}")
    if out is not None:
        lines.append(f"results     {out}  (fitted quantities + trace, Zarr)")
    return "\n".join(lines)


def _coef_lines(result: Any) -> list[str]:
    """The coefficients of a regression result: their number, norm, first values."""
    coef = result.fitted["coef"]
    shown = ", ".join(f"{c:.4g}" for c in coef[:8]) + (", ..." if coef.size > 8 else "")
    lines = [f"coefficients: {coef.size} (|coef| = {np.linalg.norm(coef):.6g}), "
             f"intercept {float(result.fitted['intercept']):.6g}", f"coef[:8]: {shown}"]
    if "grad_norm" in result.fitted:
        lines.append(f"gradient norm {float(result.fitted['grad_norm']):.3g}")
    return lines


def _cluster_lines(summary: dict[str, Any]) -> list[str]:
    """The workers lost, frozen, moved or joined (``Result.summary()``), one line each."""
    lines = []
    for loss in summary.get("worker_losses", []):
        reason, kind = loss.get("reason", "left the cluster"), loss.get("kind") or ""
        what = {"adopted": "moved"}.get(kind, kind) or (
            "lost" if reason == "left the cluster" else
            "frozen" if reason.startswith("has not answered") else "moved")
        how = "reloaded on" if loss.get("reloaded", True) else "moved to"
        lines.append(f"worker {what} {loss['lost']} (index {loss['worker_index']}): partitions "
                     f"{loss['partitions']} {how} {loss['moved_to']}")
    for join in summary.get("worker_joins", []):
        ended = f"; stopped: {join['ended']}" if join.get("ended") else ""
        lines.append(f"worker joined {join['worker']}: helped index {join['helps']} "
                     f"({join['split_units']} units split with it{ended})")
    return lines


def _pca_table(result: Any) -> list[str]:
    """The per-component rows of a PCA result (variance, ratio, residual, determined)."""
    ev = result.fitted["explained_variance"]
    ratio = result.fitted["explained_variance_ratio"]
    optional = [(f" {'exact ratio':>12}", _reference_ratios(result), " {:>12.4%}"),
                (f" {'residual':>9}", result.fitted.get("residuals"), " {:>9.2g}"),
                ("  determined", result.determined, "  {}")]
    shown = [(head, values, cell) for head, values, cell in optional if values is not None]
    lines = [f"{'component':>10} {'explained variance':>19} {'ratio':>9}"
             + "".join(head for head, _, _ in shown)]
    lines += [f"{'PC' + str(j + 1):>10} {ev[j]:>19.6g} {ratio[j]:>9.4%}"
              + "".join(cell.format(values[j]) for _, values, cell in shown)
              for j in range(len(ev))]
    lines.append(f"{'total':>10} {ev.sum():>19.6g} {ratio.sum():>9.4%}")
    return lines


def _optimality_name(result: Any) -> str:
    if result.problem != "pca":
        return "relative gradient norm"
    return ("largest eigen-residual or variance error" if "variance" in (result.determined or ())
            else "largest eigen-residual")


def _reference_ratios(result: Any) -> np.ndarray | None:
    eig = result.attrs.get("reference_info", {}).get("eigenvalues")
    if eig is None:
        return None
    ev = result.fitted["explained_variance"]
    ratio = result.fitted["explained_variance_ratio"]
    # total variance = eigenvalue / ratio for any component with a non-zero ratio
    j = int(np.argmax(ratio))
    n = result.attrs["matrix"]["shape"][0]
    total = ev[j] * (n - 1) / ratio[j]
    return np.asarray(eig, dtype=float) / total


def _population_table(result: Any, matrix: Any) -> str:
    """Each population's size and mean scores on PC1 and PC2, and the share of each PC's
    variance between the populations."""
    groups = np.asarray(matrix.column_groups)
    names, counts = np.unique(groups, return_counts=True)
    scores = result.fitted["components"][:2]
    k = scores.shape[0]
    means = np.stack([scores[:, groups == g].mean(axis=1) for g in names], axis=1)  # (k, G)
    lines = ["population   samples" + "".join(f"  mean PC{j + 1} score" for j in range(k))]
    lines += [f"{g:<12} {n:>7}" + "".join(f"  {m:>+14.4f}" for m in means[:, i])
              for i, (g, n) in enumerate(zip(names, counts, strict=True))]
    centre = scores.mean(axis=1, keepdims=True)
    between = (counts * (means - centre) ** 2).sum(axis=1)
    total = ((scores - centre) ** 2).sum(axis=1)
    r2 = [b / t if t > 0 else 0.0 for b, t in zip(between, total, strict=True)]
    lines.append("share of each PC's variance that lies between populations: "
                 + ", ".join(f"PC{j + 1} {v:.1%}" for j, v in enumerate(r2)))
    return "\n".join(lines)
