"""``method="auto"`` that measures: probe, fit, simulate the candidates, run the fastest.

The decision is tested in the simulated runtime (a runtime that declares
``measures_workers`` is probed like a cluster); one ``cluster`` test probes real process
workers with an injected straggler and without.
"""

from __future__ import annotations

import numpy as np
import pytest

from daskstraggle import fit_least_squares, fit_logistic, fit_pca
from daskstraggle.api import run_on
from daskstraggle.data import open_matrix
from daskstraggle.engine.recorder import TraceRecorder
from daskstraggle.engine.stop import StopRule
from daskstraggle.latency.models import Gamma
from daskstraggle.methods import make_method
from daskstraggle.problems import PCA, LeastSquares
from daskstraggle.runtime import auto
from daskstraggle.runtime.sim import SimRuntime
from daskstraggle.trace import Result

SLOW = "gamma(mean=0.1, var=1e-5) + slowdown(workers=0, factor=8)"
CLEAN = "gamma(mean=0.1, var=1e-5)"


class MeasuringSim(SimRuntime):
    """The simulated runtime, probed by ``auto`` as a cluster is."""

    measures_workers = True


#: The size from which auto probes (the tests below probe smaller matrices).
MEASURE_MIN_BYTES = auto.MEASURE_MIN_BYTES


@pytest.fixture(autouse=True)
def _small_data_measured(monkeypatch):
    """These tests' matrices are small: probe them anyway."""
    monkeypatch.setattr(auto, "MEASURE_MIN_BYTES", 0)


def _model(n: int, slow: float) -> Gamma:
    mean = (0.1 * slow,) + (0.1,) * (n - 1)
    return Gamma(mean=mean, var=tuple((0.01 * m) ** 2 for m in mean))


def test_candidates_are_the_plain_method_then_its_straggler_resilient_variants():
    labels = [c.label for c in auto.candidates(make_method("gd"), 4)]
    assert labels == ["gd", "coded(s=1)", "coded(s=2)", "dsag(w=3)"]
    # no coded variant that stores the whole matrix on every worker
    assert [c.label for c in auto.candidates(make_method("gram"), 3)] == ["gram", "gram(s=1)"]
    assert [c.label for c in auto.candidates(make_method("gd"), 2)] == ["gd", "dsag(w=1)"]
    assert [c.label for c in auto.candidates(make_method("gd"), 1)] == ["gd"]
    assert [c.label for c in auto.candidates(make_method("block"), 1)] == ["block"]
    gram = auto.candidates(make_method("gram"), 4)
    # gram's round plays as the GD round with the same waiting rule
    assert [c.surrogate.name for c in gram] == ["gd", "coded", "coded"]
    assert gram[1].method.name == "gram" and gram[1].method.scheme.n_stragglers == 1
    dsag = auto.candidates(make_method("gd"), 4)[3]
    assert dsag.method.n_wait == 3 and dsag.surrogate is dsag.method


@pytest.mark.parametrize("plain", ["gd", "gram"])
def test_predictions_follow_the_order_statistics_of_the_fitted_laws(plain):
    """One worker 8x slow: gd waits for it (0.8 s), coded s=1 does twice the work on the
    others (0.2 s); clean, gd's round is 0.1 s and stays."""
    options = auto.candidates(make_method(plain), 4)
    slow = auto.predict(options, _model(4, 8.0), 4, np.random.default_rng(0))
    assert slow[plain] == pytest.approx(0.8, rel=0.05)
    coded = "coded(s=1)" if plain == "gd" else "gram(s=1)"
    assert slow[coded] == pytest.approx(0.2, rel=0.05)
    clean = auto.predict(options, _model(4, 1.0), 4, np.random.default_rng(0))
    assert clean[plain] == pytest.approx(0.1, rel=0.1)
    assert auto.pick(clean, plain) == plain
    assert auto.pick(slow, plain) != plain
    if plain == "gd":  # waits for the 3 fast workers: 0.1
        assert slow["dsag(w=3)"] == pytest.approx(0.1, rel=0.1)
        assert auto.pick(slow, plain) == "dsag(w=3)"


