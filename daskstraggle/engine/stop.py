"""Stop rules: a tolerance on the optimality measure, the gap, iterations, time.

:class:`StopRule` is one of the run's option groups, declared with the others in
:mod:`daskstraggle.options` (below the engine, which reads it from here).
"""

from __future__ import annotations

from daskstraggle.options import StopRule

__all__ = ["StopRule"]
