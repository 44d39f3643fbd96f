"""Dense linear-algebra helpers of the problems, on small arrays (an iterate, a d x d Gram
matrix, an R factor), never a whole data block."""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import numpy as np

from daskstraggle.errors import InvalidParameterError

__all__ = [
    "MAX_DENSE_FEATURES",
    "check_dense_size",
    "orthonormalize",
    "power_iteration",
    "precision_floor",
    "sin_largest_angle",
    "solve_psd",
    "stack_r",
]

#: Largest number of columns for which the exact reference solvers build a dense
#: d x d matrix (20000 columns: 3.2 GB in float64).
MAX_DENSE_FEATURES = 20_000

#: Seed of the generator that fills rank-deficient columns in :func:`orthonormalize`.
_FILL_SEED = 20_240_917

#: Relative size below which :func:`orthonormalize` treats a column as dependent.
_RANK_TOL = 1e-12


def precision_floor(n: int) -> float:
    """Return the relative size below which an eigenvalue of an ``n x n`` product is rounding.

    ``max(n, 8) * eps`` (numpy's ``matrix_rank`` tolerance for a Hermitian matrix): an
    eigenvalue of ``X^T X`` (``n`` the columns of ``X``) at most this fraction of the
    largest cannot be told from zero.

    Examples
    --------
    >>> precision_floor(6) == 8 * float(np.finfo(np.float64).eps)
    True
    """
    return max(int(n), 8) * float(np.finfo(np.float64).eps)


def orthonormalize(Y: np.ndarray, *, tol: float = _RANK_TOL) -> np.ndarray:
    """Return an orthonormal basis of the columns of ``Y`` by QR, with the diagonal of R
    positive (so the result depends on ``Y`` only, not on LAPACK's reflector signs).

    ``Y`` is (d, k), ``k <= d``; ``Q`` (d, k) spans the same leading spaces wherever ``Y``
    has full column rank. A column whose part orthogonal to the previous ones is at most
    ``tol`` times its norm, or whose norm is at most :func:`precision_floor` ``(d)`` times
    the largest column norm, is dependent: it is replaced by a random direction orthogonal
    to the kept columns (fixed seed). Small independent columns are kept.
    """
    Y = np.asarray(Y, dtype=np.float64)
    d, k = Y.shape
    Q, R = np.linalg.qr(Y)
    diag = np.diag(R).copy()
    signs = np.where(diag < 0, -1.0, 1.0)
    Q = Q * signs
    norms = np.linalg.norm(Y, axis=0)
    scale = float(np.max(norms, initial=0.0))
    weak = ((np.abs(diag) <= tol * norms) | (norms <= precision_floor(d) * scale)
            if scale > 0 else np.ones(k, dtype=bool))
    if not weak.any():
        return Q
    keep = Q[:, ~weak]
    fill = np.random.default_rng(_FILL_SEED).standard_normal((d, int(weak.sum())))
    for _ in range(2):  # project twice: one pass can leave O(eps) components behind
        fill -= keep @ (keep.T @ fill)
    basis, r_fill = np.linalg.qr(fill)
    basis = basis * np.where(np.diag(r_fill) < 0, -1.0, 1.0)
    Q = Q.copy()
    Q[:, weak] = basis
    return Q


def sin_largest_angle(A: np.ndarray, B: np.ndarray) -> float:
    """Return the sine of the largest principal angle between the spaces of the orthonormal
    columns ``A`` and ``B`` (d, k): the spectral norm of ``A - B (B^T A)`` in [0, 1]
    (accurate for tiny angles)."""
    residual = A - B @ (B.T @ A)
    if residual.size == 0:
        return 0.0
    return min(1.0, float(np.linalg.norm(residual, ord=2)))


def power_iteration(matvec: Callable[[np.ndarray], np.ndarray], v0: np.ndarray, *,
                    n_iter: int = 20) -> float:
    """Estimate the largest eigenvalue of a symmetric positive semi-definite operator
    ``matvec`` by ``n_iter`` applications from ``v0`` (random, so not orthogonal to the
    top eigenvector; InvalidParameterError if zero).

    Returns the Rayleigh quotient at the last vector: a lower bound on the largest
    eigenvalue that converges to it; 0 for the zero operator.
    """
    v = np.asarray(v0, dtype=np.float64)
    norm = float(np.linalg.norm(v))
    if norm == 0:
        raise InvalidParameterError(
            "The 'v0' parameter of power_iteration must be a non-zero vector. Got zeros instead."
        )
    v = v / norm
    lam = 0.0
    for _ in range(n_iter):
        w = np.asarray(matvec(v), dtype=np.float64)
        lam = float(v @ w)
        norm = float(np.linalg.norm(w))
        if norm == 0:
            return 0.0
        v = w / norm
    return max(lam, 0.0)


def stack_r(top: np.ndarray, bottom: np.ndarray) -> np.ndarray:
    """Return the R factor of ``vstack(top, bottom)``, R factors (or raw rows) of two
    disjoint row sets: the TSQR combine step. Shape (min(m1 + m2, c), c), ``R^T R = top^T
    top + bottom^T bottom``; (0, c) for no rows."""
    A = np.vstack([top, bottom])
    if A.shape[0] == 0:
        return np.zeros((0, A.shape[1]))
    # numpy's stubs say QRResult for every mode; mode="r" returns R alone
    return cast(np.ndarray, np.linalg.qr(A, mode="r"))


def check_dense_size(n_features: int, caller: str) -> None:
    """Raise InvalidParameterError if ``n_features`` exceeds :data:`MAX_DENSE_FEATURES`
    (an exact reference solve would need a dense d x d matrix too large)."""
    if n_features > MAX_DENSE_FEATURES:
        gib = 8 * n_features**2 / 2**30
        raise InvalidParameterError(
            f"The 'reference' parameter of {caller} must be False for a matrix with more "
            f"than {MAX_DENSE_FEATURES} columns: the exact solver builds a dense "
            f"{n_features} x {n_features} matrix ({gib:.1f} GiB). Got True instead. "
            "Pass reference=False (CLI: drop --reference)."
        )


def solve_psd(H: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Solve ``H x = b`` for symmetric positive (semi-)definite ``H``.

    Cholesky when ``H`` is positive definite; the minimum-norm least-squares solution
    when it is singular (e.g. no regularisation and collinear columns).
    """
    import scipy.linalg  # loaded when first needed

    try:
        factor = scipy.linalg.cho_factor(H)
    except np.linalg.LinAlgError:
        return scipy.linalg.lstsq(H, b)[0]
    return scipy.linalg.cho_solve(factor, b)
