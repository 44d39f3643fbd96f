"""Stores behind fsspec URLs: a real S3-compatible server (moto) on 127.0.0.1.

The server runs in this process (moto's WSGI app, served by werkzeug on a free port) behind
a small WSGI layer that records each request's method, path and access key id. The client
(this process) and the workers of the LocalCluster get different AWS credentials through
their environment, as on a cloud cluster, so the request log says who read what: the
workers read every chunk of the matrix, the client none. Tests of ``memory://`` and
``file://`` URLs and of bad URLs need no server.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

import daskstraggle as ds
from daskstraggle.cli import main
from daskstraggle.data._remote import parse_storage_options
from daskstraggle.errors import DataNotFoundError, InvalidParameterError, MissingChunksError
from daskstraggle.testing import free_port, one_error_line

_NEEDS = "remote-store tests need s3fs, moto[s3] and flask (pip install -e '.[test]')"
s3fs = pytest.importorskip("s3fs", reason=_NEEDS)
moto_app = pytest.importorskip("moto.moto_server.werkzeug_app", reason=_NEEDS)

BUCKET = "daskstraggle-test"
CLIENT_KEY, WORKER_KEY = "client-key", "worker-key"
ROOT = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------------- server
class _Recorder:
    """WSGI layer in front of moto: logs (method, path, access key id) of each request."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.requests: list[tuple[str, str, str | None]] = []

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        found = re.search(r"Credential=([^/]+)/", environ.get("HTTP_AUTHORIZATION", ""))
        self.requests.append((environ["REQUEST_METHOD"], environ.get("PATH_INFO", ""),
                              found.group(1) if found else None))
        return self.app(environ, start_response)


class _QuietHandler(moto_app.MotoRequestHandler):
    def log_request(self, *args: Any, **kwargs: Any) -> None:  # no access log on stderr
        pass


class S3Server:
    """moto's S3 on 127.0.0.1:PORT in a thread, with a request log."""

    def __init__(self) -> None:
        import threading

        from werkzeug.serving import make_server

        self.recorder = _Recorder(moto_app.DomainDispatcherApplication(
            moto_app.create_backend_app))
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._server = make_server("127.0.0.1", self.port, self.recorder, threaded=True,
                                   request_handler=_QuietHandler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.storage_options = {"endpoint_url": self.endpoint}
        self.fs = s3fs.S3FileSystem(endpoint_url=self.endpoint, skip_instance_cache=True)

    def url(self, key: str) -> str:
        return f"s3://{BUCKET}/{key}"

    def chunk_reads(self, key: str, array: str) -> list[tuple[str, str, str | None]]:
        """Requests for chunk objects of ``array`` in the store ``key`` (v2 or v3 keys)."""
        chunk = re.compile(rf"^/{BUCKET}/{re.escape(key)}/{array}/(c/[\d/]+|[\d.]+)$")
        return [r for r in self.recorder.requests if chunk.match(r[1])]

    def stop(self) -> None:
        self._server.shutdown()
        self._thread.join()


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory, vcz_path: Path):
    """The server with a bucket holding ``lin.zarr`` (a group X, y) and ``geno.vcz``.

    Credentials come from the environment, as the docs advise: the client's here, the
    workers' in :func:`workers`.
    """
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AWS_ACCESS_KEY_ID", CLIENT_KEY)
        mp.setenv("AWS_SECRET_ACCESS_KEY", "client-secret")
        mp.setenv("AWS_DEFAULT_REGION", "us-east-1")
        server = S3Server()
        try:
            local = tmp_path_factory.mktemp("remote") / "lin.zarr"
            rng = np.random.default_rng(4)
            X = rng.normal(size=(400, 5))
            group = zarr.open_group(local, mode="w")
            group.create_array("X", shape=X.shape, chunks=(100, 5), dtype="f8")[:] = X
            group.create_array("y", shape=(400,), chunks=(200,), dtype="f8")[:] = (
                X @ [1.0, -2.0, 0.5, 0.0, 3.0] + 0.1 * rng.normal(size=400))
            server.fs.mkdir(BUCKET)
            server.fs.put(str(local), f"{BUCKET}/lin.zarr", recursive=True)
            server.fs.put(str(vcz_path), f"{BUCKET}/geno.vcz", recursive=True)
            server.local = {"lin.zarr": local, "geno.vcz": vcz_path}
            yield server
        finally:
            server.stop()


