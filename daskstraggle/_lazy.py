"""Names a package loads on first use (PEP 562), so importing it stays cheap."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping


def attach(package: str, modules: Mapping[str, str], public: Iterable[str]
           ) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """Return a package's ``__getattr__`` and ``__dir__`` for names loaded on first use.

    Parameters
    ----------
    package : str
        The package's ``__name__``.
    modules : mapping of str to str
        Each lazily loaded name and the submodule (relative to ``package``) defining it.
    public : iterable of str
        The package's ``__all__``, loaded or not.

    Returns
    -------
    getattr, dir : callable
        A name is imported on its first look-up and kept in the package's namespace
        (later look-ups are plain attribute reads); an unknown name raises AttributeError.
    """
    names = sorted(public)

    def __getattr__(name: str) -> object:
        if name not in modules:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{modules[name]}"), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(names))

    return __getattr__, __dir__
