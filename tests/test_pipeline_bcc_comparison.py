"""Smoke test of ``pipelines/bcc_comparison.py`` (simulated part, quick sizes).

Checks what the pipeline reports against what must hold whatever the latency draws: the
three schemes give the same iterates (exact gradients), the uncoded scheme waits for every
worker and cyclic repetition for exactly n - s, BCC for fewer, and with the master's link
as the bottleneck the total time follows the number of results waited for.
"""

from __future__ import annotations

import json


def test_quick_simulated_comparison(tmp_path, capsys, load_pipeline):
    out = tmp_path / "bcc.json"
    results = load_pipeline("bcc_comparison").main(
        ["--quick", "--sections", "sim", "--out", str(out)])
    saved = json.loads(out.read_text())
    assert saved["quick"] is True and set(saved["sim"]) == {"20"}
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
    assert "largest relative difference of final iterates" in capsys.readouterr().out
