"""daskstraggle.plot and the solve commands' --plot, on real runs (matplotlib's Agg canvas)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

pytest.importorskip("matplotlib")

import matplotlib.image
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure

import daskstraggle as ds
from daskstraggle.cli import main
from daskstraggle.data.datasets import make_dataset
from daskstraggle.errors import (
    InvalidDataError,
    InvalidParameterError,
    InvalidTypeError,
    OutputExistsError,
)
from daskstraggle.plot import LOG_FLOOR, plot_convergence, plot_latency, plot_pca, plot_run
from daskstraggle.testing import one_error_line

ROOT = Path(__file__).resolve().parents[1]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def new_axes():
    fig = Figure()
    FigureCanvasAgg(fig)
    return fig.subplots()


@pytest.fixture(scope="module")
def X() -> np.ndarray:
    return np.random.default_rng(0).normal(size=(300, 6)) * [5, 3, 1, 1, 1, 1]


@pytest.fixture(scope="module")
def pca_runs(X):
    """Two PCA runs with a reference (gap in the trace) on 4 in-process workers."""
    gd = ds.fit_pca(X, 2, method="gd", runtime="local", reference=True, rng=0)
    dsag = ds.fit_pca(X, 2, method="dsag", method_params={"n_wait": 3}, runtime="local",
                      reference=True, rng=0, max_iter=200)
    return {"gd": gd, "dsag": dsag}


@pytest.fixture(scope="module")
def sim_run(X):
    """Least squares in simulated time: 3 workers with gamma latencies, no reference."""
    return ds.fit_least_squares(X, X @ np.arange(1.0, 7.0), method="gd", runtime="sim",
                                n_workers=3, stragglers="gamma(mean=0.05, var=1e-4)",
                                rng=0, max_iter=30, tol=None)


@pytest.fixture(scope="module")
def genotypes(tmp_path_factory):
    """A small VCF Zarr store with 3 populations, and its matrix."""
    path = make_dataset("genotypes", tmp_path_factory.mktemp("plot") / "geno.vcz",
                        n_variants=1500, n_samples=45, chunk_rows=500, n_populations=3)
    return path, ds.open_matrix(path)


@pytest.fixture(scope="module")
def genotype_pca(genotypes):
    return ds.fit_pca(genotypes[1], 2, runtime="local", rng=0)


# --------------------------------------------------------------------------- convergence
def test_convergence_draws_one_line_per_run_with_the_trace_values(pca_runs):
    ax = plot_convergence(list(pca_runs.values()), ax=new_axes())
    lines = ax.get_lines()
    assert [line.get_label() for line in lines] == ["gd", "dsag"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["gd", "dsag"]
    assert ax.get_yscale() == "log" and ax.get_xlabel() == "time (s)"
    for line, res in zip(lines, pca_runs.values(), strict=True):
        np.testing.assert_array_equal(line.get_xdata(), res.trace["wall_time"].values)
        gap = res.trace["gap"].values
        np.testing.assert_array_equal(line.get_ydata(), np.maximum(gap, LOG_FLOOR))
    assert lines[0].get_color() != lines[1].get_color()


def test_convergence_labels_from_a_mapping_or_a_list_and_repeated_methods(pca_runs):
    ax = plot_convergence({"power": pca_runs["gd"], "w=3": pca_runs["dsag"]},
                          x="iteration", y="objective", ax=new_axes())
    assert [line.get_label() for line in ax.get_lines()] == ["power", "w=3"]
    assert ax.get_yscale() == "linear" and ax.get_xlabel() == "iteration"
    np.testing.assert_array_equal(ax.get_lines()[1].get_xdata(),
                                  np.arange(pca_runs["dsag"].n_iter))
    gd = pca_runs["gd"]
    ax = plot_convergence([gd, pca_runs["dsag"], gd], ax=new_axes())
    assert [line.get_label() for line in ax.get_lines()] == ["gd (1)", "dsag", "gd (2)"]
    ax = plot_convergence(gd, labels=["mine"], log=False, ax=new_axes())
    assert [line.get_label() for line in ax.get_lines()] == ["mine"]
    assert ax.get_yscale() == "linear"


def test_convergence_of_an_exact_one_round_run_shows_its_zero_gap(X):
    gram = ds.fit_pca(X, 2, method="gram", runtime="local", reference=True, rng=0)
    line = plot_convergence(gram, ax=new_axes()).get_lines()[0]
    assert list(line.get_ydata()) == [LOG_FLOOR] and line.get_marker() == "o"


def test_convergence_in_simulated_time_is_labelled_so(sim_run):
    ax = plot_convergence(sim_run, y="optimality", ax=new_axes())
    assert ax.get_xlabel() == "simulated time (s)" and ax.get_yscale() == "log"


def test_convergence_refuses_bad_input(pca_runs, sim_run):
    gd = pca_runs["gd"]
    with pytest.raises(InvalidParameterError, match=r"'y' parameter .* trace variable over "
                                                    r"iteration; the trace of 'gd' has \["):
        plot_convergence(gd, y="latency")  # over (iteration, worker)
    with pytest.raises(InvalidDataError, match=re.escape(
            "'gd' has no finite 'gap' in its trace (the run had no reference: pass "
            "reference=True, CLI --reference, or y='objective').")):
        plot_convergence(sim_run)
    with pytest.raises(InvalidParameterError, match="'x' parameter of plot_convergence"):
        plot_convergence(gd, x="seconds")
    with pytest.raises(InvalidParameterError, match="sequence of 2 strings"):
        plot_convergence([gd, gd], labels=["one"])
    with pytest.raises(InvalidParameterError, match="must be None when results is a mapping"):
        plot_convergence({"a": gd}, labels=["b"])
    with pytest.raises(InvalidParameterError, match="holds no Result"):
        plot_convergence([])
    with pytest.raises(InvalidTypeError, match="Got Dataset instead"):
        plot_convergence([gd, gd.trace])
    with pytest.raises(InvalidTypeError, match="Got ndarray instead"):
        plot_convergence(np.zeros(3))


# ------------------------------------------------------------------------------- latency
def test_latency_heatmap_is_iterations_by_workers_with_a_colour_bar(sim_run):
    ax = plot_latency(sim_run, ax=new_axes())
    (image,) = ax.images
    values = sim_run.trace["latency"].values
    assert image.get_array().shape == (sim_run.n_iter, 3) == values.shape
    np.testing.assert_array_equal(image.get_array().filled(np.nan), values)
    assert image.colorbar is not None and image.colorbar.ax.get_ylabel() == "latency (s)"
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("worker", "iteration")
    assert image.get_extent() == [-0.5, 2.5, -0.5, sim_run.n_iter - 0.5]


def test_latency_heatmap_of_a_saved_trace_greys_missing_results(pca_runs, tmp_path):
    dsag = pca_runs["dsag"]
    trace = ds.Result.load(dsag.save(tmp_path / "dsag.zarr")).trace
    ax = plot_latency(trace, variable="compute_duration", ax=new_axes())
    data = ax.images[0].get_array()
    assert data.shape == (dsag.n_iter, 4)
    np.testing.assert_array_equal(data.mask, ~np.isfinite(trace["compute_duration"].values))


def test_latency_refuses_bad_input(sim_run):
    with pytest.raises(InvalidParameterError, match=re.escape(
            "one of ['communication_duration', 'compute_duration', 'latency']. Got 'gap'")):
        plot_latency(sim_run, variable="gap")
    empty = sim_run.trace.assign(latency=sim_run.trace["latency"] * np.nan)
    with pytest.raises(InvalidDataError, match="'latency' has no finite value"):
        plot_latency(empty)
    with pytest.raises(InvalidTypeError, match="Result or its trace"):
        plot_latency(sim_run.trace["latency"])


# ------------------------------------------------------------------------------------ PCA
def test_pca_scatter_colours_each_population(genotypes, genotype_pca):
    _, matrix = genotypes
    groups = matrix.column_groups
    ax = plot_pca(genotype_pca, labels=groups, ax=new_axes())
    names = sorted(set(groups.tolist()))
    assert len(names) == 3
    assert [c.get_label() for c in ax.collections] == names
    assert [t.get_text() for t in ax.get_legend().get_texts()] == names
    assert sum(len(c.get_offsets()) for c in ax.collections) == matrix.n_columns == 45
    comps = genotype_pca.fitted["components"]
    for collection, name in zip(ax.collections, names, strict=True):
        np.testing.assert_array_equal(collection.get_offsets(), comps[:2, groups == name].T)
    colours = {tuple(c.get_facecolor()[0]) for c in ax.collections}
    assert len(colours) == 3
    ratio = genotype_pca.fitted["explained_variance_ratio"]
    assert ax.get_xlabel() == f"PC1 ({ratio[0]:.1%})" and ax.get_ylabel().startswith("PC2 (")


def test_pca_scatter_of_a_dataset_scores_and_other_components(X, tmp_path):
    res = ds.fit_pca(X, 3, runtime="local", rng=0)
    ax = plot_pca(xr.open_zarr(res.save(tmp_path / "pca.zarr"), consolidated=False),
                  components=(2, 0),
                  ax=new_axes())
    (dots,) = ax.collections
    np.testing.assert_allclose(dots.get_offsets(), res.fitted["components"][[2, 0]].T)
    assert ax.get_xlabel().startswith("PC3 (") and ax.get_legend() is None
    scores = (X - X.mean(axis=0)) @ res.fitted["components"].T
    ax = plot_pca(scores, labels=np.arange(300) % 2, ax=new_axes())
    assert [len(c.get_offsets()) for c in ax.collections] == [150, 150]
    assert ax.get_xlabel() == "PC1"
    ax = plot_pca(scores, labels=np.linspace(0, 1, 300), ax=new_axes())  # numbers: a scale
    (dots,) = ax.collections
    assert len(dots.get_offsets()) == 300 and dots.colorbar is not None


def test_pca_scatter_refuses_bad_input(X, genotype_pca, sim_run):
    with pytest.raises(InvalidParameterError, match=re.escape(
            "'components' parameter of plot_pca must be two distinct component indices in "
            "[0, 2) (0 is PC1; the data has 2 components). Got (0, 2) instead.")):
        plot_pca(genotype_pca, components=(0, 2))
    with pytest.raises(InvalidParameterError, match="two distinct"):
        plot_pca(genotype_pca, components=(1, 1))
    with pytest.raises(InvalidParameterError, match="must be a PCA result; got a "
                                                    "'least-squares' result"):
        plot_pca(sim_run)
    with pytest.raises(InvalidParameterError, match=r"one label per point \(45\). Got 3"):
        plot_pca(genotype_pca, labels=["a", "b", "c"])
    with pytest.raises(InvalidTypeError, match="1-D array-like"):
        plot_pca(genotype_pca, labels="population")
    with pytest.raises(InvalidParameterError, match="45 distinct values; at most 20"):
        plot_pca(genotype_pca, labels=[f"s{i}" for i in range(45)])
    with pytest.raises(InvalidParameterError, match=r"shape \(n_samples, n_components\)"):
        plot_pca(np.zeros(5))


def test_run_figure_has_the_panels_the_run_supports(genotypes, genotype_pca, sim_run):
    fig = plot_run(genotype_pca, labels=genotypes[1].column_groups, fig=Figure())
    panels = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    assert [ax.get_title() for ax in panels] == ["pca by gram", "per-worker latency",
                                                  "PC1 and PC2 of 45 samples"]
    assert len(panels[2].collections) == 3
    fig = plot_run(sim_run, fig=Figure())  # no reference: optimality; no PCA panel
    panels = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    assert [ax.get_title() for ax in panels] == ["least-squares by gd", "per-worker latency"]
    assert panels[0].get_ylabel() == "optimality (relative)"


# ------------------------------------------------------------------------------------ CLI
def test_cli_plot_writes_a_png_of_the_run(genotypes, tmp_path, capsys):
    path, _ = genotypes
    target = tmp_path / "pca.png"
    code = main(["pca", str(path), "--runtime", "local", "--reference", "--quiet",
                 "--plot", str(target)])
    out = capsys.readouterr().out
    assert code == 0 and f"figure      {target}" in out
    assert target.read_bytes()[:8] == PNG_SIGNATURE
    image = matplotlib.image.imread(target)
    assert image.shape == (400, 3 * 480, 4)  # 3 panels of 4.8 x 4 inches at 100 dpi
    assert not list(tmp_path.glob(".pca.png.tmp-*"))


def test_cli_plot_of_a_regression_in_json(tmp_path, capsys):
    data = make_dataset("linear", tmp_path / "lin.zarr", n_samples=400, n_features=5,
                        chunk_rows=100)
    target = tmp_path / "lin.pdf"
    code = main(["linreg", str(data), "--runtime", "local", "--json", "--plot", str(target)])
    assert code == 0
    assert '"plot": "' + str(target) + '"' in capsys.readouterr().out
    assert target.read_bytes()[:5] == b"%PDF-"


def test_cli_plot_refuses_an_existing_file_before_any_work(genotypes, tmp_path, capsys,
                                                           no_cluster):
    path, _ = genotypes
    target = tmp_path / "old.png"
    target.write_bytes(b"precious")
    for command in (["pca", str(path)], ["logreg", str(path)], ["linreg", str(path)]):
        assert main([*command, "--plot", str(target)]) == 2
        line = one_error_line(capsys.readouterr().err)
        assert line == (f"error: --plot {str(target)!r} exists already; pass --overwrite or "
                        "choose another path.")
    assert target.read_bytes() == b"precious"


@pytest.mark.parametrize("case", ["folder", "no_parent", "suffix", "inside_input", "is_out"])
def test_cli_plot_refuses_bad_paths_before_any_work(case, genotypes, tmp_path, capsys,
                                                    no_cluster):
    path, _ = genotypes
    (tmp_path / "fig.png").mkdir()
    plot, extra, expected = {
        "folder": (tmp_path / "fig.png", [], "is a folder"),
        "no_parent": (tmp_path / "missing" / "run.png", [], "does not exist"),
        "suffix": (tmp_path / "run.txt", [], "must end in an image format's suffix"),
        "inside_input": (path / "run.png", [], "lies inside the input store"),
        "is_out": (tmp_path / "out.png", ["--out", str(tmp_path / "out.png")],
                   "is or lies inside --out"),
    }[case]
    assert main(["pca", str(path), "--plot", str(plot), *extra]) == 2
    assert expected in one_error_line(capsys.readouterr().err)
    assert not (tmp_path / "out.png").exists()


def test_cli_plot_overwrite_replaces_an_existing_file(genotypes, tmp_path, capsys):
    path, _ = genotypes
    target = tmp_path / "run.png"
    target.write_bytes(b"old")
    assert main(["pca", str(path), "--runtime", "local", "--quiet", "--overwrite",
                 "--plot", str(target)]) == 0
    assert target.read_bytes()[:8] == PNG_SIGNATURE
    capsys.readouterr()


def test_save_refuses_a_file_that_appeared_during_the_run(genotype_pca, tmp_path):
    from daskstraggle._cli_plot import save_run_figure

    target = tmp_path / "late.png"
    target.write_bytes(b"arrived meanwhile")
    with pytest.raises(OutputExistsError, match="appeared during the run"):
        save_run_figure(genotype_pca, target)
    assert target.read_bytes() == b"arrived meanwhile"
    assert [p.name for p in tmp_path.iterdir()] == ["late.png"]


# ------------------------------------------------------------------- without matplotlib
BLOCK_MATPLOTLIB = "import sys; sys.modules['matplotlib'] = None\n"


def run_without_matplotlib(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", BLOCK_MATPLOTLIB + code], cwd=cwd,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_without_matplotlib_the_package_imports_and_plots_say_how_to_install(tmp_path):
    code = (
        "import numpy as np\n"
        "import daskstraggle as ds\n"
        "assert sys.modules['matplotlib'] is None  # nothing tried to import it for real\n"
        "res = ds.fit_least_squares(np.eye(8), np.arange(8.0), runtime='local', rng=0)\n"
        "try:\n"
        "    ds.plot.plot_convergence(res, y='objective')\n"
        "except ImportError as err:\n"
        "    print(err)\n"
    )
    proc = run_without_matplotlib(code, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "daskstraggle.plot needs matplotlib: pip install 'daskstraggle[plot]'\n"


def test_without_matplotlib_cli_plot_exits_2_with_one_line(tmp_path):
    code = ("from daskstraggle.cli import main\n"
            "sys.exit(main(['linreg', 'missing.zarr', '--plot', 'run.png']))\n")
    proc = run_without_matplotlib(code, tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert one_error_line(proc.stderr) == ("error: --plot needs matplotlib: pip install "
                                           "'daskstraggle[plot]'")
    assert list(tmp_path.iterdir()) == []


def test_importing_daskstraggle_does_not_import_matplotlib():
    code = ("import sys, daskstraggle, daskstraggle.plot\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'matplotlib'))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_colours_of_a_categorical_legend_match_their_points(genotypes, genotype_pca):
    _, matrix = genotypes
    ax = plot_pca(genotype_pca, labels=matrix.column_groups, ax=new_axes())
    handles = ax.get_legend().legend_handles
    for handle, collection in zip(handles, ax.collections, strict=True):
        assert to_rgba(handle.get_facecolor()[0]) == to_rgba(collection.get_facecolor()[0])
