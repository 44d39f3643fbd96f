"""Names a package loads on first use (PEP 562), so importing it stays cheap."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping


def attach(package: str, modules: Mapping[str, str], public: Iterable[str]
           ) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """Return ``package``'s ``__getattr__`` and ``__dir__``: each name of ``modules`` is
    imported from its submodule on first look-up and kept in the package's namespace;
    ``__dir__`` lists ``public`` too."""
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
