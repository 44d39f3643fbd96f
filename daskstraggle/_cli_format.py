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
    lines: list[str] = []
    attrs = result.attrs
    shape = attrs["matrix"]["shape"]
    lines.append(
        f"{result.problem} of a {shape[0]} x {shape[1]} matrix ({attrs['matrix']['kind']}), "
        f"method {result.method}, {attrs['runtime']} runtime with {len(attrs['workers'])} workers, "
        f"{attrs['matrix']['n_partitions']} partitions"
    )
    lines.append("")
    if result.problem == "pca":
        lines.extend(_pca_table(result))
    else:
        coef = result.fitted["coef"]
        lines.append(f"coefficients: {coef.size} (|coef| = {np.linalg.norm(coef):.6g}), "
                     f"intercept {float(result.fitted['intercept']):.6g}")
        shown = ", ".join(f"{c:.4g}" for c in coef[:8]) + (", ..." if coef.size > 8 else "")
        lines.append(f"coef[:8]: {shown}")
        if "grad_norm" in result.fitted:
            lines.append(f"gradient norm {float(result.fitted['grad_norm']):.3g}")
    lines.append("")
    lines.append(f"objective   {result.objective:.10g}")
    if result.reference_objective is not None:
        lines.append(f"exact       {result.reference_objective:.10g}   gap {result.gap:.3g}   "
                     f"distance {result.distance:.3g}")
    lines.append(f"iterations  {result.n_iter} (stopped by {result.stop_reason})")
    verdict = "yes" if result.converged else "NO"
    lines.append(f"converged   {verdict} ({_optimality_name(result)} {result.optimality:.3g}, "
                 f"tol {attrs.get('stop', {}).get('tol')})")
    per_iter = result.wall_time / max(result.n_iter, 1)
    lines.append(f"time        {result.wall_time:.3f} s solve ({per_iter * 1e3:.1f} ms/iteration), "
                 f"{attrs['load_duration_s']:.3f} s load")
    auto = attrs.get("auto")
    if auto is not None:
        from daskstraggle.runtime.auto import describe

        lines.append(f"auto        {describe(auto)}")
    if "staleness" in result.trace and result.n_iter:
        staleness = result.trace["staleness"].values
        lines.append(f"staleness   cache entries up to {int(np.nanmax(staleness))} iterations "
                     f"old ({int(staleness[-1])} at the last)")
    summary = result.summary()  # what --json prints: the table says the same
    for loss in summary.get("worker_losses", []):
        reason = loss.get("reason", "left the cluster")
        what = {"adopted": "moved"}.get(loss.get("kind", ""), loss.get("kind")) or (
            "lost" if reason == "left the cluster" else
            "frozen" if reason.startswith("has not answered") else "moved")
        how = "reloaded on" if loss.get("reloaded", True) else "moved to"
        lines.append(f"worker {what} {loss['lost']} (index {loss['worker_index']}): partitions "
                     f"{loss['partitions']} {how} {loss['moved_to']}")
    for join in summary.get("worker_joins", []):
        ended = f"; stopped: {join['ended']}" if join.get("ended") else ""
        lines.append(f"worker joined {join['worker']}: helped index {join['helps']} "
                     f"({join['split_units']} units split with it{ended})")
    if matrix is not None and matrix.column_groups is not None and result.problem == "pca":
        lines.append("")
        lines.append(_population_table(result, matrix))
    qc = qc_line(result)
    if qc is not None:
        lines.append(qc)
    if data_path is not None:
        lines.append(f"data        {data_path}")
    if out is not None:
        lines.append(f"results     {out}  (fitted quantities + trace, Zarr)")
    return "\n".join(lines)


def _pca_table(result: Any) -> list[str]:
    """The per-component rows of a PCA result (variance, ratio, residual, determined)."""
    lines: list[str] = []
    ev = result.fitted["explained_variance"]
    ratio = result.fitted["explained_variance_ratio"]
    ref_ratio = _reference_ratios(result)
    residuals = result.fitted.get("residuals")
    determined = result.determined
    header = f"{'component':>10} {'explained variance':>19} {'ratio':>9}"
    header += f" {'exact ratio':>12}" if ref_ratio is not None else ""
    header += f" {'residual':>9}" if residuals is not None else ""
    header += "  determined" if determined is not None else ""
    lines.append(header)
    for j in range(len(ev)):
        row = f"{'PC' + str(j + 1):>10} {ev[j]:>19.6g} {ratio[j]:>9.4%}"
        if ref_ratio is not None:
            row += f" {ref_ratio[j]:>12.4%}"
        if residuals is not None:
            row += f" {residuals[j]:>9.2g}"
        if determined is not None:
            row += f"  {determined[j]}"
        lines.append(row)
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
    comps = result.fitted["components"]
    groups = np.asarray(matrix.column_groups)
    k = min(2, comps.shape[0])
    lines = ["population   samples" + "".join(f"  mean PC{j + 1} score" for j in range(k))]
    for g in np.unique(groups):
        sel = groups == g
        row = f"{g:<12} {int(sel.sum()):>7}"
        row += "".join(f"  {comps[j, sel].mean():>+14.4f}" for j in range(k))
        lines.append(row)
    r2 = []
    for j in range(k):
        scores = comps[j]
        means = {g: scores[groups == g].mean() for g in np.unique(groups)}
        between = sum((groups == g).sum() * (m - scores.mean()) ** 2 for g, m in means.items())
        total = ((scores - scores.mean()) ** 2).sum()
        r2.append(between / total if total > 0 else 0.0)
    lines.append("share of each PC's variance that lies between populations: "
                 + ", ".join(f"PC{j + 1} {v:.1%}" for j, v in enumerate(r2)))
    return "\n".join(lines)
