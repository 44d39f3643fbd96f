"""Click commands whose options are made when first needed (the declarations they come
from import numpy and scipy), not when ``daskstraggle.cli`` loads."""

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

        def target() -> None:  # pragma: no cover - never called, collects the parameters
            pass

        made: Any = target
        for option in reversed(self.make()):
            made = option(made)
        return list(reversed(made.__click_params__))


def deferred(make: Callable[[], list[Callable[..., Any]]]
             ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Add the options ``make()`` returns here, made when the command first needs them."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn.__dict__.setdefault("__click_params__", []).append(_Deferred(make))
        return fn

    return decorate


class LazyCommand(click.Command):
    """A command whose :func:`deferred` options are made, in place, when first read."""

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
