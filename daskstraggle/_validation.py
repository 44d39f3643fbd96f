"""Parameter checks shared by every layer (pure Python, no dask).

Each ``check_*`` returns the normalised value or raises
:class:`~daskstraggle.errors.InvalidParameterError` with the message template
"The {name!r} parameter of {caller} must be {constraint}. Got {value!r} instead."
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Literal, NoReturn, overload

import numpy as np

from daskstraggle.errors import InvalidParameterError


def _fail(name: str, caller: str, constraint: str, value: object, remedy: str = "") -> NoReturn:
    message = f"The {name!r} parameter of {caller} must be {constraint}. Got {value!r} instead."
    if remedy:
        message += f" {remedy}"
    raise InvalidParameterError(message)


def check_int(
    value: object,
    *,
    name: str,
    caller: str,
    low: int | None = None,
    high: int | None = None,
    remedy: str = "",
) -> int:
    """Return ``value`` as an int in ``[low, high]`` or raise InvalidParameterError."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        number = int(value)
        if (low is None or number >= low) and (high is None or number <= high):
            return number
        value = number
    bound = (f" in [{low}, {high}]" if low is not None and high is not None
             else f" >= {low}" if low is not None else f" <= {high}" if high is not None else "")
    _fail(name, caller, "an int" + bound, value, remedy)


@overload
def check_positive(
    value: object, *, name: str, caller: str, allow_none: Literal[False] = ..., remedy: str = ""
) -> float: ...


@overload
def check_positive(
    value: object, *, name: str, caller: str, allow_none: bool, remedy: str = ""
) -> float | None: ...


def check_positive(
    value: object, *, name: str, caller: str, allow_none: bool = False, remedy: str = ""
) -> float | None:
    """Return ``value`` as a finite float > 0 (or None when allowed)."""
    if value is None and allow_none:
        return None
    return _real(value, lambda x: bool(np.isfinite(x)) and x > 0, name, caller,
                 "a finite number > 0" + (" or None" if allow_none else ""), remedy)


def check_fraction(value: object, *, name: str, caller: str, closed_low: bool = False) -> float:
    """Return ``value`` as a float in (0, 1), or in [0, 1) with ``closed_low``."""
    return _real(value, lambda x: (0.0 <= x if closed_low else 0.0 < x) and x < 1.0, name,
                 caller, f"a number in {'[' if closed_low else '('}0, 1)")


def check_nonnegative(value: object, *, name: str, caller: str, remedy: str = "") -> float:
    """Return ``value`` as a finite float >= 0."""
    return _real(value, lambda x: bool(np.isfinite(x)) and x >= 0, name, caller,
                 "a finite number >= 0", remedy)


def _real(value: object, ok: Callable[[float], bool], name: str, caller: str,
          constraint: str, remedy: str = "") -> float:
    """Return ``value`` as a float if it is a real number (not a bool) for which ``ok``
    holds; else fail saying ``constraint``."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        number = float(value)
        if ok(number):
            return number
        value = number
    _fail(name, caller, constraint, value, remedy)


def check_choice(value: object, *, name: str, caller: str, choices: Iterable[str]) -> str:
    """Return ``value`` if it is one of ``choices``."""
    options = list(choices)
    if not isinstance(value, str) or value not in options:
        _fail(name, caller, f"one of {options}", value)
    return value


def check_bool(value: object, *, name: str, caller: str) -> bool:
    """Return ``value`` if it is a bool."""
    if not isinstance(value, bool | np.bool_):
        _fail(name, caller, "True or False", value)
    return bool(value)


def check_rng(value: object, *, caller: str, name: str = "rng",
              hint: str = " (CLI: --seed)") -> object:
    """Return ``rng`` if numpy can seed from it: None, an int >= 0 or a Generator.

    Also accepts a ``SeedSequence`` or a ``BitGenerator``. ``name`` and ``hint`` (the
    command line's spelling) name the parameter in the message.
    """
    seedable = (np.random.Generator, np.random.SeedSequence, np.random.BitGenerator)
    ok = value is None or isinstance(value, seedable) or (
        isinstance(value, numbers.Integral) and not isinstance(value, bool) and int(value) >= 0)
    if not ok:
        _fail(name, caller, f"None, an int >= 0{hint} or a numpy.random.Generator", value)
    return value


def check_mapping(value: object, *, name: str, caller: str) -> dict:
    """Return ``value`` as a dict (None: empty) if it is a mapping with str keys."""
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        _fail(name, caller, "a dict of parameter names to values, or None", value)
    return dict(value)


def check_addresses(value: object, *, name: str, caller: str, constraint: str) -> tuple[str, ...]:
    """Return worker addresses (one string, or a non-empty list of distinct strings).

    Raises InvalidParameterError saying ``constraint`` when the value is not such a
    list, and asking to list each worker once when one repeats.
    """
    items: object = [value] if isinstance(value, str) else value
    try:
        listed = list(items)  # type: ignore[call-overload]
    except TypeError:
        listed = []
    if not listed or not all(isinstance(a, str) for a in listed):
        _fail(name, caller, constraint, value)
    if len(set(listed)) != len(listed):
        raise InvalidParameterError(
            f"The {name!r} parameter of {caller} lists a worker twice. Got {value!r} "
            "instead; list each worker once."
        )
    return tuple(listed)


def check_path(value: object, *, name: str, caller: str, example: str) -> str | os.PathLike[str]:
    """Return ``value`` if it is a path (str or os.PathLike) that ends in a name.

    A path without one (``''``, ``'.'``, ``'..'``, ``'dir/..'``) names the current folder
    or one above it, which writing, or replacing with overwrite, would destroy. ``example``
    is shown in the message.
    """
    text = os.fspath(value) if isinstance(value, str | os.PathLike) else None
    if text is None or not text or Path(text).name in ("", ".."):
        _fail(name, caller, f"a path that ends in the name to write, e.g. {example!r}",
              value if text is None else text)
    return value  # type: ignore[return-value]
