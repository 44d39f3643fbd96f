"""Stores behind fsspec URLs (``s3://``, ``gs://``, ``https://``, ``memory://``, ``file://``):
the client's checks, each failure one line (docs/remote-stores.md)."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from daskstraggle.data._zarr import _reason
from daskstraggle.errors import DataNotFoundError, InvalidParameterError

__all__ = ["check_remote_store", "is_url", "member_exists", "parse_location",
           "parse_storage_options"]

#: ``protocol://...`` or a chained ``protocol::protocol://...`` URL.
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*(://|::)")

#: Metadata documents, one of which is at the root of every Zarr v3 or v2 node.
_ROOT_KEYS = ("zarr.json", ".zgroup", ".zarray")

_CLI_HINT = "(CLI: --storage-option KEY=VALUE)"


def is_url(path: object) -> bool:
    """Return whether ``path`` is an fsspec URL (``s3://bucket/x.zarr``) rather than a path."""
    return isinstance(path, str) and bool(_URL.match(path))


def parse_location(
    source: str, storage_options: object, *, caller: str = "open_matrix"
) -> tuple[str, dict[str, Any] | None]:
    """Return where a store lives: ``source`` as an absolute local path (a ``file://`` URL
    is the local path it names) and None, or a URL unchanged and a copy of its fsspec
    ``storage_options`` (``{}`` when none were given). InvalidParameterError, naming
    ``caller``, if ``storage_options`` is not a dict with str keys or is given with a path.
    """
    if storage_options is not None and (
        not isinstance(storage_options, Mapping)
        or not all(isinstance(k, str) for k in storage_options)
    ):
        raise InvalidParameterError(
            f"The 'storage_options' parameter of {caller} must be a dict of fsspec options "
            f"(str keys) or None. Got {storage_options!r} instead."
        )
    if source.startswith("file:"):
        parsed = urlparse(source)
        if parsed.netloc not in ("", "localhost"):
            raise InvalidParameterError(
                f"The 'source' parameter of {caller} is a file:// URL on host "
                f"{parsed.netloc!r}; a file:// URL names a local path (file:///abs/path). "
                f"Got {source!r} instead."
            )
        source = unquote(parsed.path)
    elif is_url(source):
        return source, dict(storage_options or {})
    if storage_options:
        raise InvalidParameterError(
            f"The 'storage_options' parameter of {caller} applies to remote URLs (s3://, "
            f"gs://, https://, memory://, ...); {source!r} is a local path. Drop it {_CLI_HINT}."
        )
    # absolute: workers may run in another working directory (--scheduler)
    return str(Path(source).absolute()), None


def _filesystem(url: str, storage_options: dict[str, Any], caller: str) -> tuple[Any, str]:
    """Return ``(file system, path)`` for ``url``; refuse a protocol fsspec cannot serve."""
    import fsspec

    for protocol in (part.split("://", 1)[0] for part in url.split("::")):  # outermost first
        try:
            fsspec.get_filesystem_class(protocol)
        except ImportError as err:
            raise InvalidParameterError(
                f"The 'source' parameter of {caller} is a {protocol}:// URL ({url!r}), but "
                f"fsspec cannot load its file system: {str(err).strip()}. Install it on the "
                "client and on every worker (daskstraggle[cloud] brings s3fs, gcsfs and "
                "aiohttp for https://)."
            ) from err
        except ValueError as err:
            raise InvalidParameterError(
                f"The 'source' parameter of {caller} is a URL with the protocol "
                f"{protocol!r}, which fsspec does not know ({url!r}). Use a local path or an "
                "s3://, gs://, https://, file:// or memory:// URL (or install the package "
                f"that registers {protocol}://)."
            ) from err
    from fsspec.core import url_to_fs

    try:
        return url_to_fs(url, **storage_options)
    except (TypeError, ValueError) as err:
        raise _refused(url, err, caller) from err


def _refused(url: str, err: BaseException, caller: str) -> InvalidParameterError:
    return InvalidParameterError(
        f"The 'storage_options' parameter of {caller} was refused by the file system of "
        f"{url!r} ({_reason(err)}). Pass options it accepts {_CLI_HINT}."
    )


def check_remote_store(
    url: str, storage_options: dict[str, Any], *, caller: str = "open_matrix"
) -> None:
    """Refuse, with one line naming ``caller``, a URL (with its file system's
    ``storage_options``) that does not lead to a readable Zarr array or group:
    InvalidParameterError if fsspec has no implementation of the protocol installed (the
    message names the package) or the file system refuses ``storage_options``;
    DataNotFoundError if the store cannot be reached (connection or credentials refused) or
    the URL holds no Zarr store.
    """
    fs, root = _filesystem(url, storage_options, caller)
    root = root.rstrip("/")
    try:
        found = any(fs.exists(f"{root}/{key}") for key in _ROOT_KEYS)
        if not found:  # HTTP's exists() also answers False when the server cannot be reached
            with contextlib.suppress(FileNotFoundError):  # the only answer; errors propagate
                fs.cat_file(f"{root}/{_ROOT_KEYS[0]}")
    except TypeError as err:  # s3fs hands unknown options to its session on first use
        raise _refused(url, err, caller) from err
    except Exception as err:  # botocore, aiohttp, google-auth, ... each raise their own
        raise DataNotFoundError(
            f"Cannot read the store {url!r} ({_reason(err)}). Check the URL (the 'source' "
            "parameter; CLI: the SOURCE argument) and the 'storage_options' parameter "
            f"{_CLI_HINT}: endpoint_url, credentials (see docs/remote-stores.md)."
        ) from err
    if not found:
        raise DataNotFoundError(
            f"No Zarr store at {url!r}: it has none of {', '.join(_ROOT_KEYS)} (the bucket "
            "or the path does not exist, or is not a Zarr store). Check the URL (the "
            "'source' parameter; CLI: the SOURCE argument) and the 'storage_options' "
            f"parameter {_CLI_HINT}."
        )


def member_exists(url: str, name: str, storage_options: dict[str, Any]) -> bool:
    """Return whether the Zarr group at ``url`` has a member ``name`` (the store checked
    first, as :func:`check_remote_store` does)."""
    check_remote_store(url, storage_options)
    fs, root = _filesystem(url, storage_options, "open_matrix")
    root = root.rstrip("/")
    return any(fs.exists(f"{root}/{name}/{key}") for key in _ROOT_KEYS)


def parse_storage_options(pairs: Sequence[str]) -> dict[str, Any] | None:
    """Turn ``KEY=VALUE`` strings (CLI ``--storage-option``) into storage options (None
    when ``pairs`` is empty).

    Values are read as ``true``/``false`` (bool), ``none``/``null`` (None), an int, a
    float, a JSON object or list when they start with ``{`` or ``[`` (e.g.
    ``client_kwargs={"region_name": "eu-west-1"}``), and as strings otherwise.
    InvalidParameterError if a string has no ``=`` or an empty key, a key repeats, or a JSON
    value does not parse.
    """
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise InvalidParameterError(
                f"--storage-option must be KEY=VALUE, e.g. anon=true or "
                f"endpoint_url=http://127.0.0.1:9000. Got {pair!r} instead."
            )
        if key in options:
            raise InvalidParameterError(
                f"--storage-option {key} is given twice; give each key once."
            )
        options[key] = _value(key, text.strip())
    return options or None


def _value(key: str, text: str) -> Any:
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("none", "null"):
        return None
    if text[:1] in ("{", "["):
        try:
            return json.loads(text)
        except json.JSONDecodeError as err:
            raise InvalidParameterError(
                f"--storage-option {key}=... starts like JSON but does not parse ({err}). "
                "Quote it for the shell, e.g. 'client_kwargs={\"region_name\": \"eu-west-1\"}'."
            ) from err
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text
