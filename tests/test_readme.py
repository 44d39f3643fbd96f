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


def test_the_readme_is_a_landing_page() -> None:
    """At most 300 lines; the rest is in docs/, which it links; it still says which runtime
    ran and how the default one is chosen."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 300, "move sections into docs/ (see docs/guide.md)"
    for page in ("docs/README.md", "docs/guide.md", "docs/stragglers.md", "docs/benchmarks.md",
                 "docs/development.md"):
        assert f"]({page})" in readme, f"README.md does not link {page}"
    assert "runtime_reason" in readme and "](docs/guide.md#where-a-command-runs)" in readme
