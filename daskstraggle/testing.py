"""Helpers for testing daskstraggle and code built on it (no pytest import)."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["BackgroundCommand", "assert_exact_components", "free_port", "one_error_line",
           "reference_dosages", "reference_matrix"]


def assert_exact_components(result: Any, dense: np.ndarray, k: int, *, center: bool = True,
                            rtol: float = 1e-10) -> None:
    """Assert a PCA result's first ``k`` components (well separated) and variances equal
    numpy's SVD of ``dense`` (centred with ``center``), to ``rtol`` on ``1 - |cos|``."""
    A = dense - dense.mean(axis=0) if center else dense
    _, s, vt = np.linalg.svd(A, full_matrices=False)
    cos = np.abs(np.sum(result.fitted["components"] * vt[:k], axis=1))
    assert cos.min() >= 1 - rtol, cos
    np.testing.assert_allclose(result.fitted["explained_variance"],
                               s[:k] ** 2 / (dense.shape[0] - 1), rtol=rtol)


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that nothing listens on right now."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def one_error_line(err: str) -> str:
    """Assert that ``err``, a command's stderr, is exactly one line ``error: ...`` (the
    CLI's contract for bad input and failed runs; no traceback); return that line."""
    assert "Traceback" not in err, err
    lines = err.strip("\n").splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), err
    return lines[0]


class BackgroundCommand:
    """Command ``argv`` run in ``cwd`` in the background, killed after ``timeout`` seconds;
    once :meth:`result` returned, ``out``, ``err`` and ``elapsed`` (seconds) are set."""

    def __init__(self, argv: list[str], cwd: str | Path, *, timeout: float = 90) -> None:
        self.t0 = time.monotonic()
        self.timeout = float(timeout)
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, cwd=cwd)
        self.out = self.err = ""
        self.elapsed = float("nan")
        self._thread = threading.Thread(target=self._wait, daemon=True)
        self._thread.start()

    def _wait(self) -> None:
        try:
            self.out, self.err = self.proc.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.out, self.err = self.proc.communicate()
        self.elapsed = time.monotonic() - self.t0

    def result(self) -> BackgroundCommand:
        """Wait for the command to end; return self."""
        self._thread.join()
        return self


def reference_dosages(calls: np.ndarray) -> np.ndarray:
    """Return the dosage (n_variants, n_samples) of every call of ``call_genotype``, NaN when
    missing, one call at a time: an oracle for the data layer's vectorised decoding.

    An allele -2 pads a call of lower ploidy; a call with another negative allele, or
    only padding, is missing; the dosage is the alternate alleles scaled to the ploidy.
    """
    n_variants, n_samples, ploidy = calls.shape
    out = np.full((n_variants, n_samples), np.nan)
    for v in range(n_variants):
        for s in range(n_samples):
            alleles = [int(a) for a in calls[v, s] if a != -2]  # -2: padding
            if alleles and min(alleles) >= 0:
                out[v, s] = sum(a > 0 for a in alleles) * ploidy / len(alleles)
    return out


def reference_matrix(dosage: np.ndarray, ploidy: int, *, patterson: bool) -> np.ndarray:
    """Return the dosages with missing calls mean-imputed; with ``patterson``, each variant
    centred and divided by ``sqrt(p (1 - p))``, ``p = mean / ploidy`` (0 if at most 1e-12).
    """
    dense = dosage.copy()
    for v in range(dense.shape[0]):
        seen = dense[v][~np.isnan(dense[v])]
        mean = seen.mean() if len(seen) else 0.0
        dense[v][np.isnan(dense[v])] = mean
        if patterson:
            p = mean / ploidy
            var = p * (1 - p)
            dense[v] = (dense[v] - mean) / np.sqrt(var) if var > 1e-12 else 0.0
    return dense
