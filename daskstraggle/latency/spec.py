"""Straggler and latency specs: one line of text -> models (``--stragglers``).

Grammar: terms joined by ``+``; each term is ``name(key=value, ...)`` (or a bare ``name``)
where ``name`` is a registered latency model (``_`` or ``-`` alike) and the values are Python
literals or nested terms. The first term may be a model with a distribution; every later
model term is a modifier applied on top of what precedes it (modifiers alone slow down the
*real* compute time). ``throttle(workers=..., factor=..., period=...)`` asks for the
whole-process throttle, alone or beside a model. The fault terms of
:mod:`daskstraggle.latency.faults` (``loss``, ``freeze``, ``join``, ``retire``) are played by
the simulated runtime. ``none`` means no stragglers. ``docs/stragglers.md`` shows each term.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any, ClassVar

from daskstraggle._validation import _fail
from daskstraggle.errors import InvalidParameterError
from daskstraggle.latency.base import (
    LatencyModel,
    _is_number,
    _worker_indices,
    get_model_class,
    list_models,
)
from daskstraggle.latency.faults import FAULTS, Fault, _Term

__all__ = ["Stragglers", "ThrottleSpec", "parse_latency", "parse_stragglers"]

_HELP = (
    "Write terms like 'slowdown(workers=1, factor=4)', 'markov(p_slow=0.05, slow_factor=4)', "
    "'gamma(mean=0.05, var=1e-4) + slowdown(workers=0, factor=3)' or "
    "'throttle(workers=1, factor=4)'; with --runtime sim (and in simulate --latency) also "
    "'loss(workers=1, at=2)', "
    "'freeze(workers=1, at=2, for=5)', 'join(count=1, at=2)', 'retire(workers=1, at=2)'"
)


@dataclass(frozen=True, kw_only=True, slots=True)
class ThrottleSpec(_Term):
    """Whole-process throttle of some workers (see ``daskstraggle.runtime.throttle``).

    Parameters
    ----------
    workers : tuple of int
    factor : float
        Slow-down factor (>= 1): the process runs ``1/factor`` of the time.
    period : float, default=0.05
        Seconds of one run/stop cycle.
    """

    workers: tuple[int, ...]
    factor: float
    period: float = 0.05

    name: ClassVar[str] = "throttle"

    def __post_init__(self) -> None:
        object.__setattr__(self, "workers", _worker_indices(self.workers, term=self.name))
        for name, low, strict, constraint in (("factor", 1.0, False, "a number >= 1"),
                                              ("period", 0.0, True, "a number of seconds > 0")):
            value = getattr(self, name)
            if not (_is_number(value) and (value > low if strict else value >= low)):
                _fail(name, "throttle", constraint, value)
            object.__setattr__(self, name, float(value))


@dataclass(frozen=True, kw_only=True, slots=True)
class Stragglers:
    """What slows workers down in a run: a latency model, a process throttle, or both.

    Parameters
    ----------
    model : LatencyModel or None, default=None
        Injected on the worker (Dask) or simulated (SimRuntime).
    throttle : ThrottleSpec or None, default=None
        Whole-process throttle (Dask only).
    faults : tuple of Fault, default=()
        Simulated losses, freezes, joins and retirements (simulated runtime only), in the
        order given.
    """

    model: LatencyModel | None = None
    throttle: ThrottleSpec | None = None
    faults: tuple[Fault, ...] = ()

    def check_n_workers(self, n_workers: int) -> None:
        """Raise InvalidParameterError if the spec does not fit ``n_workers`` workers."""
        for term in (self.model, self.throttle, *self.faults):
            if term is not None:
                term.check_n_workers(n_workers)

    def to_spec(self) -> str:
        """Return the spec text (``"none"`` when empty)."""
        terms = [t.to_spec() for t in (self.model, self.throttle, *self.faults) if t is not None]
        return " + ".join(terms) or "none"

    def __bool__(self) -> bool:
        return self.model is not None or self.throttle is not None or bool(self.faults)


def _literal(node: ast.AST, text: str) -> Any:
    if isinstance(node, ast.Call):
        return _term(node, text, base=None)
    if isinstance(node, ast.List | ast.Tuple):
        return [_literal(elt, text) for elt in node.elts]
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise InvalidParameterError(
            f"Could not read {ast.get_source_segment(text, node)!r} in the stragglers spec "
            f"{text!r}: values must be numbers, strings, lists or model terms."
        ) from None


def _call(node: ast.AST, text: str) -> tuple[str, dict[str, Any]]:
    """Return the name and the parameters of the term ``node`` (``name`` or ``name(...)``)."""
    if isinstance(node, ast.Name):
        return node.id, {}
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
        raise InvalidParameterError(
            f"Could not read {ast.get_source_segment(text, node)!r} in the stragglers spec "
            f"{text!r}. {_HELP}."
        )
    name = node.func.id
    keys = [kw.arg for kw in node.keywords]
    if node.args or None in keys:  # f(1) or f(**d)
        raise InvalidParameterError(
            f"Write the parameters of {name!r} as key=value in the stragglers spec "
            f"{text!r}. {_HELP}."
        )
    repeated = next((key for i, key in enumerate(keys) if key in keys[:i]), None)
    if repeated is not None:  # Python's parser reads f(a=1, a=2); a dict keeps one
        raise InvalidParameterError(
            f"The parameter {repeated.removesuffix('_')!r} of {name!r} is given twice in "
            "the stragglers spec; give each parameter once."
        )
    return name, {str(kw.arg): _literal(kw.value, text) for kw in node.keywords}


def _term(node: ast.AST, text: str, *, base: LatencyModel | None) -> Any:
    """Read one term: the class registered under its name builds it (``from_term``)."""
    name, params = _call(node, text)
    params = {k: tuple(v) if isinstance(v, list) else v for k, v in params.items()}
    cls: Any = ThrottleSpec if name == ThrottleSpec.name else \
        FAULTS.get(name) if name in FAULTS else get_model_class(name)
    return cls.from_term(name, params, base=base, spec=text)


def _terms(node: ast.AST) -> list[ast.AST]:
    """The terms of ``a + b + ...``, in order."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return [*_terms(node.left), *_terms(node.right)]
    return [node]


