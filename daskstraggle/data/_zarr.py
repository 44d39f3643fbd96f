"""Zarr reads that turn absent chunks, undecodable chunks and bad metadata into one
:class:`~daskstraggle.errors.CorruptDataError` line; they touch only the keys of the rows read.
"""

from __future__ import annotations

import asyncio
import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from daskstraggle.errors import (
    CorruptDataError,
    DataNotFoundError,
    InvalidDataError,
    MissingChunksError,
)

__all__ = ["MISSING_CHUNKS", "GroupArrays", "ShardLayout", "absent_inner_chunks", "absent_keys",
           "check_chunks", "chunk_keys", "describe", "fsspec_options", "group_arrays",
           "open_array", "open_node", "read", "read_rows", "read_selection", "shard_layout"]

#: Values of ``missing_chunks``: refuse absent chunks, or read them as the fill value.
MISSING_CHUNKS = ("error", "fill")

#: Metadata documents of Zarr v3 and v2 nodes.
_METADATA_KEYS = ("zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata")

#: Existence checks issued at once.
_BATCH = 256


def fsspec_options(storage_options: dict[str, Any] | None) -> dict[str, Any]:
    """The keywords that open a store with zarr: none for a local path (None)."""
    return {} if storage_options is None else {"storage_options": storage_options}


def describe(path: str, name: str | None) -> str:
    """Return how messages name an array: ``array 'X' in the Zarr store '/p/g.zarr'``."""
    if name is None:
        return f"the Zarr array {path!r}"
    return f"array {name!r} in the Zarr store {path!r}"


def _reason(err: BaseException) -> str:
    """Return ``Type: first line of the message`` (messages stay on one line)."""
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0]}" if text else type(err).__name__


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


