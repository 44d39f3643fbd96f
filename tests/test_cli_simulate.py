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
    _exits_2_with_one_line(argv, words, capsys)


def _exits_2_with_one_line(argv, words, capsys):
    """``simulate ARGV`` exits 2, prints nothing on stdout and one error line naming ``words``."""
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
    assert ("--batch-size: only with --method block, coded or gram, not 'auto'"
            in capsys.readouterr().err)
    assert main(["logreg", "whatever.zarr", "--method", "nag", "--nesterov"]) == 2
    assert "--nesterov: only with --method coded, not 'nag'" in capsys.readouterr().err


def test_wait_needs_sgd(capsys):
    assert main(["pca", "whatever.zarr", "--wait", "2"]) == 2
    assert "--wait: only with --method dsag, sag or sgd, not 'auto'" in capsys.readouterr().err
    assert main(["pca", "whatever.zarr", "--method", "nag", "--subpartitions", "2"]) == 2
    assert "--subpartitions: only with --method dsag, sag or sgd, not 'nag'" in \
        capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--method", "gd", "--balance"],
         "--balance: only with --method dsag, sag or sgd, not 'gd'"),
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


# ------------------------------------------------------------------ fault terms in --latency
#: The README's example: 8 workers, wait for 6, worker 0 lost at simulated second 1.
LOSS = ["simulate", "--latency", "gamma(mean=0.05, var=1e-4) + loss(workers=0, at=1)",
        "--workers", "8", "--wait", "6", "--iterations", "50"]


def test_a_lost_worker_keeps_the_simulation_going_and_its_rows_move(capsys):
    out = _strict_json(_json_text(capsys, [*LOSS, "--json"]))
    assert (out["n_workers"], out["n_wait"], out["n_iterations"]) == (8, 6, 50)
    assert out["faults"] == ["loss(workers=[0], at=1)"] and out["method"] == "dsag"
    assert out["order_statistics"] is None and out["predicted_wth_fastest_s"] is None
    assert out["mean_fresh"] >= 6 and out["total_time_s"] > 1.0  # all 50 iterations ran
    loss, move = out["events"]
    assert loss == {"time": 1.0, "event": "loss", "workers": ["0"],
                    "iteration": loss["iteration"]}
    assert 0 < loss["iteration"] < 50
    assert (move["event"], move["kind"], move["worker_index"], move["from"]) == \
        ("move", "lost", 0, "0")
    assert move["time"] == 1.0 and move["rows"] == [[0, 4]] and move["data"] == "reloaded"
    assert move["to"] in {str(i) for i in range(1, 8)}
    assert out["workers_at_end"][0] == move["to"] and "0" not in out["workers_at_end"]
    assert len(out["participation"]) == 8 and out["faults_not_reached"] == []
    # the table says the same in words, without the one-round order statistics
    assert main(LOSS) == 0
    text = capsys.readouterr().out
    for words in ("faults: loss(workers=[0], at=1)", "N = 8 workers, waiting for w = 6",
                  "no one-round order statistics: the faults change the workers",
                  "50 iterations of DSAG", "loss: worker 0",
                  f"move: worker index 0 (rows [0, 4)) from worker 0 to {move['to']} (lost",
                  f"worker of each index at the end: 0 -> {move['to']}"):
        assert words in text, (words, text)
    assert "w-th fastest" not in text


def test_a_loss_agrees_with_the_same_spec_through_solve(capsys):
    """simulate's numbers are those of solve(..., runtime="sim") on the same problem: the
    same engine decides, at the same simulated times."""
    from daskstraggle import DSAG, StopRule, solve
    from daskstraggle.options import DataOptions, RuntimeSpec
    from daskstraggle.problems import LeastSquares
    from daskstraggle.runtime.fault_simulation import make_least_squares_data

    out = _json(capsys, [*LOSS, "--seed", "3", "--json"])
    X, y = make_least_squares_data(8)
    spec = RuntimeSpec("sim", n_workers=8,
                       stragglers="gamma(mean=0.05, var=1e-4) + loss(workers=0, at=1)")
    res = solve(LeastSquares(), X, labels=y, method=DSAG(n_wait=6), runtime=spec,
                data=DataOptions(n_partitions=8), stop=StopRule(max_iter=50, tol=None), rng=3)
    trace = res.trace
    assert out["total_time_s"] == pytest.approx(float(trace.wall_time[-1]), rel=1e-12)
    assert out["iteration_duration_s"]["median"] == pytest.approx(
        float(np.median(trace.iteration_duration)), rel=1e-12)
    assert out["mean_fresh"] == pytest.approx(float(trace.n_fresh.mean()))
    assert out["mean_stale"] == pytest.approx(float(trace.n_stale.mean()))
    (lost,) = res.attrs["worker_losses"]
    move = out["events"][1]
    assert (move["worker_index"], move["from"], move["to"], move["kind"], move["time"]) == \
        (lost["worker_index"], lost["lost"], lost["moved_to"], lost["kind"], lost["time"])


