"""``daskstraggle simulate`` and the straggler options of the solve commands (no cluster)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from daskstraggle import Result, fit_pca
from daskstraggle.cli import main
from daskstraggle.latency.fit import fit_trace


def _json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_order_statistics_and_iterations_of_a_deterministic_model(capsys):
    out = _json(capsys, ["simulate", "--workers", "3", "--wait", "2", "--latency",
                         "constant(compute=[1.0, 2.0, 3.0])", "--collect-window", "0",
                         "--iterations", "3", "--json"])
    assert out["order_statistics"]["mean_s"] == [1.0, 2.0, 3.0]
    assert out["predicted_wth_fastest_s"] == 2.0
    # it 0 ends at 2; it 1 starts at 2 (w0 -> 3, w1 -> 4; w2's stale result at 3 re-tasks it
    # until 6) and ends at 4; it 2: w0 -> 5, w1 -> 6 (w2 stale at 6): ends at 6
    assert out["total_time_s"] == pytest.approx(6.0)
    assert out["iteration_duration_s"]["mean"] == pytest.approx(2.0)
    assert out["participation"] == [1.0, 1.0, 0.0]


def test_table_output_names_the_numbers(capsys):
    assert main(["simulate", "--workers", "20", "--wait", "10", "--latency",
                 "gamma(mean=0.05, var=1e-4) + slowdown(workers=0, factor=3)", "--iterations",
                 "20"]) == 0
    text = capsys.readouterr().out
    for words in ("N = 20 workers, waiting for w = 10", "w-th fastest", "w =    10",
                  "total time", "stale workers re-tasked at once", "slowdown("):
        assert words in text


def test_fitted_statistics_saved_from_a_run(capsys, tmp_path):
    X = np.random.default_rng(0).normal(size=(300, 5))
    path = tmp_path / "run.zarr"
    fit_pca(X, 2, runtime="sim", n_workers=3, method="sgd", method_params={"n_wait": 2},
            stragglers="gamma(mean=[0.1, 0.2, 0.4], var=1e-3)", max_iter=40, tol=None,
            rng=0, out=path)
    out = _json(capsys, ["simulate", "--from-trace", str(path), "--wait", "2", "--json"])
    assert out["n_workers"] == 3 and "per worker" in out["source"]
    np.testing.assert_allclose(out["model"]["mean"], [0.1, 0.2, 0.4], rtol=0.15)
    pooled = _json(capsys, ["simulate", "--from-trace", str(path), "--iid", "--workers", "10",
                            "--json"])
    assert pooled["n_workers"] == 10 and np.isscalar(pooled["model"]["mean"])
    # the same rows on 6 workers: worker j is traced worker j mod 3 with half the compute
    six = _json(capsys, ["simulate", "--from-trace", str(path), "--workers", "6", "--json"])
    assert six["n_workers"] == 6 and "rescaled from 3 to 6 workers" in six["source"]
    np.testing.assert_allclose(six["model"]["mean"], np.tile(out["model"]["mean"], 2) / 2)
    np.testing.assert_allclose(six["model"]["var"], np.tile(out["model"]["var"], 2) / 4)
    np.testing.assert_allclose(pooled["model"]["mean"],
                               fit_trace(Result.load(path).trace, iid=True).mean * 3 / 10)


def test_a_coded_trace_is_not_rescaled_to_other_workers(capsys, tmp_path):
    X = np.random.default_rng(0).normal(size=(300, 5))
    path = tmp_path / "coded.zarr"
    fit_pca(X, 2, runtime="sim", n_workers=3, method="coded", max_iter=5, tol=None, rng=0,
            stragglers="gamma(mean=0.1, var=1e-3)", out=path)
    assert main(["simulate", "--from-trace", str(path), "--workers", "6"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "coded" in err and "--workers" in err
    assert main(["simulate", "--from-trace", str(path), "--iterations", "3"]) == 0


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--workers", "4", "--wait", "5", "--latency", "gamma(mean=0.1, var=0.01)"],
         ("'n_wait'", "[1, 4]", "5")),
        (["--workers", "4", "--wait", "0", "--latency", "gamma(mean=0.1, var=0.01)"],
         ("'n_wait'", "0")),
        (["--workers", "4", "--latency", "weibull(shape=2)"], ("'weibull'", "gamma")),
        (["--workers", "4", "--latency", "gamma(mean=0.1, var=-1)"], ("'var'", "-1")),
        (["--workers", "2", "--latency", "slowdown(workers=3, factor=2) + gamma(mean=1, var=1)"],
         ("not a modifier",)),
        (["--workers", "4", "--latency", "slowdown(workers=1, factor=4)"],
         ("base distribution",)),
        (["--workers", "4"], ("--latency", "--from-trace")),
        (["--from-trace", "nowhere.zarr"], ("nowhere.zarr",)),
        (["--workers", "0", "--latency", "gamma(mean=0.1, var=0.01)"], ("--workers",)),
        (["--latency", "gamma(mean=0.1, var=0.01)", "--iid"], ("--iid",)),
        (["--latency", "gamma(mean=0.1)"], ("'gamma'", "needs ['var']")),
        (["--workers", "100000", "--latency", "gamma(mean=0.1, var=0.01)"], ("--samples",)),
        # issue 25: models whose moments or draws overflow float64, sizes beyond the bounds
        (["--latency", "gamma(mean=1e300, var=1e300)", "--json"], ("'mean'", "<= 1e+15")),
        (["--latency", "gamma(mean=1e-200, var=1)"], ("shape m^2/v", "'var'")),
        (["--latency", "shifted_exponential(rate=1e-300)"], ("'rate'", ">= 1e-15")),
        (["--latency", "gamma(mean=1e15, var=1e30)", "--load", "1e300", "--json"],
         ("not finite", "smaller load")),
        (["--latency", "gamma(mean=1, var=1)", "--wait", "50", "--update-duration", "1.7e308"],
         ("simulated time", "update_duration")),
        (["--workers", "10000000", "--samples", "1", "--latency", "gamma(mean=1, var=1)"],
         ("--iterations x --workers", "50,000,000")),
        (["--workers", "20000", "--samples", "1", "--latency",
          "gamma(mean=1, var=1) + markov(p_slow=0.1, slow_factor=3)"],
         ("--iterations x --workers", "1,000,000", "state over time")),
    ],
    ids=["w-above-n", "w-zero", "unknown-model", "negative-var", "modifier-first",
         "no-distribution", "no-model", "missing-trace", "no-workers", "iid-without-trace",
         "missing-parameter", "too-many-samples", "gamma-moments-overflow",
         "gamma-shape-underflow", "rate-underflow", "load-overflow", "time-overflow",
         "too-many-iterations", "too-many-events"],
)
def test_bad_input_exits_2_with_one_line(argv, words, capsys):
    assert main(["simulate", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    for word in words:
        assert word.lower() in lines[0].lower(), (word, lines[0])


def _strict_json(text):
    """Parse JSON as the standard has it: NaN and Infinity are not JSON."""
    def refuse(name):
        raise AssertionError(f"{name} in the --json output")
    return json.loads(text, parse_constant=refuse)


def test_json_never_holds_nan_or_infinity(capsys, monkeypatch):
    out = _strict_json(_json_text(capsys, ["simulate", "--workers", "4", "--latency",
                                           "gamma(mean=0.1, var=1e-4)", "--json"]))
    assert out["n_workers"] == 4
    # a value that is not finite all the same (here forced): one line naming it, exit 2
    import daskstraggle.latency.simulator as simulator

    real = simulator.simulate

    def infinite(*args, **kwargs):
        result = real(*args, **kwargs)
        result.iteration_time[-1] = np.inf
        return result

    monkeypatch.setattr(simulator, "simulate", infinite)
    assert main(["simulate", "--workers", "4", "--latency", "gamma(mean=0.1, var=1e-4)",
                 "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1, captured
    assert captured.err.startswith("error: the simulation gave total_time_s = inf, not a finite")


def _json_text(capsys, argv):
    assert main(argv) == 0
    return capsys.readouterr().out


def test_a_million_workers_are_simulated_without_a_stream_each(capsys, monkeypatch):
    """Many workers are drawn vectorised, with no Generator per worker (40 us each: 400 s
    for the 10**7 workers of issue 25)."""
    from daskstraggle.latency import base

    monkeypatch.setattr(base.WorkerStreams, "__getitem__", None)  # a stream per worker fails
    assert main(["simulate", "--workers", "1000000", "--wait", "900000", "--iterations", "1",
                 "--samples", "1", "--latency",
                 "gamma(mean=0.05, var=1e-4) + slowdown(workers=0, factor=2)"]) == 0
    text = capsys.readouterr().out
    assert "N = 1000000 workers, waiting for w = 900000" in text
    assert "w = 900000" in text and "fresh results per iteration: 9" in text


def test_stateful_models_are_simulated_without_a_one_round_table(capsys):
    out = _json(capsys, ["simulate", "--workers", "4", "--latency",
                         "gamma(mean=0.1, var=1e-4) + markov(p_slow=0.5, slow_factor=10)",
                         "--json"])
    assert out["order_statistics"] is None
    assert out["iteration_duration_s"]["mean"] > 0.3  # the slow state shows up
    assert main(["simulate", "--workers", "4", "--latency", "bursts(base=constant(compute=1))"]
                ) == 0
    assert "model has state over time" in capsys.readouterr().out


def test_negative_seed_is_a_usage_error(capsys):
    assert main(["simulate", "--latency", "gamma(mean=0.1, var=0.01)", "--seed", "-1"]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_coding_flags_need_coded(capsys):
    assert main(["pca", "whatever.zarr", "--batch-size", "2"]) == 2
    assert "--batch-size: only with --method coded" in capsys.readouterr().err
    assert main(["logreg", "whatever.zarr", "--method", "nag", "--nesterov"]) == 2
    assert "--nesterov: only with --method coded, not 'nag'" in capsys.readouterr().err


def test_wait_needs_sgd(capsys):
    assert main(["pca", "whatever.zarr", "--wait", "2"]) == 2
    assert "--wait applies to --method sgd, sag or dsag" in capsys.readouterr().err
    assert main(["pca", "whatever.zarr", "--method", "nag", "--subpartitions", "2"]) == 2
    assert "--subpartitions applies to --method sgd, sag or dsag, not 'nag'" in \
        capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--method", "gd", "--balance"], "--balance applies to --method sgd, sag or dsag"),
        (["--method", "dsag", "--balance-margin", "0.2"], "--balance-margin: only with --balance"),
        (["--method", "dsag", "--balance", "--balance-margin", "1.5"],
         "'margin' parameter of LoadBalancer must be a number in (0, 1)"),
        (["--method", "dsag", "--balance", "--balance-window", "0"],
         "'window' parameter of LoadBalancer"),
    ],
)
def test_bad_balance_settings_exit_2_with_one_line(capsys, args, message):
    assert main(["pca", "whatever.zarr", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


def test_dsag_lb_from_the_command_line(capsys, tmp_path):
    rng = np.random.default_rng(4)
    X = rng.normal(size=(1200, 6)) @ np.diag([4.0, 2, 1, 1, 0.5, 0.5])
    import zarr

    z = zarr.create_array(tmp_path / "x.zarr", shape=X.shape, chunks=(100, 6), dtype="f8")
    z[:] = X
    out = _json(capsys, ["pca", str(tmp_path / "x.zarr"), "--runtime", "sim", "--workers", "4",
                         "--method", "dsag", "--subpartitions", "10", "--balance",
                         "--max-iter", "120", "--tol", "1e-14", "--stragglers",
                         "gamma(mean=0.2, var=1e-4) + slowdown(workers=2, factor=2)", "--json"])
    events = out["balance_events"]
    assert events and events[0]["subpartitions"][2] > max(
        v for i, v in enumerate(events[0]["subpartitions"]) if i != 2)


def test_pca_in_simulated_time_with_stragglers(capsys, tmp_path):
    X = np.random.default_rng(1).normal(size=(400, 6))
    import zarr

    z = zarr.create_array(tmp_path / "x.zarr", shape=X.shape, chunks=(50, 6), dtype="f8")
    z[:] = X
    out = _json(capsys, ["pca", str(tmp_path / "x.zarr"), "--runtime", "sim", "--workers", "8",
                         "--method", "sgd", "--wait", "4", "--max-iter", "5", "--stragglers",
                         "gamma(mean=0.1, var=1e-3) + slowdown(workers=0, factor=10)", "--json"])
    assert out["n_iter"] == 5 and out["wall_time_s"] > 5 * 0.05


def test_dsag_from_the_command_line_reaches_the_optimum(capsys, tmp_path):
    rng = np.random.default_rng(2)
    X = rng.normal(size=(600, 6)) @ np.diag([4.0, 2, 1, 1, 0.5, 0.5])
    import zarr

    z = zarr.create_array(tmp_path / "x.zarr", shape=X.shape, chunks=(50, 6), dtype="f8")
    z[:] = X
    out = _json(capsys, ["pca", str(tmp_path / "x.zarr"), "--runtime", "sim", "--workers", "6",
                         "--method", "dsag", "--wait", "4", "--subpartitions", "2",
                         "--max-iter", "200", "--tol", "1e-14", "--reference", "--stragglers",
                         "constant(compute=1) + slowdown(workers=5, factor=6)", "--json"])
    # converged by the exact eigen-residual check before the iteration budget
    assert out["method"] == "dsag" and out["n_iter"] <= 200
    assert out["converged"] is True and out["stop_reason"] == "tol", out
    assert abs(out["gap"]) < 1e-8 * abs(out["objective"]), out


def test_partial_and_async_from_the_command_line(capsys, tmp_path):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(600, 5))
    import zarr

    root = zarr.open_group(tmp_path / "g.zarr", mode="w")
    root.create_array("X", shape=X.shape, chunks=(100, 5), dtype="f8")[:] = X
    root.create_array("y", shape=(600,), chunks=(100,), dtype="f8")[:] = X @ np.ones(5)
    base = ["linreg", str(tmp_path / "g.zarr"), "--array", "X", "--labels", "y", "--runtime",
            "sim", "--workers", "6", "--stragglers", "multi-message(alpha=0.01, rate=10)",
            "--max-iter", "30", "--tol", "1e-14", "--json"]
    out = _json(capsys, [*base, "--method", "partial", "--degrees", "1,2", "--tolerance",
                         "0.3", "--ordering", "age", "--age-threshold", "1"])
    # y = X 1 exactly: every partition's gradient vanishes at the optimum, so even with
    # q = 0.3 of the partitions left out the exact check can confirm convergence
    assert out["method"] == "partial" and out["n_iter"] <= 30
    assert out["converged"] is (out["stop_reason"] == "tol"), out
    out = _json(capsys, [*base, "--method", "async", "--max-delay", "3", "--update-order",
                         "shortest", "--step-size", "0.05"])
    assert out["method"] == "async" and out["n_iter"] <= 30


def test_partial_and_async_flags_need_their_method(capsys):
    assert main(["pca", "whatever.zarr", "--tolerance", "0.2"]) == 2
    assert "--tolerance: only with --method partial, not 'auto'" in capsys.readouterr().err
    assert main(["pca", "whatever.zarr", "--method", "dsag", "--max-delay", "2"]) == 2
    assert "--max-delay: only with --method async, not 'dsag'" in capsys.readouterr().err
    assert main(["pca", "whatever.zarr", "--method", "partial", "--degrees", "1,x"]) == 2
    assert "--degrees must be comma-separated ints" in capsys.readouterr().err
