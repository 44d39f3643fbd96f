"""Optimisation policies (pure: no dask): GD, NAG, SGD, SAG, DSAG, coded, gram, block, partial,
async."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import TYPE_CHECKING, Any

from daskstraggle._lazy import attach
from daskstraggle._registry import Registry
from daskstraggle.errors import InvalidParameterError
from daskstraggle.methods.options import MethodOption, check_cli_values

if TYPE_CHECKING:  # what type checkers see; at run time each loads on first use
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
    "get_method_class",
    "list_methods",
    "make_method",
    "method_cli_options",
    "method_params_from_cli",
]

#: The classes and functions loaded on first use (PEP 562), by the module defining each:
#: importing a submodule (``methods.base``) loads no other method's module.
_LAZY = {name: module for module, names in {
    "base": ("Method", "RoundSummary", "WorkResult", "WorkUnit", "contiguous_placement"),
    "block": ("BlockKrylov",), "bounded_async": ("BoundedAsync",),
    "coded": ("CodedGD", "CodedSum", "IgnoreStragglers"), "dsag": ("DSAG", "SAG"),
    "gd": ("GD", "NAG"), "gram": ("Gram",), "partial": ("PartialRecovery",), "sgd": ("SGD",),
}.items() for name in names}


__getattr__, __dir__ = attach(__name__, _LAZY, __all__)


#: Modules of this package that hold no method.
_NOT_METHODS = frozenset({"base", "cache", "options"})


def _package_methods(paths: list[str], package: str) -> list[type[Method]]:
    """Every ``Method`` subclass whose class body sets ``name``, in the package's modules
    (a new method is one module: no list here to extend)."""
    from daskstraggle.methods.base import Method

    found = []
    for info in pkgutil.iter_modules(paths):
        if info.name.startswith("_") or info.name in _NOT_METHODS:
            continue
        module = importlib.import_module(f"{package}.{info.name}")
        found += [obj for obj in vars(module).values()
                  if isinstance(obj, type) and issubclass(obj, Method)
                  and obj.__module__ == module.__name__ and "name" in vars(obj)]
    return found


def _register_package_methods(paths: list[str], package: str) -> None:
    """Register every method a module of the package defines (:func:`_package_methods`)."""
    for cls in _package_methods(paths, package):
        _REGISTRY.register(cls)


#: The methods by name, the package's own registered on the first look-up; other packages
#: add theirs under the entry-point group ``daskstraggle.methods``.
_REGISTRY: Registry[Method] = Registry(
    "method", group="daskstraggle.methods",
    load=lambda: _package_methods(list(__path__), __name__),
    unknown=lambda name, names: (
        f"The 'method' parameter must be one of {names}. Got {name!r} instead."),
)


def list_methods() -> list[str]:
    """Return the method names: :meth:`~daskstraggle._registry.Registry.names`."""
    return _REGISTRY.names()


def get_method_class(name: str) -> type[Method]:
    """Return the method class ``name``: :meth:`~daskstraggle._registry.Registry.get`."""
    return _REGISTRY.get(name)


def method_cli_options() -> dict[str, tuple[MethodOption, ...]]:
    """Return each registered method's command-line options (:attr:`Method.cli_options`),
    by method name."""
    return {cls.name: cls.cli_options for cls in _REGISTRY.classes()}


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
    cls = None if name == "auto" else get_method_class(name)  # "ignore_stragglers" too
    given = check_cli_values(name if cls is None else cls.name, method_cli_options(), values)
    return cls.params_from_cli(given) if cls is not None and given else None


def make_method(name: str | Method, **params: Any) -> Method:
    """Return a new method by registry name (or pass a Method through).

    Raises
    ------
    InvalidParameterError
        If ``name`` is not registered.
    """
    from daskstraggle.methods.base import Method

    if isinstance(name, Method):
        if params:
            raise InvalidParameterError(
                f"method_params {sorted(params)} apply to a method given by name; pass them "
                f"to the {type(name).__name__} you built instead."
            )
        return name
    cls = get_method_class(name)
    _check_params(cls, params)
    return cls(**params)


def _check_params(cls: type[Method], params: dict[str, Any]) -> None:
    """Refuse parameters the method does not take (schemes check their own: ``**``)."""
    name = cls.name
    signature = inspect.signature(cls)
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
