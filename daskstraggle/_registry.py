"""A string registry of frozen-dataclass value objects (latency models, coding schemes).

Pure Python: shared by the pure packages. Names are hyphenated; lookups treat ``_`` and
``-`` alike, so spec strings may use Python identifiers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, fields
from typing import Any, Generic, TypeVar

from daskstraggle.errors import InvalidParameterError

T = TypeVar("T")


class Registry(Generic[T]):
    """Classes by name, with one clear error for unknown names and parameters.

    Parameters
    ----------
    kind : str
        What is registered, for messages (e.g. ``"latency model"``).
    unknown : callable
        ``unknown(name, names)`` returns the message for a name not registered.
    """

    def __init__(self, kind: str, *, unknown: Callable[[str, list[str]], str]) -> None:
        self.kind = kind
        self._unknown = unknown
        self._classes: dict[str, type[T]] = {}

    def register(self, cls: type[T]) -> type[T]:
        """Register ``cls`` under ``cls.name`` (usable as a class decorator)."""
        name = cls.name  # type: ignore[attr-defined]
        if name in self._classes and self._classes[name] is not cls:
            raise ValueError(f"{self.kind} name {name!r} registered twice")
        self._classes[name] = cls
        return cls

    def names(self) -> list[str]:
        """Return the registered names, sorted."""
        return sorted(self._classes)

    def get(self, name: str) -> type[T]:
        """Return the class registered as ``name``; InvalidParameterError if none."""
        key = str(name).replace("_", "-")
        if key not in self._classes:
            raise InvalidParameterError(self._unknown(name, self.names()))
        return self._classes[key]

    def make(self, name: str, **params: Any) -> T:
        """Build the class registered as ``name``, refusing unknown or missing parameters."""
        cls = self.get(name)
        label = cls.name  # type: ignore[attr-defined]
        all_fields = fields(cls)  # type: ignore[arg-type]
        allowed = [f.name for f in all_fields]
        unknown = sorted(set(params) - set(allowed))
        if unknown:
            raise InvalidParameterError(
                f"The {self.kind} {label!r} does not take {unknown}; it takes {allowed}."
            )
        required = [f.name for f in all_fields
                    if f.default is MISSING and f.default_factory is MISSING]
        missing = [name for name in required if name not in params]
        if missing:
            raise InvalidParameterError(
                f"The {self.kind} {label!r} needs {missing}, e.g. "
                f"{label.replace('-', '_')}({', '.join(f'{m}=...' for m in required)})."
            )
        return cls(**params)
