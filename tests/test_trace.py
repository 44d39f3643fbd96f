"""Result: summary, Zarr round trip, atomic and refusing writes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from daskstraggle import GD, Result, StopRule, open_matrix
from daskstraggle.api import run_on
from daskstraggle.errors import OutputExistsError
from daskstraggle.problems import PCA
from daskstraggle.runtime import LocalRuntime


@pytest.fixture
def result(low_rank_matrix) -> Result:
    with LocalRuntime(n_workers=3) as rt:
        return run_on(rt, GD(), PCA(n_components=2), open_matrix(low_rank_matrix), reference=True,
                      rng=0, stop=StopRule(max_iter=50))


def test_summary_is_json_with_the_documented_keys(result):
    summary = json.loads(json.dumps(result.summary()))
    for key in ("method", "n_iter", "wall_time_s", "objective", "explained_variance",
                "explained_variance_ratio", "reference_objective", "gap"):
        assert key in summary
    assert summary["n_iter"] == result.n_iter == result.trace.sizes["iteration"]


def test_round_trip(result, tmp_path):
    path = result.save(tmp_path / "r.zarr")
    back = Result.load(path)
    assert back.problem == "pca" and back.method == "gd" and back.n_iter == result.n_iter
    for key, value in result.fitted.items():
        np.testing.assert_array_equal(back.fitted[key], value)
    np.testing.assert_array_equal(back.trace["objective"], result.trace["objective"])
    np.testing.assert_array_equal(back.trace["compute_duration"], result.trace["compute_duration"])
    assert back.reference_objective == result.reference_objective
    assert back.attrs["runtime"] == "local"


def test_existing_output_is_never_overwritten_without_permission(result, tmp_path):
    path = tmp_path / "r.zarr"
    path.mkdir()
    (path / "precious.txt").write_text("keep")
    with pytest.raises(OutputExistsError, match="exists already"):
        result.save(path)
    assert (path / "precious.txt").read_text() == "keep"
    result.save(path, overwrite=True)
    assert not (path / "precious.txt").exists()
    assert Result.load(path).n_iter == result.n_iter
    assert [p.name for p in tmp_path.iterdir()] == ["r.zarr"]  # no temporaries left


def test_recorded_iterates_give_the_exact_objective_of_every_round():
    from daskstraggle.methods import SGD
    from daskstraggle.runtime import SimRuntime

    X = np.random.default_rng(4).normal(size=(300, 6)) @ np.diag([3.0, 2, 1, 1, 1, 1])
    with LocalRuntime(3) as rt:
        gd = run_on(rt, GD(), PCA(n_components=2), open_matrix(X),
                    stop=StopRule(max_iter=8, tol=None), rng=0, reference=True,
                    record_iterates=True)
    tr = gd.trace
    assert (tr.coverage == 1).all() and (tr.n_dropped == 0).all() and "age" not in tr
    # GD evaluates its objective exactly each round: the post-hoc pass must agree
    np.testing.assert_allclose(tr.exact_objective, tr.objective, rtol=1e-12)
    np.testing.assert_allclose(tr.exact_gap, tr.gap, rtol=1e-9, atol=1e-15)
    with SimRuntime(3, latency="constant(compute=(1.0, 1.0, 5.0))") as rt:
        sgd = run_on(rt, SGD(n_wait=2), PCA(n_components=2), open_matrix(X),
                     stop=StopRule(max_iter=8, tol=None), rng=0, record_iterates=True)
    tr = sgd.trace
    assert np.isnan(tr.objective).all() and np.isfinite(tr.exact_objective).all()
    assert (tr.coverage < 1).all() and "exact_gap" not in tr
    assert float(tr.exact_objective[-1]) == pytest.approx(sgd.objective, rel=1e-12)


# ---------------------------------------------------------------- issue 42: lost chunks
def _tree(path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*"))
            if p.is_file()}


@pytest.mark.parametrize(("name", "chunk"), [("components", "c/0/0"), ("iterate", "c/0/0"),
                                             ("explained_variance", "c/0"),
                                             ("compute_duration", "c/0/0")])
def test_a_lost_chunk_of_a_saved_result_is_refused_not_read_as_nan(result, tmp_path, name,
                                                                   chunk):
    from daskstraggle.errors import MissingChunksError

    path = result.save(tmp_path / "r.zarr")
    (path / name / chunk).unlink()
    with pytest.raises(MissingChunksError, match=f"array '{name}' in the Zarr store .*"
                                                 f"first: '{chunk}'"):
        Result.load(path)
    # a store written without empty chunks is read as inputs are, with missing_chunks='fill'
    assert np.isnan(Result.load(path, missing_chunks="fill").to_dataset()[name]).all()


def test_a_lost_array_or_a_corrupt_chunk_is_refused_naming_it(result, tmp_path):
    import shutil

    from daskstraggle.errors import CorruptDataError

    lost = result.save(tmp_path / "lost.zarr")
    shutil.rmtree(lost / "components")  # loaded as a result without components before
    with pytest.raises(CorruptDataError, match=r"1 of \d+ arrays of the result .* are missing "
                                               r"\(first: 'components'\)"):
        Result.load(lost)
    corrupt = result.save(tmp_path / "corrupt.zarr")
    (corrupt / "components" / "c" / "0" / "0").write_bytes(b"xx")  # was "not a result"
    with pytest.raises(CorruptDataError, match=r"array 'components' in the Zarr store .* could "
                                               r"not be decoded .*a chunk is corrupt"):
        Result.load(corrupt)


def test_every_chunk_is_saved_even_all_zero_or_nan_ones(tmp_path):
    """Zarr skips a chunk equal to the fill value unless told: then a lost one is undetectable."""
    from daskstraggle.errors import InvalidParameterError, MissingChunksError
    from daskstraggle.trace import TraceRecorder, trace_dataset

    empty = Result(problem="logistic", method="gd", trace=trace_dataset(TraceRecorder(3)),
                   fitted={"coef": np.zeros(4), "intercept": np.array(0.0),
                           "grad_norm": np.array(np.nan)},
                   iterate=np.zeros(5), objective=0.0, stop_reason="max_iter")
    path = empty.save(tmp_path / "e.zarr")
    back = Result.load(path)
    assert back.fitted["intercept"] == 0 and np.isnan(back.fitted["grad_norm"])
    (path / "intercept" / "c").unlink()  # a 0-d array's one chunk
    with pytest.raises(MissingChunksError, match="'intercept'"):
        Result.load(path)
    with pytest.raises(InvalidParameterError, match=r"'missing_chunks' parameter of Result\.load"):
        Result.load(path, missing_chunks="zero")


def test_a_result_saved_before_every_chunk_was_written_still_loads(result, tmp_path):
    """A store saved as before (no ``arrays`` record, chunks equal to the fill value not
    written: every gd run's all-zero n_stale) loads with those chunks as the fill value."""
    import zarr

    ds = result.to_dataset()
    ds.to_zarr(tmp_path / "old.zarr", mode="w", consolidated=False, zarr_format=3)
    assert "arrays" not in zarr.open_group(tmp_path / "old.zarr").attrs
    back = Result.load(tmp_path / "old.zarr")
    np.testing.assert_array_equal(back.fitted["components"], result.fitted["components"])


def test_cli_refuses_a_result_with_a_lost_chunk_in_one_line(tmp_path):
    import subprocess
    import sys

    from daskstraggle import fit_pca
    from daskstraggle.testing import one_error_line

    path = tmp_path / "run.zarr"
    fit_pca(np.random.default_rng(0).normal(size=(300, 5)), 2, runtime="sim", n_workers=3,
            method="gd", stragglers="gamma(mean=0.1, var=1e-3)", max_iter=5, tol=None,
            rng=0, out=path)
    (path / "compute_duration" / "c" / "0" / "0").unlink()
    before = _tree(path)
    proc = subprocess.run([sys.executable, "-m", "daskstraggle.cli", "simulate",
                           "--from-trace", str(path), "--json"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2, proc.stderr
    line = one_error_line(proc.stderr)
    assert "'compute_duration'" in line and "missing" in line and proc.stdout == ""
    assert _tree(path) == before


# ------------------------------------------------- issue 42: --json says what the table says
def _table_and_json(capsys, argv):
    from daskstraggle.cli import main

    assert main(argv) == 0
    table = capsys.readouterr().out
    assert main([*argv, "--json"]) == 0
    return table, json.loads(capsys.readouterr().out)


def test_json_has_the_quality_control_counts_of_the_table(vcz_missing_path, capsys):
    table, out = _table_and_json(capsys, ["pca", str(vcz_missing_path), "-k", "2",
                                          "--runtime", "local", "--min-maf", "0.05",
                                          "--max-missing", "0.08", "--mind", "0.06"])
    qc = out["quality_control"]
    assert set(qc) == {"n_variants", "n_kept", "removed", "n_samples", "n_samples_kept",
                       "samples_removed"}
    assert set(qc["removed"]) >= {"missing", "maf"} and "mind" in qc["samples_removed"]
    for kind, n, kept, removed in (("variants", "n_variants", "n_kept", "removed"),
                                   ("samples ", "n_samples", "n_samples_kept",
                                    "samples_removed")):
        steps = ", ".join(f"{step} removed {k}" for step, k in qc[removed].items())
        assert f"{kind}    {qc[kept]} of {qc[n]} kept by quality control ({steps})" in table
    assert f"pca of a {qc['n_kept']} x {qc['n_samples_kept']} matrix" in table


def test_json_has_the_worker_losses_and_joins_of_the_table(low_rank_matrix, tmp_path, capsys):
    import zarr

    store = tmp_path / "X.zarr"
    zarr.create_array(store, shape=low_rank_matrix.shape, chunks=(50, 12),
                      dtype="f8")[:] = low_rank_matrix
    argv = ["pca", str(store), "-k", "2", "--method", "dsag", "--runtime", "sim",
            "--workers", "3", "--max-iter", "30", "--stragglers",
            "gamma(mean=0.05, var=1e-4) + slowdown(workers=1, factor=4) + "
            "loss(workers=0, at=0.3) + join(count=2, at=0.6)"]
    table, out = _table_and_json(capsys, argv)
    losses, joins = out["worker_losses"], out["worker_joins"]
    assert [loss["kind"] for loss in losses] == ["lost", "adopted"] and len(joins) == 1
    lines = [line for line in table.splitlines() if line.startswith("worker ")]
    assert len(lines) == len(losses) + len(joins)
    for line, loss in zip(lines, losses, strict=False):
        assert line.startswith(f"worker {'lost' if loss['kind'] == 'lost' else 'moved'} "
                               f"{loss['lost']} (index {loss['worker_index']}): partitions "
                               f"{loss['partitions']} reloaded on {loss['moved_to']}")
    assert lines[-1].startswith(f"worker joined {joins[0]['worker']}: helped index "
                                f"{joins[0]['helps']} ({joins[0]['split_units']} units split")