@pytest.fixture(scope="module")
def workers(s3):
    """A client of 2 single-threaded process workers with their own AWS credentials."""
    import dask
    from distributed import Client, LocalCluster

    from daskstraggle.runtime.dask import OWN_CLUSTER_CONFIG

    env = {"AWS_ACCESS_KEY_ID": WORKER_KEY, "AWS_SECRET_ACCESS_KEY": "worker-secret",
           "AWS_DEFAULT_REGION": "us-east-1"}
    with dask.config.set(OWN_CLUSTER_CONFIG):
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                               dashboard_address=None, env=env)
    client = Client(cluster, set_as_default=False)
    yield client
    client.close()
    cluster.close()


def _copy(s3: S3Server, key: str, new: str) -> str:
    s3.fs.copy(f"{BUCKET}/{key}", f"{BUCKET}/{new}", recursive=True)
    return s3.url(new)


# ---------------------------------------------------------------------------- API
def test_open_matrix_and_fits_from_s3_match_the_local_store(s3):
    m = ds.open_matrix(s3.url("lin.zarr"), storage_options=s3.storage_options, labels="y")
    local = ds.open_matrix(s3.local["lin.zarr"], labels="y")
    assert (m.shape, m.n_partitions, m.kind) == (local.shape, local.n_partitions, "zarr")
    assert m.source.path == s3.url("lin.zarr")
    np.testing.assert_array_equal(m.labels, local.labels)
    np.testing.assert_array_equal(m.loader(1)().values, local.loader(1)().values)

    fit = dict(method="gd", max_iter=300, tol=1e-8, runtime="local", rng=0)
    remote = ds.fit_least_squares(s3.url("lin.zarr"), "y", storage_options=s3.storage_options,
                                  **fit)
    np.testing.assert_allclose(remote.fitted["coef"],
                               ds.fit_least_squares(s3.local["lin.zarr"], "y", **fit)
                               .fitted["coef"], rtol=1e-12)

    # VCF Zarr: sample ids read from the bucket, exact PCA equal to the local store's
    geno = ds.open_matrix(s3.url("geno.vcz"), storage_options=s3.storage_options)
    assert geno.kind == "vcf-zarr"
    np.testing.assert_array_equal(geno.columns, ds.open_matrix(s3.local["geno.vcz"]).columns)
    pca = ds.fit_pca(s3.url("geno.vcz"), 2, storage_options=s3.storage_options,
                     runtime="local")
    np.testing.assert_allclose(pca.fitted["explained_variance"],
                               ds.fit_pca(s3.local["geno.vcz"], 2, runtime="local")
                               .fitted["explained_variance"], rtol=1e-12)