def parse_stragglers(spec: str | LatencyModel | Stragglers | None) -> Stragglers:
    """Read a straggler spec (see the module docstring for the grammar).

    Parameters
    ----------
    spec : str, LatencyModel, Stragglers or None
        Text such as ``"slowdown(workers=1, factor=4)"``, a model, or None / ``"none"``.

    Returns
    -------
    stragglers : Stragglers

    Raises
    ------
    InvalidParameterError
        For unknown models, unknown or invalid parameters, or text that does not parse.

    Examples
    --------
    >>> parse_stragglers("throttle(workers=[1, 2], factor=4)").throttle.workers
    (1, 2)
    >>> parse_stragglers("none")
    Stragglers(model=None, throttle=None, faults=())
    """
    if spec is None:
        return Stragglers()
    if isinstance(spec, Stragglers):
        return spec
    if isinstance(spec, LatencyModel):
        return Stragglers(model=spec)
    if isinstance(spec, ThrottleSpec):
        return Stragglers(throttle=spec)
    if not isinstance(spec, str):
        raise InvalidParameterError(
            f"The 'stragglers' parameter must be a spec string, a LatencyModel or None. "
            f"Got {type(spec).__name__} instead."
        )
    text = spec.strip()
    if text.lower() in ("", "none"):
        return Stragglers()
    import daskstraggle.latency.models  # noqa: F401 - registers the models

    # outside string literals, "a-b" (a hyphenated name) becomes "a_b" and the keyword
    # "for" (freeze's duration) "for_", so that Python parses the text
    text = "".join(
        part if part[:1] in ("'", '"') else re.sub(
            r"\bfor(?=\s*=)", "for_", re.sub(r"(?<=[A-Za-z])-(?=[A-Za-z])", "_", part))
        for part in re.split(r"(\"[^\"]*\"|'[^']*')", text)
    )
    try:
        tree = ast.parse(text, mode="eval").body
    except SyntaxError:
        raise InvalidParameterError(
            f"Could not parse the stragglers spec {spec!r}. {_HELP}."
        ) from None
    model: LatencyModel | None = None
    throttle: ThrottleSpec | None = None
    faults: list[Fault] = []
    for node in _terms(tree):
        value = _term(node, text, base=model)
        if isinstance(value, Fault):
            faults.append(value)
        elif isinstance(value, ThrottleSpec):
            if throttle is not None:
                raise InvalidParameterError(f"Give at most one throttle term in {spec!r}.")
            throttle = value
        else:
            model = value
    return Stragglers(model=model, throttle=throttle, faults=tuple(faults))


def parse_latency(spec: str | LatencyModel) -> LatencyModel:
    """Read a latency model spec (no throttle term); see :func:`parse_stragglers`.

    Raises
    ------
    InvalidParameterError
        If the text does not describe exactly one latency model.

    Examples
    --------
    >>> parse_latency("constant(compute=0.5)")
    Constant(compute=0.5, communication=0.0)
    """
    out = parse_stragglers(spec)
    if out.throttle is not None or out.faults or out.model is None:
        raise InvalidParameterError(
            f"Expected a latency model such as 'gamma(mean=0.05, var=1e-4)', got {spec!r}. "
            f"Models: {list_models()}."
        )
    return out.model
