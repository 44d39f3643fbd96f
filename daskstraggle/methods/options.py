"""Command-line options declared by the methods themselves (``Method.cli_options``).

The solve commands build their method options from every registered method's
declarations and hand the values given to the chosen method's
:meth:`~daskstraggle.methods.Method.params_from_cli`; an option given with a method that
does not declare it is refused in one line naming the methods that do. Pure: no click.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from daskstraggle._declared_options import CliOption
from daskstraggle.errors import InvalidParameterError

__all__ = ["CliOption", "MethodOption", "check_cli_values", "method_options", "parse_int_list"]


#: A method's command-line option (the same declaration problems use).
MethodOption = CliOption


def parse_int_list(text: str) -> tuple[int, ...]:
    """Parse ``"1,2,3"`` into ``(1, 2, 3)``; ValueError for anything else."""
    try:
        return tuple(int(part) for part in str(text).split(","))
    except ValueError:
        raise ValueError("must be comma-separated ints such as 1,2,3") from None


def method_options(classes: Iterable[type]) -> dict[str, MethodOption]:
    """Return every option the method ``classes`` declare, by ``dest``, in first-seen order.

    Raises
    ------
    ValueError
        If two classes declare different options under one ``dest`` or one flag.
    """
    options: dict[str, MethodOption] = {}
    flags: dict[str, str] = {}
    for cls in classes:
        for option in getattr(cls, "cli_options", ()):
            known = options.setdefault(option.dest, option)
            if known != option or flags.setdefault(option.flag, option.dest) != option.dest:
                raise ValueError(f"{cls.__name__} declares {option.flag} ({option.dest}) "
                                 "unlike another method")
    return options


def _or_join(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def check_cli_values(method: str, declared: Mapping[str, tuple[MethodOption, ...]],
                     values: Mapping[str, Any]) -> dict[str, Any]:
    """Return the option values given for ``method`` (None and off flags dropped), parsed.

    Parameters
    ----------
    method : str
        The chosen method's name (``"auto"``: none chosen yet, so no option applies).
    declared : mapping of str to tuple of MethodOption
        Each registered method's options, by method name.
    values : mapping of str to object
        Every method option's value by ``dest``, None when not given.

    Raises
    ------
    InvalidParameterError
        ``"--wait: only with --method dsag, sag or sgd, not 'gd'"`` for options ``method``
        does not declare (the first such group of options), or a value ``parse`` refused.
    """
    given = {dest: value for dest, value in values.items()
             if value is not None and value is not False}
    own = {option.dest: option for option in declared.get(method, ())}
    foreign = [dest for dest in given if dest not in own]
    if foreign:
        raise _foreign_error(method, declared, foreign)
    parsed = {}
    for dest, value in given.items():
        option = own[dest]
        try:
            parsed[dest] = option.parse(value) if option.parse is not None else value
        except ValueError as err:
            raise InvalidParameterError(f"{option.flag} {err}; got {value!r}") from None
    return parsed


def _foreign_error(method: str, declared: Mapping[str, tuple[MethodOption, ...]],
                   foreign: list[str]) -> InvalidParameterError:
    """The error naming the first group of ``foreign`` options and the methods they go with."""
    owners = {dest: sorted(name for name, options in declared.items()
                           if any(o.dest == dest for o in options)) for dest in foreign}
    group = owners[foreign[0]]
    flags = [_flag(declared, dest) for dest in foreign if owners[dest] == group]
    return InvalidParameterError(
        f"{', '.join(flags)}: only with --method {_or_join(group)}, not {method!r}")


def _flag(declared: Mapping[str, tuple[MethodOption, ...]], dest: str) -> str:
    return next(o.flag for options in declared.values() for o in options if o.dest == dest)
