"""Aliases for public names that moved: the old import keeps working for a release, with a
``DeprecationWarning`` that names the new place."""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["moved_function", "moved_module"]


def moved_module(old: str, new: str, names: Iterable[str]) -> Callable[[str], Any]:
    """Return module ``old``'s ``__getattr__``: each of ``names`` is served from module
    ``new`` with a ``DeprecationWarning`` naming it.

    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     value = moved_module("pkg.old", "math", ["pi"])("pi")
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
    """Return a function that warns that ``old`` moved to ``new`` (a dotted path, imported
    on each call) and calls it with its arguments; ``call`` shows how, in the warning.

    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     value = moved_function("old_hypot", "math.hypot", "math.hypot(x, y)")(3.0, 4.0)
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
