"""``pipelines/biobank_pca.py``: a Balding-Nichols .bed cohort, ours against plink2 --pca."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
from test_pipelines_load import run_quick

from daskstraggle.data import open_matrix


def test_cohort_is_a_plink_fileset_with_structure(load_pipeline, tmp_path):
    pipeline = load_pipeline("biobank_pca")
    cfg = {"variants": 300, "samples": 90, "populations": 3, "fst": 0.1, "missing": 0.02,
           "seed": 1}
    prefix = pipeline.cohort(cfg, tmp_path)
    bed = Path(f"{prefix}.bed")
    assert bed.stat().st_size == 3 + 300 * 23  # magic, then ceil(90 / 4) bytes a variant
    ids = [line.split("\t")[1] for line in Path(f"{prefix}.bim").read_text().splitlines()]
    assert len(set(ids)) == 300  # plink2 needs unique variant ids
    families = [line.split()[0] for line in Path(f"{prefix}.fam").read_text().splitlines()]
    assert families[:4] == ["p0", "p1", "p2", "p0"]
    # read back by our reader: the structured components separate the populations
    result = __import__("daskstraggle").fit_pca(open_matrix(str(bed)), 2, method="gram",
                                                runtime="local")
    scores = result.fitted["components"][0]
    pops = np.arange(90) % 3
    means = [scores[pops == p].mean() for p in range(3)]
    spread = max(scores[pops == p].std() for p in range(3))
    assert max(means) - min(means) > 3 * spread
    # the same settings are reused, not written again
    stamp = next(tmp_path.glob("*.json"))
    before = stamp.stat().st_mtime_ns
    assert pipeline.cohort(cfg, tmp_path) == prefix
    assert stamp.stat().st_mtime_ns == before


def test_quick_run(tmp_path):
    saved, _ = run_quick("biobank_pca", tmp_path, "--workdir", str(tmp_path / "data"))
    ours = saved["runs"]["ours block"]
    assert ours["summary"]["converged"] is True
    assert len(ours["summary"]["determined"]) == 5
    assert saved["machine"]["cpu"]
    if shutil.which("plink2"):
        assert "plink2 --pca approx" in saved["runs"]
        # the strongest population axis is the same direction in both tools
        assert saved["versus"]["ours block"]["cosine"][0] > 0.99
    else:
        assert "plink2 --pca approx" not in saved["runs"]


def test_relatives_are_children_of_their_parents(load_pipeline):
    """The cohort's last samples take one allele from each parent at every variant."""
    pipeline = load_pipeline("biobank_pca")
    table = np.array([2, -1, 1, 0], dtype=np.int8)  # .bed codes 00, 01 (missing), 10, 11

    def decode(data):
        raw = np.frombuffer(data, np.uint8).reshape(400, 10)
        codes = (raw[:, :, None] >> np.array([0, 2, 4, 6], np.uint8)) & 3
        return table[codes.reshape(400, 40)]

    plain, related = (decode(pipeline._chunk((400, 40, 2, 0.1, 0.0, relatives,
                                              np.random.SeedSequence(5))))
                      for relatives in (0, 3))
    assert np.array_equal(plain[:, :37], related[:, :37])  # the others are unchanged
    for j, child in enumerate(range(37, 40)):
        mother, father = related[:, 2 * j * 2], related[:, (2 * j + 1) * 2]
        # a child shares an allele with each parent: never opposite homozygotes
        assert not np.any(np.abs(related[:, child] - mother) == 2)
        assert not np.any(np.abs(related[:, child] - father) == 2)
    assert np.any(np.abs(plain[:, 39] - plain[:, 0]) == 2)  # unrelated ones do differ


def test_quick_workflow(tmp_path):
    saved, _ = run_quick("biobank_pca", tmp_path, "--workflow", "--exact", "--relatives", "10",
                         "--workdir", str(tmp_path / "data"))
    ours = saved["runs"]["ours (as typed)"]
    assert ours["summary"]["converged"] is True
    assert ours["summary"]["quality_control"]["n_samples_kept"] <= 2000 - 10
    if shutil.which("plink2"):
        versus = saved["versus"]["ours (as typed)"]
        assert versus["samples_jaccard"] == 1.0 and versus["variants_jaccard"] == 1.0
        assert min(versus["cosine"][:3]) > 0.999
        assert versus["time_over_plink2"] > 0 and versus["memory_over_plink2"] > 0
