"""The declarations of options: a command-line option (:class:`CliOption`) and the values
a parameter takes (:class:`Constraint`), and a run option group's field (:func:`declared`).
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
    (:func:`declared`)."""

    flag: str  #: the option, e.g. ``"--wait"``
    dest: str  #: the name the CLI stores the value under (unique across all options)
    help: str
    #: int, float, str, bool (an on/off flag; off counts as not given) or pathlib.Path
    type: type = str
    param: str | None = None  #: the parameter it sets (None: ``dest``)
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    #: converts the text, raising ValueError whose message completes "``FLAG`` ..."
    parse: Callable[[str], Any] | None = None
    default: Any = None
    short: str | None = None  #: a one-letter alias, e.g. ``"-k"``
    #: with ``type=bool``, the flag that sets False (``"--no-center"``; neither: None)
    off_flag: str | None = None
    show_default: bool | str = False  #: show ``default`` in ``--help`` (a str: this)
    multiple: bool = False  #: repeatable; the value is the tuple of the values given

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
    """The values a parameter takes (scikit-learn's ``_parameter_constraints``); any other
    is refused with one line (:mod:`daskstraggle._validation`)."""

    #: int (an int >= ``low``), float (a finite number > 0), bool, str (one of ``choices``)
    #: or Path (a path that ends in a name; ``example`` shown in the message)
    type: type
    low: int | None = None
    choices: tuple[str, ...] | None = None
    example: str = "run.out"
    none: bool = True  #: None is allowed too

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
        if (constraint := field.metadata.get("constraint")) is not None:
            value = getattr(group, field.name)
            checked = constraint.check(value, name=flat_name(field), caller=caller,
                                       flag=getattr(field.metadata.get("cli"), "flag", None))
            if checked is not value:
                changed[field.name] = checked
    return dataclasses.replace(group, **changed) if changed else group
