"""Ctrl-C is never lost: an interrupt that lands in a garbage-collector callback or in a
``__del__`` (where Python swallows exceptions) still ends the command
(``daskstraggle._entry.install_interrupt_handling``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

#: The interrupt is sent from inside a gc callback (as distributed's GC diagnosis runs in a
#: command's own scheduler) or a ``__del__``, then a few bytecodes run there: the default
#: handler raises ``KeyboardInterrupt`` inside it, Python prints "Exception ignored" and the
#: main loop runs on ("lost"). ``{install}`` turns our handling on.
SCRIPT = """
import gc, os, signal, sys, time
if {install}:
    from daskstraggle._entry import install_interrupt_handling
    install_interrupt_handling()
where = sys.argv[1]

def interrupt_here():
    os.kill(os.getpid(), signal.SIGINT)
    total = 0
    for i in range(20000):  # bytecodes inside the callback: the handler runs here
        total += i
    return total

def callback(phase, info):
    if phase == "start" and not getattr(callback, "done", False):
        callback.done = True
        interrupt_here()

class Finalised:
    def __del__(self):
        interrupt_here()

try:
    if where == "gc":
        gc.callbacks.append(callback)
        gc.collect()
        gc.callbacks.remove(callback)
    else:
        Finalised()
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        pass
    print("lost")
except KeyboardInterrupt:
    print("interrupted")
"""


@pytest.mark.parametrize("where", ["gc", "del"])
@pytest.mark.parametrize("install", [True, False], ids=["handled", "control"])
def test_an_interrupt_in_a_callback_that_swallows_it_still_interrupts(where, install,
                                                                      as_from_a_shell):
    proc = subprocess.run([sys.executable, "-c", SCRIPT.format(install=install), where],
                          capture_output=True, text=True, timeout=60, **as_from_a_shell)
    if install:
        assert proc.stdout.strip() == "interrupted", proc.stderr
        assert "Exception ignored" not in proc.stderr and "Traceback" not in proc.stderr
    else:  # the control: without it the interrupt is swallowed and the loop runs on
        assert proc.stdout.strip() == "lost"
        assert "Exception ignored" in proc.stderr and "KeyboardInterrupt" in proc.stderr


#: An interrupt inside an extension module's initialisation, which turns it into an
#: ImportError (pandas' Cython modules: "PyCapsule_Import could not import module"): the
#: console script's ``main`` with the command line replaced by such an import.
EXTENSION = """
import os, signal, sys
import daskstraggle.cli
from daskstraggle import _entry

def run():
    try:
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(20000):  # the handler runs here
            pass
    except KeyboardInterrupt as err:
        raise ImportError('PyCapsule_Import could not import module "pandas"') from err
    return 0

daskstraggle.cli.main = run
sys.exit(_entry.main())
"""


def test_an_interrupt_an_extension_import_turned_into_an_error_is_still_aborted(as_from_a_shell):
    proc = subprocess.run([sys.executable, "-c", EXTENSION], capture_output=True, text=True,
                          timeout=60, **as_from_a_shell)
    assert (proc.returncode, proc.stderr) == (130, "aborted\n")


#: An interrupt inside an import that turns it into an ImportError, while the caller takes
#: an ImportError for a missing optional dependency and goes on
#: (``daskstraggle._numba.numba_available``). ``extension``: in an extension module's
#: initialisation (numpy's C API in numba's; played by a loader of that class, the frames
#: the handler can see); ``python``: in a pure-Python module's code.
SWALLOWING_IMPORT = """
import importlib.abc, importlib.machinery, importlib.util, os, signal, sys, time, types
import daskstraggle.cli
from daskstraggle import _entry

def swallow():
    try:
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(20000):  # the handler runs here, inside the import
            pass
    except KeyboardInterrupt as err:
        raise ImportError("numpy.core.multiarray failed to import") from err

class Extension(importlib.machinery.ExtensionFileLoader):
    def create_module(self, spec):
        return types.ModuleType(spec.name)

    def exec_module(self, module):
        swallow()

class Python(importlib.abc.Loader):
    def create_module(self, spec):
        return None

    def exec_module(self, module):
        swallow()

class Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != "optional":
            return None
        loader = Extension(name, "optional.so") if sys.argv[1] == "extension" else Python()
        return importlib.util.spec_from_loader(name, loader)

sys.meta_path.insert(0, Finder())

def run():
    try:
        import optional  # noqa: F401
    except ImportError:
        pass  # "not installed": run on without it
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:  # the rest of the command
        pass
    print("ran on")
    return 0

daskstraggle.cli.main = run
sys.exit(_entry.main())
"""


@pytest.mark.parametrize("where", ["extension", "python"])
def test_an_interrupt_an_import_turned_into_an_error_a_caller_ignores_still_aborts(
        where, as_from_a_shell):
    """In an extension's initialisation the interrupt comes again once it ended (the
    command stops there); elsewhere the command runs on, then ends as aborted."""
    proc = subprocess.run([sys.executable, "-c", SWALLOWING_IMPORT, where],
                          capture_output=True, text=True, timeout=60, **as_from_a_shell)
    assert (proc.returncode, proc.stderr) == (130, "aborted\n")
    assert proc.stdout == ("" if where == "extension" else "ran on\n")


#: A Ctrl-C that lands as the command starts, before its handler is in (Python's own
#: KeyboardInterrupt, raised a few bytecodes later).
EARLY = """
import os, signal, sys
from daskstraggle import _entry

def interrupted_while_installing():
    os.kill(os.getpid(), signal.SIGINT)
    for _ in range(20000):  # the default handler raises KeyboardInterrupt here
        pass

_entry.install_interrupt_handling = interrupted_while_installing
sys.exit(_entry.main())
"""


def test_an_interrupt_before_the_handler_is_in_is_aborted(as_from_a_shell):
    """The window between the entry's call and its handler's installation: one line,
    ``aborted``, exit 130, no traceback (it was Python's traceback, status -2)."""
    proc = subprocess.run([sys.executable, "-c", EARLY, "--version"], capture_output=True,
                          text=True, timeout=120, **as_from_a_shell)
    assert proc.returncode == 130, (proc.returncode, proc.stderr)
    assert proc.stderr == "aborted\n" and proc.stdout == ""
