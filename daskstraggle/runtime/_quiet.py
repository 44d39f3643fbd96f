"""A worker plugin that keeps the worker processes of our LocalClusters quiet at exit (apart
from :mod:`daskstraggle.runtime._connect`, which must not import ``distributed``)."""


from __future__ import annotations

import atexit
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin

__all__ = ["QuietExit"]


class QuietExit(WorkerPlugin):
    """Drop zarr's exit hook in the worker processes of a cluster this package started.

    At interpreter exit zarr stops its I/O thread, waits 0.2 s for it, then closes the
    thread's event loop; on a busy machine (many workers per core, all closing at once)
    the thread is still running, and each worker prints a warning and a
    ``RuntimeError: Cannot close a running event loop`` traceback. The thread is a
    daemon and the process is ending, so nothing is lost by skipping the hook.
    """

    name = "daskstraggle-quiet-exit"

    def setup(self, worker: Any) -> None:
        """Unregister the hook in this worker process."""
        try:
            from zarr.core import sync
        except ImportError:  # another zarr layout: nothing known to silence
            return
        atexit.unregister(sync.cleanup_resources)
