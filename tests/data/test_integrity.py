"""Damaged Zarr stores: absent chunks, undecodable chunks, unreadable metadata.

Each damage is refused with one line naming the store, the array and (for chunks of the
matrix, checked on the worker that loads them) the partition; ``missing_chunks="fill"``
reads absent chunks as the fill value, as zarr does. Loader-level tests run in process;
the end-to-end ones run on the session's LocalCluster of process workers, through the API
and the CLI.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import zarr

import daskstraggle
from daskstraggle import open_matrix
from daskstraggle.cli import main
from daskstraggle.data._zarr import chunk_keys
from daskstraggle.data.datasets import make_logistic
from daskstraggle.errors import (
    CorruptDataError,
    DataNotFoundError,
    InvalidDataError,
    InvalidParameterError,
    MissingChunksError,
)
from daskstraggle.testing import one_error_line

ROWS, COLS, CHUNK = 200, 6, 50


def _dense(matrix) -> np.ndarray:
    """All rows of a matrix as the kernels see them, loaded partition by partition."""
    return np.vstack([
        tile.copy() for p in range(matrix.n_partitions)
        for _, _, tile in matrix.loader(p)().tiles()
    ])




@pytest.fixture(scope="module")
def X() -> np.ndarray:
    return np.random.default_rng(5).normal(size=(ROWS, COLS)) + 3.0


def _write(path: Path, X: np.ndarray, kind: str) -> tuple[Path, str | None, str]:
    """Write ``X`` as ``kind``; return (store, array name, key of the chunk of rows 100-150)."""
    if kind == "datasets-make":  # this package's writer: a v3 group with X and y
        make_logistic(path, n_samples=ROWS, n_features=COLS, chunk_rows=CHUNK, seed=1)
        group = zarr.open_group(path, mode="r+")
        group["X"][:] = X
        return path, "X", "X/c/2/0"
    fmt = 2 if kind.startswith("v2") else 3
    sharded = {"shards": (2 * CHUNK, COLS)} if kind == "v3-sharded" else {}
    if kind.endswith("group"):
        group = zarr.open_group(path, mode="w", zarr_format=fmt)
        z = group.create_array("X", shape=X.shape, chunks=(CHUNK, 3), dtype="f8")
        name, prefix = "X", "X/"
    else:
        z = zarr.create_array(path, shape=X.shape, chunks=(CHUNK, 3), dtype="f8",
                              zarr_format=fmt, **sharded)
        name, prefix = None, ""
    z[:] = X
    key = {2: "2.1", 3: "c/2/1"}[fmt] if not sharded else "c/1/0"
    return path, name, prefix + key


KINDS = ["v2-array", "v3-array", "v2-group", "v3-group", "v3-sharded", "datasets-make"]


@pytest.fixture(params=KINDS)
def holed(request, tmp_path, X):
    """A store of ``X`` with the chunk (or shard) holding rows 100-150 deleted."""
    path, name, key = _write(tmp_path / f"{request.param}.zarr", X, request.param)
    assert (path / key).is_file(), sorted(p.name for p in path.rglob("*"))
    (path / key).unlink()
    return path, name, request.param


# ------------------------------------------------------------------------ absent chunks
def test_absent_chunk_is_refused_by_the_partition_that_holds_it(holed, X):
    path, name, kind = holed
    m = open_matrix(path, n_partitions=4)  # rows 0-50, 50-100, 100-150, 150-200
    m.loader(0)()
    m.loader(1)()
    m.loader(3)() if kind != "v3-sharded" else None  # the shard also holds rows 150-200
    total = 1 if kind == "datasets-make" else 2
    absent = 2 if kind == "v3-sharded" else 1  # both inner chunks of rows 100-150
    what = f"array {name!r} in the Zarr store" if name else "the Zarr array"
    with pytest.raises(MissingChunksError,
                       match=rf"^Partition 2 \(rows 100-150\): {absent} of {total} chunks of "
                             rf"{what} '{re.escape(str(path))}' are missing \(first: '") as info:
        m.loader(2)()
    assert "missing_chunks='fill'" in str(info.value) and "--missing-chunks fill" in str(info.value)
    assert isinstance(info.value, CorruptDataError) and isinstance(info.value, InvalidDataError)


def test_fill_reads_absent_chunks_as_the_fill_value(holed, X):
    path, _, kind = holed
    rows = slice(100, 200) if kind == "v3-sharded" else slice(100, 150)
    cols = slice(None) if kind in ("v3-sharded", "datasets-make") else slice(3, 6)
    expected = X.copy()
    expected[rows, cols] = 0.0  # the fill value: what zarr reads, and what happened before
    m = open_matrix(path, n_partitions=4, missing_chunks="fill")
    np.testing.assert_array_equal(_dense(m), expected)


def test_chunk_keys_cover_only_the_rows_asked_for(tmp_path):
    z3 = zarr.create_array(tmp_path / "a3.zarr", shape=(10, 5), chunks=(3, 2), dtype="i1")
    z2 = zarr.create_array(tmp_path / "a2.zarr", shape=(10, 5), chunks=(3, 2), dtype="i1",
                           zarr_format=2)
    assert chunk_keys(z3, 3, 7) == ["c/1/0", "c/1/1", "c/1/2", "c/2/0", "c/2/1", "c/2/2"]
    assert chunk_keys(z2, 9, 10) == ["3.0", "3.1", "3.2"]
    assert chunk_keys(z3, 0, 10)[-1] == "c/3/2" and len(chunk_keys(z3, 0, 10)) == 12


def test_loader_checks_its_chunks_without_listing_the_store(tmp_path, X, monkeypatch):
    path, _, _ = _write(tmp_path / "a.zarr", X, "v3-array")
    m = open_matrix(path, n_partitions=4)
    from zarr.storage import LocalStore

    def refuse(*args, **kwargs):
        raise AssertionError("the store was listed")

    for method in ("list", "list_dir", "list_prefix"):
        monkeypatch.setattr(LocalStore, method, refuse)
    seen: list[str] = []
    exists = LocalStore.exists

    async def spy(self, key):
        seen.append(key)
        return await exists(self, key)

    monkeypatch.setattr(LocalStore, "exists", spy)
    m.loader(1)()
    assert seen == ["c/1/0", "c/1/1"]


def test_genotype_chunk_absent_from_a_bio2zarr_store(vcz_path, tmp_path):
    path = tmp_path / "holed.vcz"
    shutil.copytree(vcz_path, path)
    gt = zarr.open_group(path, mode="r")["call_genotype"]
    assert gt.metadata.zarr_format == 2 and gt.shape[0] > 200  # as bio2zarr writes it
    (path / "call_genotype" / "1.0.0").unlink()
    m = open_matrix(path)
    assert m.bounds[1] == 100
    m.loader(0)()
    with pytest.raises(MissingChunksError,
                       match=r"^Partition 1 \(rows 100-200\): 1 of 1 chunks of array "
                             r"'call_genotype' .* \(first: '1\.0\.0'\)"):
        m.loader(1)()
    filled = open_matrix(path, missing_chunks="fill", genotype_scaling="none")
    assert filled.loader(1)().values.shape[0] == 100


@pytest.mark.parametrize("member", ["y", "sample_id"])
def test_absent_chunk_of_labels_or_sample_ids_is_refused_on_the_client(member, tmp_path,
                                                                       vcz_path, X):
    if member == "y":
        path, _, _ = _write(tmp_path / "g.zarr", X, "datasets-make")
        (path / "y" / "c" / "1").unlink()
        kwargs = {"labels": "y"}
        total = 4
    else:
        path = tmp_path / "ids.vcz"
        shutil.copytree(vcz_path, path)
        chunks = sorted(p.name for p in (path / "sample_id").iterdir() if p.name[0] != ".")
        (path / "sample_id" / chunks[0]).unlink()
        kwargs = {}
        total = len(chunks)
    with pytest.raises(MissingChunksError,
                       match=rf"^1 of {total} chunks of array '{member}' in the Zarr store"):
        open_matrix(path, **kwargs)
    open_matrix(path, missing_chunks="fill", **kwargs)


def test_missing_chunks_parameter_is_validated():
    with pytest.raises(InvalidParameterError,
                       match=re.escape("The 'missing_chunks' parameter of open_matrix must be "
                                       "one of ['error', 'fill']. Got 'skip' instead.")):
        open_matrix(np.ones((4, 2)), missing_chunks="skip")


# --------------------------------------------------------- holes inside Zarr v3 shards
#: Bytes of a shard index of the stores below: 2 x 2 inner chunks of 16 bytes, and crc32c.
INDEX = 2 * 2 * 16 + 4
ABSENT = 2**64 - 1


def _write_sharded(path: Path, X: np.ndarray, *, location: str = "end",
                   write_empty_chunks: bool = False) -> Path:
    """Write a v3 group: X in shards of 100 x 6 (inner chunks 50 x 3, index at ``location``), y.

    With ``write_empty_chunks=False`` (zarr's default) zarr leaves out of a shard every
    inner chunk whose values all equal the fill value, 0.
    """
    from zarr.codecs import BytesCodec, ShardingCodec, ZstdCodec

    group = zarr.open_group(path, mode="w", zarr_format=3)
    serializer = ShardingCodec(chunk_shape=(CHUNK, 3), codecs=[BytesCodec(), ZstdCodec()],
                               index_location=location)
    z = group.create_array("X", shape=X.shape, chunks=(2 * CHUNK, COLS), dtype="f8",
                           serializer=serializer, compressors=None,
                           config={"write_empty_chunks": write_empty_chunks})
    z[:] = X
    group.create_array("y", shape=(len(X),), chunks=(CHUNK,), dtype="f8")[:] = (
        X @ np.linspace(1.0, 2.0, COLS))
    return path


def _index_span(shard: Path, location: str) -> slice:
    """The bytes of a shard's index: (offset, nbytes) pairs, then their crc32c."""
    size = shard.stat().st_size
    return slice(size - INDEX, size) if location == "end" else slice(0, INDEX)


def _shard_index(shard: Path, location: str) -> np.ndarray:
    """The (2, 2, 2) index of a shard: offset and length of each inner chunk."""
    data = shard.read_bytes()[_index_span(shard, location)]
    return np.frombuffer(data[:-4], "<u8").reshape(2, 2, 2)


def _mark_absent(shard: Path, location: str, inner: tuple[int, int], *,
                 fix_checksum: bool) -> None:
    """Damage a shard: set the index entry of ``inner`` (local to the shard) to absent."""
    import google_crc32c

    data = bytearray(shard.read_bytes())
    span = _index_span(shard, location)
    index = np.frombuffer(bytes(data[span][:-4]), "<u8").reshape(2, 2, 2).copy()
    index[inner] = ABSENT
    crc = (google_crc32c.value(index.tobytes()).to_bytes(4, "little") if fix_checksum
           else bytes(data[span][-4:]))
    data[span] = index.tobytes() + crc
    shard.write_bytes(bytes(data))


@pytest.fixture
def X_hole(X) -> np.ndarray:
    """``X`` with rows 100-150 of columns 3-5 zero: inner chunk (2, 1), in shard 'c/1/0'."""
    out = X.copy()
    out[100:150, 3:] = 0.0
    return out


_HOLE = r"'c/1/0', inner chunk \(2, 1\): absent from the shard's index"


@pytest.mark.parametrize("location", ["end", "start"])
def test_inner_chunk_left_out_of_a_shard_is_refused_by_its_partition(location, tmp_path,
                                                                      X_hole):
    path = _write_sharded(tmp_path / "s.zarr", X_hole, location=location)
    index = _shard_index(path / "X" / "c" / "1" / "0", location)
    assert (index[0, 1] == ABSENT).all() and (index[[0, 1, 1], [0, 0, 1]] != ABSENT).all()
    m = open_matrix(path, n_partitions=4)  # rows 0-50, 50-100, 100-150, 150-200
    for p in (0, 1, 3):  # partition 3 reads the same shard, not the missing inner chunk
        m.loader(p)()
    with pytest.raises(MissingChunksError,
                       match=rf"^Partition 2 \(rows 100-150\): 1 of 2 chunks of array 'X' in "
                             rf"the Zarr store '{re.escape(str(path))}' are missing \(first: "
                             rf"{_HOLE}\)\. Restore the store.*\(CLI: --missing-chunks fill\) "
                             r"to read absent chunks as the fill value 0\.0\.$"):
        m.loader(2)()
    filled = open_matrix(path, n_partitions=4, missing_chunks="fill")
    np.testing.assert_array_equal(_dense(filled), X_hole)


def test_a_row_and_column_selection_checks_only_the_inner_chunks_it_reads(tmp_path, X_hole):
    from daskstraggle.data._zarr import read_selection

    path = str(_write_sharded(tmp_path / "s.zarr", X_hole))
    rows, cols = np.array([160, 10, 120]), np.array([1, 2])  # columns 0-2: no hole
    np.testing.assert_array_equal(
        read_selection(path, "X", rows, cols, missing_chunks="error"), X_hole[rows][:, cols])
    with pytest.raises(MissingChunksError, match=rf"^1 of 6 chunks of array 'X' .*{_HOLE}"):
        read_selection(path, "X", rows, np.array([1, 4]), missing_chunks="error")
    np.testing.assert_array_equal(
        read_selection(path, "X", rows[:2], np.array([1, 4]), missing_chunks="error"),
        X_hole[rows[:2]][:, [1, 4]])  # rows 10 and 160 are in whole inner chunks


@pytest.mark.parametrize("fit", ["fit_pca", "fit_least_squares"])
def test_fits_refuse_a_hole_in_a_shard_and_fill_reads_the_fill_value(fit, tmp_path, X_hole):
    holed = _write_sharded(tmp_path / "holed.zarr", X_hole)
    whole = _write_sharded(tmp_path / "whole.zarr", X_hole, write_empty_chunks=True)
    args = () if fit == "fit_pca" else ("y",)
    kw = {"runtime": "local", "max_iter": 5, "tol": None, "rng": 0}
    with pytest.raises(MissingChunksError,
                       match=rf"1 of \d+ chunks of array 'X' .*holed\.zarr.*{_HOLE}"):
        getattr(daskstraggle, fit)(holed, *args, **kw)
    filled = getattr(daskstraggle, fit)(holed, *args, missing_chunks="fill", **kw)
    written = getattr(daskstraggle, fit)(whole, *args, **kw)  # the zeros stored
    assert filled.attrs["matrix"]["missing_chunks"] == "fill"
    assert filled.fitted.keys() == written.fitted.keys()
    for key, value in written.fitted.items():
        np.testing.assert_allclose(filled.fitted[key], value, rtol=1e-12, err_msg=key)


@pytest.mark.parametrize("location", ["end", "start"])
def test_a_shard_whose_index_marks_a_written_chunk_absent_is_refused(location, tmp_path, X):
    path = _write_sharded(tmp_path / "d.zarr", X, location=location, write_empty_chunks=True)
    _mark_absent(path / "X" / "c" / "0" / "0", location, (1, 0), fix_checksum=True)
    expected = X.copy()
    expected[50:100, :3] = 0.0  # inner chunk (1, 0): what zarr alone reads, silently
    np.testing.assert_array_equal(zarr.open_group(path, mode="r")["X"][:], expected)
    m = open_matrix(path, n_partitions=4)
    m.loader(0)()  # rows 0-50 of the same shard are whole
    with pytest.raises(MissingChunksError,
                       match=r"^Partition 1 \(rows 50-100\): 1 of 2 chunks of array 'X' .* "
                             r"\(first: 'c/0/0', inner chunk \(1, 0\): absent from the "
                             r"shard's index\)"):
        m.loader(1)()
    filled = open_matrix(path, n_partitions=4, missing_chunks="fill")
    np.testing.assert_array_equal(_dense(filled), expected)


@pytest.mark.parametrize(
    ("damage", "message"),
    [("checksum", r"The index of shard 'c/0/0' of array 'X' .* fails its crc32c checksum"),
     ("truncated", r"Shard 'c/0/0' of array 'X' .* is truncated: 10 bytes where its index "
                   rf"alone takes {INDEX}\.")],
)
def test_a_damaged_shard_index_is_corrupt_data(damage, message, tmp_path, X):
    path = _write_sharded(tmp_path / "d.zarr", X, write_empty_chunks=True)
    shard = path / "X" / "c" / "0" / "0"
    if damage == "checksum":
        _mark_absent(shard, "end", (1, 0), fix_checksum=False)
    else:
        shard.write_bytes(shard.read_bytes()[-10:])
    m = open_matrix(path, n_partitions=4)
    with pytest.raises(CorruptDataError, match=rf"^Partition 0 \(rows 0-50\): {message}") as info:
        m.loader(0)()
    assert not isinstance(info.value, MissingChunksError)


def test_cli_refuses_a_hole_in_a_shard_with_one_line_and_fill_exits_0(tmp_path, X_hole,
                                                                      capsys):
    path = _write_sharded(tmp_path / "s.zarr", X_hole)
    argv = ["pca", str(path), "--runtime", "local", "--quiet", "--max-iter", "3"]
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 2, captured
    assert captured.out == ""
    line = one_error_line(captured.err)
    assert re.search(rf"1 of \d+ chunks of array 'X' .*{_HOLE}.*--missing-chunks fill", line)
    assert main([*argv, "--missing-chunks", "fill"]) == 0, capsys.readouterr().err


def test_a_hole_in_a_shard_is_refused_through_an_fsspec_store(X_hole):
    url = "memory://daskstraggle-test/sharded.zarr"
    _write_sharded(url, X_hole)  # zarr opens the URL as an FsspecStore
    try:
        m = open_matrix(url, n_partitions=4)
        m.loader(3)()
        with pytest.raises(MissingChunksError, match=rf"^Partition 2 .*{_HOLE}"):
            m.loader(2)()
        np.testing.assert_array_equal(_dense(open_matrix(url, missing_chunks="fill")), X_hole)
    finally:
        import fsspec

        fsspec.filesystem("memory").rm("/daskstraggle-test/sharded.zarr", recursive=True)


def test_a_whole_sharded_store_is_read_with_one_index_request_per_shard(tmp_path, X,
                                                                        monkeypatch):
    """The check requests each shard's index, nothing else: no data byte is read twice."""
    from collections import Counter

    from zarr.abc.store import SuffixByteRequest
    from zarr.storage import LocalStore

    path = _write_sharded(tmp_path / "w.zarr", X)
    seen: list[tuple[str, object]] = []
    get = LocalStore.get

    async def spy(self, key, prototype=None, byte_range=None):
        if key.startswith("X/c/"):
            seen.append((key, byte_range))
        return await get(self, key, prototype, byte_range)

    monkeypatch.setattr(LocalStore, "get", spy)

    def requests(missing_chunks: str, partition: int) -> Counter:
        m = open_matrix(path, n_partitions=3, missing_chunks=missing_chunks)
        seen.clear()
        tile = m.loader(partition)().values
        np.testing.assert_array_equal(tile, X[m.bounds[partition]:m.bounds[partition + 1]])
        return Counter(seen)

    index = SuffixByteRequest(INDEX)
    for partition, shards in ((0, ["X/c/0/0"]), (1, ["X/c/0/0", "X/c/1/0"])):
        checked, unchecked = requests("error", partition), requests("fill", partition)
        assert checked - unchecked == Counter({(key, index): 1 for key in shards})
        assert not unchecked - checked
        assert all(n == 1 for (_, byte_range), n in checked.items() if byte_range != index)
    assert np.array_equal(_dense(open_matrix(path)), X)


def test_nested_sharding_is_refused_with_one_line_unless_fill(tmp_path, X):
    from zarr.codecs import ShardingCodec

    inner = ShardingCodec(chunk_shape=(CHUNK, 3))
    nested = ShardingCodec(chunk_shape=(CHUNK, COLS), codecs=[inner])
    z = zarr.create_array(tmp_path / "n.zarr", shape=X.shape, chunks=(2 * CHUNK, COLS),
                          dtype="f8", compressors=None, serializer=nested)
    z[:] = X
    with pytest.raises(InvalidDataError,
                       match=r"^The chunks of the Zarr array .* "
                             r"cannot be checked for absence: it uses nested sharding .*Pass "
                             r"missing_chunks='fill' \(CLI: --missing-chunks fill\)") as info:
        open_matrix(tmp_path / "n.zarr", n_partitions=4).loader(0)()
    assert "\n" not in str(info.value) and not isinstance(info.value, CorruptDataError)
    filled = open_matrix(tmp_path / "n.zarr", n_partitions=4, missing_chunks="fill")
    np.testing.assert_array_equal(_dense(filled), X)


# -------------------------------------------------------------------- corrupt chunks
def test_undecodable_chunk_is_refused_by_its_partition(tmp_path, X):
    path, _, _ = _write(tmp_path / "g.zarr", X, "datasets-make")
    (path / "X" / "c" / "1" / "0").write_bytes(b"\x00garbage" * 10)
    m = open_matrix(path, n_partitions=4)
    m.loader(0)()
    with pytest.raises(CorruptDataError,
                       match=r"^Partition 1 \(rows 50-100\): array 'X' in the Zarr store "
                             r"'.*g\.zarr' could not be decoded \(RuntimeError: Zstd "
                             r"[^\n]*\): a chunk is corrupt\."):
        m.loader(1)()


@pytest.mark.parametrize(
    ("damage", "words"),
    [("root-json", ("the Zarr store", "JSONDecodeError")),
     ("member-json", ("array 'X'", "JSONDecodeError")),
     ("member-no-shape", ("array 'X'",)),
     ("labels-json", ("array 'y'", "JSONDecodeError")),
     ("v2-zarray", ("array 'X'", "JSONDecodeError"))],
)
def test_unreadable_metadata_is_one_line_on_the_client(damage, words, tmp_path, X):
    if damage == "v2-zarray":
        path, _, _ = _write(tmp_path / "g.zarr", X, "v2-group")
        (path / "X" / ".zarray").write_text("{not json")
    else:
        path, _, _ = _write(tmp_path / "g.zarr", X, "datasets-make")
        target = {"root-json": path / "zarr.json", "member-json": path / "X" / "zarr.json",
                  "member-no-shape": path / "X" / "zarr.json",
                  "labels-json": path / "y" / "zarr.json"}[damage]
        if damage == "member-no-shape":
            target.write_text(target.read_text().replace('"shape"', '"shap"'))
        else:
            target.write_text("{not json")
    with pytest.raises(CorruptDataError, match=r"^The metadata of .* cannot be read") as info:
        open_matrix(path, labels="y" if damage == "labels-json" else None)
    message = str(info.value)
    assert "\n" not in message and repr(str(path)) in message
    for word in words:
        assert word in message


def test_unreadable_metadata_of_an_unused_member_does_not_block(tmp_path, X):
    path, _, _ = _write(tmp_path / "g.zarr", X, "datasets-make")
    (path / "coef" / "zarr.json").write_text("{not json")
    np.testing.assert_array_equal(_dense(open_matrix(path)), X)


def test_not_a_store_is_still_data_not_found(tmp_path):
    (tmp_path / "folder").mkdir()
    with pytest.raises(DataNotFoundError, match="not a readable Zarr"):
        open_matrix(tmp_path / "folder")


# ---------------------------------------------------------------- sparse, 1-D X
@pytest.mark.parametrize("kind", ["csr_matrix", "csr_array", "coo_matrix"])
def test_sparse_input_is_refused_naming_the_fix(kind):
    import scipy.sparse

    sparse = getattr(scipy.sparse, kind)(np.eye(4))
    with pytest.raises(InvalidDataError,
                       match=rf"'source' parameter of open_matrix must be a dense array; got "
                             rf"a sparse {kind} of shape \(4, 4\)\. Densify it \(X\.toarray\(\)"):
        open_matrix(sparse)


def test_unknown_object_is_refused_by_type():
    with pytest.raises(InvalidDataError, match="open_matrix cannot read a object"):
        open_matrix(object())


def test_group_whose_X_is_1d_names_the_matrix(tmp_path):
    group = zarr.open_group(tmp_path / "g.zarr", mode="w")
    group.create_array("X", shape=(20,), dtype="f8")
    group.create_array("y", shape=(20,), dtype="f8")
    with pytest.raises(InvalidDataError,
                       match=r"holds no 2-D matrix: its array 'X' has shape \(20,\)\. Write X as "
                             r"\(rows, columns\) .* --array NAME"):
        open_matrix(tmp_path / "g.zarr")


# ------------------------------------------------------- end to end, process workers
@pytest.fixture(scope="module")
def damaged(tmp_path_factory) -> dict[str, Path]:
    """A logistic store, the same with chunk 2 absent, and with chunk 1 corrupt."""
    root = tmp_path_factory.mktemp("damaged")
    good = make_logistic(root / "good.zarr", n_samples=400, n_features=5, chunk_rows=100,
                         seed=2)
    stores = {"good": good}
    for name in ("absent", "corrupt"):
        stores[name] = root / f"{name}.zarr"
        shutil.copytree(good, stores[name])
    (stores["absent"] / "X" / "c" / "2" / "0").unlink()
    (stores["corrupt"] / "X" / "c" / "1" / "0").write_bytes(b"\x00garbage" * 10)
    stores["zeroed"] = root / "zeroed.zarr"  # what zarr reads for the absent chunk
    shutil.copytree(good, stores["zeroed"])
    # zarr's default (write_empty_chunks=False) would delete an all-fill chunk instead
    with zarr.config.set({"array.write_empty_chunks": True}):
        zarr.open_array(stores["zeroed"] / "X", mode="r+")[200:300] = 0.0
    assert (stores["zeroed"] / "X" / "c" / "2" / "0").is_file()
    return stores


def test_api_refuses_absent_chunk_on_a_cluster(damaged, dask_client, tmp_path):
    out = tmp_path / "out.zarr"
    with pytest.raises(MissingChunksError,
                       match=r"Partition 2 \(rows 200-300\): 1 of 1 chunks of array 'X'"):
        daskstraggle.fit_logistic(damaged["absent"], "y", client=dask_client, out=out,
                                  max_iter=5)
    assert not out.exists()


def test_api_fill_reproduces_reading_the_fill_value(damaged, dask_client):
    # a given step size (the default, 1.83 on the good store, is estimated by ~15 passes
    # per run): the runs differ only by the data their partitions loaded
    kw = {"client": dask_client, "max_iter": 5, "tol": None, "rng": 0, "step_size": 1.0}
    filled = daskstraggle.fit_logistic(damaged["absent"], "y", missing_chunks="fill", **kw)
    zeroed = daskstraggle.fit_logistic(damaged["zeroed"], "y", **kw)
    good = daskstraggle.fit_logistic(damaged["good"], "y", **kw)
    np.testing.assert_allclose(filled.fitted["coef"], zeroed.fitted["coef"], rtol=1e-12)
    assert not np.allclose(filled.fitted["coef"], good.fitted["coef"])
    assert filled.attrs["matrix"]["missing_chunks"] == "fill"


@pytest.mark.parametrize(
    ("store", "words"),
    [("absent", ("partition 2", "rows 200-300", "1 of 1 chunks", "array 'x'", "absent.zarr",
                 "--missing-chunks fill")),
     ("corrupt", ("partition 1", "rows 100-200", "array 'x'", "corrupt.zarr",
                  "could not be decoded"))],
)
@pytest.mark.parametrize("command", ["logreg", "pca"])
def test_cli_exits_2_with_one_line_on_a_cluster(store, words, command, damaged, dask_client,
                                                capsys):
    code = main([command, str(damaged[store]), "--scheduler", dask_client.scheduler.address,
                 "--quiet", "--max-iter", "3"])
    captured = capsys.readouterr()
    assert code == 2, captured
    assert captured.out == ""
    line = one_error_line(captured.err).lower()
    for word in words:
        assert word.lower() in line, (word, line)


def test_cli_fill_exits_0_with_the_fill_value_answer(damaged, dask_client, capsys):
    argv = ["--scheduler", dask_client.scheduler.address, "--json", "--max-iter", "5",
            "--tol", "1e-12", "--step-size", "1.0"]  # not estimated: fewer passes
    assert main(["logreg", str(damaged["absent"]), "--missing-chunks", "fill", *argv]) == 0
    filled = capsys.readouterr().out
    assert main(["logreg", str(damaged["zeroed"]), *argv]) == 0
    zeroed = capsys.readouterr().out
    assert _coef(filled) == pytest.approx(_coef(zeroed), rel=1e-12)


def _coef(stdout: str) -> list[float]:
    import json

    return json.loads(stdout)["coef"]


def test_cli_missing_chunks_choice_is_checked(damaged, capsys):
    code = main(["pca", str(damaged["good"]), "--missing-chunks", "skip"])
    assert code == 2
    assert "'skip' is not one of 'error', 'fill'" in capsys.readouterr().err


def test_console_command_prints_one_line_for_unreadable_metadata(tmp_path, X):
    path, _, _ = _write(tmp_path / "g.zarr", X, "datasets-make")
    (path / "X" / "zarr.json").write_text("{not json")
    proc = subprocess.run([sys.executable, "-m", "daskstraggle.cli", "logreg", str(path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    line = one_error_line(proc.stderr)
    assert "The metadata of array 'X'" in line and "g.zarr" in line


def test_datasets_write_every_chunk_even_when_it_is_all_fill_value(tmp_path):
    """Zarr skips all-fill chunks by default; our own stores must open with the default check."""
    from daskstraggle.data.datasets import _write_table

    def rows(rng, m, arrays, attrs, params):
        return np.zeros((m, 3)), np.zeros(m)  # every chunk equals the fill value, 0

    out = _write_table("zeros", tmp_path / "zeros.zarr",
                       {"n_samples": 20, "n_features": 3, "chunk_rows": 10, "dtype": "float64",
                        "seed": 0}, ("noise", 0.0), overwrite=False, progress=False,
                       global_arrays=lambda rng, params: ({}, {}), rows=rows)
    for key in ("X/c/0/0", "X/c/1/0", "y/c/0", "y/c/1"):
        assert (out / key).is_file(), key
    m = open_matrix(out, labels="y")
    np.testing.assert_array_equal(_dense(m), 0.0)


@pytest.mark.parametrize("fit", ["fit_pca", "fit_logistic", "fit_least_squares"])
def test_fit_functions_check_missing_chunks_before_cluster_work(fit, damaged, monkeypatch):
    import distributed

    def refuse(self, *args, **kwargs):
        raise AssertionError(f"{type(self).__name__} created before the input was validated")

    monkeypatch.setattr(distributed.LocalCluster, "__init__", refuse)
    monkeypatch.setattr(distributed.Client, "__init__", refuse)
    args = () if fit == "fit_pca" else ("y",)
    with pytest.raises(InvalidParameterError, match="'missing_chunks' parameter of open_matrix"):
        getattr(daskstraggle, fit)(damaged["good"], *args, missing_chunks="ignore", n_workers=2)


def test_console_logreg_on_a_store_with_a_deleted_chunk(damaged, tmp_path):
    """The issue's case: ``rm m.zarr/X/c/2/0; daskstraggle logreg m.zarr`` exited 0."""
    proc = subprocess.run([sys.executable, "-m", "daskstraggle.cli", "logreg",
                           str(damaged["absent"]), "--workers", "2", "--out",
                           str(tmp_path / "out.zarr")],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    line = one_error_line(proc.stderr)
    assert "Partition 2 (rows 200-300): 1 of 1 chunks of array 'X'" in line, line
    assert not (tmp_path / "out.zarr").exists()
