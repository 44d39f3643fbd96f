"""The README's two set-up commands stay true: CI runs exactly the test command."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).parents[1]


def _commands() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    return [line for line in readme.splitlines() if line.startswith("python3 -m venv .venv &&")]


def test_ci_runs_exactly_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    tests = [c for c in _commands() if "pytest" in c]
    assert tests, "README lost its test command"
    assert tests[0] in ci, f"{tests[0]!r} is not a line of .ci/run"


def test_readme_demo_command_installs_what_the_demo_needs() -> None:
    demo = [c for c in _commands() if c.endswith("daskstraggle demo")]
    assert demo, "README lost its demo command"
    assert "genomics" in demo[0]  # msprime and bio2zarr simulate the demo's genotypes
