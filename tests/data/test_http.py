"""Zarr stores served over plain HTTP (``python -m http.server``) on 127.0.0.1.

Two real servers of one folder run in threads: Python's own, whose directory pages list a
folder's members as links (``call_genotype/``, with the slash), and one that answers a
directory with 404, as static hosting does. A store is then read as zarr and xarray read it:
through its consolidated metadata when it has some, else by its listing, else by opening
the members a caller names. Each run over HTTP gives the local store's numbers.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import shutil
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import zarr

import daskstraggle as ds
from daskstraggle.data._zarr import group_arrays
from daskstraggle.testing import BackgroundCommand, free_port, one_error_line

pytest.importorskip("aiohttp", reason="https:// stores need aiohttp (pip install -e '.[cloud]')")

CLI = [sys.executable, "-m", "daskstraggle"]


class _Quiet(http.server.SimpleHTTPRequestHandler):
    """``python -m http.server``'s handler, without the access log on stderr."""

    def log_message(self, *args: Any) -> None:
        pass


class _NoListing(_Quiet):
    """A server that gives no directory pages: a folder answers 404."""

    def list_directory(self, path: Any) -> None:
        self.send_error(404, "No directory listing")


class _Server:
    """A threaded HTTP server of ``directory`` on 127.0.0.1, on a port the system chose."""

    def __init__(self, directory: Path, handler: type[http.server.BaseHTTPRequestHandler]):
        self._server = http.server.ThreadingHTTPServer(
            ("127.0.0.1", 0), functools.partial(handler, directory=str(directory)))
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.1}, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop serving: the loop ends within its poll interval; the join is bounded."""
        self._server.shutdown()
        self._thread.join(timeout=10)
        self._server.server_close()
        assert not self._thread.is_alive(), "the HTTP server thread did not stop"


def _tree_hash(path: Path) -> str:
    digest = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(str(file.relative_to(path)).encode() + b"\0" + file.read_bytes())
    return digest.hexdigest()


@pytest.fixture(scope="module")
def served(vcz_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A folder of stores, served with directory pages (``listing``) and without (``bare``).

    ``plain.vcz``: the VCF Zarr store as bio2zarr writes it (Zarr v2, no consolidated
    metadata); ``consolidated.vcz``: the same with ``.zmetadata``; ``lin2.zarr`` and
    ``lin3.zarr``: groups of X and y in Zarr v2 and v3; ``arr.zarr``: a bare Zarr v3 array.
    """
    folder = tmp_path_factory.mktemp("http")
    shutil.copytree(vcz_path, folder / "plain.vcz")
    shutil.copytree(vcz_path, folder / "consolidated.vcz")
    zarr.consolidate_metadata(str(folder / "consolidated.vcz"))
    rng = np.random.default_rng(5)
    X = rng.normal(size=(120, 4)) * [4.0, 2.0, 1.0, 0.5]
    for fmt in (2, 3):
        group = zarr.open_group(folder / f"lin{fmt}.zarr", mode="w", zarr_format=fmt)
        group.create_array("X", shape=X.shape, chunks=(30, 4), dtype="f8")[:] = X
        group.create_array("y", shape=(120,), chunks=(60,), dtype="f8")[:] = X @ [1, -2, 0.5, 3]
    zarr.create_array(folder / "arr.zarr", shape=X.shape, chunks=(40, 4), dtype="f8")[:] = X
    servers = {"listing": _Server(folder, _Quiet), "bare": _Server(folder, _NoListing)}
    try:
        yield SimpleNamespace(folder=folder, url={k: s.url for k, s in servers.items()})
    finally:
        for server in servers.values():
            server.stop()


def _pca(source: Any, **kwargs: Any) -> dict[str, np.ndarray]:
    return ds.fit_pca(source, 2, runtime="local", **kwargs).fitted


# ---------------------------------------------------------------------------- API
@pytest.mark.parametrize("store", ["plain.vcz", "consolidated.vcz"])
@pytest.mark.parametrize("server", ["listing", "bare"])
def test_a_vcf_zarr_store_over_http_reads_as_the_local_store(served, server, store):
    url, local = f"{served.url[server]}/{store}", served.folder / store
    m, expected = ds.open_matrix(url), ds.open_matrix(local)
    assert (m.kind, m.shape) == ("vcf-zarr", expected.shape)
    np.testing.assert_array_equal(m.columns, expected.columns)  # sample_id, found by name
    keys = m.variants.keys()  # contig_id, variant_* arrays: the plink outputs' variant ids
    assert keys is not None
    np.testing.assert_array_equal(keys, expected.variants.keys())
    got, want = _pca(url), _pca(local)
    for name in ("explained_variance", "components"):
        np.testing.assert_array_equal(got[name], want[name])


