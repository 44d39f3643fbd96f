"""Optimisation policies (pure: no dask): GD, NAG, SGD, SAG, DSAG, coded, gram, block, partial,
async."""

from __future__ import annotations

import inspect
from typing import Any

from daskstraggle.errors import InvalidParameterError
from daskstraggle.methods.base import (
    Method,
    RoundSummary,
    WorkResult,
    WorkUnit,
    contiguous_placement,
)
from daskstraggle.methods.block import BlockKrylov
from daskstraggle.methods.bounded_async import BoundedAsync
from daskstraggle.methods.coded import CodedGD, CodedSum, IgnoreStragglers
from daskstraggle.methods.dsag import DSAG, SAG
from daskstraggle.methods.gd import GD, NAG
from daskstraggle.methods.gram import Gram
from daskstraggle.methods.options import MethodOption, check_cli_values
from daskstraggle.methods.partial import PartialRecovery
from daskstraggle.methods.sgd import SGD

__all__ = [
    "DSAG",
    "GD",
    "NAG",
    "SAG",
    "SGD",
    "BlockKrylov",
    "BoundedAsync",
    "CodedGD",
    "CodedSum",
    "Gram",
    "IgnoreStragglers",
    "Method",
    "PartialRecovery",
    "RoundSummary",
    "WorkResult",
    "WorkUnit",
    "contiguous_placement",
    "list_methods",
    "make_method",
    "method_cli_options",
    "method_params_from_cli",
]

_METHODS: dict[str, type[Method]] = {
    "async": BoundedAsync,
    "block": BlockKrylov,
    "coded": CodedGD,
    "dsag": DSAG,
    "gd": GD,
    "gram": Gram,
    "ignore-stragglers": IgnoreStragglers,
    "nag": NAG,
    "partial": PartialRecovery,
    "sag": SAG,
    "sgd": SGD,
}


def list_methods() -> list[str]:
    """Return the registered method names."""
    return sorted(_METHODS)


def method_cli_options() -> dict[str, tuple[MethodOption, ...]]:
    """Return each registered method's command-line options (:attr:`Method.cli_options`),
    by method name."""
    return {name: _METHODS[name].cli_options for name in list_methods()}


def method_params_from_cli(name: str, values: dict[str, Any]) -> dict[str, Any] | None:
    """Return the parameters of method ``name`` from the CLI's method-option values.

    Parameters
    ----------
    name : str
        The chosen method (``"auto"`` when none was chosen).
    values : dict
        Every declared option's value by ``dest`` (None, or False for a flag, when not
        given).

    Returns
    -------
    params : dict or None
        None when no option was given, else the method's parameters.

    Raises
    ------
    InvalidParameterError
        For an option ``name`` does not declare, or a value it refuses.
    """
    given = check_cli_values(name, method_cli_options(), values)
    return _METHODS[name].params_from_cli(given) if given else None


def make_method(name: str | Method, **params: Any) -> Method:
    """Return a new method by registry name (or pass a Method through).

    Raises
    ------
    InvalidParameterError
        If ``name`` is not registered.
    """
    if isinstance(name, Method):
        if params:
            raise InvalidParameterError(
                f"method_params {sorted(params)} apply to a method given by name; pass them "
                f"to the {type(name).__name__} you built instead."
            )
        return name
    if name not in _METHODS:
        raise InvalidParameterError(
            f"The 'method' parameter must be one of {list_methods()}. Got {name!r} instead."
        )
    _check_params(name, params)
    return _METHODS[name](**params)


def _check_params(name: str, params: dict[str, Any]) -> None:
    """Refuse parameters the method does not take (schemes check their own: ``**``)."""
    signature = inspect.signature(_METHODS[name])
    if any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values()):
        return
    unknown = sorted(set(params) - set(signature.parameters))
    if unknown:
        names = sorted(signature.parameters)
        takes = f"it takes {names}" if names else "it takes none: drop method_params"
        raise InvalidParameterError(
            f"The 'method_params' parameter has {unknown}, which method {name!r} does not "
            f"take; {takes}."
        )