def test_predictions_call_no_numba_kernel(monkeypatch):
    """The client of a cluster runs no kernel: the simulation of the candidates must not
    compile one there (numba's compilation cost a CLI call 0.4 s)."""
    from daskstraggle.problems import _kernels

    called = []
    monkeypatch.setattr(_kernels, "_call_numba", lambda *args: called.append(args[0]))
    auto.predict(auto.candidates(make_method("gd"), 4), _model(4, 8.0), 4,
                 np.random.default_rng(0))
    assert called == []


def test_pick_keeps_the_plain_method_unless_the_margin_is_met():
    assert auto.pick({"gd": 1.0, "dsag(w=3)": 1.0 / auto.MARGIN + 1e-9}, "gd") == "gd"
    assert auto.pick({"gd": 1.0, "dsag(w=3)": 1.0 / auto.MARGIN}, "gd") == "dsag(w=3)"
    from daskstraggle.cli import _method_help  # (which spells it: the CLI starts faster)

    assert f"if {auto.MARGIN:g}x faster" in _method_help()


@pytest.mark.parametrize(("stragglers", "expected"), [
    ("gamma(mean=0.1, var=1e-5) + markov(p_slow=0.1, p_fast=0.3, slow_factor=8)", "dsag"),
    ("gamma(mean=0.1, var=1e-5) + artificial(spread=3, n_recover=1, recover_time=5)", "gd"),
    (CLEAN, "gd")])
