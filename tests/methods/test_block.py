"""BlockKrylov: every component converged by block Krylov with thick restarts.

Oracles: numpy's SVD of the centred (or Patterson-scaled) dense matrix, and a per-call
loop over genotype calls with missing alleles and mixed ploidy (``reference_matrix``).
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import zarr

from daskstraggle import api, fit_logistic, fit_pca, open_matrix
from daskstraggle.api import run_on
from daskstraggle.cli import main
from daskstraggle.errors import InvalidParameterError
from daskstraggle.methods import GD, BlockKrylov, make_method
from daskstraggle.problems import PCA
from daskstraggle.problems._linalg import sin_largest_angle
from daskstraggle.runtime import LocalRuntime, StopRule
from daskstraggle.testing import assert_exact_components, reference_dosages, reference_matrix

K = 6
TOL = 1e-10
#: Every component judged as an eigenvector, also in the flat bulk past K (the default
#: judges that bulk by its variance only: tests/problems/test_separation.py).
STRICT = 0.0


def _spectrum_matrix(n_rows: int, scales: np.ndarray, seed: int) -> np.ndarray:
    """Rows with column variances ``scales**2`` in a random rotation (no structure to
    exploit in the coordinates)."""
    rng = np.random.default_rng(seed)
    rotation = np.linalg.qr(rng.normal(size=(scales.size, scales.size)))[0]
    return (rng.normal(size=(n_rows, scales.size)) * scales) @ rotation.T + 1.5


@pytest.fixture(scope="module")
def flat() -> np.ndarray:
    """Three strong components, then the sampling-noise bulk of 297 unit-variance
    directions (eigenvalue gaps below 1 %, as past the structured components of a
    genotype spectrum): the power method needs over a thousand passes here."""
    scales = np.concatenate([[6.0, 5.0, 4.0], np.ones(297)])
    return _spectrum_matrix(3000, scales, seed=1)


def _svd(dense: np.ndarray) -> np.ndarray:
    return np.linalg.svd(dense - dense.mean(axis=0), full_matrices=False)[2]


def _assert_every_component(res, dense: np.ndarray, k: int, *, center: bool = True) -> None:
    assert_exact_components(res, dense, k, center=center)
    assert res.converged and res.stop_reason == "tol"
    assert res.fitted["residuals"].max() <= TOL * (1 + 1e-6)


def test_converges_every_component_where_the_power_method_crawls(flat):
    res = fit_pca(flat, K, runtime="local", n_workers=3, method="block", rng=0, tol=TOL,
                  min_eigengap=STRICT)
    _assert_every_component(res, flat, K)
    # the power method, given 10x the passes, still has components far from converged
    with pytest.warns(Warning, match="did not converge"):
        gd = fit_pca(flat, K, runtime="local", n_workers=3, method="gd", rng=0, tol=TOL,
                     max_iter=10 * res.n_iter)
    assert not gd.converged and gd.optimality > 1e3 * TOL
    assert res.n_iter <= 60


def test_restarts_keep_converging(flat):
    # the smallest basis restarts every round or two; convergence must survive it
    res = fit_pca(flat, K, runtime="local", n_workers=2, method="block", rng=3, tol=TOL,
                  max_iter=400, oversample=2, method_params={"max_blocks": 3},
                  min_eigengap=STRICT)
    _assert_every_component(res, flat, K)
    assert res.trace.basis_size.values.max() <= 3 * (K + 2)


def test_one_exact_pass_at_the_end_and_none_at_the_start(flat, monkeypatch):
    """block makes no exact pass at its random start (its rounds are exact), only the final
    one at the returned point; the power method (gd) makes both."""
    from daskstraggle.runtime.base import Runtime

    calls = []
    real = Runtime._exact_pass

    def counting(self, problem, iterate):
        calls.append(iterate.shape)
        return real(self, problem, iterate)

    monkeypatch.setattr(Runtime, "_exact_pass", counting)
    res = fit_pca(flat, K, runtime="local", n_workers=2, method="block", rng=0, tol=1e-4)
    assert res.converged and len(calls) == 1
    assert res.trace.basis_size.values[0] > 0  # the first round is recorded all the same
    calls.clear()
    fit_pca(flat, K, runtime="local", n_workers=2, method="gd", rng=0, max_iter=2, tol=None)
    assert len(calls) == 2


@pytest.mark.parametrize("oversample", [0, 1, 20])
def test_any_oversampling(flat, oversample):
    res = fit_pca(flat, 3, runtime="local", n_workers=2, method="block", rng=0, tol=TOL,
                  oversample=oversample)
    _assert_every_component(res, flat, 3)


@pytest.mark.parametrize("oversample", [1, 2, 3])
def test_oversampling_up_to_every_column(oversample):
    """The first block is the oversampled iterate, not ``k + 2p`` columns: on 5 columns
    ``k = 2, p = 2`` stopped in QR with a broadcast error (the tour of issue 42)."""
    from sklearn.decomposition import PCA as SkPCA

    X = np.random.default_rng(0).normal(size=(200, 5)) * [5.0, 4.0, 3.0, 2.0, 1.0]
    res = fit_pca(X, 2, oversample=oversample, method="block", runtime="sim", rng=0)
    assert res.converged
    np.testing.assert_allclose(res.fitted["explained_variance"],
                               SkPCA(2).fit(X).explained_variance_, rtol=1e-9)


def test_degenerate_components_are_judged_as_a_subspace():
    # components 2 and 3 have the same variance: only their span is defined
    scales = np.array([5.0, 3.0, 3.0, 1.0, 0.9, 0.8, 0.7, 0.6])
    dense = _spectrum_matrix(4000, scales, seed=2)
    res = fit_pca(dense, 3, runtime="local", n_workers=2, method="block", rng=0, tol=1e-9)
    assert res.converged
    vt = _svd(dense)
    assert abs(float(res.fitted["components"][0] @ vt[0])) >= 1 - 1e-10
    assert sin_largest_angle(res.fitted["components"][1:].T, vt[1:3].T) < 1e-4


def test_small_matrices_and_every_component():
    # k = d: the basis is the whole space after the first block
    dense = _spectrum_matrix(50, np.array([3.0, 2.0, 1.0, 0.5]), seed=4)
    res = fit_pca(dense, 4, runtime="local", n_workers=2, method="block", rng=0, tol=TOL)
    _assert_every_component(res, dense, 4)
    # fixed iterations with a basis that spans everything go on without breaking
    fixed = fit_pca(dense, 2, runtime="local", n_workers=2, method="block", rng=0,
                    tol=None, max_iter=6)
    assert fixed.n_iter == 6 and fixed.fitted["residuals"].max() < 1e-10


def test_genotypes_with_missing_calls_and_mixed_ploidy(tmp_path):
    rng = np.random.default_rng(8)
    n_samples = 40
    pops = np.repeat([0.2, 0.5, 0.8], [14, 13, 13])
    freq = rng.uniform(0.05, 0.95, size=(900, 1)) * 0.5 + 0.5 * pops * rng.random((900, 1))
    calls = (rng.random((900, n_samples, 2)) < freq[:, :, None]).astype(np.int8)
    calls[:, :8, 1] = -2  # haploid samples
    calls[rng.random((900, n_samples)) < 0.05, 0] = -1  # missing calls
    path = tmp_path / "geno.vcz"
    group = zarr.open_group(path, mode="w", zarr_format=2)
    group.create_array("call_genotype", shape=calls.shape, chunks=(100, n_samples, 2),
                       dtype="i1")[:] = calls
    dense = reference_matrix(reference_dosages(calls), 2, patterson=True)
    res = fit_pca(path, 4, runtime="local", n_workers=3, method="block", rng=0, tol=TOL)
    _assert_every_component(res, dense, 4, center=False)


@pytest.mark.parametrize(("scheme", "params"), [
    ("fractional-repetition", {"n_stragglers": 1}),
    ("cyclic-repetition", {"n_stragglers": 2}),
    ("bcc", {"batch_size": 2}),
])
def test_coded_rounds_give_the_same_iterates_without_the_straggler(flat, scheme, params):
    plain = fit_pca(flat, K, runtime="local", n_workers=4, method="block", rng=0, tol=TOL,
                    min_eigengap=STRICT)
    slow = "gamma(mean=0.05, var=1e-4) + slowdown(workers=[0], factor=20)"
    coded = fit_pca(flat, K, runtime="sim", n_workers=4, method="block", rng=0, tol=TOL,
                    stragglers=slow, method_params={"scheme": scheme, "rng": 0, **params},
                    min_eigengap=STRICT)
    _assert_every_component(coded, flat, K)
    # decoded sums equal the plain one to rounding, so the tol test may flip one round
    assert abs(coded.n_iter - plain.n_iter) <= 1
    np.testing.assert_allclose(coded.fitted["components"], plain.fitted["components"],
                               atol=1e-9)
    # every round decoded without the slow worker (simulated time: it needs 1 s a unit)
    assert (coded.trace.n_workers_used.values < 4).all()
    assert coded.trace.iteration_duration.values.max() < 0.5


def test_on_process_workers_with_a_straggler(flat, dask_client):
    res = fit_pca(flat, K, client=dask_client, method="block", rng=0, tol=TOL,
                  method_params={"scheme": "cyclic-repetition", "n_stragglers": 1},
                  min_eigengap=STRICT)
    _assert_every_component(res, flat, K)


def test_the_bulk_past_k_converges_in_variance_by_default(flat):
    """North's gap for 3000 rows is 2.6 %: PC4-6 lie in the unit bulk that runs past K, so
    the default run stops once their variances settle, in fewer rounds than the strict
    one; the three structured components are exact either way, and the bulk's variances
    equal the exact eigenvalues to about TOL."""
    res = fit_pca(flat, K, runtime="local", n_workers=3, method="block", rng=0, tol=TOL)
    strict = fit_pca(flat, K, runtime="local", n_workers=3, method="block", rng=0, tol=TOL,
                     min_eigengap=STRICT)
    assert res.converged and res.determined == ["vector"] * 3 + ["variance"] * 3
    assert res.n_iter < strict.n_iter
    np.testing.assert_allclose(res.fitted["explained_variance"],
                               strict.fitted["explained_variance"], rtol=10 * TOL)
    np.testing.assert_allclose(np.abs(np.sum(res.fitted["components"][:3]
                                             * strict.fitted["components"][:3], axis=1)),
                               1.0, atol=1e-12)
    assert res.fitted["residuals"][3:].min() > TOL  # directions not resolved: not claimed


def test_auto_picks_block_above_the_gram_limit(flat, monkeypatch):
    monkeypatch.setattr(api, "GRAM_AUTO_MAX_FEATURES", flat.shape[1] - 1)
    res = fit_pca(flat, 3, runtime="local", n_workers=2, rng=0)
    assert res.method == "block" and res.converged


def test_refuses_what_it_cannot_do(flat):
    y = (flat[:, 0] > flat[:, 0].mean()).astype(float)
    with pytest.raises(InvalidParameterError, match="'block' applies to PCA only"):
        fit_logistic(flat, y, runtime="local", method="block")
    with pytest.raises(InvalidParameterError, match="'oversample' parameter of PCA"):
        PCA(oversample=-1)
    with pytest.raises(InvalidParameterError, match=r"'oversample' parameter of PCA .* 'gram'"):
        fit_pca(flat, 2, runtime="local", method="gram", oversample=2)
    with pytest.raises(InvalidParameterError, match="'max_blocks' parameter of BlockKrylov"):
        BlockKrylov(max_blocks=2)
    assert isinstance(make_method("block", scheme="cyclic-repetition", n_stragglers=1),
                      BlockKrylov)


def test_iterates_repeat_with_the_same_seed(flat):
    runs = [run_on(LocalRuntime(2), BlockKrylov(rng=5), PCA(n_components=3), open_matrix(flat),
                                stop=StopRule(max_iter=4, tol=None), rng=1)
            for _ in range(2)]
    np.testing.assert_array_equal(runs[0].iterate, runs[1].iterate)
    # the power method from the same start is a different (slower) run
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gd = run_on(LocalRuntime(2), GD(), PCA(n_components=3), open_matrix(flat),
                                 stop=StopRule(max_iter=4, tol=None), rng=1)
    assert gd.optimality > runs[0].optimality


def test_cli(tmp_path, capsys, flat):
    path = tmp_path / "x.zarr"
    zarr.create_array(path, data=flat, chunks=(500, flat.shape[1]))
    code = main(["pca", str(path), "-k", "3", "--runtime", "sim", "--workers", "4",
                 "--method", "block", "--oversample", "5", "--scheme", "cyclic-repetition",
                 "--stragglers-tolerated", "1", "--tol", "1e-9", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["converged"] is True and out["method"] == "block"
    assert main(["pca", str(path), "--method", "gram", "--oversample", "2", "--runtime",
                 "local"]) == 2
    assert "'oversample' parameter of PCA (CLI: --oversample)" in capsys.readouterr().err
    assert main(["pca", str(path), "--method", "block", "--nesterov", "--runtime",
                 "local"]) == 2
    assert "--nesterov: only with --method coded, not 'block'" in capsys.readouterr().err
