"""Aliases for public names that moved: the old import keeps working for a release, with a
``DeprecationWarning`` that names the new place."""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["moved_module"]


def moved_module(old: str, new: str, names: Iterable[str]) -> Callable[[str], Any]:
    """Return a module ``__getattr__`` that serves ``names`` of module ``old`` from ``new``.

    Parameters
    ----------
    old : str
        The former module's dotted name (the module defining the returned function).
    new : str
        The dotted name of the module the names moved to.
    names : iterable of str
        The public names that moved.

    Returns
    -------
    getattr : callable
        For the old module's ``__getattr__``: each access warns with a
        ``DeprecationWarning`` naming ``new``, then returns the object from there.

    Examples
    --------
    >>> import warnings
    >>> get = moved_module("pkg.old", "math", ["pi"])
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     value = get("pi")
    >>> round(value, 2), caught[0].category.__name__
    (3.14, 'DeprecationWarning')
    """
    known = frozenset(names)

    def __getattr__(name: str) -> Any:
        if name not in known:
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        warnings.warn(
            f"{old}.{name} moved to {new}.{name}; import it from there (the old name goes "
            "in a later release).",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(new), name)

    return __getattr__
