"""SimRuntime charges each reply's bytes through the link term: closed forms in runs."""

from __future__ import annotations

import numpy as np
import pytest

import daskstraggle as ds
from daskstraggle import open_matrix
from daskstraggle.api import run_on
from daskstraggle.latency.spec import parse_latency
from daskstraggle.methods import GD
from daskstraggle.problems import LeastSquares
from daskstraggle.runtime import SimRuntime, StopRule

N_WORKERS = 4
COMPUTE = 0.1  # seconds per task: constant, so every round's time is a closed form


@pytest.fixture
def Xy() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 6))
    return X, X @ np.arange(6.0) + 0.1 * rng.normal(size=400)


def _least_squares(Xy, stragglers: str, method: str = "gd", n_iter: int = 5):
    X, y = Xy
    return ds.fit_least_squares(X, y, method=method, runtime="sim", n_workers=N_WORKERS,
                                max_iter=n_iter, tol=None, rng=0, stragglers=stragglers)


def _reply_bytes(result) -> float:
    """Bytes of one worker's reply (every worker sends the same) from the trace."""
    per_round = result.trace.bytes_to_coordinator.values
    assert np.all(per_round == per_round[0]) and per_round[0] > 0
    return float(per_round[0]) / N_WORKERS


def test_one_slow_worker_link_lengthens_each_round_by_its_transfer(Xy):
    plain = _least_squares(Xy, f"constant(compute={COMPUTE})")
    rate, latency = 1e3, 0.002  # bytes/s of worker 3's link; seconds per message
    linked = _least_squares(
        Xy, f"constant(compute={COMPUTE}) + link(bandwidth=(1e9, 1e9, 1e9, {rate}), "
            f"latency={latency})")
    nbytes = _reply_bytes(linked)
    slow = latency + nbytes / rate  # 0.066 s for 64 bytes
    np.testing.assert_allclose(plain.trace.iteration_duration, COMPUTE, rtol=1e-12)
    # GD waits for every worker: the slow link's reply comes last, B / R + latency later
    np.testing.assert_allclose(linked.trace.iteration_duration, COMPUTE + slow, rtol=1e-12)
    comm = linked.trace.communication_duration.values
    np.testing.assert_allclose(comm[:, 3], slow, rtol=1e-9)
    np.testing.assert_allclose(comm[:, :3], latency + nbytes / 1e9, rtol=1e-6)
    # an exact method: the same numbers, only later
    np.testing.assert_array_equal(linked.iterate, plain.iterate)
    assert "link(bandwidth=[" in linked.attrs["latency_model"]


def test_replies_arriving_together_share_the_coordinator_link(Xy):
    rate = 1e3
    result = _least_squares(Xy, f"constant(compute={COMPUTE}) + link(coordinator={rate})")
    turn = _reply_bytes(result) / rate
    # the four replies of a round share the link from COMPUTE on: all cross at
    # COMPUTE + 4 B / R_c (TCP streams through one port)
    expected = COMPUTE + N_WORKERS * turn
    np.testing.assert_allclose(result.trace.latency.values,
                               np.full((5, N_WORKERS), expected), rtol=1e-9)
    np.testing.assert_allclose(result.trace.iteration_duration, expected, rtol=1e-9)


def test_a_later_reply_shares_the_link_with_the_one_still_on_it(Xy):
    X, y = Xy
    nbytes = _reply_bytes(_least_squares(Xy, "constant(compute=1)", n_iter=1))
    rate = nbytes / 1.5  # a reply alone holds the coordinator's link for 1.5 s
    spec = f"constant(compute=(1.0, 2.0, 9.0, 9.0)) + link(coordinator={rate})"
    with SimRuntime(N_WORKERS, latency=spec) as rt:
        runs = [run_on(rt, GD(), LeastSquares(), open_matrix(X, labels=y, n_partitions=N_WORKERS),
                       stop=StopRule(max_iter=2, tol=None), rng=0) for _ in range(2)]
    for result in runs:  # the link is the run's: the second run starts with an idle link
        latency = result.trace.latency.values[0]
        # worker 0 alone over [1, 2] (2/3 of its bytes), then with worker 1 at half the
        # rate: done at 3; worker 1 then alone: 1/3 crossed by 3, done at 4; workers 2
        # and 3 both from 9, sharing: done at 12
        np.testing.assert_allclose(latency, [3.0, 4.0, 12.0, 12.0], rtol=1e-9)
        np.testing.assert_allclose(result.trace.wall_time, [12.0, 24.0], rtol=1e-9)
    np.testing.assert_array_equal(runs[0].trace.latency, runs[1].trace.latency)


