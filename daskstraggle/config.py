"""Settings through ``dask.config``, under the key ``daskstraggle``.

Every key, its default and what it bounds are in ``daskstraggle.yaml`` beside this module,
registered with ``dask.config`` when this module is first imported (``dask.config.get`` in
your own code needs ``import daskstraggle.config`` first). They are changed the way every
Dask setting is (``docs/guide.md``, Settings), e.g. in code::

    >>> import dask
    >>> import daskstraggle.config as config
    >>> with dask.config.set({"daskstraggle.workers": 8}):
    ...     config.workers()
    8

Settings are read on the client; a value of the wrong type is refused when it is read,
with one line naming the key.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import dask.config
import yaml
from dask.utils import parse_timedelta

from daskstraggle.errors import InvalidParameterError

__all__ = ["get", "output_dir", "progress", "seconds", "workers"]

#: The file of defaults shipped with the package.
DEFAULTS_FILE = os.path.join(os.path.dirname(__file__), "daskstraggle.yaml")
#: The top-level key of every setting.
KEY = "daskstraggle"

with open(DEFAULTS_FILE, encoding="utf-8") as _file:
    DEFAULTS: dict[str, Any] = yaml.safe_load(_file)

dask.config.update_defaults(DEFAULTS)
_UNSET = object()


def get(key: str) -> Any:
    """Return the setting ``daskstraggle.<key>`` (dots for nesting, e.g.
    ``"timeouts.stall"``) as configured (the shipped default unless changed)."""
    value = dask.config.get(f"{KEY}.{key}", default=_UNSET)
    if value is _UNSET:  # a dask.config.set block that began before this module was
        # imported restores, when it ends, a config without the defaults: add them again
        dask.config.update_defaults(DEFAULTS)
        value = dask.config.get(f"{KEY}.{key}")
    return value


def _refuse(key: str, value: Any, expected: str) -> InvalidParameterError:
    return InvalidParameterError(
        f"The dask config setting '{KEY}.{key}' must be {expected}; got {value!r} instead "
        f"(set it in ~/.config/dask/*.yaml, DASK_{KEY.upper()}__"
        f"{key.upper().replace('.', '__').replace('-', '_')}, or dask.config.set)."
    )


def seconds(key: str) -> float:
    """Return the duration setting ``daskstraggle.<key>`` (e.g. ``"timeouts.stall"``: a
    duration such as ``"30s"``, or a number of seconds) in seconds.

    Raises
    ------
    InvalidParameterError
        If the value is not a positive duration.
    """
    return _positive(key, lambda value: parse_timedelta(value, default="seconds"),
                     "a positive duration such as '30s'")


def number(key: str) -> float:
    """Return the positive number setting ``daskstraggle.<key>`` (e.g. ``"frozen.factor"``
    or ``"tol"``), as :func:`seconds` returns a duration."""
    return _positive(key, float, "a positive number")


def _positive(key: str, parse: Callable[[Any], Any], expected: str) -> float:
    """Return ``float(parse(value))`` of setting ``key`` if positive; refuse it, naming
    ``expected``, if it does not parse, is not positive or is a bool."""
    value = get(key)
    try:
        parsed = float(parse(value))
    except (TypeError, ValueError, KeyError, AttributeError):
        raise _refuse(key, value, expected) from None
    if not parsed > 0 or isinstance(value, bool):
        raise _refuse(key, value, expected)
    return parsed


def count(key: str) -> int:
    """Return the positive integer setting ``daskstraggle.<key>`` (e.g. ``"workers"`` or
    ``"max-iter"``), as :func:`seconds` returns a duration."""
    value = get(key)
    if isinstance(value, str) and value.strip().lstrip("+").isdigit():
        value = int(value)  # environment variables are parsed by YAML rules, but be kind
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _refuse(key, value, "a positive integer")
    return int(value)


def workers() -> int:
    """Return the default number of workers (``daskstraggle.workers``)."""
    return count("workers")


def progress() -> bool:
    """Return whether the command line shows progress bars (``daskstraggle.progress``)."""
    value = get("progress")
    if not isinstance(value, bool):
        raise _refuse("progress", value, "true or false")
    return value


def output_dir() -> str:
    """Return the folder ``daskstraggle demo`` writes to by default
    (``daskstraggle.output-dir``)."""
    value = get("output-dir")
    if not isinstance(value, str | os.PathLike) or not str(value):
        raise _refuse("output-dir", value, "a folder path")
    return str(value)
