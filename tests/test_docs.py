"""The repository carries its own docs: nothing points outside it, links resolve, layout true."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]

#: Places outside the repository that shipped files used to point to (spelled in pieces so
#: this file does not match itself).
OUTSIDE = ("../" + "shared", "/work/" + "shared", "shared/" + "papers", "papers/" + "dsag.txt")

#: Markdown files whose relative links must resolve.
MARKDOWN = ["README.md", "docs/architecture.md", "docs/algorithms.md", "pipelines/README.md",
            "datasets/README.md", "docs/remote-stores.md", "docs/genotype-pca.md"]


def _tracked_files() -> list[Path]:
    """Files under version control (every file outside hidden and build folders without git)."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                             check=True, timeout=30).stdout.decode()
        return [ROOT / name for name in out.split("\0") if name]
    except (OSError, subprocess.SubprocessError):
        skip = {".git", ".venv", "results", "__pycache__", "build", "dist"}
        return [p for p in ROOT.rglob("*") if p.is_file()
                and not skip.intersection(p.relative_to(ROOT).parts)]


def test_no_tracked_file_points_outside_the_repository():
    found = []
    for path in _tracked_files():
        if not path.is_file():
            continue
        text = path.read_bytes().decode("utf-8", errors="ignore")
        for line_no, line in enumerate(text.splitlines(), 1):
            found += [f"{path.relative_to(ROOT)}:{line_no}: {line.strip()[:100]}"
                      for needle in OUTSIDE if needle in line]
    assert not found, "point these into docs/ instead:\n" + "\n".join(found)


def test_the_docs_exist_and_the_readme_links_them():
    readme = (ROOT / "README.md").read_text()
    for doc in ("docs/architecture.md", "docs/algorithms.md", "docs/remote-stores.md"):
        assert (ROOT / doc).is_file(), doc
        assert f"]({doc})" in readme, f"README.md does not link {doc}"


@pytest.mark.parametrize("name", MARKDOWN)
def test_relative_markdown_links_resolve(name):
    path = ROOT / name
    links = re.findall(r"\]\(([^)\s]+)\)", path.read_text())
    broken = []
    for link in links:
        target = link.split("#")[0]
        if not target or re.match(r"^[a-z]+:", target):
            continue  # an anchor in the same file, or a URL
        if not (path.parent / target).exists():
            broken.append(link)
    assert not broken, f"{name}: links to missing files {broken}"


def _layout_blocks() -> tuple[str, str]:
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## 3. Layout")[1].split("## 4.")[0]
    blocks = re.findall(r"```\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 2, "expected the 'exists now' and the 'planned' layout blocks"
    return blocks[0], blocks[1]


def _package_entries(block: str) -> list[str]:
    """Names listed under ``daskstraggle/`` (two-space indent), e.g. ``api.py``, ``data/``."""
    names = []
    for line in block.splitlines():
        match = re.match(r"^  ([A-Za-z_][\w.]*/?)\s", line + " ")
        if match:
            names.append(match.group(1))
    return names


def test_architecture_layout_matches_the_tree():
    """What the doc says exists does; what it calls planned does not exist yet."""
    exists, planned = _layout_blocks()
    listed = _package_entries(exists)
    assert {"api.py", "cli.py", "trace.py", "data/", "methods/", "runtime/"} <= set(listed)
    missing = [n for n in listed if not (ROOT / "daskstraggle" / n.rstrip("/")).exists()]
    assert not missing, f"docs/architecture.md lists {missing} under daskstraggle/, not in the tree"
    real = {p.name + ("/" if p.is_dir() else "") for p in (ROOT / "daskstraggle").iterdir()
            if not p.name.startswith(("_", ".")) and p.name != "__pycache__"}
    unlisted = sorted(real - set(listed) - {"py.typed"})
    assert not unlisted, f"add {unlisted} to the layout of docs/architecture.md"
    built = [n for n in _package_entries(planned)
             if (ROOT / "daskstraggle" / n.rstrip("/")).exists()]
    assert not built, f"{built} exist now: move them out of the 'planned' layout"