def test_group_members_are_named_as_zarr_names_them(served):
    """The root of it: a directory page's ``call_genotype/`` is the member ``call_genotype``."""
    local = group_arrays(zarr.open_group(served.folder / "plain.vcz", mode="r"), "local")
    for store in ("plain.vcz", "consolidated.vcz"):
        url = f"{served.url['listing']}/{store}"
        listed = group_arrays(zarr.open_group(url, mode="r"), url)
        assert listed.listed and listed.names == local.names, listed.names
    # no directory pages and no consolidated metadata: nothing listed, members opened by name
    url = f"{served.url['bare']}/plain.vcz"
    bare = group_arrays(zarr.open_group(url, mode="r"), url)
    assert (bare.listed, bare.names) == (False, [])
    assert "call_genotype" in bare and "nope" not in bare and "../lin3.zarr" not in bare
    assert bare.names == ["call_genotype"]
    assert bare["call_genotype"].shape == local["call_genotype"].shape


@pytest.mark.parametrize("server", ["listing", "bare"])
def test_plain_groups_and_arrays_over_http_read_as_the_local_stores(served, server):
    for store in ("lin2.zarr", "lin3.zarr", "arr.zarr"):
        url, local = f"{served.url[server]}/{store}", served.folder / store
        got, want = _pca(url), _pca(local)  # the group's default matrix is X
        np.testing.assert_array_equal(got["explained_variance"], want["explained_variance"])
    m = ds.open_matrix(f"{served.url[server]}/lin3.zarr", array="X", labels="y")
    np.testing.assert_array_equal(m.labels, ds.open_matrix(served.folder / "lin3.zarr",
                                                           labels="y").labels)


# ---------------------------------------------------------------------------- CLI
def _run(argvs: list[list[str]], cwd: Path, *, at_once: int = 3) -> list[BackgroundCommand]:
    """Run the CLI with each argument list, ``at_once`` processes at a time; wait for all."""
    done: list[BackgroundCommand] = []
    for i in range(0, len(argvs), at_once):
        batch = [BackgroundCommand([*CLI, *argv, "--runtime", "local"], cwd, timeout=180)
                 for argv in argvs[i : i + at_once]]
        done += [command.result() for command in batch]
    return done


def test_cli_pca_over_http_equals_the_local_run(served, tmp_path):
    before = _tree_hash(served.folder)
    # the API tests above cover every store on both servers; the CLI runs a VCF Zarr store
    # on both and a group with --array on the server without directory pages
    for store, extra, servers in (("plain.vcz", [], ("listing", "bare")),
                                  ("lin3.zarr", ["--array", "X"], ("bare",))):
        sources = [str(served.folder / store), *(f"{served.url[s]}/{store}" for s in servers)]
        runs = _run([["pca", source, *extra, "-k", "2", "--json"] for source in sources],
                    tmp_path)
        for run in runs:
            assert run.proc.returncode == 0, (store, run.err)
        local, *remote = (json.loads(run.out)["explained_variance"] for run in runs)
        assert remote == [local] * len(servers), store
    assert _tree_hash(served.folder) == before
    assert list(tmp_path.iterdir()) == []


def test_bad_http_sources_print_one_line_and_exit_2(served, tmp_path):
    listing, bare = served.url["listing"], served.url["bare"]
    cases = [
        (["pca", f"{listing}/nope.vcz"], "No Zarr store at 'http://127.0.0.1"),
        (["pca", f"{bare}/nope.vcz"], "No Zarr store at 'http://127.0.0.1"),
        (["pca", f"{listing}/plain.vcz/sample_id/.zarray"], "No Zarr store at"),
        (["pca", f"http://127.0.0.1:{free_port()}/plain.vcz"], "Cannot read the store"),
        (["pca", f"{listing}/plain.vcz", "--array", "nope"],
         "Array 'nope' not found in the Zarr group"),
        (["pca", f"{bare}/plain.vcz", "--array", "nope"], "it cannot be listed"),
        (["pca", f"{bare}/lin3.zarr", "--array", "../lin2.zarr/X"], "it cannot be listed"),
        (["pca", f"{listing}/arr.zarr", "--array", "X"], "is a Zarr array, not a group"),
        (["linreg", f"{bare}/lin3.zarr", "--labels", "nope"], "Labels array 'nope' not found"),
    ]
    before = _tree_hash(served.folder)
    for (argv, expected), run in zip(cases, _run([argv for argv, _ in cases], tmp_path),
                                     strict=True):
        assert run.proc.returncode == 2, (argv, run.err)
        assert run.out == ""
        assert expected in one_error_line(run.err), (argv, run.err)
    assert _tree_hash(served.folder) == before
    assert list(tmp_path.iterdir()) == []
