"""Stop rules (:class:`StopRule`, declared in :mod:`daskstraggle.options`)."""

from __future__ import annotations

from daskstraggle.options import StopRule

__all__ = ["StopRule"]
