"""Every pipeline loads and parses its options in each suite run, and has a test that runs
its whole ``--quick`` path as a user types it.

``run_quick`` is that run: ``python pipelines/NAME.py --quick`` in a fresh process (every
section: no ``--sections``), its JSON written under the test's folder. The runs that take
real clusters for a minute are marked slow (``--runslow``); the loading test keeps an import
error, a renamed library name or a broken option parser from going unnoticed until someone
runs them.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).parents[1]
PIPELINES = sorted(p.stem for p in (ROOT / "pipelines").glob("*.py")
                   if not p.stem.startswith("_"))


def run_quick(name: str, tmp_path: Path, *options: str,
              timeout: float = 600) -> tuple[dict[str, Any], str]:
    """Run ``python pipelines/NAME.py --quick --out ... OPTIONS`` in ``tmp_path``, whole.

    Returns
    -------
    saved : dict
        The JSON the run wrote.
    printed : str
        What it printed on stdout.
    """
    assert "--sections" not in options, "the whole --quick path, every section"
    out = tmp_path / f"{name}.json"
    done = subprocess.run([sys.executable, str(ROOT / "pipelines" / f"{name}.py"), "--quick",
                           "--out", str(out), *options], capture_output=True, text=True,
                          timeout=timeout, cwd=tmp_path, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert not (tmp_path / "results").exists()  # --out was honoured
    return json.loads(out.read_text()), done.stdout


def test_there_are_pipelines():
    assert {"time_to_accuracy", "soak", "genotype_pca", "load_balancing"} <= set(PIPELINES)


@pytest.mark.parametrize("name", PIPELINES)
def test_the_pipeline_loads_and_prints_its_help(name, load_pipeline, capsys):
    module = load_pipeline(name)
    with pytest.raises(SystemExit) as exit_info:
        module.main(["--help"])
    assert exit_info.value.code == 0
    printed = capsys.readouterr().out
    assert "usage:" in printed and "--quick" in printed  # every pipeline has a smoke run


@pytest.mark.parametrize("name", PIPELINES)
def test_a_test_runs_the_whole_quick_path(name):
    """``tests/test_pipeline_NAME.py`` calls ``run_quick("NAME", ...)`` (issue 42: a test
    of one section let ``--quick`` crash in another)."""
    test = ROOT / "tests" / f"test_pipeline_{name}.py"
    assert test.exists(), f"{test.name} is missing"
    calls = [node for node in ast.walk(ast.parse(test.read_text()))
             if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "run_quick"
             and node.args and getattr(node.args[0], "value", None) == name]
    assert calls, f"{test.name} does not run_quick({name!r}, ...)"
