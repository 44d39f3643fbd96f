"""What this machine has for a run: memory available to a new allocation, and where a path
that does not exist yet would be created."""

from __future__ import annotations

from pathlib import Path

__all__ = ["available_memory", "nearest_existing"]


def available_memory() -> int:
    """Return the bytes of memory available to a new allocation (psutil's ``available``)."""
    import psutil  # distributed's dependency, imported when a check needs it

    return int(psutil.virtual_memory().available)


def nearest_existing(path: Path) -> Path:
    """Return ``path`` if it exists, else its nearest existing ancestor."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path