def test_a_slow_coordinator_link_favours_the_method_with_smaller_replies(Xy):
    X, _ = Xy
    rate = 1e4
    runs = {method: ds.fit_pca(X, n_components=2, method=method, runtime="sim",
                               n_workers=N_WORKERS, max_iter=3, tol=None, rng=0,
                               stragglers=f"constant(compute={COMPUTE}) + link(coordinator={rate})")
            for method in ("gd", "block")}
    nbytes = {m: _reply_bytes(r) for m, r in runs.items()}
    assert nbytes["block"] > nbytes["gd"]
    extra = {m: r.trace.iteration_duration.values - COMPUTE for m, r in runs.items()}
    for method in runs:  # every round: the replies cross one after another
        np.testing.assert_allclose(extra[method], N_WORKERS * nbytes[method] / rate, rtol=1e-9)
    np.testing.assert_allclose(extra["block"] / extra["gd"], nbytes["block"] / nbytes["gd"],
                               rtol=1e-9)


def test_an_unlimited_link_changes_nothing(Xy):
    plain = _least_squares(Xy, "constant(compute=(0.1, 0.2, 0.3, 0.4))", method="sgd")
    linked = _least_squares(Xy, "constant(compute=(0.1, 0.2, 0.3, 0.4)) + link()",
                            method="sgd")
    for name in ("wall_time", "latency", "compute_duration"):
        np.testing.assert_array_equal(linked.trace[name], plain.trace[name])
    np.testing.assert_array_equal(linked.iterate, plain.iterate)


def test_streamed_messages_each_carry_their_bytes(Xy):
    # partial recovery streams two messages per unit: each one crosses the worker's link
    result = _least_squares(Xy, f"constant(compute={COMPUTE}) + link(bandwidth=1e3)",
                            method="partial", n_iter=3)
    plain = _least_squares(Xy, f"constant(compute={COMPUTE})", method="partial", n_iter=3)
    nbytes = _reply_bytes(result)
    np.testing.assert_allclose(result.trace.wall_time - plain.trace.wall_time,
                               nbytes / 1e3 * np.arange(1, 4), rtol=1e-9)
    np.testing.assert_array_equal(result.iterate, plain.iterate)


# ---------------------------------------------------------------- tree aggregation
def _gram(X, stragglers: str, aggregation: str, method: str = "gram", **kw):
    return ds.fit_pca(X, n_components=3, method=method, runtime="sim", n_workers=N_WORKERS,
                      rng=0, stragglers=stragglers, aggregation=aggregation, **kw)


