"""The pure packages never import dask or distributed (docs/architecture.md §3); the package
and its command line load nothing heavy until it is used, and the console script's exit
skips collecting what the command loaded (issue 43, items 4a and 4c)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import daskstraggle

PURE = ["problems", "coding", "latency", "methods", "balance", "engine"]
FORBIDDEN = ("dask", "distributed")
ROOT = Path(daskstraggle.__file__).parent


def _imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
    return names


@pytest.mark.parametrize("package", PURE)
def test_pure_package_sources_do_not_import_dask(package: str) -> None:
    for path in sorted((ROOT / package).rglob("*.py")):
        for name in _imports(path):
            top = name.split(".")[0]
            assert top not in FORBIDDEN, f"{path.relative_to(ROOT)} imports {name}"
            # nor the impure layers of this package, which would drag dask in
            assert not name.startswith(("daskstraggle.runtime", "daskstraggle.data",
                                        "daskstraggle.api", "daskstraggle.cli")), (
                f"{path.relative_to(ROOT)} imports {name}"
            )


#: Pure modules inside the runtime package (the checkpoint's I/O and the balancing loop
#: import no dask).
PURE_MODULES = ["runtime/checkpoint.py", "runtime/balancing.py"]


@pytest.mark.parametrize("module", PURE_MODULES)
def test_pure_runtime_modules_do_not_import_dask(module: str) -> None:
    path = ROOT / module
    for name in _imports(path):
        assert name.split(".")[0] not in FORBIDDEN, f"{module} imports {name}"
        assert not name.startswith(("daskstraggle.runtime.dask", "daskstraggle.data",
                                    "daskstraggle.api", "daskstraggle.cli")), (
            f"{module} imports {name}")


#: What the engine may import besides the standard library's pure modules: numpy, scipy
#: and the package's pure layers.
ENGINE_ALLOWED = ("numpy", "scipy", "daskstraggle.engine", "daskstraggle.methods",
                  "daskstraggle.problems", "daskstraggle.coding", "daskstraggle.latency",
                  "daskstraggle.balance", "daskstraggle.errors", "daskstraggle._validation",
                  "daskstraggle.options",
                  "__future__", "collections", "dataclasses", "enum", "math", "statistics",
                  "typing", "functools", "itertools", "numbers", "abc", "heapq", "bisect")


@pytest.mark.parametrize("path", sorted((ROOT / "engine").rglob("*.py")),
                         ids=lambda p: p.name)
def test_the_engine_imports_only_numpy_scipy_and_the_pure_layers(path: Path) -> None:
    """No dask, distributed or xarray; no file I/O (os, pathlib, pickle, the trace), no
    clock (time), no threads: time arrives inside events, writes leave as instructions."""
    for name in _imports(path):
        assert name == "daskstraggle" or name.startswith(ENGINE_ALLOWED), (
            f"engine/{path.name} imports {name}")


def test_the_engine_checker_catches_a_clock(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import time\nfrom daskstraggle.trace import TraceRecorder\n")
    assert not any(n.startswith(ENGINE_ALLOWED) for n in _imports(bad))


def test_pure_packages_load_without_dask() -> None:
    code = (
        "import sys\n"
        + "".join(f"import daskstraggle.{p}\n" for p in PURE if (ROOT / p / "__init__.py").exists())
        + "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed'))\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_checker_catches_a_forbidden_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from distributed import Client\nimport numpy\n")
    assert "distributed" in _imports(bad)


@pytest.mark.parametrize(("old", "name", "home"), [
    ("daskstraggle.runtime.coordinator", "Coordinator", "daskstraggle.engine"),
    ("daskstraggle.runtime.coordinator", "RunSession", "daskstraggle.engine"),
    ("daskstraggle.runtime.convergence", "ConvergenceMonitor", "daskstraggle.engine"),
    # declared with the other option groups, below the engine, which re-exports it
    ("daskstraggle.runtime.stop", "StopRule", "daskstraggle.options"),
])
def test_moved_names_keep_a_deprecated_alias(old: str, name: str, home: str) -> None:
    import importlib

    import daskstraggle.engine

    module = importlib.import_module(old)
    with pytest.warns(DeprecationWarning, match=f"moved to daskstraggle.engine.*{name}"):
        value = getattr(module, name)
    assert value is getattr(daskstraggle.engine, name, value)
    assert value.__module__.startswith(home)
    with pytest.raises(AttributeError):
        module.no_such_name  # noqa: B018


def test_the_top_level_is_small_and_every_name_in_it_resolves() -> None:
    import daskstraggle

    assert len(daskstraggle.__all__) <= 20, daskstraggle.__all__
    for name in daskstraggle.__all__:
        assert getattr(daskstraggle, name) is not None, name


def test_names_moved_off_the_top_level_warn_and_still_work() -> None:
    import importlib

    import daskstraggle

    moved = daskstraggle._MOVED
    assert {"InvalidParameterError", "ConvergenceWarning", "LocalRuntime", "SGD",
            "LoadBalancer", "simulate"} <= set(moved)
    for name, module in moved.items():
        assert name not in daskstraggle.__all__, name
        with pytest.warns(DeprecationWarning, match=f"import it from {module} "):
            value = getattr(daskstraggle, name)
        assert value is getattr(importlib.import_module(module), name)
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        daskstraggle.no_such_name  # noqa: B018


#: What loads on first use only: importing the package, its command line or the registries
#: of the methods, problems and data sources loads none of these (issue 43, item 4a:
#: ``daskstraggle --help`` was 1.0 s, mostly scipy, dask.config and numpy).
HEAVY = ("numpy", "scipy", "numba", "dask", "distributed", "xarray", "zarr", "pandas",
         "sklearn", "matplotlib", "bio2zarr", "msprime")
#: The package's own modules ``import daskstraggle.cli`` may load (the options that come
#: from the methods' and problems' declarations are made when a command first needs them).
CLI_MODULES = {"daskstraggle", "daskstraggle._version", "daskstraggle.cli",
               "daskstraggle._cli_genotypes", "daskstraggle._cli_lazy", "daskstraggle.errors"}


def _loaded(code: str) -> list[str]:
    """The modules loaded once ``code`` has run in a fresh interpreter."""
    code += "\nimport sys\nprint('\\nMODULES', *sorted(sys.modules))\n"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True).stdout
    return out.rpartition("MODULES ")[2].split()


def _heavy(modules: list[str], allowed: tuple[str, ...] = ()) -> list[str]:
    return [m for m in modules if m.split(".")[0] in HEAVY and m.split(".")[0] not in allowed]


@pytest.mark.parametrize("code", [
    "import daskstraggle",
    "import daskstraggle.cli",
    "from daskstraggle.cli import main\nassert main(['--help']) == 0",
    "from daskstraggle.cli import main\nassert main(['datasets', '--help']) == 0",
    "import daskstraggle.methods, daskstraggle.problems, daskstraggle.data",
])
def test_the_package_and_its_command_line_load_nothing_heavy(code: str) -> None:
    assert _heavy(_loaded(code)) == []


def test_import_daskstraggle_cli_loads_only_these_package_modules() -> None:
    ours = {m for m in _loaded("import daskstraggle.cli") if m.startswith("daskstraggle")}
    assert ours <= CLI_MODULES, sorted(ours - CLI_MODULES)


def test_a_command_s_help_reads_the_declarations_without_scipy_numba_or_dask() -> None:
    loaded = _loaded("from daskstraggle.cli import main\nassert main(['pca', '--help']) == 0")
    assert "daskstraggle.methods.dsag" in loaded and "daskstraggle.problems.pca" in loaded
    assert _heavy(loaded, allowed=("numpy",)) == []


def test_the_console_script_leaves_what_the_command_loaded_out_of_the_exit_collections(
        ) -> None:
    """The interpreter's exit garbage-collects every tracked object three times over, 0.4 to
    0.9 s once dask, numba and xarray are loaded: once the command has ended the console
    script moves them out of those collections (``gc.freeze``); atexit still runs."""
    code = ("import atexit, gc, sys\n"
            "from daskstraggle import _entry\n"
            "atexit.register(lambda: print('AT EXIT', gc.get_freeze_count()))\n"
            "sys.argv = ['daskstraggle', 'datasets', '--help']\n"
            "print('CODE', _entry.main())\n")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True).stdout
    assert "CODE 0" in out
    assert int(out.rpartition("AT EXIT ")[2]) > 1000  # the modules' objects, frozen
