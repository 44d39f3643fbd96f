"""Fitting latency models: recovery of known parameters, pooling, missing samples, errors."""

from __future__ import annotations

import numpy as np
import pytest

from daskstraggle.errors import InvalidDataError, InvalidParameterError
from daskstraggle.latency.fit import (
    UNLIMITED,
    fit_gamma,
    fit_link,
    fit_peers,
    fit_shifted_exponential,
    fit_trace,
)
from daskstraggle.latency.models import Gamma, ShiftedExponential

MEAN = (0.1, 0.2, 0.4)
VAR = (1e-3, 4e-3, 4e-2)


def _draws(model, n_workers, n, seed=0):
    sampler = model.sampler(n_workers, rng=seed)
    compute, communication = zip(*(sampler.sample(i, size=n) for i in range(n_workers)),
                                 strict=True)
    return np.stack(compute, axis=1), np.stack(communication, axis=1)


@pytest.mark.parametrize("seed", range(3))
def test_fit_gamma_recovers_per_worker_parameters(seed):
    model = Gamma(mean=MEAN, var=VAR, communication_mean=0.05, communication_var=1e-4)
    compute, communication = _draws(model, 3, 20000, seed)
    rng = np.random.default_rng(seed)
    compute[rng.random(compute.shape) < 0.3] = np.nan  # missing samples
    fitted = fit_gamma(compute, communication)
    np.testing.assert_allclose(fitted.mean, MEAN, rtol=0.02)
    np.testing.assert_allclose(fitted.var, VAR, rtol=0.05)
    np.testing.assert_allclose(fitted.communication_mean, (0.05,) * 3, rtol=0.02)
    np.testing.assert_allclose(fitted.communication_var, (1e-4,) * 3, rtol=0.05)
    assert isinstance(fitted.mean, tuple) and len(fitted.mean) == 3


def test_fit_gamma_moments_exact():
    compute = np.array([[1.0, 2.0], [3.0, np.nan], [2.0, 4.0]])
    fitted = fit_gamma(compute)
    assert fitted.mean == (2.0, 3.0)
    assert fitted.var == (1.0, 2.0)
    assert fitted.communication_mean == 0.0 and fitted.communication_var == 0.0
    assert fit_gamma([1.0, 2.0, 3.0]).mean == (2.0,)  # 1-D: one worker


def test_fit_gamma_iid_pools_workers():
    compute = np.array([[1.0, 2.0], [3.0, np.nan], [2.0, 4.0]])
    fitted = fit_gamma(compute, iid=True)
    pooled = compute[np.isfinite(compute)]
    assert fitted.mean == pytest.approx(pooled.mean())
    assert fitted.var == pytest.approx(pooled.var(ddof=1))
    assert isinstance(fitted.mean, float)
    # the i.i.d. fit of heterogeneous workers matches their mixture's moments
    compute, _ = _draws(Gamma(mean=MEAN, var=VAR), 3, 20000)
    fitted = fit_gamma(compute, iid=True)
    assert fitted.mean == pytest.approx(np.mean(MEAN), rel=0.02)
    assert fitted.var == pytest.approx(np.mean(VAR) + np.var(MEAN), rel=0.05)


def test_fit_gamma_too_few_samples():
    compute = np.array([[1.0, np.nan], [2.0, 3.0], [1.5, np.nan]])
    with pytest.raises(InvalidParameterError, match=r"1 finite samples for worker 1.*iid=True"):
        fit_gamma(compute)
    assert fit_gamma(compute, iid=True).mean == pytest.approx(1.875)
    with pytest.raises(InvalidParameterError, match="worker 0"):
        fit_gamma(compute, min_samples=4)
    with pytest.raises(InvalidParameterError, match="'min_samples'"):
        fit_gamma(compute, min_samples=1)
    with pytest.raises(InvalidParameterError, match="'iid'"):
        fit_gamma(compute, iid="yes")


def test_fit_gamma_bad_data():
    with pytest.raises(InvalidDataError, match="negative"):
        fit_gamma([[1.0], [-1.0]])
    with pytest.raises(InvalidDataError, match="shape"):
        fit_gamma(np.ones((2, 2, 2)))
    with pytest.raises(InvalidDataError, match="'compute'"):
        fit_gamma([["a"], ["b"]])


