"""Whether numba is there and wanted, and one thread-safe import of each module of numba
functions; numba is imported only when a function here needs it."""

from __future__ import annotations

import os
import tempfile
import threading
import warnings
from typing import Any

__all__ = ["NUMBA_VARIABLE", "default_implementation", "import_numba_module",
           "numba_available"]

#: Environment variable that disables numba when set to ``0``.
NUMBA_VARIABLE = "DASKSTRAGGLE_NUMBA"

_lock = threading.Lock()
_numba_modules: dict[str, Any] = {}
_numba_missing: bool | None = None


def numba_available() -> bool:
    """Return whether numba can be imported (checked once per process)."""
    global _numba_missing
    if _numba_missing is None:
        try:
            import numba  # noqa: F401
        except ImportError:
            _numba_missing = True
        else:
            _numba_missing = False
    return not _numba_missing


def default_implementation() -> str:
    """Return ``"numba"`` if it is importable and not disabled (``DASKSTRAGGLE_NUMBA=0``),
    else ``"numpy"``."""
    return "numpy" if _numba_switch().strip() == "0" or not numba_available() else "numba"


#: ``os.environ`` at import, and the key of :data:`NUMBA_VARIABLE` in its store.
_ENVIRON = os.environ
_NUMBA_KEY = os.environ.encodekey(NUMBA_VARIABLE)


def _numba_switch() -> str:
    """``$DASKSTRAGGLE_NUMBA`` now ("1" when unset), read from ``os.environ``'s own store
    (``os.environ.get`` of an unset variable is slow in a loop of small units)."""
    env = os.environ
    data = getattr(env, "_data", None)
    if env is not _ENVIRON or not isinstance(data, dict):
        return env.get(NUMBA_VARIABLE, "1")
    raw = data.get(_NUMBA_KEY)
    return "1" if raw is None else str(env.decodevalue(raw))


def import_numba_module(name: str) -> Any:
    """Import a module of numba functions once, thread-safely (also the genotype decoder's).

    Numba's warnings while importing and compiling (e.g. a cache directory that cannot
    be written) are silenced; a package directory without write access moves numba's
    cache to the temporary directory.
    """
    module = _numba_modules.get(name)
    if module is None:
        with _lock, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module = _numba_modules.get(name)
            if module is None:
                module = _numba_modules[name] = _import_numba(name)
    return module


def _import_numba(name: str) -> Any:
    import importlib
    import sys

    try:
        return importlib.import_module(name)
    except RuntimeError:  # "cannot cache function ...: no locator available"
        import numba

        sys.modules.pop(name, None)
        numba.config.CACHE_DIR = os.path.join(  # type: ignore[attr-defined]
            tempfile.gettempdir(), f"daskstraggle-numba-{os.getuid()}")
        return importlib.import_module(name)