@pytest.mark.parametrize("method", ["gram", "gd", "coded", "dsag", "block"])
def test_a_simulated_tree_without_links_gives_the_flat_run_exactly(method):
    """Results held on the simulated workers and summed there: the same iterates and
    times as flat (moving results costs nothing without a link term), one message of
    the sum's size per read instead of one per worker."""
    X = np.random.default_rng(1).normal(size=(400, 12))
    spec = "gamma(mean=0.1, var=1e-3)"
    kw = {} if method == "gram" else {"max_iter": 6, "tol": None}
    flat, tree = (_gram(X, spec, agg, method, **kw) for agg in ("flat", "tree"))
    assert tree.n_iter == flat.n_iter
    np.testing.assert_allclose(tree.iterate, flat.iterate, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(tree.trace.wall_time, flat.trace.wall_time, rtol=1e-12)
    assert (tree.trace.bytes_to_coordinator < flat.trace.bytes_to_coordinator).all()


def test_a_simulated_tree_charges_each_level_on_the_links_it_crosses():
    """Four equal gram results of B bytes, FAN_IN = 4, each streaming through the links
    it crosses: flat, through its worker's link (B / b) and the slower coordinator's, in
    turn (4 B / c); tree, three through their links into worker 0's, in turn there
    (3 B / b), then the sum through worker 0's link and the coordinator's (B / c)."""
    X = np.random.default_rng(1).normal(size=(400, 64))
    b, c = 1e6, 2.5e5  # bytes/s: workers' links, the coordinator's
    spec = f"constant(compute={COMPUTE}) + link(bandwidth={b}, coordinator={c})"
    flat, tree = (_gram(X, spec, agg) for agg in ("flat", "tree"))
    B = float(flat.trace.bytes_to_coordinator[0]) / N_WORKERS  # one 64 x 64 Gram triangle
    assert float(tree.trace.bytes_to_coordinator[0]) == pytest.approx(B, rel=0.01)
    np.testing.assert_allclose(flat.trace.iteration_duration, COMPUTE + 4 * B / c, rtol=1e-9)
    np.testing.assert_allclose(tree.trace.iteration_duration, COMPUTE + 3 * B / b + B / c,
                               rtol=1e-2)
    assert tree.trace.iteration_duration[0] < flat.trace.iteration_duration[0]
    np.testing.assert_allclose(tree.iterate, flat.iterate, rtol=1e-9, atol=1e-12)


def test_a_checkpoint_write_crosses_the_coordinator_link_in_simulated_time(
        Xy, tmp_path, monkeypatch):
    """Every round's state written (checkpoint_iterations=1) holds the coordinator B / R_c
    simulated seconds before the next round, B the bytes of that state (it grows with the
    trace); without a coordinator rate it takes no time."""
    from daskstraggle.runtime import checkpoint

    X, y = Xy
    rate = 1e4
    sizes: list[int] = []
    dump = checkpoint.dump_state
    monkeypatch.setattr(checkpoint, "dump_state",
                        lambda state: sizes.append(len(data := dump(state))) or data)

    def run(stragglers: str, path: str | None):
        kw = {"checkpoint": tmp_path / path, "checkpoint_iterations": 1} if path else {}
        return ds.fit_least_squares(X, y, method="gd", runtime="sim", n_workers=N_WORKERS,
                                    max_iter=5, tol=None, rng=0, stragglers=stragglers, **kw)

    linked = f"constant(compute={COMPUTE}) + link(coordinator={rate})"
    plain, written = run(linked, None), run(linked, "a.ckpt")
    assert len(sizes) == written.attrs["checkpoint"]["n_written"] == 5
    rounds = plain.trace.iteration_duration.values
    # between two rows: the round, and the state written after the first of them
    gaps = np.diff(written.trace.wall_time.values) - rounds[1:]
    np.testing.assert_allclose(gaps, np.asarray(sizes[:-1]) / rate, rtol=1e-9)
    np.testing.assert_array_equal(written.iterate, plain.iterate)
    free = f"constant(compute={COMPUTE})"
    assert run(free, "b.ckpt").wall_time == pytest.approx(run(free, None).wall_time, abs=1e-12)


@pytest.mark.parametrize(("spec", "same"), [
    ("link(bandwidth=['100mbit', '100mbit', '10mbit'], coordinator='100mbit')", True),
    ("link(bandwidth='100mbit', coordinator='50mbit', latency=0.002)", True),
    ("link(bandwidth=[1e7, 2e7, 4e7], coordinator=1e8, latency=[0.001, 0.0, 0.003])", False),
])
def test_fit_link_gives_a_link_back_from_its_own_messages(spec, same):
    """The simulated runtime measures its link model as a cluster's are measured (alone
    and at once): the fitted link gives the same times, each message the rate of the
    slower of its two links, and the coordinator is the model's where the messages sent
    at once are held on its link. Where they are not (the third: every worker's link is
    slower), its rate is not in the times."""
    from daskstraggle.latency.modifiers import share_link

    model = parse_latency(f"constant(compute=0.01) + {spec}").link
    links = SimRuntime(3, latency=f"constant(compute=0.01) + {spec}").measure_links(10**6)
    fitted = links.to_coordinator
    # between workers, a ring: each move's time back (a worker between two slower ones
    # is known to be at least as fast as the faster of them)
    peers, own = links.between_workers.bandwidth, np.broadcast_to(model.bandwidth, 3)
    for i, j in [(0, 1), (1, 2), (2, 0)]:
        assert min(peers[i], peers[j]) == pytest.approx(min(own[i], own[j]))

    def times(link):
        return ([link.message_duration(i, 10**6) for i in range(3)],
                share_link(link, [link.transfer_duration(i, 0) for i in range(3)], 10**6,
                           [link.rate(i) for i in range(3)]))

    for got, expected in zip(times(fitted), times(model), strict=True):
        assert got == pytest.approx(expected, rel=2e-3)
    assert np.broadcast_to(fitted.latency, 3) == pytest.approx(np.broadcast_to(model.latency, 3))
    bandwidth = np.broadcast_to(model.bandwidth, 3)
    slower = np.minimum(bandwidth, model.coordinator)  # what each message meets
    assert np.minimum(fitted.bandwidth, fitted.coordinator) == pytest.approx(slower, rel=2e-3)
    if same:
        assert fitted.coordinator == pytest.approx(model.coordinator, rel=2e-3)
    assert SimRuntime(3, latency="constant(compute=0.01)").measure_links(10**6) is None
