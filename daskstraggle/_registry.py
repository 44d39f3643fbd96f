"""The one string registry of the pluggable concepts (methods, problems, coding schemes,
latency models, runtimes, data sources, fault kinds), with entry-point plugins read lazily.

Pure Python. Names are hyphenated; lookups treat ``_`` and ``-`` alike. How a plugin
package registers a class: ``docs/architecture.md`` (the registries' table).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import MISSING, fields
from importlib.metadata import entry_points
from typing import Any, Generic, TypeVar

from daskstraggle.errors import InvalidParameterError

T = TypeVar("T")

logger = logging.getLogger(__name__)


class Registry(Generic[T]):
    """Classes of ``kind`` (e.g. ``"latency model"``) by name; ``unknown(name, names)``
    words the error for a name not registered.

    ``load()`` returns the package's own classes, called once before the first lookup;
    entry-point ``group``'s classes are read once, when a name is first not found or the
    names are first listed (one that fails to load, or clashes, is skipped with a warning in
    the log).
    """

    def __init__(self, kind: str, *, unknown: Callable[[str, list[str]], str],
                 group: str | None = None,
                 load: Callable[[], Iterable[type[T]]] | None = None) -> None:
        self.kind = kind
        self.group = group
        self._unknown = unknown
        self._classes: dict[str, type[T]] = {}
        self._plugins_read = group is None
        self._load = load

    def _load_own(self) -> None:
        """Register the package's own classes (once; before any plugin's)."""
        load, self._load = self._load, None
        if load is not None:
            for cls in load():
                self.register(cls)

    def register(self, cls: type[T]) -> type[T]:
        """Register ``cls`` under ``cls.name`` (a class decorator); ValueError if taken."""
        name = cls.name  # type: ignore[attr-defined]
        if name in self._classes and self._classes[name] is not cls:
            raise ValueError(f"{self.kind} name {name!r} registered twice")
        self._classes[name] = cls
        return cls

    def _read_plugins(self) -> None:
        """Register the classes of the entry-point group (once)."""
        self._load_own()
        if self._plugins_read:
            return
        self._plugins_read = True
        for point in entry_points(group=str(self.group)):
            try:
                cls = point.load()
                if getattr(cls, "name", None) != point.name:
                    raise ValueError(f"its class's name is {getattr(cls, 'name', None)!r}")
                self.register(cls)
            except Exception as err:  # a broken plugin must not break the package
                logger.warning("%s %r from entry point %r skipped: %s", self.kind,
                               point.name, point.value, err)

    def names(self) -> list[str]:
        """Return the registered names, sorted (the entry-point group's included)."""
        self._read_plugins()
        return sorted(self._classes)

    def classes(self) -> list[type[T]]:
        """Return the registered classes, in the order of :meth:`names`."""
        return [self._classes[name] for name in self.names()]

    def __contains__(self, name: object) -> bool:
        key = str(name).replace("_", "-")
        self._load_own()
        if key not in self._classes:
            self._read_plugins()
        return key in self._classes

    def __getitem__(self, name: str) -> type[T]:
        """The class registered as ``name`` (KeyError if none)."""
        if name not in self:
            raise KeyError(name)
        return self.get(name)

    def __iter__(self) -> Iterator[str]:
        """The registered names, sorted, as a mapping iterates its keys."""
        return iter(self.names())

    def get(self, name: str) -> type[T]:
        """Return the class registered as ``name`` (``_`` and ``-`` are equal), or raise
        InvalidParameterError naming the registered names."""
        key = str(name).replace("_", "-")
        if key not in self:
            raise InvalidParameterError(self._unknown(name, self.names()))
        return self._classes[key]

    def make(self, name: str, **params: Any) -> T:
        """Build the class registered as ``name``; InvalidParameterError for an unknown
        name, a missing or unknown parameter, or a value the class refuses."""
        cls = self.get(name)
        label = cls.name  # type: ignore[attr-defined]
        all_fields = fields(cls)  # type: ignore[arg-type]
        allowed = [f.name for f in all_fields]
        if unknown := sorted(set(params) - set(allowed)):
            raise InvalidParameterError(
                f"The {self.kind} {label!r} does not take {unknown}; it takes {allowed}."
            )
        required = [f.name for f in all_fields
                    if f.default is MISSING and f.default_factory is MISSING]
        if missing := [name for name in required if name not in params]:
            raise InvalidParameterError(
                f"The {self.kind} {label!r} needs {missing}, e.g. "
                f"{label.replace('-', '_')}({', '.join(f'{m}=...' for m in required)})."
            )
        return cls(**params)