def test_intermittent_stragglers_lead_to_dsag_and_a_ramp_or_none_to_gd(stragglers, expected):
    """Each worker slow a quarter of the time, for a few rounds at a time (markov): the
    probe sees some slow phases and dsag, which does not wait for them, is chosen (every
    seed); DSAG's ramp (every worker slowed by another factor) or no straggler keeps gd
    (on a cluster dsag and gd took the same time under the ramp)."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(2000, 20))
    y = X @ rng.normal(size=20) + rng.normal(size=2000)
    for seed in range(4):
        res = fit_least_squares(X, y, runtime=MeasuringSim(4, latency=stragglers, rng=seed),
                                rng=seed, max_iter=3, tol=None)
        assert res.method == expected, res.attrs["auto"]


@pytest.mark.parametrize(("latency", "expected"), [(SLOW, "block(s=1)"), (CLEAN, "block")])
def test_measuring_a_runtime_chooses_for_its_stragglers(latency, expected):
    X = np.random.default_rng(1).normal(size=(400, 12))
    matrix = open_matrix(X, n_partitions=4)
    with MeasuringSim(4, latency=latency, rng=0) as runtime:
        choice = auto.measure_and_choose(runtime, PCA(n_components=2), matrix,
                                         make_method("block"), rng=np.random.default_rng(0))
    assert choice.label == expected and choice.method.name == "block"
    assert choice.probe_rounds == auto.PROBE_ROUNDS and len(choice.worker_latency) == 4
    slow = np.asarray(choice.worker_latency)
    if latency == SLOW:  # the probe saw worker 0 eight times slower
        assert slow[0] / np.median(slow[1:]) == pytest.approx(8, rel=0.1)
    assert f"ran {expected} after {auto.PROBE_ROUNDS} probe rounds" in choice.summary()
    assert choice.summary().split("predicted per gd round: ")[1].count(" s") == len(
        choice.predicted)


def test_a_single_candidate_is_described_without_an_empty_prediction():
    """One worker (a running cluster of one): no probe, and the line says so instead of
    'after 0 probe rounds ... predicted per gd round:' with nothing after it."""
    matrix = open_matrix(np.random.default_rng(1).normal(size=(100, 4)), n_partitions=1)
    with MeasuringSim(1, latency=CLEAN, rng=0) as runtime:
        choice = auto.measure_and_choose(runtime, PCA(n_components=2), matrix,
                                         make_method("gram"), rng=np.random.default_rng(0))
    assert choice.probe_rounds == 0 and choice.label == "gram"
    line = auto.describe(choice.as_attrs())
    assert line == ("ran gram, the rule on the data (one candidate on this cluster: "
                    "nothing to probe)")
    assert choice.summary() == f"auto: {line}"


def test_the_probe_does_not_wait_for_a_busy_worker_and_counts_it_slow():
    """Worker 0 is busy (frozen) for the whole probe, as a worker still computing a task an
    earlier run left running: gd rounds would wait 1000 simulated seconds for it; the
    probe's rounds go on with the other three, worker 0's latency is censored at the
    rounds' durations, and the coded block method, which does not wait for it, is
    chosen."""
    X = np.random.default_rng(1).normal(size=(400, 12))
    matrix = open_matrix(X, n_partitions=4)
    with MeasuringSim(4, latency=CLEAN, faults="freeze(workers=0, at=0, for=1000)",
                      rng=0) as runtime:
        choice = auto.measure_and_choose(runtime, PCA(n_components=2), matrix,
                                         make_method("block"), rng=np.random.default_rng(0),
                                         clock=runtime._clock)
    assert choice.label == "block(s=1)"
    assert choice.probe_seconds < 10  # simulated seconds (gd rounds: over 1000)
    assert all(row[0] is None for row in choice.probe_latency)  # never answered


def test_a_probe_of_the_runs_data_reads_a_share_of_each_workers_rows():
    """On the data the run loads, each probe task reads the first TASK_FRACTION of its
    worker's rows (a round that much shorter, the same message), and the compute times
    are fitted as a whole share's: the prediction is per round of the run."""
    probe = auto.ProbeGD(share=auto.TASK_FRACTION)
    probe.start(LeastSquares(), np.zeros(6), [(0, 1), (2,)], step_size=1.0,
                partition_rows=[10, 30, 17])
    assert probe.dispatch(0).rows == (0, 10) and probe.dispatch(1).rows == (0, 5)
    assert probe.dispatch(0) is None  # busy until it answers
    whole = auto.ProbeGD()
    whole.start(LeastSquares(), np.zeros(6), [(0,)], step_size=1.0,
                partition_rows=[10])
    assert whole.dispatch(0).rows is None
    rows = TraceRecorder(2)
    for _ in range(auto.WARMUP_ROUNDS + 2):
        rows.add(wall_time=0.0, iteration_duration=0.2, objective=None, gap=None, n_fresh=2,
                 n_stale=0, workers_used=(0, 1), compute_durations={0: 0.05, 1: 0.1},
                 latencies={0: 0.06, 1: 0.11})
    arrays = auto._fit_arrays(rows, whole=True, share=0.25)
    np.testing.assert_allclose(arrays["compute_duration"], [[0.2, 0.4]] * 2)
    np.testing.assert_allclose(arrays["communication_duration"], 0.01, atol=1e-12)


def test_a_censored_worker_is_fitted_at_the_probe_rounds_durations():
    nan = np.nan
    compute = np.array([[0.1, 0.1, nan]] * 2 + [[0.1, 0.12, nan], [0.11, 0.1, 0.9],
                                                 [0.1, 0.1, nan]])
    rows = TraceRecorder(3)
    for row, duration in zip(compute, [9.0, 9.0, 0.4, 0.45, 0.5], strict=True):
        answered = {i: float(d) for i, d in enumerate(row) if np.isfinite(d)}
        rows.add(wall_time=0.0, iteration_duration=duration, objective=None, gap=None,
                 n_fresh=len(answered), n_stale=0, workers_used=tuple(answered),
                 compute_durations=answered,
                 latencies={i: d + 0.01 for i, d in answered.items()})
    arrays = auto._fit_arrays(rows, whole=True)
    # one answer after the warm-up: the rounds it missed count at their durations
    np.testing.assert_allclose(arrays["compute_duration"][:, 2], [0.4, 0.9, 0.5])
    np.testing.assert_allclose(arrays["compute_duration"][:, :2], compute[2:, :2])
    # and the others' communication time where it had none
    np.testing.assert_allclose(arrays["communication_duration"], 0.01, atol=1e-12)


