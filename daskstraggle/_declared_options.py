"""The declarations of options: a command-line option (:class:`CliOption`, turned into a
click option by the CLI), and the values a parameter takes (:class:`Constraint`).

The run's option groups (:data:`daskstraggle.options.RUN_GROUPS`) declare each field with
:func:`declared`; from that come the ``fit_*`` keywords, the CLI and the range checks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["CliOption", "Constraint", "check_fields", "declared", "flat_name"]


@dataclass(frozen=True)
class CliOption:
    """One parameter exposed as a command-line option: a method's parameter
    (:attr:`Method.cli_options`), a keyword of a problem's ``fit_*`` function
    (:attr:`Problem.cli_options`: ``-k``, ``--alpha``, ...) or a run option's field
    (:func:`declared`).

    Parameters
    ----------
    flag : str
        The option, e.g. ``"--wait"``.
    dest : str
        The name the CLI stores the value under (unique across all methods' options).
    help : str
        The option's help text.
    type : {int, float, str, bool, pathlib.Path}, default=str
        Type of the value; ``bool`` makes an on/off flag (off counts as not given),
        ``Path`` a path.
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
        The value when not given.
    short : str or None, default=None
        A one-letter alias, e.g. ``"-k"``.
    off_flag : str or None, default=None
        With ``type=bool``: the flag that sets False (``"--no-center"``); the value is then
        None when neither is given.
    show_default : bool or str, default=False
        Show ``default`` in ``--help`` (a str: show it instead).
    multiple : bool, default=False
        Repeatable; the value is the tuple of the values given.
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
    show_default: bool | str = False
    multiple: bool = False

    @property
    def is_flag(self) -> bool:
        """Whether the option is an on/off flag."""
        return self.type is bool

    @property
    def target(self) -> str:
        """The method parameter the option sets."""
        return self.param or self.dest


@dataclass(frozen=True)
class Constraint:
    """The values a parameter takes (scikit-learn's ``_parameter_constraints``, one per
    parameter); any other is refused with one line built from the constraint, e.g. "The
    'backup_after' parameter of fit_pca (CLI: --backup-after) must be a finite number > 0
    or None. Got -1.0 instead." (:mod:`daskstraggle._validation`).

    Parameters
    ----------
    type : {int, float, bool, str, pathlib.Path}
        ``int``: an int >= ``low``; ``float``: a finite number > 0; ``bool``: True or
        False; ``str``: one of ``choices``; ``Path``: a path that ends in a name.
    low : int or None, default=None
        With ``int``: the least value.
    choices : tuple of str or None, default=None
        With ``str``: the values allowed.
    example : str, default="run.out"
        With ``Path``: an example shown in the message.
    none : bool, default=True
        None is allowed too.
    """

    type: type
    low: int | None = None
    choices: tuple[str, ...] | None = None
    example: str = "run.out"
    none: bool = True

    def check(self, value: Any, *, name: str, caller: str, flag: str | None = None) -> Any:
        """Return ``value``, normalised (an int, a float, a bool), or raise
        InvalidParameterError naming parameter ``name`` of ``caller`` (and ``flag``, its
        command-line option)."""
        from daskstraggle import _validation as check

        if value is None and self.none:
            return None
        who = caller if flag is None else f"{caller} (CLI: {flag})"
        if self.type is bool:
            return check.check_bool(value, name=name, caller=who)
        if self.type is int:
            return check.check_int(value, name=name, caller=who, low=self.low)
        if self.type is float:
            return check.check_positive(value, name=name, caller=who, allow_none=self.none)
        if self.type is Path:
            return check.check_path(value, name=name, caller=who, example=self.example)
        return check.check_choice(value, name=name, caller=who, choices=self.choices or ())


def declared(default: Any, *, constraint: Constraint | None = None,
             cli: CliOption | None = None, keyword: str | None = None) -> Any:
    """A field of an option group (default ``default``) with its declarations in its
    metadata: its ``constraint`` (None: checked by hand where used, or not at all), its
    command-line option ``cli`` (None: none) and its flat ``keyword`` in the ``fit_*``
    functions (None: the field's name)."""
    return dataclasses.field(default=default, metadata={
        "constraint": constraint, "cli": cli, "keyword": keyword})


def flat_name(field: dataclasses.Field[Any]) -> str:
    """The flat keyword of a group's field (its name unless declared otherwise)."""
    return field.metadata.get("keyword") or field.name


def check_fields(group: Any, *, caller: str) -> Any:
    """Return ``group`` with each field checked by its declared constraint (and normalised),
    or raise InvalidParameterError for the first field that breaks it."""
    changed = {}
    for field in dataclasses.fields(group):
        constraint = field.metadata.get("constraint")
        if constraint is None:
            continue
        cli = field.metadata.get("cli")
        value = getattr(group, field.name)
        checked = constraint.check(value, name=flat_name(field), caller=caller,
                                   flag=None if cli is None else cli.flag)
        if checked is not value:
            changed[field.name] = checked
    return dataclasses.replace(group, **changed) if changed else group
