"""The whole tree passes ruff with the project's settings (pyproject.toml [tool.ruff])."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing():
    # ruff is pinned in the test extras, so new upstream rules cannot break this test
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", str(ROOT)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