def test_auto_in_the_fit_functions_reports_what_it_measured_and_chose(tmp_path):
    rng = np.random.default_rng(2)
    X = rng.normal(size=(400, 5))
    y = X @ rng.normal(size=5) + 0.1 * rng.normal(size=400)
    res = fit_least_squares(X, y, runtime=MeasuringSim(4, latency=SLOW, rng=0), rng=0,
                            max_iter=400)
    report = res.attrs["auto"]
    assert res.method == "dsag" and report["choice"] == "dsag(w=3)" and report["plain"] == "gd"
    assert set(report["predicted"]) == {"gd", "coded(s=1)", "coded(s=2)", "dsag(w=3)"}
    assert report["probe_fraction"] == 1.0
    assert report["achieved"] == pytest.approx(report["predicted"]["dsag(w=3)"], rel=0.2)
    assert res.converged
    assert np.array(report["probe_latency"]).shape == (auto.PROBE_ROUNDS, 4)
    res.save(tmp_path / "fit.zarr")  # the report is plain values
    assert Result.load(tmp_path / "fit.zarr").attrs["auto"]["choice"] == "dsag(w=3)"
    clean = fit_logistic(X, (y > 0).astype(float), runtime=MeasuringSim(4, latency=CLEAN,
                                                                        rng=0),
                         rng=0, max_iter=5, tol=None)
    assert clean.method == "gd" and clean.attrs["auto"]["choice"] == "gd"
    pca = fit_pca(X, n_components=2, runtime=MeasuringSim(4, latency=SLOW, rng=0), rng=0)
    assert pca.method == "gram" and pca.attrs["auto"]["choice"] == "gram"  # (backups: below)
    # no probe where the runtime does not measure, nor for a method given by name
    assert "auto" not in fit_pca(X, n_components=2, runtime="sim", n_workers=4).attrs
    assert "auto" not in fit_least_squares(
        X, y, method="gd", runtime=MeasuringSim(4, latency=SLOW, rng=0)).attrs


def test_a_resumed_auto_run_takes_the_method_its_checkpoint_chose(tmp_path):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(400, 5))
    y = X @ rng.normal(size=5)
    path = tmp_path / "run.ckpt"
    first = fit_least_squares(X, y, runtime=MeasuringSim(4, latency=SLOW, rng=0), rng=0,
                              max_iter=5, tol=None, checkpoint=path,
                              checkpoint_iterations=1)
    assert first.method == "dsag"
    again = fit_least_squares(X, y, runtime=MeasuringSim(4, latency=CLEAN, rng=0), rng=0,
                              max_iter=8, tol=None, resume=path)
    assert again.method == "dsag" and "auto" not in again.attrs and again.n_iter == 8


@pytest.mark.cluster
def test_on_process_workers_auto_picks_a_straggler_resilient_method_only_with_a_straggler(
        dask_client):
    """Three process workers; one 8x slow (a sleep, which costs no CPU): auto probes it and
    runs DSAG or coded GD; without it, gd. The clean tasks take 0.2 s: a busy machine
    (CI's other cluster tests) delays a 0.04 s task by as much again, on one worker more
    than the others, and auto rightly sees a straggler there."""
    rng = np.random.default_rng(4)
    X = rng.normal(size=(3000, 8))
    y = np.where(X @ rng.normal(size=8) + rng.logistic(size=3000) > 0, 1.0, 0.0)
    slow = fit_logistic(X, y, client=dask_client, rng=0, max_iter=3, tol=None,
                        stragglers="gamma(mean=0.04, var=1e-6) + slowdown(workers=0, factor=8)")
    report = slow.attrs["auto"]
    assert slow.method in ("dsag", "coded"), report
    assert report["predicted"]["gd"] >= auto.MARGIN * report["predicted"][report["choice"]]
    assert np.argmax(report["worker_latency"]) == 0
    clean = fit_logistic(X, y, client=dask_client, rng=0, max_iter=3, tol=None,
                         stragglers="gamma(mean=0.2, var=1e-6)")
    assert clean.method == "gd" and clean.attrs["auto"]["choice"] == "gd", clean.attrs["auto"]


