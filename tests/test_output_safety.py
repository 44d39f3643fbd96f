"""Output paths cannot destroy data: never the input, a writable folder, no hidden leftovers.

Refusals happen before any cluster work (the ``no_cluster`` guard makes starting one fail
the test) and reach the command line as one line ``error: ...`` with exit code 2.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import zarr

import daskstraggle
from daskstraggle import Result
from daskstraggle.cli import main
from daskstraggle.errors import (
    InputError,
    InvalidParameterError,
    OutputNotWritableError,
    StraggleWarning,
)
from daskstraggle.testing import one_error_line


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A Zarr group with X (100 x 3) and y, inside its own folder ``data``."""
    rng = np.random.default_rng(0)
    path = tmp_path / "data" / "v.zarr"
    group = zarr.open_group(path, mode="w")
    group.create_array("X", shape=(100, 3), chunks=(25, 3), dtype="f8")[:] = rng.normal(
        size=(100, 3))
    group.create_array("y", shape=(100,), chunks=(25,), dtype="f8")[:] = rng.normal(size=100)
    return path


def snapshot(path: Path) -> dict[str, bytes]:
    """Relative path -> bytes of every file below ``path``."""
    return {str(p.relative_to(path)): p.read_bytes()
            for p in sorted(path.rglob("*")) if p.is_file()}




def small_result(store: Path | None = None) -> Result:
    X = np.random.default_rng(1).normal(size=(40, 3))
    source = daskstraggle.open_matrix(store, array="X") if store is not None else X
    return daskstraggle.fit_pca(source, 1, runtime="local", n_workers=2, rng=0, max_iter=3,
                                tol=None)


# --------------------------------------------------------------- never the input store
#: ``--out`` relative to the input store ``data/v.zarr``: the store, a path inside it, the
#: folder holding it, and the store through a symlink.
OVERLAPS = {
    "same": ("v.zarr", "is the input store"),
    "inside": ("v.zarr/X/out.zarr", "lies inside the input store"),
    "parent": (".", "contains the input store"),
    "symlink": ("alias.zarr", "is the input store"),
}


def _out(store: Path, which: str) -> Path:
    rel = OVERLAPS[which][0]
    if which == "symlink":
        (store.parent / rel).symlink_to(store.name)
    return store.parent / rel


@pytest.mark.parametrize("which", list(OVERLAPS))
def test_cli_refuses_out_overlapping_the_input_even_with_overwrite(which, store, capsys,
                                                                   no_cluster):
    before = snapshot(store)
    out = _out(store, which)
    code = main(["linreg", str(store), "--out", str(out), "--overwrite"])
    captured = capsys.readouterr()
    assert code == 2, captured
    assert captured.out == ""
    line = one_error_line(captured.err)
    assert OVERLAPS[which][1] in line and "--out" in line, line
    assert snapshot(store) == before


@pytest.mark.parametrize("which", list(OVERLAPS))
@pytest.mark.parametrize("opened", [False, True], ids=["path", "matrix"])
def test_api_refuses_out_overlapping_the_input(which, opened, store, no_cluster):
    before = snapshot(store)
    out = _out(store, which)
    X = daskstraggle.open_matrix(store, array="X", labels="y") if opened else store
    with pytest.raises(InvalidParameterError, match=OVERLAPS[which][1]):
        daskstraggle.fit_least_squares(X, "y", out=out, overwrite=True, n_workers=2)
    with pytest.raises(InvalidParameterError, match=OVERLAPS[which][1]):
        daskstraggle.fit_pca(store, 1, array="X", out=out, overwrite=True, n_workers=2)
    assert snapshot(store) == before


def test_result_save_refuses_the_recorded_source_and_protected_paths(store, tmp_path):
    result = small_result(store)
    before = snapshot(store)
    for out in (store, store / "X", store.parent):
        with pytest.raises(InvalidParameterError, match="would destroy the data"):
            result.save(out, overwrite=True)
    other = tmp_path / "other.zarr"
    other.mkdir()
    with pytest.raises(InvalidParameterError, match="is the input store"):
        small_result().save(other, overwrite=True, protect=[other])
    assert snapshot(store) == before
    assert small_result().save(tmp_path / "fine.zarr").exists()


# ------------------------------------------------------- never into any Zarr store
def _zarr_store(tmp_path: Path, kind: str) -> Path:
    """A Zarr store of one kind (v3 group, v2 group, v2 array, attributes only)."""
    path = tmp_path / "other" / "geno.vcz"
    if kind == "v3-group":
        zarr.open_group(path, mode="w", zarr_format=3).create_array(
            "call_genotype", shape=(4, 2), dtype="i1")
    elif kind == "v2-group":
        zarr.open_group(path, mode="w", zarr_format=2).attrs["source"] = "test"
    elif kind == "v2-array":
        zarr.create_array(path, shape=(4,), dtype="f8", zarr_format=2)[:] = 1.0
    else:
        path.mkdir(parents=True)
        (path / ".zattrs").write_text("{}")
    return path


