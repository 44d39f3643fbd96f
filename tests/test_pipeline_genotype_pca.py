"""Smoke test of ``pipelines/genotype_pca.py`` (quick sizes, plink2 absent on purpose).

Runs ``--quick`` with a plink2 binary that does not exist, so the plink2 rows must be
reported as skipped (printed and in the JSON) whatever is installed. Checks what holds
whatever the timings: our gram rows are exact (every component at |cos| >= 0.9999 against
the pipeline's own numpy reference, and our eigenvalues times M - 1 equal the exact
squared singular values of the Patterson-scaled matrix), every run has a wall time and a
measured memory peak, and the scale section reports a worker's peak against its share.
No assertion on a time or a ratio of times.
"""

from __future__ import annotations

import pytest
from test_pipelines_load import run_quick

pytest.importorskip("msprime")
pytest.importorskip("tskit")
pytest.importorskip("bio2zarr")
pytest.importorskip("psutil")
pytest.importorskip("cyvcf2", reason="bio2zarr's vcf2zarr needs cyvcf2")


@pytest.mark.slow  # ~50 s; tests/test_genotype_pca.py checks the same PCA against numpy in CI
@pytest.mark.cluster
@pytest.mark.timeout(600)
def test_quick_genotype_pca_without_plink2(tmp_path):
    saved, printed = run_quick("genotype_pca", tmp_path, "--plink2", str(tmp_path / "no-plink2"),
                               "--workdir", str(tmp_path / "data"))
    assert saved["quick"] is True
    assert {"spec", "settings", "machine", "skipped", "tools", "sizes", "scale",
            "elapsed_s"} <= set(saved)
    assert saved["machine"]["versions"]["plink2"] is None
    assert saved["skipped"]["plink2 exact"] == "plink2 binary not found"
    assert saved["skipped"]["plink2 approx"] == "plink2 binary not found"
    assert not any(name.startswith("plink2") for name in saved["tools"])

    k = saved["settings"]["components"]
    (block,) = saved["sizes"].values()
    assert block["vs_plink2"] == {"skipped": "no plink2 exact run"}
    assert len(block["reference"]["s2"]) == k
    for name, runs in block["runs"].items():
        for run in runs:
            assert run["returncode"] == 0 and run["wall_s"] > 0, name
            assert len(run["cosines"]) == k
            assert run["memory"]["main_mb"] > 0
    # the gram rows: local (auto picks gram), 2 workers, 2 workers with one throttled
    gram = ["ours auto, local", *(n for n in block["runs"] if n.startswith("ours gram"))]
    assert len(gram) >= 3, gram
    for name in gram:
        assert all(run["summary"]["method"] == "gram" for run in block["runs"][name]), name
        med = block["median"][name]
        assert med["n_correct"] == k, name
        # ours' explained_variance * (M - 1) is the exact s^2 of the Patterson matrix
        assert med["s2_max_rel_error"] < 1e-8, name
        if "workers" in name:
            assert med["worker_max_mb"] > 0
    if "dask-ml tsqr" in block["median"]:
        assert block["median"]["dask-ml tsqr"]["n_correct"] == k
    else:
        assert saved["skipped"]["dask-ml tsqr"] == "dask-ml is not installed"

    scale = saved["scale"]
    assert scale["method"] == "gram" and scale["converged"]
    assert scale["memory"]["worker_max_mb"] > 0 and scale["share_mb"] > 0

    assert "skipped: plink2 exact (plink2 binary not found)" in printed
    assert "(scale)" in printed