@pytest.mark.parametrize("method", ["moments", "mle"])
def test_fit_shifted_exponential_recovers_parameters(method):
    model = ShiftedExponential(shift=(0.1, 0.5), rate=(10.0, 2.0))
    samples, _ = _draws(model, 2, 20000, seed=1)
    fitted = fit_shifted_exponential(samples, method=method)
    np.testing.assert_allclose(fitted.shift, (0.1, 0.5), rtol=0.03)
    np.testing.assert_allclose(fitted.rate, (10.0, 2.0), rtol=0.03)


def test_fit_shifted_exponential_formulas_and_errors():
    x = np.array([1.0, 2.0, 4.0, 9.0])
    mle = fit_shifted_exponential(x, method="mle")
    assert mle.shift == (1.0,) and mle.rate == (pytest.approx(1 / (x.mean() - 1)),)
    moments = fit_shifted_exponential(x)
    std = x.std(ddof=1)
    assert moments.rate == (pytest.approx(1 / std),)
    assert moments.shift == (max(x.mean() - std, 0.0),)
    with pytest.raises(InvalidDataError, match=r"worker 0 .* all equal"):
        fit_shifted_exponential([2.0, 2.0, 2.0])
    with pytest.raises(InvalidParameterError, match="'method'"):
        fit_shifted_exponential(x, method="median")
    with pytest.raises(InvalidParameterError, match="worker 1"):
        fit_shifted_exponential([[1.0, np.nan], [2.0, np.nan]])


def test_fit_trace_mapping_and_xarray():
    model = Gamma(mean=MEAN, var=VAR, communication_mean=0.05, communication_var=1e-4)
    compute, communication = _draws(model, 3, 5000)
    compute[::7, 1] = np.nan
    fitted = fit_trace({"compute_duration": compute, "communication_duration": communication})
    assert fitted == fit_gamma(compute, communication)
    assert fit_trace({"compute_duration": compute}, iid=True) == fit_gamma(compute, iid=True)
    xr = pytest.importorskip("xarray")
    trace = xr.Dataset({
        "compute_duration": (("iteration", "worker"), compute),
        "communication_duration": (("iteration", "worker"), communication),
    })
    assert fit_trace(trace) == fitted
    np.testing.assert_allclose(fitted.mean, MEAN, rtol=0.03)
    with pytest.raises(InvalidParameterError, match="'compute_duration'"):
        fit_trace({"latency": compute})


def test_fitted_model_samples():
    compute, _ = _draws(Gamma(mean=MEAN, var=VAR), 3, 5000)
    sampler = fit_gamma(compute).sampler(3, rng=0)
    draws, _ = sampler.sample(2, size=20000)
    assert draws.mean() == pytest.approx(MEAN[2], rel=0.03)


def test_fit_trace_unsplit_fits_the_whole_latency():
    lat = np.array([[0.3, 0.5], [0.5, 0.7], [0.4, np.nan]])
    trace = {"compute_duration": lat - 0.1, "communication_duration": np.full_like(lat, 0.1),
             "latency": lat}
    model = fit_trace(trace, split=False)
    np.testing.assert_allclose(model.mean, [0.4, 0.6])
    np.testing.assert_allclose(model.var, [0.01, 0.02])
    assert model.communication_mean == 0.0
    np.testing.assert_allclose(fit_trace(trace).communication_mean, 0.1)


def test_fit_trace_for_more_workers_tiles_the_laws_and_scales_compute():
    model = Gamma(mean=MEAN, var=VAR, communication_mean=(0.01, 0.02, 0.03),
                  communication_var=(1e-5, 2e-5, 3e-5))
    compute, communication = _draws(model, 3, 2000)
    trace = {"compute_duration": compute, "communication_duration": communication}
    fitted = fit_trace(trace)
    assert fit_trace(trace, n_workers=3) == fitted
    bigger = fit_trace(trace, n_workers=7)  # worker j behaves like worker j % 3, share 3/7
    source = [j % 3 for j in range(7)]
    np.testing.assert_allclose(bigger.mean, [fitted.mean[i] * 3 / 7 for i in source])
    np.testing.assert_allclose(bigger.var, [fitted.var[i] * (3 / 7) ** 2 for i in source])
    assert bigger.communication_mean == tuple(fitted.communication_mean[i] for i in source)
    assert bigger.communication_var == tuple(fitted.communication_var[i] for i in source)
    bigger.check_n_workers(7)
    # a worker of the larger cluster at load 7/3 (a traced task's rows) has the traced law
    draws, _ = bigger.sampler(7, rng=1).sample(4, load=7 / 3, size=20000)
    assert draws.mean() == pytest.approx(fitted.mean[1], rel=0.03)
    assert draws.var() == pytest.approx(fitted.var[1], rel=0.1)
    fewer = fit_trace(trace, n_workers=2)  # 3/2 the rows per task
    np.testing.assert_allclose(fewer.mean, np.array(fitted.mean[:2]) * 1.5)