@pytest.mark.parametrize("kind", ["v3-group", "v2-group", "v2-array", "attributes-only"])
@pytest.mark.parametrize("inside", ["sub.zarr", "a/b/sub.zarr", "link/sub.zarr"])
def test_result_save_refuses_a_path_inside_any_zarr_store(kind, inside, tmp_path):
    """An in-memory fit's result (no input store recorded) is not saved into geno.vcz."""
    victim = _zarr_store(tmp_path, kind)
    (tmp_path / "link").symlink_to(victim)  # a symlink does not hide the store
    before, names = snapshot(victim), listing(victim)
    out = (tmp_path if inside.startswith("link") else victim) / inside
    for overwrite in (False, True):
        with pytest.raises(InvalidParameterError) as info:
            small_result().save(out, overwrite=overwrite)
        message = str(info.value)
        assert f"lies inside the Zarr store {str(victim)!r}" in message, message
        assert "\n" not in message and "outside" in message
    assert snapshot(victim) == before and listing(victim) == names  # no folder made either
    # beside the store is fine
    assert small_result().save(victim.parent / "pca.zarr").exists()


def listing(path: Path) -> list[str]:
    """Every file and folder below ``path``, relative."""
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def test_cli_refuses_out_and_plot_inside_another_zarr_store(store, tmp_path, capsys,
                                                            no_cluster):
    victim = _zarr_store(tmp_path, "v3-group")
    before = snapshot(victim)
    for args in (["--out", str(victim / "sub.zarr")],
                 ["--out", str(victim / "sub.zarr"), "--overwrite"],
                 ["--plot", str(victim / "run.png")]):
        code = main(["linreg", str(store), *args])
        line = one_error_line(capsys.readouterr().err)
        assert code == 2, line
        assert f"lies inside the Zarr store {str(victim)!r}" in line and args[0] in line, line
    with pytest.raises(InvalidParameterError, match="lies inside the Zarr store"):
        daskstraggle.fit_least_squares(store, "y", out=victim / "call_genotype" / "r.zarr",
                                       n_workers=2)
    assert snapshot(victim) == before


# ------------------------------------------------- a missing folder: refused, not made
@pytest.mark.parametrize("option", ["--out", "--plot"])
@pytest.mark.parametrize("depth", ["missing", "missing/deeper"])
def test_cli_out_and_plot_refuse_a_missing_folder_alike(option, depth, store, tmp_path,
                                                        capsys, no_cluster):
    target = tmp_path / depth / ("r.zarr" if option == "--out" else "run.png")
    before = listing(tmp_path)
    code = main(["linreg", str(store), option, str(target)])
    line = one_error_line(capsys.readouterr().err)
    assert code == 2, line
    folder = target.parent
    assert line == (f"error: {option} {str(target)!r} cannot be written: the folder "
                    f"{str(folder)!r} does not exist. Create it first (mkdir -p) or choose "
                    "another path.")
    assert listing(tmp_path) == before  # no folder made


def test_the_python_api_creates_a_missing_folder_as_to_zarr_does(tmp_path):
    out = tmp_path / "runs" / "first" / "r.zarr"
    assert small_result().save(out) == out and Result.load(out).n_iter >= 1


# ---------------------------------------------------------------- unwritable folders
def _unwritable(tmp_path: Path, kind: str) -> Path:
    if kind == "under-a-file":
        (tmp_path / "somefile").write_text("x")
        return tmp_path / "somefile" / "out.zarr"
    if kind == "pseudo-fs":  # writes fail in /proc, also for root
        return Path("/proc") / "daskstraggle-test" / "out.zarr"
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    return locked / "out.zarr"


UNWRITABLE = [
    "under-a-file",
    pytest.param("pseudo-fs", marks=pytest.mark.skipif(not Path("/proc/self").exists(),
                                                         reason="no /proc")),
    pytest.param("read-only-folder", marks=pytest.mark.skipif(
        os.name != "posix" or os.geteuid() == 0, reason="permission bits do not bind root")),
]


