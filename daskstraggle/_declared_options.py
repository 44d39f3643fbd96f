"""The declaration of a command-line option, shared by methods and problems.

Pure: no click (the CLI turns a :class:`CliOption` into a click option).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["CliOption"]


@dataclass(frozen=True)
class CliOption:
    """One parameter a method or a problem exposes as a command-line option.

    A method's options set its parameters (:attr:`Method.cli_options`); a problem's set the
    keywords of its ``fit_*`` function (:attr:`Problem.cli_options`: ``-k``,
    ``--alpha``, ...). The CLI turns each into a click option; this module imports no click.

    Parameters
    ----------
    flag : str
        The option, e.g. ``"--wait"``.
    dest : str
        The name the CLI stores the value under (unique across all methods' options).
    help : str
        The option's help text.
    type : {int, float, str, bool}, default=str
        Type of the value; ``bool`` makes an on/off flag (off counts as not given).
    param : str or None, default=None
        The method parameter it sets; None: ``dest``.
    choices : tuple of str or None, default=None
        The values allowed.
    metavar : str or None, default=None
        Placeholder shown in ``--help``.
    parse : callable or None, default=None
        ``parse(text)`` converts the given text, raising ValueError whose message
        completes "``FLAG`` ..." (e.g. "must be comma-separated ints such as 1,2,3").
    default : object, default=None
        The value when not given (shown in ``--help`` with ``show_default``).
    short : str or None, default=None
        A one-letter alias, e.g. ``"-k"``.
    off_flag : str or None, default=None
        With ``type=bool``: the flag that sets False (``"--no-center"``); the value is then
        None when neither is given.
    show_default : bool, default=False
        Show ``default`` in ``--help``.
    """

    flag: str
    dest: str
    help: str
    type: type = str
    param: str | None = None
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    parse: Callable[[str], Any] | None = None
    default: Any = None
    short: str | None = None
    off_flag: str | None = None
    show_default: bool = False

    @property
    def is_flag(self) -> bool:
        """Whether the option is an on/off flag."""
        return self.type is bool

    @property
    def target(self) -> str:
        """The method parameter the option sets."""
        return self.param or self.dest