def test_block_on_genotypes_probes_a_share_of_each_partitions_rows(vcz_path):
    """A probe as long as a few of the block method's rounds would cost more than it
    saves: it reads the first sixteenth of each partition, and a slow worker shows as
    slow there."""
    matrix = open_matrix(vcz_path, n_partitions=4)
    probed, fraction = auto._probed_rows(matrix, make_method("block"), 4)
    assert probed.n_partitions >= 4 and fraction == probed.n_rows / matrix.n_rows
    assert fraction <= 2 * auto.PROBE_FRACTION
    whole, share = auto._probed_rows(matrix, make_method("gd"), 4)  # iterative: all rows
    assert whole is matrix and share == 1.0
    with MeasuringSim(4, latency=SLOW, rng=0) as runtime:
        choice = auto.measure_and_choose(runtime, PCA(n_components=2), matrix,
                                         make_method("block"), rng=np.random.default_rng(0))
    assert choice.label.startswith("block(s=") and choice.probe_fraction == fraction
    assert np.argmax(choice.worker_latency) == 0  # the slow worker, seen on few rows
    with MeasuringSim(4, latency=SLOW, rng=0) as runtime:
        res = run_on(runtime, choice.method, PCA(n_components=2), matrix, rng=0,
                     stop=StopRule(max_iter=2, tol=None))
    assert "achieved" not in choice.as_attrs(res)  # block's round is not the probe's kind


def test_gram_runs_with_speculative_backups_and_no_probe():
    """Gram's one exact round is the whole job: auto probes nothing and runs it with
    backups, so a worker 8x slow costs about what the coded gram's twice-as-large shares
    cost (simulated seconds), and the answer is the exact one."""
    X = np.random.default_rng(7).normal(size=(400, 12))
    exact = fit_pca(X, n_components=2, runtime="local", n_workers=4, method="gram", rng=0)
    coded = {"scheme": "cyclic-repetition", "n_stragglers": 1}
    runs = {}
    for name, method, params in [("auto", "auto", None), ("plain", "gram", None),
                                 ("coded", "gram", coded)]:
        with MeasuringSim(4, latency=SLOW, rng=0) as runtime:
            runs[name] = fit_pca(X, n_components=2, method=method, method_params=params,
                                 runtime=runtime, rng=0)
            assert runtime.backup_after is None  # the runtime's own setting, restored
        np.testing.assert_allclose(np.abs(runs[name].fitted["components"]),
                                   np.abs(exact.fitted["components"]), atol=1e-10)
    report = runs["auto"].attrs["auto"]
    assert report["probe_rounds"] == 0 and report["choice"] == "gram"
    assert report["backup_after"] == auto.ONE_ROUND_BACKUP_AFTER
    assert runs["auto"].attrs["backups"] == 1  # the slow worker's unit, computed again
    assert "with speculative backups" in auto.describe(report)
    # worker 0 takes 0.8 s, which plain gram waits for; the backup goes at 1.5 x 0.1 s
    assert runs["plain"].wall_time == pytest.approx(0.8, rel=0.1)
    assert runs["auto"].wall_time < 0.35 and runs["coded"].wall_time < 0.35
    with MeasuringSim(4, latency=SLOW, rng=0, backup_after=3.0) as runtime:  # the user's
        assert fit_pca(X, n_components=2, runtime=runtime, rng=0).attrs["auto"][
            "backup_after"] == 3.0


