"""Smoke test of ``pipelines/bcc_comparison.py``: its whole ``--quick`` (both sections).

Checks what the pipeline reports against what must hold whatever the latency draws: the
three schemes give the same iterates (exact gradients), the uncoded scheme waits for every
worker and cyclic repetition for exactly n - s, BCC for fewer, and with the master's link
as the bottleneck the simulated total time follows the number of results waited for.
"""

from __future__ import annotations

import pytest
from test_pipelines_load import run_quick


@pytest.mark.slow  # tens of seconds of LocalClusters: --runslow (the suite within the CI limit)
@pytest.mark.cluster
def test_quick_comparison(tmp_path):
    results, printed = run_quick("bcc_comparison", tmp_path)
    assert results["quick"] is True and set(results["sim"]) == {"20"}
    block = results["sim"]["20"]
    med = block["median"]
    assert block["max_rel_iterate_difference"] < 1e-10
    assert med["uncoded"]["workers_waited_mean"] == 20
    assert med["cyclic-repetition"]["workers_waited_mean"] == 20 - (block["compute_load"] - 1)
    assert med["bcc"]["workers_waited_mean"] < med["cyclic-repetition"]["workers_waited_mean"]
    totals = [med[s]["total_s"] for s in ("bcc", "cyclic-repetition", "uncoded")]
    assert totals == sorted(totals)
    for m in med.values():
        assert m["computation_s"] > 0 and m["communication_s"] > 0
    assert printed.count("largest relative difference of final iterates") == 2
    (cluster,) = results["cluster"].values()  # every scheme on real workers, the same iterates
    assert cluster["max_rel_iterate_difference"] < 1e-10
    assert set(cluster["median"]) == set(med)
    assert cluster["median"]["uncoded"]["workers_waited_mean"] == int(*results["cluster"])
