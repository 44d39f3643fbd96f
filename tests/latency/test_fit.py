"""Fitting latency models: recovery of known parameters, pooling, missing samples, errors."""

from __future__ import annotations

import numpy as np
import pytest

from daskstraggle.errors import InvalidDataError, InvalidParameterError
from daskstraggle.latency.fit import fit_gamma, fit_shifted_exponential, fit_trace
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