def test_a_small_matrix_is_not_probed(monkeypatch):
    """A job smaller than the probe keeps the rule (the demo's 0.1 s gram had a 6.9 s probe)."""
    monkeypatch.setattr(auto, "MEASURE_MIN_BYTES", MEASURE_MIN_BYTES)
    X = np.random.default_rng(5).normal(size=(400, 6))
    res = fit_pca(X, n_components=2, runtime=MeasuringSim(4, latency=SLOW, rng=0), rng=0)
    assert res.method == "gram" and "auto" not in res.attrs
    assert not auto.worth_measuring(20_000, 300) and auto.worth_measuring(100_000, 100)


def test_a_probe_of_a_share_of_the_rows_that_finds_a_sample_without_calls_probes_all():
    """The first sixteenth of the rows can lack every call of a sample that has calls
    further on: the probe then reads all the rows, and the run removes what has no call."""
    import xarray as xr

    from daskstraggle.errors import StraggleWarning

    def genotypes(g: np.ndarray):
        return open_matrix(xr.Dataset(
            {"call_genotype": (("variants", "samples", "ploidy"), g),
             "sample_id": ("samples", np.array([f"s{j}" for j in range(40)]))}),
            n_partitions=4)

    rng = np.random.default_rng(6)
    g = rng.integers(0, 2, size=(640, 40, 2)).astype(np.int8)
    g[np.arange(640) % 160 < 10, 3] = -1  # sample 3: no call in the probed rows only
    with MeasuringSim(4, latency=SLOW, rng=0) as runtime:  # block probes (gram does not)
        choice = auto.measure_and_choose(runtime, PCA(n_components=2), genotypes(g),
                                         make_method("block"), rng=np.random.default_rng(0))
    assert choice.probe_fraction == 1.0 and choice.probe_rounds == auto.PROBE_ROUNDS
    g[:, 9] = -1  # sample 9: no call at all
    with pytest.warns(StraggleWarning, match="no called genotype"):
        res = fit_pca(genotypes(g), n_components=2,
                      runtime=MeasuringSim(4, latency=SLOW, rng=0), rng=0)
    assert res.attrs["no_call"]["samples"] == [9]  # sample 3 kept: it has calls
    assert res.method == "gram"


def test_the_probe_makes_no_exact_pass(monkeypatch):
    """The probe's rounds' times are what it measures: no exact pass at its start or end
    (on a cluster each one waits for a slow worker's fold up to the backup bound, 2 s or
    more); its result holds the last round's estimate."""
    X = np.random.default_rng(1).normal(size=(400, 6))
    matrix = open_matrix(X, labels=X @ np.arange(6.0), n_partitions=4)
    passes = []
    with MeasuringSim(4, latency=CLEAN, rng=0) as runtime:
        exact_pass = runtime._exact_pass
        monkeypatch.setattr(runtime, "_exact_pass",
                            lambda *args: passes.append(args) or exact_pass(*args))
        probe = auto._probe(runtime, LeastSquares(), matrix, np.random.default_rng(0))
    assert passes == [] and len(probe.rows) == auto.PROBE_ROUNDS


#: Links of a simulated cluster (a compute time of 10 ms per share, gram replies of 263 kB):
#: one worker's link 10x slower than the others, every link fast, and (six workers) the
#: coordinator's link 100x slower than the workers'.
SLOW_LINK = ("constant(compute=0.01) + link(bandwidth=['100mbit', '100mbit', '10mbit'], "
             "coordinator='100mbit')")
FAST_LINKS = "constant(compute=0.01) + link(bandwidth='10gbit', coordinator='10gbit')"
SLOW_COORDINATOR = "constant(compute=0.002) + link(bandwidth='1gbit', coordinator='10mbit')"


def _gram_runs(X: np.ndarray, n: int, latency: str) -> dict[str, Result]:
    """auto, plain gram, with backups, coded (s=1) and tree-aggregated on the same
    simulated links."""
    coded = {"scheme": "cyclic-repetition", "n_stragglers": 1}
    after = auto.ONE_ROUND_BACKUP_AFTER
    runs = {}
    for name, method, params, backups, aggregation in [
            ("auto", "auto", None, None, "flat"), ("plain", "gram", None, None, "flat"),
            ("backups", "gram", None, after, "flat"), ("coded", "gram", coded, None, "flat"),
            ("tree", "gram", None, None, "tree")]:
        with MeasuringSim(n, latency=latency, rng=0, backup_after=backups,
                          aggregation=aggregation) as runtime:
            runs[name] = fit_pca(X, n_components=2, method=method, method_params=params,
                                 runtime=runtime, rng=0)
            # the runtime's own settings, restored after the run auto chose
            assert (runtime.backup_after, runtime.aggregation) == (backups, aggregation)
    return runs


