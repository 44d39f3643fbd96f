"""Gram: exact PCA in one round from the summed Gram matrices, plain or coded.

Oracles: numpy's SVD of the centred (or Patterson-scaled) dense matrix, and a per-call
loop over genotype calls with missing alleles and mixed ploidy (tests/data/test_ploidy).
"""

from __future__ import annotations

import numpy as np
import pytest
import zarr

from daskstraggle import fit_logistic, fit_pca, open_matrix
from daskstraggle.api import run_on
from daskstraggle.cli import main
from daskstraggle.errors import InvalidParameterError
from daskstraggle.methods import Gram, make_method
from daskstraggle.problems import PCA
from daskstraggle.runtime import LocalRuntime, StopRule
from daskstraggle.testing import assert_exact_components, reference_dosages, reference_matrix

K = 5


@pytest.fixture(scope="module")
def X() -> np.ndarray:
    rng = np.random.default_rng(0)
    return rng.normal(size=(1200, 30)) * np.linspace(3.0, 1.0, 30) + 2.0


def _assert_exact(res, dense: np.ndarray, k: int, *, center: bool = True) -> None:
    assert_exact_components(res, dense, k, center=center)
    assert res.converged and res.stop_reason == "tol" and res.n_iter == 1
    assert res.fitted["residuals"].max() < 1e-10


def test_one_round_gives_every_component_exactly(X):
    res = fit_pca(X, K, runtime="local", n_workers=3, method="gram", rng=0, reference=True)
    _assert_exact(res, X, K)
    assert res.distance < 1e-12


class _CountingRuntime(LocalRuntime):
    """The in-process runtime, counting its exact passes over every partition."""

    passes = 0

    def _exact_pass(self, problem, iterate):
        type(self).passes += 1
        return super()._exact_pass(problem, iterate)


def test_the_only_exact_pass_is_the_final_one(X):
    """No pass at the (random) starting point: one round, then the final pass that
    recomputes the fitted values with the PCA kernel, independently of the Gram sum."""
    _CountingRuntime.passes = 0
    with _CountingRuntime(n_workers=3) as runtime:
        res = run_on(runtime, Gram(), PCA(n_components=K), open_matrix(X), rng=0,
                          stop=StopRule(tol=1e-8))
    assert _CountingRuntime.passes == 1
    _assert_exact(res, X, K)
    assert res.attrs["convergence"]["start_objective"] is None


@pytest.mark.parametrize(("scheme", "params"), [
    ("fractional-repetition", {"n_stragglers": 1}),
    ("cyclic-repetition", {"n_stragglers": 1}),
    ("cyclic-repetition", {"n_stragglers": 2}),
    ("bcc", {"batch_size": 2}),
])
def test_coded_sum_ignores_stragglers_and_gives_the_same_answer(X, scheme, params):
    plain = fit_pca(X, K, runtime="local", n_workers=4, method="gram", rng=0)
    slow = "gamma(mean=0.05, var=1e-4) + slowdown(workers=[0], factor=20)"
    coded = fit_pca(X, K, runtime="sim", n_workers=4, method="gram", rng=0, stragglers=slow,
                    method_params={"scheme": scheme, "rng": 0, **params})
    _assert_exact(coded, X, K)
    np.testing.assert_allclose(coded.fitted["components"], plain.fitted["components"],
                               atol=1e-10)
    # decoded before the slow worker answered: its messages were not needed
    assert int(coded.trace.n_workers_used.values[0]) < 4
    assert np.isnan(coded.trace.latency.values[0, 0])


def test_genotypes_with_missing_calls_and_mixed_ploidy(tmp_path):
    rng = np.random.default_rng(8)
    n_samples = 24
    freq = rng.uniform(0.1, 0.9, size=(300, 1, 1))
    calls = (rng.random((300, n_samples, 2)) < freq).astype(np.int8)
    calls[:, :8, 1] = -2  # haploid samples
    calls[rng.random((300, n_samples)) < 0.05, 0] = -1  # missing calls
    path = tmp_path / "geno.vcz"
    group = zarr.open_group(path, mode="w", zarr_format=2)
    group.create_array("call_genotype", shape=calls.shape, chunks=(50, n_samples, 2),
                       dtype="i1")[:] = calls
    dense = reference_matrix(reference_dosages(calls), 2, patterson=True)
    res = fit_pca(path, 3, runtime="local", n_workers=3, method="gram", rng=0)
    _assert_exact(res, dense, 3, center=False)


def test_on_process_workers_with_a_straggler(X, dask_client):
    res = fit_pca(X, K, client=dask_client, method="gram", rng=0,
                  method_params={"scheme": "cyclic-repetition", "n_stragglers": 1})
    _assert_exact(res, X, K)


def test_gram_refuses_what_it_cannot_do(X):
    y = (X[:, 0] > X[:, 0].mean()).astype(float)
    with pytest.raises(InvalidParameterError, match="'gram' applies to PCA only"):
        fit_logistic(X, y, runtime="local", method="gram")
    wide = np.random.default_rng(0).normal(size=(4, 20_001))
    with pytest.raises(InvalidParameterError, match="20000 columns"):
        fit_pca(wide, 1, runtime="local", n_workers=2, method="gram")
    with pytest.raises(InvalidParameterError, match="20000 columns"):  # before any loading
        run_on(LocalRuntime(2), Gram(), PCA(n_components=1), open_matrix(wide))
    assert isinstance(make_method("gram", scheme="cyclic-repetition", n_stragglers=1), Gram)


def test_cli(tmp_path, capsys, X):
    import json

    path = tmp_path / "x.zarr"
    zarr.create_array(path, data=X, chunks=(300, X.shape[1]))
    code = main(["pca", str(path), "-k", "3", "--runtime", "sim", "--workers", "4",
                 "--method", "gram", "--scheme", "cyclic-repetition",
                 "--stragglers-tolerated", "1", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["converged"] is True and out["n_iter"] == 1
    assert main(["pca", str(path), "--method", "gram", "--nesterov", "--runtime",
                 "local"]) == 2
    assert "--nesterov: only with --method coded, not 'gram'" in capsys.readouterr().err