def test_a_freeze_delays_the_iterations_and_a_long_one_moves_the_rows(capsys):
    import dask

    base = ["simulate", "--workers", "8", "--iterations", "40", "--json", "--latency"]
    out = _json(capsys, [*base, "gamma(mean=0.05, var=1e-4) + freeze(workers=3, at=0.5, for=2)"])
    late = _json(capsys, [*base, "gamma(mean=0.05, var=1e-4) + freeze(workers=3, at=1e3, for=2)"])
    (freeze,) = out["events"]
    assert freeze == {"time": 0.5, "event": "freeze", "workers": ["3"], "until": 2.5,
                      "iteration": freeze["iteration"]}
    # waiting for all 8, the round that needs worker 3 waits the 2 s out (same draws)
    assert out["total_time_s"] - late["total_time_s"] == pytest.approx(2.0, abs=0.15)
    assert out["workers_at_end"] == [str(i) for i in range(8)]  # a short freeze moves nothing
    # frozen far longer than the frozen bound (here 1 s): index 3 moves to a live worker
    with dask.config.set({"daskstraggle.frozen.minimum": "1s"}):
        out = _json(capsys, [*base, "gamma(mean=0.05, var=1e-4) + "
                             "freeze(workers=3, at=0.5, for=1000)"])
    freeze, move = out["events"]
    assert (move["event"], move["kind"], move["worker_index"], move["from"]) == \
        ("move", "frozen", 3, "3")
    assert "has not answered for" in move["reason"] and 1.4 < move["time"] < 2.0
    assert out["workers_at_end"][3] == move["to"] != "3"
    assert out["total_time_s"] < 20  # the run went on, not waiting the 1000 s out


def test_a_joining_worker_helps_the_slow_index(capsys):
    slow = "gamma(mean=0.05, var=1e-4) + slowdown(workers=2, factor=4)"
    base = ["simulate", "--workers", "8", "--iterations", "40", "--json", "--latency"]
    helped = _json(capsys, [*base, f"{slow} + join(count=1, at=0.5)"])
    late = _json(capsys, [*base, f"{slow} + join(count=1, at=1000)"])
    join, help_ = helped["events"]
    assert join == {"time": 0.5, "event": "join", "workers": ["8"],
                    "iteration": join["iteration"]}
    assert (help_["event"], help_["worker"], help_["worker_index"]) == ("help", "8", 2)
    assert help_["rows"] == [[8, 12]] and help_["split_units"] > 10
    # the same seed without the join reached: same engine, slower rounds
    assert late["events"] == [] and late["faults_not_reached"] == ["join(count=1, at=1000)"]
    assert helped["total_time_s"] < 0.8 * late["total_time_s"]


def test_a_retirement_fetches_the_rows_from_the_retiring_worker(capsys):
    out = _json(capsys, ["simulate", "--workers", "4", "--iterations", "30", "--json",
                         "--latency", "gamma(mean=0.05, var=1e-4) + retire(workers=1, at=0.3)"])
    retire, move = out["events"]
    assert retire["event"] == "retire" and retire["workers"] == ["1"]
    assert (move["kind"], move["worker_index"], move["data"], move["rows"]) == \
        ("retired", 1, "fetched", [[4, 8]])


def test_the_same_seed_gives_the_same_simulation(capsys):
    spec = ("gamma(mean=0.05, var=1e-4) + loss(workers=1, at=0.4) + join(count=2, at=0.8)"
            " + freeze(workers=5, at=0.2, for=0.3)")
    argv = ["simulate", "--workers", "6", "--wait", "4", "--iterations", "30", "--latency",
            spec]
    texts = []
    for seed in ("7", "7", "8"):
        assert main([*argv, "--seed", seed]) == 0
        texts.append(capsys.readouterr().out)
    assert texts[0] == texts[1] and "move: worker index 1" in texts[0]
    assert texts[2] != texts[0]  # the seed matters
    one, two = (_json(capsys, [*argv, "--seed", "7", "--json"]) for _ in range(2))
    assert one == two and len(one["events"]) >= 4


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--workers", "8", "--latency", "gamma(mean=0.05, var=1e-4) + loss(workers=9, at=1)"],
         ("loss: worker 9 is out of range for 8 workers",)),
        (["--from-trace", "run.zarr", "--latency", "loss(workers=0, at=1)"],
         ("--from-trace takes no fault terms", "--latency")),
        (["--latency", "loss(workers=0, at=1)"], ("need a latency model",)),
        (["--latency", "gamma(mean=0.05, var=1e-4) + throttle(workers=1, factor=2) + "
          "loss(workers=0, at=1)"], ("throttle",)),
        (["--latency", "slowdown(workers=1, factor=2) + loss(workers=0, at=1)"],
         ("'model'", "base distribution")),
        (["--latency", "gamma(mean=0.05, var=1e-4) + loss(workers=0)"],
         ("loss takes at, workers",)),
        (["--latency", "gamma(mean=0.05, var=1e-4) + freeze(workers=0, at=1, for=0)"],
         ("'for' parameter of freeze",)),
        (["--workers", "8", "--wait", "9", "--latency",
          "gamma(mean=0.05, var=1e-4) + loss(workers=0, at=1)"], ("'n_wait'", "[1, 8]")),
        (["--workers", "4", "--load", "2", "--latency",
          "gamma(mean=0.05, var=1e-4) + loss(workers=0, at=1)"], ("--load",)),
        (["--workers", "1000", "--iterations", "1000", "--latency",
          "gamma(mean=0.05, var=1e-4) + loss(workers=0, at=1)"],
         ("--iterations to at most", "60 s")),
        (["--workers", "20000", "--iterations", "1", "--latency",
          "gamma(mean=0.05, var=1e-4) + loss(workers=0, at=1)"], ("lower --workers",)),
        (["--workers", "3", "--latency",
          "gamma(mean=0.05, var=1e-4) + loss(workers=[0, 1, 2], at=1)"],
         ("no worker", "join(count=")),
    ],
    ids=["worker-out-of-range", "from-trace", "no-model", "throttle", "no-distribution",
         "no-at", "zero-freeze", "w-above-n", "load", "too-many-iterations",
         "too-many-workers", "every-worker-lost"],
)
def test_bad_fault_input_exits_2_with_one_line(argv, words, capsys):
    _exits_2_with_one_line(argv, words, capsys)
