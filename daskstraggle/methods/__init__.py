"""Optimisation policies (pure: no dask): GD, NAG, SGD, SAG, DSAG, coded, partial, async."""

from __future__ import annotations

from typing import Any

from daskstraggle.errors import InvalidParameterError
from daskstraggle.methods.base import (
    Method,
    RoundSummary,
    WorkResult,
    WorkUnit,
    contiguous_placement,
)
from daskstraggle.methods.bounded_async import BoundedAsync
from daskstraggle.methods.coded import CodedGD, IgnoreStragglers
from daskstraggle.methods.dsag import DSAG, SAG
from daskstraggle.methods.gd import GD, NAG
from daskstraggle.methods.partial import PartialRecovery
from daskstraggle.methods.sgd import SGD

__all__ = [
    "DSAG",
    "GD",
    "NAG",
    "SAG",
    "SGD",
    "BoundedAsync",
    "CodedGD",
    "IgnoreStragglers",
    "Method",
    "PartialRecovery",
    "RoundSummary",
    "WorkResult",
    "WorkUnit",
    "contiguous_placement",
    "list_methods",
    "make_method",
]

_METHODS: dict[str, type[Method]] = {
    "async": BoundedAsync,
    "coded": CodedGD,
    "dsag": DSAG,
    "gd": GD,
    "ignore-stragglers": IgnoreStragglers,
    "nag": NAG,
    "partial": PartialRecovery,
    "sag": SAG,
    "sgd": SGD,
}


def list_methods() -> list[str]:
    """Return the registered method names."""
    return sorted(_METHODS)


def make_method(name: str | Method, **params: Any) -> Method:
    """Return a new method by registry name (or pass a Method through).

    Raises
    ------
    InvalidParameterError
        If ``name`` is not registered.
    """
    if isinstance(name, Method):
        return name
    if name not in _METHODS:
        raise InvalidParameterError(
            f"The 'method' parameter must be one of {list_methods()}. Got {name!r} instead."
        )
    return _METHODS[name](**params)
