"""Aliases for public names that moved: the old import keeps working for a release, with a
``DeprecationWarning`` that names the new place."""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["moved_function", "moved_module"]


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


def moved_function(old: str, new: str, call: str) -> Callable[..., Any]:
    """Return a function that warns that ``old`` moved to ``new`` and calls that.

    Parameters
    ----------
    old : str
        The former name, as users wrote it (e.g. ``"Runtime.run"``).
    new : str
        The dotted path of the function that replaces it; it is imported by name on the
        first call (the alias may sit below the module that defines ``new``).
    call : str
        How the new function is called, for the warning (e.g. ``"run_on(runtime, ...)"``).

    Returns
    -------
    alias : callable
        Passes its arguments on unchanged (as a class attribute, the instance first).

    Examples
    --------
    >>> import warnings
    >>> hypot = moved_function("old_hypot", "math.hypot", "math.hypot(x, y)")
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     value = hypot(3.0, 4.0)
    >>> value, caught[0].category.__name__
    (5.0, 'DeprecationWarning')
    """
    module, _, name = new.rpartition(".")

    def alias(*args: Any, **kwargs: Any) -> Any:
        warnings.warn(
            f"{old} moved to {new}: call {call} (the old name goes in a later release).",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    alias.__doc__ = f"Deprecated: moved to :func:`{new}` (``{call}``)."
    return alias