@pytest.mark.parametrize("kind", UNWRITABLE)
def test_unwritable_out_is_refused_before_cluster_work(kind, store, tmp_path, capsys,
                                                       no_cluster):
    out = _unwritable(tmp_path, kind)
    code = main(["linreg", str(store), "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 2, captured
    line = one_error_line(captured.err)
    assert str(out) in line and "--out" in line, line
    with pytest.raises(OutputNotWritableError, match="cannot be"):
        daskstraggle.fit_least_squares(store, "y", out=out, n_workers=2)
    with pytest.raises(OutputNotWritableError):
        small_result().save(out)
    assert not os.path.lexists(out)


# ---------------------------------------------------------- overwrite leaves nothing
def hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_overwrite_leaves_no_hidden_sibling(tmp_path):
    out = tmp_path / "r.zarr"
    small_result().save(out)
    (tmp_path / ".r.zarr.old-0123abcd").mkdir()  # left by an earlier interrupted save
    result = small_result()
    result.objective = 42.0
    result.save(out, overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.zarr"]
    assert Result.load(out).objective == 42.0


def test_overwrite_retries_a_removal_that_fails_midway(tmp_path, monkeypatch):
    out = tmp_path / "r.zarr"
    small_result().save(out)
    real_rmtree = shutil.rmtree
    calls = []

    def flaky(path, *args, **kwargs):  # deletes one file, then fails, the first time
        if ".old-" not in str(path):  # zarr deletes with rmtree too
            return real_rmtree(path, *args, **kwargs)
        calls.append(path)
        if len(calls) == 1:
            next(p for p in Path(path).rglob("*") if p.is_file()).unlink()
            raise OSError(16, "Device or resource busy", str(path))
        return real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr("daskstraggle._output.shutil.rmtree", flaky)
    result = small_result()
    result.objective = 7.0
    result.save(out, overwrite=True)
    assert len(calls) >= 2
    assert hidden(tmp_path) == []
    assert Result.load(out).objective == 7.0


def test_overwrite_warns_naming_what_it_could_not_delete(tmp_path, monkeypatch):
    out = tmp_path / "r.zarr"
    small_result().save(out)
    real_rmtree = shutil.rmtree

    def stuck(path, *args, **kwargs):
        if ".old-" not in str(path):  # zarr deletes with rmtree too
            return real_rmtree(path, *args, **kwargs)
        raise OSError(16, "Device or resource busy", str(path))

    monkeypatch.setattr("daskstraggle._output.shutil.rmtree", stuck)
    with pytest.warns(StraggleWarning, match=r"Could not delete '.*\.r\.zarr\.old-.*busy"):
        small_result().save(out, overwrite=True)
    monkeypatch.undo()
    assert len(hidden(tmp_path)) == 1  # named by the warning
    assert Result.load(out).n_iter >= 1


def test_failed_write_keeps_the_existing_store_and_leaves_nothing(tmp_path, monkeypatch):
    out = tmp_path / "r.zarr"
    small_result().save(out)
    before = snapshot(out)

    def broken(self, *args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr("xarray.Dataset.to_zarr", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        small_result().save(out, overwrite=True)
    assert snapshot(out) == before
    assert hidden(tmp_path) == []


# ------------------------------------------------------------- demo checks its options
@pytest.mark.parametrize(
    ("args", "words"),
    [(["--workers", "0"], ("--workers", "Got 0", "[1, 256]")),
     (["--workers", "-2"], ("--workers",)),
     (["--out", "{file}"], ("--out", "is a file")),
     (["--out", "{file}/demo"], ("--out", "not a folder")),
     (["--out", "{full}"], ("--out", "not empty"))],
    ids=["workers-zero", "workers-negative", "out-is-a-file", "out-under-a-file",
         "out-not-empty"],
)
def test_demo_checks_options_before_simulating(args, words, tmp_path, capsys, monkeypatch,
                                               no_cluster):
    datasets = pytest.importorskip("daskstraggle.data.datasets")

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("genotypes simulated before the options were checked")

    monkeypatch.setattr(datasets, "make_genotypes", refuse)
    (tmp_path / "file").write_text("x")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("x")
    argv = [a.format(file=tmp_path / "file", full=tmp_path / "full") for a in args]
    code = main(["demo", *argv])
    line = one_error_line(capsys.readouterr().err)
    assert code == 2
    for word in words:
        assert word in line, line
    assert (tmp_path / "full" / "keep.txt").read_text() == "x"


def test_errors_are_input_errors():
    assert issubclass(OutputNotWritableError, InputError)
    assert issubclass(OutputNotWritableError, PermissionError)


def test_overwrite_swaps_in_one_step_where_the_system_can(tmp_path, monkeypatch):
    # a kill at any instant must leave the old or the new store at the path: on Linux the
    # two are exchanged atomically, so the path never goes missing in between
    from daskstraggle import _output

    out = tmp_path / "r.zarr"
    small_result().save(out)
    swaps = []
    real = _output._exchange

    def watched(a, b):
        done = real(a, b)
        swaps.append(done)
        assert os.path.isdir(b)  # right after the swap the path holds a store
        return done

    monkeypatch.setattr(_output, "_exchange", watched)
    result = small_result()
    result.objective = 3.0
    result.save(out, overwrite=True)
    assert swaps == [sys.platform == "linux"]
    assert Result.load(out).objective == 3.0
    assert hidden(tmp_path) == []


def test_leftovers_of_a_killed_save_are_cleaned_but_not_a_running_one(tmp_path):
    out = tmp_path / "r.zarr"
    small_result().save(out)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    for name in (f".r.zarr.tmp-{dead.pid}-0123abcd", f".r.zarr.old-{dead.pid}-4567abcd",
                 f".r.zarr.tmp-{os.getppid()}-89abcdef"):  # the last: a live process
        (tmp_path / name).mkdir()
    small_result().save(out, overwrite=True)
    assert hidden(tmp_path) == [f".r.zarr.tmp-{os.getppid()}-89abcdef"]
