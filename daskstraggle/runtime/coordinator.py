"""Deprecated: moved to :mod:`daskstraggle.engine.coordinator`; the old import path warns and
goes in a later release."""

from __future__ import annotations

from daskstraggle._deprecation import moved_module

__all__: list[str] = []

__getattr__ = moved_module(
    __name__, "daskstraggle.engine.coordinator",
    ["LOG_SIZE", "Coordinator", "RunSession", "resumed_session"]
)