# ---------------------------------------------------------------------------- chunks
def _grid_axes(shape: tuple[int, ...], grid: tuple[int, ...], rows: slice | np.ndarray,
               columns: np.ndarray | None) -> list[list[int]]:
    """Per dimension, the sorted indices along ``grid`` of the chunks holding a selection:
    ``rows`` a slice ``[start, stop)`` or sorted indices, ``columns`` indices (None: all)."""
    def count(n: int, c: int) -> int:
        return -(-int(n) // int(c))

    if not shape:  # a 0-d array: its one chunk
        return []
    if isinstance(rows, slice):
        first = list(range(rows.start // int(grid[0]), count(rows.stop, grid[0])))
    else:
        first = np.unique(np.asarray(rows) // int(grid[0])).tolist()
    axes = [first, *(list(range(count(n, c))) for n, c in zip(shape[1:], grid[1:], strict=True))]
    if columns is not None and len(shape) > 1:
        axes[1] = np.unique(np.asarray(columns) // int(grid[1])).tolist()
    return axes


def chunk_keys(array: Any, start: int, stop: int) -> list[str]:
    """Return the storage keys (relative to the array; shards' for a sharded one) of the
    chunks holding rows ``[start, stop)``, along the other dimensions all."""
    return _keys(array, slice(start, stop), None)


def _keys(array: Any, rows: slice | np.ndarray, columns: np.ndarray | None) -> list[str]:
    """The storage keys of the chunks (shards) holding a selection (see :func:`_grid_axes`)."""
    axes = _grid_axes(array.shape, array.metadata.chunk_grid.chunk_shape, rows, columns)
    encode = array.metadata.encode_chunk_key
    return [encode(coords) for coords in itertools.product(*axes)]


def _fresh_store_path(array: Any) -> Any:
    """Return the array's store path, a remote store's cached listings dropped first."""
    store_path = array.store_path
    fs = getattr(store_path.store, "fs", None)
    if fs is not None:  # a remote store: answer from the store, not from listings cached earlier
        fs.invalidate_cache()
    return store_path


def _batched(calls: list[Any]) -> list[Any]:
    """Run the coroutine factories ``calls`` on zarr's event loop, ``_BATCH`` at a time."""
    from zarr.core.sync import sync

    async def run() -> list[Any]:
        out: list[Any] = []
        for i in range(0, len(calls), _BATCH):
            out += await asyncio.gather(*[call() for call in calls[i : i + _BATCH]])
        return out

    return sync(run())


def absent_keys(array: Any, keys: Iterable[str]) -> list[str]:
    """Return the keys (relative to the array) that do not exist in its store."""
    store_path = _fresh_store_path(array)
    keys = list(keys)
    found = _batched([(store_path / key).exists for key in keys])
    return [key for key, ok in zip(keys, found, strict=True) if not ok]


def check_chunks(array: Any, start: int, stop: int, *, what: str, missing_chunks: str) -> None:
    """Refuse rows ``[start, stop)`` of ``array`` (named ``what`` in messages,
    :func:`describe`) if a chunk holding them is absent (MissingChunksError);
    ``missing_chunks="fill"`` skips the check. A sharded array's inner chunk is absent if its
    shard is or the shard's index marks it so: a truncated index or one failing its
    checksum is a CorruptDataError, a layout that cannot be checked (:func:`shard_layout`)
    an InvalidDataError.
    """
    if missing_chunks == "fill":
        return
    _refuse_absent(array, slice(start, stop), None, what)


def _refuse_absent(array: Any, rows: slice | np.ndarray, columns: np.ndarray | None,
                   what: str) -> None:
    """Raise :class:`MissingChunksError` if a chunk holding the selection is absent."""
    shards = shard_layout(array, what)
    if shards is None:
        keys = _keys(array, rows, columns)
        absent = absent_keys(array, keys)
        n_absent, n_checked = len(absent), len(keys)
        first = repr(absent[0]) if absent else ""
    else:
        axes = _grid_axes(array.shape, shards.chunks, rows, columns)
        n_absent, first = absent_inner_chunks(array, shards, axes, what)
        n_checked = math.prod(len(axis) for axis in axes)
    if n_absent:
        raise MissingChunksError(
            f"{n_absent} of {n_checked} chunks of {what} are missing (first: {first}). Restore "
            "the store, or if it was written with write_empty_chunks=False pass "
            "missing_chunks='fill' (CLI: --missing-chunks fill) to read absent chunks as the "
            f"fill value {_plain(array.fill_value)!r}."
        )


# ---------------------------------------------------------------------------- shards
#: Offset and length of an inner chunk absent from a shard's index.
_ABSENT = 2**64 - 1


@dataclass(frozen=True, slots=True)
class ShardLayout:
    """How a Zarr v3 sharded array indexes its shards: the inner chunks' shape and number
    per shard along each dimension; whether the index ends the shard (zarr's default) or
    starts it; the byte order of its uint64 (offset, length) pairs; a crc32c after them."""

    chunks: tuple[int, ...]
    per_shard: tuple[int, ...]
    at_end: bool
    byteorder: str
    checksum: bool

    @property
    def index_size(self) -> int:
        """Bytes of a shard's index: 16 per inner chunk, plus 4 for the checksum."""
        return 16 * math.prod(self.per_shard) + 4 * self.checksum

    def request(self) -> Any:
        """Return the byte-range request of a shard's index (a zarr ``ByteRequest``)."""
        from zarr.abc.store import RangeByteRequest, SuffixByteRequest

        if self.at_end:
            return SuffixByteRequest(self.index_size)
        return RangeByteRequest(0, self.index_size)


def shard_layout(array: Any, what: str) -> ShardLayout | None:
    """Return how the shards of ``array`` are indexed, or None if it is not sharded;
    InvalidDataError if the index cannot be read by a byte range (nested sharding, codecs
    around the sharding codec, index codecs other than ``bytes`` and an optional ``crc32c``).
    """
    from zarr.codecs import BytesCodec, ShardingCodec

    codecs = tuple(getattr(array.metadata, "codecs", ()))
    sharding = [c for c in codecs if isinstance(c, ShardingCodec)]
    if not sharding:
        return None
    codec = sharding[0]
    index = tuple(codec.index_codecs)
    reason = _unreadable_sharding(codecs, codec, index)
    if reason is not None:
        raise InvalidDataError(
            f"The chunks of {what} cannot be checked for absence: it uses {reason}. Pass "
            "missing_chunks='fill' (CLI: --missing-chunks fill) to read it unchecked, absent "
            f"chunks as the fill value {_plain(array.fill_value)!r}."
        )
    shard_shape = tuple(int(n) for n in array.metadata.chunk_grid.chunk_shape)
    chunks = tuple(int(n) for n in codec.chunk_shape)
    bytes_codec = cast(BytesCodec, index[0])  # checked above
    endian = getattr(bytes_codec.endian, "value", bytes_codec.endian)
    return ShardLayout(
        chunks=chunks,
        per_shard=tuple(s // c for s, c in zip(shard_shape, chunks, strict=True)),
        at_end=getattr(codec.index_location, "value", codec.index_location) == "end",
        byteorder=">" if endian == "big" else "<",
        checksum=len(index) == 2,
    )


def _unreadable_sharding(codecs: tuple[Any, ...], codec: Any,
                         index: tuple[Any, ...]) -> str | None:
    """Why the shard index of ``codec`` cannot be read by a byte range (None: it can)."""
    from zarr.codecs import BytesCodec, Crc32cCodec, ShardingCodec

    if any(isinstance(c, ShardingCodec) for c in codec.codecs):
        return "nested sharding (a sharding codec inside its shards)"
    if len(codecs) > 1:
        return "codecs outside its sharding codec"
    if not (index and isinstance(index[0], BytesCodec)
            and [type(c) for c in index[1:]] in ([], [Crc32cCodec])):
        return f"the shard index codecs {[type(c).__name__ for c in index]}"
    return None


def absent_inner_chunks(array: Any, shards: ShardLayout, axes: list[list[int]],
                        what: str) -> tuple[int, str]:
    """Count the absent inner chunks of a sharded array among ``axes`` (per dimension, sorted
    indices on the inner chunk grid), reading one byte range per shard holding them, and
    name the first (``""`` if none), e.g. ``'c/1/0', inner chunk (2, 1): absent from the
    shard's index``; an absent shard's inner chunks are absent. CorruptDataError for a shard
    shorter than its index or an index failing its checksum."""
    groups = [_by_shard(axis, n) for axis, n in zip(axes, shards.per_shard, strict=True)]
    coords = list(itertools.product(*(sorted(g) for g in groups)))
    encode = array.metadata.encode_chunk_key
    keys = [encode(c) for c in coords]
    store_path = _fresh_store_path(array)
    request = shards.request()
    indexes = _batched([
        lambda key=key: (store_path / key).get(byte_range=request) for key in keys
    ])
    n_absent, first = 0, ""
    for coord, key, raw in zip(coords, keys, indexes, strict=True):
        local = [g[i] for g, i in zip(groups, coord, strict=True)]
        absent = _absent_map(raw, shards, key, what)
        hit = np.ones([len(x) for x in local], bool) if absent is None else absent[np.ix_(*local)]
        n_absent += int(hit.sum())
        if not first and hit.any():
            at = np.argwhere(hit)[0]
            chunk = tuple(int(c * n + x[i]) for c, n, x, i in
                          zip(coord, shards.per_shard, local, at, strict=True))
            where = ("the whole shard is absent" if absent is None
                     else "absent from the shard's index")
            first = f"{key!r}, inner chunk {chunk}: {where}"
    return n_absent, first


def _by_shard(axis: list[int], per_shard: int) -> dict[int, np.ndarray]:
    """Group inner chunk indices by shard: shard index to local indices within it."""
    groups: dict[int, list[int]] = {}
    for i in axis:
        groups.setdefault(i // per_shard, []).append(i % per_shard)
    return {s: np.asarray(local, dtype=np.intp) for s, local in groups.items()}


def _absent_map(raw: Any, shards: ShardLayout, key: str, what: str) -> np.ndarray | None:
    """Return which inner chunks a shard's index marks absent (None: the shard is absent)."""
    if raw is None:
        return None
    data, size = raw.to_bytes(), shards.index_size
    if len(data) > size:  # a server that ignores range requests sends the whole shard
        data = data[-size:] if shards.at_end else data[:size]
    if len(data) < size:
        raise CorruptDataError(
            f"Shard {key!r} of {what} is truncated: {len(data)} bytes where its index alone "
            f"takes {shards.index_size}. Restore the store from a good copy or write it again."
        )
    pairs = data[:-4] if shards.checksum else data
    if shards.checksum and not _crc32c_matches(pairs, data[-4:]):
        raise CorruptDataError(
            f"The index of shard {key!r} of {what} fails its crc32c checksum: the shard is "
            "corrupt. Restore the store from a good copy or write it again."
        )
    index = np.frombuffer(pairs, dtype=f"{shards.byteorder}u8")
    return index.reshape(*shards.per_shard, 2)[..., 0] == _ABSENT


def _crc32c_matches(data: bytes, stored: bytes) -> bool:
    """Return whether ``stored`` is the little-endian crc32c of ``data`` (True if unverifiable)."""
    try:
        import google_crc32c  # zarr's own crc32c codec uses it
    except ImportError:  # pragma: no cover - installed with zarr
        return True
    return int(google_crc32c.value(data)).to_bytes(4, "little") == stored


# ---------------------------------------------------------------------------- reads
def read(array: Any, selection: Any, *, what: str) -> Any:
    """Return ``array[selection]``; CorruptDataError if a chunk cannot be decoded (I/O
    errors propagate unchanged)."""
    try:
        return array[selection]
    except (OSError, MemoryError):
        raise
    except Exception as err:  # codecs raise RuntimeError, ValueError, TypeError, ...
        raise CorruptDataError(
            f"{what} could not be decoded ({_reason(err)}): a chunk is corrupt. Restore the "
            "store from a good copy or write it again."
        ) from err


def open_array(path: str, name: str | None,
               storage_options: dict[str, Any] | None = None) -> Any:
    """Open the array ``name`` of the store at ``path`` (the store itself if None), read-only;
    ``storage_options`` (None for a local path) opens ``path`` as an fsspec URL.
    CorruptDataError if its metadata cannot be read, DataNotFoundError for a URL with no
    store (I/O errors propagate unchanged)."""
    import zarr

    options = fsspec_options(storage_options)
    try:
        if name is None:
            return zarr.open_array(path, mode="r", **options)
        return zarr.open_group(path, mode="r", **options)[name]
    except Exception as err:  # JSONDecodeError, KeyError, TypeError, ValueError, ...
        if storage_options is None or not isinstance(err, _node_not_found()):
            if isinstance(err, OSError | MemoryError):
                raise
            raise CorruptDataError(_bad_metadata(describe(path, name), err)) from err
        reason = _reason(err)
    raise _detached(DataNotFoundError(
        f"{describe(path, name)} is not found by the process reading it ({reason}). Each "
        "worker opens the store itself: give a URL every worker reaches (a memory:// store "
        "lives in one process: use it with runtime='local' or threaded workers)."
    ))


def _detached(err: BaseException) -> BaseException:
    """Return ``err``, raised outside any ``except`` block by the caller: no context.

    On a worker an error travels pickled with its cause and context, and zarr's and
    botocore's exceptions do not unpickle (the client would get a bare ``Exception``).
    """
    err.__cause__ = err.__context__ = None
    return err


def _node_not_found() -> tuple[type[BaseException], ...]:
    import zarr.errors

    return tuple(getattr(zarr.errors, n) for n in ("NodeNotFoundError", "GroupNotFoundError",
                                                   "ArrayNotFoundError")
                 if hasattr(zarr.errors, n))


def read_rows(path: str, name: str | None, start: int, stop: int, *, missing_chunks: str,
              storage_options: dict[str, Any] | None = None) -> Any:
    """Read rows ``[start, stop)`` of an array where this runs (the store a path, or an
    fsspec URL with ``storage_options``): MissingChunksError or CorruptDataError for a chunk
    absent (:func:`check_chunks`) or undecodable (:func:`read`), DataNotFoundError for a
    remote store that cannot be reached or read from here."""
    def body(array: Any, what: str) -> Any:
        check_chunks(array, start, stop, what=what, missing_chunks=missing_chunks)
        return read(array, slice(start, stop), what=what)

    return _guarded_read(path, name, storage_options, body)


def read_selection(path: str, name: str | None, rows: np.ndarray, columns: np.ndarray | None,
                   *, missing_chunks: str,
                   storage_options: dict[str, Any] | None = None) -> np.ndarray:
    """Read ``array[rows][:, columns]`` (``columns`` None: all; the other dimensions whole)
    in the order given (repeats allowed), checking and reading only the chunks holding a
    selected (row, column); as :func:`read_rows` otherwise."""
    unique_rows, row_order = np.unique(rows, return_inverse=True)
    unique_cols, col_order = (None, None) if columns is None else np.unique(
        columns, return_inverse=True)

    def body(array: Any, what: str) -> Any:
        if missing_chunks == "error":
            _refuse_absent(array, unique_rows, unique_cols, what)
        values = _read_runs(array, unique_rows, unique_cols, what)
        if not np.array_equal(unique_rows, rows):
            values = values[row_order]
        if unique_cols is not None and columns is not None and not np.array_equal(
                unique_cols, columns):
            values = values[:, col_order]
        return values

    return _guarded_read(path, name, storage_options, body)


def _read_runs(array: Any, rows: np.ndarray, columns: np.ndarray | None, what: str) -> np.ndarray:
    """Read sorted unique ``rows`` (and ``columns``) as slices over runs of consecutive
    chunks that each hold a selected row, then a numpy take (several times faster than
    zarr's orthogonal selection, and the same chunks read)."""
    grid = int(array.metadata.chunk_grid.chunk_shape[0])
    chunk = rows // grid
    starts = np.flatnonzero(np.diff(chunk, prepend=-2) > 1)  # a chunk skipped: a new run
    cols: tuple[slice, ...] = ()
    if columns is not None and array.ndim > 1:
        cols = (slice(int(columns[0]), int(columns[-1]) + 1),)
    parts = []
    for a, b in zip(starts, [*starts[1:], len(rows)], strict=True):
        low, high = int(rows[a]), int(rows[b - 1]) + 1
        block = np.asarray(read(array, (slice(low, high), *cols), what=what))
        parts.append(block[rows[a:b] - low])
    values = np.concatenate(parts) if len(parts) > 1 else parts[0]
    if columns is not None and array.ndim > 1:
        values = values[:, columns - columns[0]]
    return values


def _guarded_read(path: str, name: str | None, storage_options: dict[str, Any] | None,
                  body: Any) -> Any:
    """Open the array and run ``body(array, what)``, turning remote I/O errors into one line."""
    what = describe(path, name)
    try:
        array = open_array(path, name, storage_options)
        return body(array, what)
    except DataNotFoundError:
        raise
    except (OSError, MemoryError) as err:
        if storage_options is None or isinstance(err, MemoryError):
            raise
        reason = _reason(err)
    raise _detached(DataNotFoundError(
        f"{what} cannot be read by the process reading it ({reason}). Each worker opens the "
        "store itself: it needs the same fsspec packages, network access and credentials as "
        "the client (see docs/remote-stores.md)."
    ))


def _bad_metadata(what: str, err: BaseException | str) -> str:
    reason = err if isinstance(err, str) else _reason(err)
    return (
        f"The metadata of {what} cannot be read ({reason}): the store is damaged. "
        "Restore it from a good copy or write it again."
    )


# ---------------------------------------------------------------------------- groups
@dataclass(frozen=True, slots=True)
class GroupArrays:
    """The arrays of a Zarr group, and the members whose metadata cannot be read.

    ``arrays`` maps names to readable arrays, ``corrupt`` names to why their metadata
    cannot be read; ``path`` names the store in messages. A name asked for (``name in
    arrays``, ``arrays[name]``) that :func:`group_arrays` did not find is opened by name
    from ``group``, once (None: only the members found, as with consolidated metadata), so
    a store that cannot be listed (plain HTTP) still gives the members a caller names.
    ``listed`` is False when the store listed nothing, not even the group's own metadata.
    """

    path: str
    arrays: dict[str, Any]
    corrupt: dict[str, str]
    group: Any = None
    listed: bool = True
    _absent: set[str] = field(default_factory=set, init=False, repr=False, compare=False)

    @property
    def names(self) -> list[str]:
        """Every array name found or opened, readable or not, sorted."""
        return sorted({*self.arrays, *self.corrupt})

    def summary(self) -> str:
        """Return how messages say what the group holds: its array names, or why none."""
        held = str(self.names) if self.names else "no arrays"
        if self.listed:
            return held
        return (f"{held} found by name (it cannot be listed: it has no consolidated metadata "
                "and its server gives no directory listing; zarr.consolidate_metadata writes "
                "the metadata that lists it)")

    def __contains__(self, name: object) -> bool:
        if name in self.arrays or name in self.corrupt:
            return True
        if (self.group is None or not isinstance(name, str) or not _is_member_name(name)
                or name in self._absent):
            return False
        _add_member(self.group, name, self.arrays, self.corrupt)
        found = name in self.arrays or name in self.corrupt
        if not found:
            self._absent.add(name)
        return found

    def __getitem__(self, name: str) -> Any:
        """Return the array ``name``; CorruptDataError if its metadata cannot be read,
        KeyError if the group has no such array."""
        if name not in self:
            raise KeyError(name)
        if name in self.corrupt:
            raise CorruptDataError(_bad_metadata(describe(self.path, name), self.corrupt[name]))
        return self.arrays[name]


def group_arrays(group: Any, path: str) -> GroupArrays:
    """Open each direct member of ``group`` that is an array; note those that cannot be read.

    The members are those of the group's consolidated metadata, else of one level of the
    store's listing (an HTTP index's ``call_genotype/`` is cut to ``call_genotype``). A
    member whose metadata document exists but does not parse is recorded in ``corrupt``
    instead of failing the whole group.
    """
    arrays: dict[str, Any] = {}
    corrupt: dict[str, str] = {}
    names = _member_names(group)
    for name in names or ():
        _add_member(group, name, arrays, corrupt)
    # consolidated metadata is the whole list (zarr answers from it alone): no lookups
    lookup = None if group.metadata.consolidated_metadata is not None else group
    return GroupArrays(path, arrays, corrupt, lookup, listed=names is not None)


def _member_names(group: Any) -> list[str] | None:
    """Names of the direct members of ``group`` (consolidated, else listed), sorted; None if
    the store lists nothing, not even the group's metadata (a server without listings)."""
    consolidated = group.metadata.consolidated_metadata
    if consolidated is not None:
        return sorted(consolidated.metadata)
    from zarr.core.sync import collect_aiterator

    store_path = group.store_path
    names = {name.rstrip("/") for name in
             collect_aiterator(store_path.store.list_dir(store_path.path))}
    if not names:
        return None
    return sorted(n for n in names - set(_METADATA_KEYS) if _is_member_name(n))


def _is_member_name(name: str) -> bool:
    """A direct member's name is one path segment (an HTML index may link to other pages)."""
    return bool(name) and name not in (".", "..") and not set(name) & set("/?#")


def _add_member(group: Any, name: str, arrays: dict[str, Any], corrupt: dict[str, str]) -> None:
    """Open member ``name``: an array goes to ``arrays``, unreadable metadata to ``corrupt``."""
    import zarr

    try:
        node = group[name]
    except (OSError, MemoryError):
        raise
    except Exception as err:  # KeyError when not a node; parse errors when damaged
        if _has_metadata(group.store_path / name):
            corrupt[name] = _reason(err)
        return
    if isinstance(node, zarr.Array):
        arrays[name] = node


def _has_metadata(store_path: Any) -> bool:
    return any(_batched([(store_path / k).exists for k in _METADATA_KEYS[:3]]))


def open_node(path: str, storage_options: dict[str, Any] | None = None) -> Any:
    """Open the Zarr array or group at ``path`` read-only (``storage_options``: an fsspec
    URL's); CorruptDataError if ``path`` holds a metadata document that cannot be read, else
    whatever zarr raises when ``path`` is not a Zarr store (the caller words it)."""
    import zarr
    from zarr.storage import FsspecStore, LocalStore, StorePath

    try:
        return zarr.open(path, mode="r", **fsspec_options(storage_options))
    except (OSError, MemoryError):
        raise
    except Exception as err:
        store = (LocalStore(path, read_only=True) if storage_options is None
                 else FsspecStore.from_url(path, storage_options=storage_options,
                                           read_only=True))
        if _has_metadata(StorePath(store)):
            raise CorruptDataError(_bad_metadata(f"the Zarr store {path!r}", err)) from err
        raise
