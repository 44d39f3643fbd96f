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

#: Markdown files whose relative links (and their #anchors) must resolve: the README, every
#: page of docs/, the pipelines' and the datasets' READMEs.
MARKDOWN = sorted({"README.md", "pipelines/README.md", "datasets/README.md",
                   *(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").rglob("*.md"))})
#: Where the shipped text lives besides the README: package, docs, pipelines, datasets, notebooks.
SHIPPED_DIRS = ("docs", "daskstraggle", "pipelines", "datasets", "notebooks")
#: A repository path written in prose or code, e.g. ``docs/remote-stores.md``.
REPO_PATH = re.compile(r"(?<![\w./-])((?:docs|datasets|pipelines|notebooks|tests|daskstraggle)/"
                       r"[\w./-]*\w\.(?:md|py|toml|ipynb))")


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
    for doc in ("docs/README.md", "docs/architecture.md", "docs/algorithms.md",
                "docs/remote-stores.md", "docs/methods.md", "docs/cli.md", "docs/conventions.md"):
        assert (ROOT / doc).is_file(), doc
        assert f"]({doc})" in readme, f"README.md does not link {doc}"


def test_the_docs_index_links_every_page():
    index = (ROOT / "docs" / "README.md").read_text()
    pages = sorted(p.name for p in (ROOT / "docs").glob("*.md") if p.name != "README.md")
    assert len(pages) >= 8, pages
    missing = [page for page in pages if f"]({page})" not in index]
    assert not missing, f"docs/README.md does not link {missing}"


def test_the_license_is_shipped_and_declared():
    assert "BSD 3-Clause License" in (ROOT / "LICENSE").read_text()
    assert (ROOT / "daskstraggle" / "py.typed").is_file()
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'license = "BSD-3-Clause"' in pyproject
    assert 'license-files = ["LICENSE"]' in pyproject


def test_nothing_shipped_points_outside_the_repository():
    """Also for files git does not track yet (the tracked-file test needs git)."""
    paths = [ROOT / "README.md"] + [p for d in SHIPPED_DIRS for p in (ROOT / d).rglob("*")
                                    if p.is_file() and "__pycache__" not in p.parts]
    found = [f"{p.relative_to(ROOT)}: {needle}" for p in paths
             for needle in (*OUTSIDE, "/work" + "/")
             if needle in p.read_bytes().decode("utf-8", errors="ignore")]
    assert not found, "point these into the repository instead:\n" + "\n".join(found)


def test_every_repository_path_named_in_shipped_text_exists():
    """``docs/x.md``, ``daskstraggle/y.py`` ... named in the docs, the package's docstrings,
    messages and --help, and the pipelines, exist (a renamed page breaks no pointer)."""
    paths = [ROOT / "README.md"] + [p for d in SHIPPED_DIRS for p in (ROOT / d).rglob("*")
                                    if p.suffix in (".md", ".py", ".toml")]
    missing = sorted({f"{p.relative_to(ROOT)} names {m}" for p in paths
                      for m in REPO_PATH.findall(p.read_text(errors="ignore"))
                      if not (ROOT / m).exists()})
    assert not missing, "\n".join(missing)


def test_cli_help_points_only_to_what_it_names_itself():
    """--help (docs/cli.md is its copy, kept current by test_docs_cli.py) says things itself:
    no 'see README', and every file it names is a page of this repository."""
    helps = "\n".join(re.findall(r"```text\n(.*?)```", (ROOT / "docs" / "cli.md").read_text(),
                                 flags=re.S))
    assert "daskstraggle pca" in helps and "datasets make" in helps
    assert "README" not in helps, "a --help refers to a README, which pip installs do not ship"
    for name in re.findall(r"[\w./-]+\.md\b", helps):
        assert name.startswith("docs/") and (ROOT / name).is_file(), name


def _anchors(path: Path) -> set[str]:
    """GitHub's anchors of the headings of a Markdown file (outside fenced code)."""
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.S | re.M)
    anchors: set[str] = set()
    for title in re.findall(r"^#{1,6} +(.+?) *#*$", text, flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
        anchor, n = slug, 0
        while anchor in anchors:  # repeated headings get -1, -2, ...
            n += 1
            anchor = f"{slug}-{n}"
        anchors.add(anchor)
    return anchors


def test_anchors_follow_github():
    assert {"7-faces", "10-extending-one-registry-per-concept-and-how-to-add-a-method-a-"
            "problem-a-runtime"} <= _anchors(ROOT / "docs" / "architecture.md")
    runs = {a for a in _anchors(ROOT / "pipelines" / "README.md") if a.startswith("run")}
    assert {"run", "run-1", "run-2"} <= runs  # repeated headings
    assert "e-genotype-pca-vs-plink2-genotype_pcapy" in _anchors(ROOT / "pipelines" / "README.md")


@pytest.mark.parametrize("name", MARKDOWN)
def test_relative_markdown_links_resolve(name):
    path = ROOT / name
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.S | re.M)
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    broken = []
    for link in links:
        target, _, anchor = link.partition("#")
        if re.match(r"^[a-z]+:", target):
            continue  # a URL
        file = (path.parent / target) if target else path
        if not file.exists():
            broken.append(link)
        elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
            broken.append(link)
    assert not broken, f"{name}: links to missing files or headings {broken}"


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


#: The sections of docs/architecture.md that must each carry one test-backed worked example.
WORKED_SECTIONS = ("Adding a method", "Adding a data source", "Adding a fault kind")


def _subsection(text: str, title: str) -> str:
    """The body of the ``### title`` subsection (up to the next heading of level 2 or 3)."""
    match = re.search(rf"^### {re.escape(title)}\n(.*?)(?=^##)", text + "\n## end",
                      flags=re.S | re.M)
    assert match, f"docs/architecture.md has no '### {title}' section"
    return match.group(1)


def _top_level_names(path: Path) -> tuple[set[str], set[str]]:
    """The classes and the functions a Python file defines at module level."""
    import ast

    tree = ast.parse(path.read_text())
    classes = {node.name for node in tree.body if isinstance(node, ast.ClassDef)}
    functions = {node.name for node in tree.body
                 if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)}
    return classes, functions


@pytest.mark.parametrize("title", WORKED_SECTIONS)
def test_each_worked_example_names_a_test_module_and_what_it_defines(title):
    """'Worked example, `tests/...py`: `Subject` ...': the file exists, the subject (the first
    name after the colon) is a class or function it defines, and every ``test_*`` named is
    one of its functions; renaming or removing the example's test fails here."""
    body = _subsection((ROOT / "docs" / "architecture.md").read_text(), title)
    examples = re.findall(r"^Worked example, `(tests/[\w/]+\.py)`:\s*(.*?)(?:\n\n|\Z)", body,
                          flags=re.S | re.M)
    assert len(examples) == 1, f"'{title}' needs one 'Worked example, `tests/...py`:' paragraph"
    file, paragraph = examples[0]
    path = ROOT / file
    assert path.is_file(), f"'{title}': the worked example's {file} does not exist"
    classes, functions = _top_level_names(path)
    named = re.findall(r"`([A-Za-z_]\w*)`", paragraph)
    assert named and named[0] in classes | functions, (
        f"'{title}': the worked example's subject `{named[:1]}` is not defined in {file}")
    tests = sorted({name for name in named if name.startswith("test_")})
    missing = [name for name in tests if name not in functions]
    assert not missing, f"'{title}': {file} has no {missing}"


def test_the_data_source_snippet_is_the_real_pgen_backend():
    """The class shown under 'Adding a data source' is the built-in one, attribute for
    attribute (its base, docstring and every class attribute it sets)."""
    import ast
    import inspect

    from daskstraggle.data.backends import get_source

    body = _subsection((ROOT / "docs" / "architecture.md").read_text(), "Adding a data source")
    (snippet,) = re.findall(r"```python\n(.*?)```", body, flags=re.S)
    (node,) = [n for n in ast.parse(snippet).body if isinstance(n, ast.ClassDef)]
    assigned = {target.id: ast.literal_eval(stmt.value) for stmt in node.body
                if isinstance(stmt, ast.Assign) for target in stmt.targets}
    real = get_source(assigned["name"])
    assert real.__name__ == node.name
    assert [base.id for base in node.bases] == [b.__name__ for b in real.__bases__]
    assert ast.get_docstring(node) == inspect.cleandoc(real.__doc__ or "")
    assert {"name", "description", "priority"} <= set(assigned)
    differ = {k: (v, getattr(real, k, None)) for k, v in assigned.items()
              if getattr(real, k, None) != v}
    assert not differ, f"the snippet's attributes differ from the real class: {differ}"
    own = {k for k in vars(real) if not k.startswith("_") and not callable(vars(real)[k])
           and not isinstance(vars(real)[k], classmethod | staticmethod)}
    assert own <= set(assigned), f"the snippet leaves out {sorted(own - set(assigned))}"