def test_fit_trace_for_more_workers_pooled_and_unsplit():
    lat = np.array([[0.3, 0.5], [0.5, 0.7], [0.4, np.nan]])
    trace = {"compute_duration": lat - 0.1, "communication_duration": np.full_like(lat, 0.1),
             "latency": lat}
    pooled = fit_trace(trace, iid=True, n_workers=8)
    reference = fit_trace(trace, iid=True)
    assert pooled.mean == pytest.approx(reference.mean / 4)
    assert pooled.var == pytest.approx(reference.var / 16)
    assert pooled.communication_mean == reference.communication_mean
    whole = fit_trace(trace, split=False, n_workers=4)  # the whole latency is compute
    np.testing.assert_allclose(whole.mean, [0.2, 0.3, 0.2, 0.3])
    np.testing.assert_allclose(whole.var, [0.0025, 0.005, 0.0025, 0.005])
    assert whole.communication_mean == 0.0


@pytest.mark.parametrize("bad", [0, -2, 2.5, "4", True])
def test_fit_trace_bad_n_workers(bad):
    trace = {"compute_duration": [[0.1, 0.2], [0.3, 0.2]]}
    with pytest.raises(InvalidParameterError, match="'n_workers' parameter of fit_trace"):
        fit_trace(trace, n_workers=bad)


def test_fit_link_on_a_shared_port_finds_the_coordinator_and_the_slow_worker():
    """Measured links share a port's rate fairly (TCP): two fast workers sending at once
    on a 100 Mbit/s port with a third behind its own 10 Mbit/s link get 90 % of the port
    between them, and arrive after 2.22 M / rate, the third after 10 M / rate. The fit
    finds the port and the slow worker: its message alone takes as long in the model as
    it was measured."""
    m = 10**6 / 12.5e6  # seconds of one message at 100 Mbit/s
    link = fit_link(10**6, [m, m, 10 * m], [20 / 9 * m, 20 / 9 * m, 10 * m], latency=[0.0] * 3)
    assert link.coordinator == pytest.approx(12.5e6, rel=0.01)
    assert link.bandwidth[:2] == (UNLIMITED, UNLIMITED)
    assert link.message_duration(2, 10**6) == pytest.approx(10 * m, rel=0.01)
    assert link.bandwidth[2] == pytest.approx(1.25e6, rel=0.01)  # its own 10 Mbit/s


def test_fit_link_refuses_times_that_are_not_one_per_worker():
    with pytest.raises(InvalidDataError, match="one finite time per worker"):
        fit_link(10**6, [0.1, 0.1], [0.1])
    with pytest.raises(InvalidDataError, match="infinite or negative"):
        fit_link(10**6, [0.1, -1.0], [0.1, 0.2])
    with pytest.raises(InvalidParameterError, match="'nbytes'"):
        fit_link(0, [0.1], [0.1])


def test_fit_peers_solves_a_ring_and_keeps_the_fallback_elsewhere():
    # four workers, messages of 1 MB; worker 3 left out (no edge): its fallback stays
    # (a message streams through both links: it takes the slower one's time)
    edges = [(0, 1, 0.1), (1, 2, 1.0), (2, 0, 1.0)]
    bandwidth = fit_peers(1e6, edges, fallback=[5.0, 5.0, 5.0, 7.0])
    assert bandwidth == pytest.approx((1e7, 1e7, 1e6, 7.0))
    # the fitted links give every edge's time back
    assert [1e6 / min(bandwidth[i], bandwidth[j]) for i, j, _ in edges] == pytest.approx(
        [seconds for _, _, seconds in edges])
    # two workers: each link at least as fast as their messages
    assert fit_peers(1e6, [(0, 1, 0.2), (1, 0, 0.2)], [1.0, 1.0]) == pytest.approx((5e6, 5e6))
    # no time left for a link: unlimited
    assert fit_peers(1e6, [(0, 1, 0.0)], [1.0, 1.0]) == (UNLIMITED, UNLIMITED)
    assert fit_peers(1e6, [], [3.0]) == (3.0,)