@pytest.mark.parametrize(("n", "latency", "expected"), [
    (3, SLOW_LINK, "gram(s=1)"), (6, SLOW_COORDINATOR, "gram(tree)")])
def test_gram_on_links_that_hold_its_round_up_runs_the_fastest_on_them(n, latency, expected):
    """A worker's slow link is not caught by backups (its share computed again elsewhere
    comes late too): the coded gram waits for the others; a slow coordinator's link is
    crossed by one sum with tree aggregation. auto measures the links, probes gram's
    compute in three rounds, and runs the candidate that is fastest on them, as fast as
    that candidate run by hand (simulated seconds), with the exact answer."""
    X = np.random.default_rng(3).normal(size=(1500, 256))
    exact = fit_pca(X, n_components=2, runtime="local", method="gram", rng=0)
    runs = _gram_runs(X, n, latency)
    report = runs["auto"].attrs["auto"]
    assert report["choice"] == expected and report["probe_rounds"] == 3
    fastest = min(("backups", "coded", "tree"), key=lambda name: runs[name].wall_time)
    assert runs["auto"].wall_time == pytest.approx(runs[fastest].wall_time, rel=0.02)
    assert runs["plain"].wall_time > 1.5 * runs["auto"].wall_time
    # each prediction within 5 % of the same run by hand
    by_hand = {"gram": "backups", "gram(s=1)": "coded", "gram(tree)": "tree"}
    for label, name in by_hand.items():
        assert report["predicted"][label] == pytest.approx(runs[name].wall_time, rel=0.05)
    assert report["link"]["coordinator"] > 0 and len(report["link"]["bandwidth"]) == n
    assert "links measured" in auto.describe(report)
    np.testing.assert_allclose(np.abs(runs["auto"].fitted["components"]),
                               np.abs(exact.fitted["components"]), atol=1e-10)


def test_links_too_fast_to_hold_gram_up_keep_the_backups_without_a_compute_probe():
    X = np.random.default_rng(3).normal(size=(600, 32))
    with MeasuringSim(3, latency=FAST_LINKS, rng=0) as runtime:
        report = fit_pca(X, n_components=2, runtime=runtime, rng=0).attrs["auto"]
    assert report["choice"] == "gram" and report["probe_rounds"] == 0
    assert report["backup_after"] == auto.ONE_ROUND_BACKUP_AFTER
    # each message meets 10 Gbit/s (the worker's link is as fast as the coordinator's)
    assert np.minimum(report["link"]["bandwidth"], report["link"]["coordinator"]) \
        == pytest.approx([1.25e9] * 3)
    assert report["link"]["peer_bandwidth"] == pytest.approx([1.25e9] * 3)
    assert "could save its round less than measuring them took" in auto.describe(report)


def test_the_surrogate_messages_are_the_bytes_predict_scales_by():
    """Bandwidths are scaled by the surrogate's message size: if the surrogate changed,
    every link prediction would be off by as much."""
    X = np.random.default_rng(0).normal(size=(72, 6))
    with SimRuntime(3) as sim:
        outcome = auto._rounds(sim, make_method("gd"), LeastSquares(),
                               open_matrix(X, labels=X[:, 0], n_partitions=3), 2, rng=0)
    assert outcome.rows.column("bytes_to_coordinator")[-1] == 3 * auto.SURROGATE_MESSAGE_BYTES