def test_cli_linreg_finds_the_labels_in_the_bucket(s3, capsys):
    fit = dict(method="gd", max_iter=300, tol=1e-8, runtime="local", rng=0)
    expected = ds.fit_least_squares(s3.local["lin.zarr"], "y", **fit)
    code = main(["linreg", s3.url("lin.zarr"), "--runtime", "local", "--method", "gd",
                 "--max-iter", "300", "--tol", "1e-8", "--json",
                 "--storage-option", f"endpoint_url={s3.endpoint}",
                 "--storage-option", "use_listings_cache=false"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    np.testing.assert_allclose(json.loads(captured.out)["coef"], expected.fitted["coef"],
                               rtol=1e-12)


# ---------------------------------------------------------------------------- workers
@pytest.mark.cluster
def test_workers_read_the_chunks_from_s3_themselves(s3, workers):
    fit = dict(method="gd", max_iter=300, tol=1e-8, rng=0)
    expected = ds.fit_least_squares(s3.local["lin.zarr"], "y", runtime="local", **fit)
    s3.recorder.requests.clear()
    res = ds.fit_least_squares(s3.url("lin.zarr"), "y", storage_options=s3.storage_options,
                               client=workers, **fit)
    np.testing.assert_allclose(res.fitted["coef"], expected.fitted["coef"], rtol=1e-9)

    reads = s3.chunk_reads("lin.zarr", "X")
    assert {key for method, _, key in reads if method == "GET"} == {WORKER_KEY}, reads
    assert {path for method, path, _ in reads if method == "GET"} == {
        f"/{BUCKET}/lin.zarr/X/c/{i}/0" for i in range(4)}
    # the client opened the store (metadata) and read the small labels array, no more
    client_paths = {path for _, path, key in s3.recorder.requests if key == CLIENT_KEY}
    assert f"/{BUCKET}/lin.zarr/zarr.json" in client_paths
    assert not any("/X/c/" in p for p in client_paths), client_paths


@pytest.mark.cluster
def test_cli_pca_of_s3_vcf_zarr_on_the_cluster(s3, workers):
    expected = ds.fit_pca(s3.local["geno.vcz"], 3, runtime="local").fitted
    s3.recorder.requests.clear()
    out = subprocess.run(
        [sys.executable, "-m", "daskstraggle", "pca", s3.url("geno.vcz"), "-k", "3",
         "--scheduler", workers.scheduler.address, "--json", "--packed-genotypes",
         "--storage-option", f"endpoint_url={s3.endpoint}"],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    np.testing.assert_allclose(summary["explained_variance"], expected["explained_variance"],
                               rtol=1e-9)
    reads = [r for r in s3.chunk_reads("geno.vcz", "call_genotype") if r[0] == "GET"]
    assert reads and {key for _, _, key in reads} == {WORKER_KEY}, reads


@pytest.mark.cluster
def test_a_deleted_chunk_object_is_an_error_never_zeros(s3, workers):
    url = _copy(s3, "lin.zarr", "holed.zarr")
    s3.fs.rm(f"{BUCKET}/holed.zarr/X/c/2/0")
    match = r"Partition \d+ \(rows 200-300\).*1 of 1 chunks of array 'X'.*missing.*c/2/0"
    for where in ({"client": workers}, {"runtime": "local"}):
        with pytest.raises(MissingChunksError, match=match):
            ds.fit_least_squares(url, "y", storage_options=s3.storage_options, max_iter=3,
                                 **where)
    # a VCF Zarr store with a genotype chunk gone
    url = _copy(s3, "geno.vcz", "holed.vcz")
    chunk = next(p for p in s3.fs.find(f"{BUCKET}/holed.vcz/call_genotype")
                 if not p.rsplit("/", 1)[-1].startswith((".", "zarr.json")))
    s3.fs.rm(chunk)
    with pytest.raises(MissingChunksError, match="chunks of array 'call_genotype'"):
        ds.fit_pca(url, 2, storage_options=s3.storage_options, client=workers)


@pytest.mark.cluster
def test_a_memory_store_is_not_found_on_process_workers(workers):
    url = "memory://daskstraggle-test/workers.zarr"
    zarr.create_array(url, shape=(40, 3), chunks=(10, 3), dtype="f8")[:] = 1.0
    with pytest.raises(DataNotFoundError, match=r"not found by the process reading it.*memory"):
        ds.fit_pca(url, 1, client=workers)


# ---------------------------------------------------------------------------- memory, file
def test_memory_and_file_urls_give_the_local_result(tmp_path, capsys):
    X = np.random.default_rng(2).normal(size=(120, 4)) * [4.0, 2.0, 1.0, 0.5]
    local = tmp_path / "m.zarr"
    zarr.create_array(local, shape=X.shape, chunks=(30, 4), dtype="f8")[:] = X
    memory = "memory://daskstraggle-test/m.zarr"
    zarr.create_array(memory, shape=X.shape, chunks=(30, 4), dtype="f8", overwrite=True)[:] = X
    expected = ds.fit_pca(local, 2, runtime="local").fitted["explained_variance"]
    for url in (memory, local.as_uri()):
        got = ds.fit_pca(url, 2, runtime="local").fitted["explained_variance"]
        np.testing.assert_allclose(got, expected, rtol=1e-12)
    assert ds.open_matrix(local.as_uri()).source.path == str(local)  # a file:// URL is a path
    assert main(["pca", local.as_uri(), "--runtime", "local", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    np.testing.assert_allclose(summary["explained_variance"], expected, rtol=1e-12)


def test_an_http_store_is_read_and_its_missing_chunk_refused(tmp_path):
    import functools
    import http.server
    import threading

    X = np.random.default_rng(3).normal(size=(80, 3)) * [3.0, 1.0, 0.5]
    zarr.create_array(tmp_path / "h.zarr", shape=X.shape, chunks=(20, 3), dtype="f8")[:] = X

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", free_port()), functools.partial(Quiet, directory=str(tmp_path)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/h.zarr"
        expected = ds.fit_pca(tmp_path / "h.zarr", 2, runtime="local").fitted
        got = ds.fit_pca(url, 2, runtime="local", storage_options={}).fitted
        np.testing.assert_allclose(got["explained_variance"], expected["explained_variance"],
                                   rtol=1e-12)
        (tmp_path / "h.zarr" / "c" / "1" / "0").unlink()
        with pytest.raises(MissingChunksError, match=r"rows 20-40.*missing.*c/1/0"):
            ds.fit_pca(url, 2, runtime="local")
    finally:
        server.shutdown()
        thread.join()
        server.server_close()


# ---------------------------------------------------------------------------- bad input
def _uninstalled_protocol() -> tuple[str, str]:
    import importlib.util

    for protocol, package in (("gs", "gcsfs"), ("oci", "ocifs"), ("dropbox", "dropboxdrivefs")):
        if importlib.util.find_spec(package) is None:
            return protocol, package
    raise AssertionError("every candidate fsspec implementation is installed")


def test_bad_remote_sources_print_one_line_and_exit_2(s3, tmp_path, capsys, no_cluster):
    protocol, package = _uninstalled_protocol()
    so = ["--storage-option", f"endpoint_url={s3.endpoint}"]
    closed = ["--storage-option", f"endpoint_url=http://127.0.0.1:{free_port()}",
              "--storage-option", 'config_kwargs={"retries": {"max_attempts": 1}}']
    cases = [
        (["pca", s3.url("nope.zarr"), *so], "No Zarr store at 's3://daskstraggle-test/nope"),
        (["pca", "s3://no-such-bucket/lin.zarr", *so], "No Zarr store at 's3://no-such-bucket"),
        (["linreg", s3.url("lin.zarr"), *closed], "Cannot read the store"),
        (["pca", f"{protocol}://bucket/x.zarr"], f"install {package}"),
        (["pca", "nosuchfs://bucket/x.zarr"], "protocol 'nosuchfs', which fsspec does not know"),
        (["pca", s3.url("lin.zarr"), *so, "--storage-option", "bogus=1"],
         "'storage_options' parameter of open_matrix was refused"),
        (["pca", str(tmp_path), *so], "'storage_options' parameter of open_matrix applies to"),
        (["pca", s3.url("lin.zarr"), "--storage-option", "anon"], "must be KEY=VALUE"),
        (["pca", s3.url("lin.zarr"), *so, "--out", s3.url("out.zarr")],
         "output path (CLI: --out) must be a local path"),
    ]
    for argv, expected in cases:
        assert main(argv) == 2, argv
        line = one_error_line(capsys.readouterr().err)
        assert expected in line, (argv, line)


def test_storage_options_are_checked_by_the_api(s3):
    with pytest.raises(InvalidParameterError, match="'storage_options' parameter of open_matrix"):
        ds.open_matrix(np.ones((4, 2)), storage_options={"anon": True})
    with pytest.raises(InvalidParameterError, match="must be a dict"):
        ds.open_matrix(s3.url("lin.zarr"), storage_options=["anon"])
    with pytest.raises(DataNotFoundError, match="No Zarr store"):
        ds.fit_pca(s3.url("missing.zarr"), storage_options=s3.storage_options,
                   runtime="local")


def test_storage_option_values_are_parsed():
    parsed = parse_storage_options([
        "anon=true", "use_ssl=False", "endpoint_url=http://127.0.0.1:9000", "retries=3",
        "timeout=2.5", "token=none", 'client_kwargs={"region_name": "eu-west-1"}',
        "key=a=b",
    ])
    assert parsed == {"anon": True, "use_ssl": False, "endpoint_url": "http://127.0.0.1:9000",
                      "retries": 3, "timeout": 2.5, "token": None,
                      "client_kwargs": {"region_name": "eu-west-1"}, "key": "a=b"}
    assert parse_storage_options([]) is None
    for bad, match in ((["=1"], "KEY=VALUE"), (["a=1", "a=2"], "given twice"),
                       (["c={oops"], "does not parse")):
        with pytest.raises(InvalidParameterError, match=match):
            parse_storage_options(bad)
