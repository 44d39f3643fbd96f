"""Click commands whose options are made when first needed, not when the module loads.

The solve commands' options come from the declarations of the registered methods,
problems and runtimes, whose modules import numpy and scipy: made on first use,
``import daskstraggle.cli`` and the group's help load none of them, and a command's own
``--help`` or run makes the same options, in the same order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

__all__ = ["LazyCommand", "LazyGroup", "deferred"]


class _Deferred:
    """A place in a command's options for options made later (see :class:`LazyCommand`)."""

    def __init__(self, make: Callable[[], list[Callable[..., Any]]]) -> None:
        self.make = make

    def params(self) -> list[click.Parameter]:
        """Return the click parameters of the option decorators ``make()`` returns, in order."""

        def target() -> None:  # pragma: no cover - never called
            """Collects the parameters."""

        made: Any = target
        for option in reversed(self.make()):
            made = option(made)
        return list(reversed(made.__click_params__))


def deferred(make: Callable[[], list[Callable[..., Any]]]
             ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Add the options ``make()`` returns (click option decorators) at this place of the
    command's options, made when the command first needs them (:class:`LazyCommand`)."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn.__dict__.setdefault("__click_params__", []).append(_Deferred(make))
        return fn

    return decorate


class LazyCommand(click.Command):
    """A command whose :func:`deferred` options are made when they are first read (its
    ``--help``, a run, the tests' ``command.params``), in their place among the others."""

    _params: list[Any]

    @property
    def params(self) -> list[click.Parameter]:
        """The command's parameters, the deferred ones made on first access."""
        if any(isinstance(param, _Deferred) for param in self._params):
            self._params = [made for param in self._params
                            for made in (param.params() if isinstance(param, _Deferred)
                                         else [param])]
        return self._params

    @params.setter
    def params(self, value: list[click.Parameter]) -> None:
        self._params = value


class LazyGroup(click.Group):
    """A group whose commands (``@group.command()``) are :class:`LazyCommand`."""

    command_class = LazyCommand