def test_links_matter_when_a_worker_or_the_coordinator_holds_messages_up():
    from daskstraggle.latency.modifiers import Link

    even = Link(bandwidth=1e8, coordinator=1e9)
    assert not auto.links_matter(even, 4, 10**6, 1.5)
    assert auto.links_matter(Link(bandwidth=(1e8, 1e8, 1e8, 1e7), coordinator=1e9), 4, 10**6,
                             1.5)
    assert auto.links_matter(Link(bandwidth=1e9, coordinator=1e8), 4, 10**6, 1.5)


def test_tree_is_predicted_on_the_links_between_workers():
    """Tree aggregation's sums cross the links between workers (the measurement's
    ``between_workers``), the replies the links to the coordinator: on six workers whose
    links to each other are half as fast as the coordinator's, the tree is not predicted
    faster than gram; with fast links between them it is, gram's prediction unchanged."""
    from daskstraggle.latency.fit import Links
    from daskstraggle.latency.modifiers import Link

    options = auto.gram_candidates(make_method("gram"), 6, auto.ONE_ROUND_BACKUP_AFTER)
    model = auto.Constant(compute=0.002)
    to_coordinator = Link(bandwidth=(1.25e8,) * 6, coordinator=1.25e6)

    def predicted(between: float) -> dict[str, float]:
        links = Links(to_coordinator, Link(bandwidth=(between,) * 6, coordinator=1.25e6))
        return auto.predict(options, model, 6, np.random.default_rng(0), links=links,
                            message_bytes=263_000, rounds=1)

    slow, fast = predicted(6.25e5), predicted(1.25e8)
    assert slow["gram(tree)"] > slow["gram"]
    assert fast["gram(tree)"] < fast["gram"] / 3
    assert slow["gram"] == pytest.approx(fast["gram"], rel=0.05)


@pytest.mark.parametrize(("columns", "coordinator", "expected"), [
    (2400, 1e6, "gd(tree)"), (2400, "10gbit", "gd"), (1000, 1e6, "gd")])
def test_gd_on_a_slow_coordinator_link_runs_tree_aggregation(columns, coordinator, expected):
    """Least squares on 2400 columns, six workers: each gradient is 19 kB (over
    TREE_MIN_BYTES), and on a 1 MB/s coordinator's link the six of a round share it for
    115 ms where a worker computes for 2 ms. The probe's replies take that long, so auto
    measures the links and predicts gd with tree aggregation (one sum reaches the
    coordinator; the sums cross 1 Gbit/s links between workers): it runs it, as fast as
    gd with tree aggregation by hand, to the same iterate as gd. On a 10 Gbit/s link the
    replies take no time, and replies of 1000 columns (8 kB) are too small for a level
    of sums to pay on a cluster: no link is measured."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(1200, columns))
    y = X @ rng.normal(size=columns)
    latency = f"constant(compute=0.002) + link(bandwidth='1gbit', coordinator={coordinator!r})"

    def fit(method, aggregation="flat"):
        with MeasuringSim(6, latency=latency, rng=0, aggregation=aggregation) as runtime:
            result = fit_least_squares(X, y, method=method, runtime=runtime, rng=0,
                                       max_iter=5, tol=None)
            assert runtime.aggregation == aggregation  # restored after the run
        return result

    chosen, by_hand = fit("auto"), fit("gd", "tree" if expected == "gd(tree)" else "flat")
    report = chosen.attrs["auto"]
    assert report["choice"] == expected, report
    assert report["aggregation"] == ("tree" if expected == "gd(tree)" else None)
    assert (report["link"] is None) == (expected == "gd")
    rounds = chosen.trace.iteration_duration.values
    assert np.median(rounds) == pytest.approx(np.median(by_hand.trace.iteration_duration.values),
                                              rel=0.02)
    if expected == "gd(tree)":
        assert report["predicted"]["gd(tree)"] == pytest.approx(np.median(rounds), rel=0.1)
        assert report["predicted"]["gd"] > 3 * report["predicted"]["gd(tree)"]
    np.testing.assert_allclose(chosen.iterate, by_hand.iterate, rtol=1e-9)
