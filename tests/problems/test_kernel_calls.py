"""What a kernel call costs besides the kernel, without changing what it computes: the PCA
kernel's buffers kept per thread, the compile-cache key, the ``DASKSTRAGGLE_NUMBA`` switch
(problems/_kernels.py)."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

from daskstraggle.problems import Block
from daskstraggle.problems import _kernels as kernels

numba = pytest.importorskip("numba")


def _fresh_thread(fn):
    """``fn()`` run in a new thread: its PCA buffers are new, not kept ones."""
    out = []
    thread = threading.Thread(target=lambda: out.append(fn()))
    thread.start()
    thread.join()
    return out[0]


def test_kept_pca_buffers_give_what_new_ones_give():
    """One thread's calls of one padded width (int8 rows of 8 and of 7 columns: both 8
    wide) and of several widths, in turn: every result equals, bit for bit, the same call
    in a thread with new buffers, and no result changes after the next call."""
    rng = np.random.default_rng(0)
    blocks = [Block(rng.integers(-1, 3, size=(9, m)).astype(np.int8), fill=rng.random(9))
              for m in (8, 7, 8, 20, 7)] + [Block(rng.normal(size=(5, 6)))]
    shapes = [(b.n_features, 3) for b in blocks]
    Vs = [rng.normal(size=shape) for shape in shapes]
    shifts = [rng.normal(size=3) for _ in blocks]
    results = [kernels.pca_pass(b, V, s, implementation="numba")
               for b, V, s in zip(blocks, Vs, shifts, strict=True)]
    for b, V, s, got in zip(blocks, Vs, shifts, results, strict=True):
        alone = _fresh_thread(lambda b=b, V=V, s=s: kernels.pca_pass(
            b, V, s, implementation="numba"))
        for a, e in zip(got, alone, strict=True):
            np.testing.assert_array_equal(a, e)
        assert got[0].flags.c_contiguous and got[0].flags.owndata  # not a kept buffer
    V1 = rng.normal(size=(8, 1))  # k = 1: a copy still, not a view of the kept G
    first = kernels.pca_pass(blocks[0], V1, None, implementation="numba")[0]
    kept = first.copy()
    kernels.pca_pass(blocks[2], rng.normal(size=(8, 1)), None, implementation="numba")
    np.testing.assert_array_equal(first, kept)


def test_aligned_buffers_start_on_64_byte_boundaries():
    for shape in [(3, 8), (3, 7), (1,), (5,), (2, 13)]:
        arrays = kernels._aligned_zeros(shape, 3)
        for a in arrays:
            assert a.shape == shape and a.ctypes.data % 64 == 0 and not a.any()
        arrays[0][...] = 1.0  # no two share memory
        assert not arrays[1].any() and not arrays[2].any()


def test_the_compile_key_tells_apart_what_numba_types_tell_apart():
    base = np.zeros((6, 4))
    readonly = base.copy()
    readonly.flags.writeable = False
    args = [base, base.T, base[:, ::2], readonly, base.astype(np.float32),
            base.astype(np.int8), base[0], np.zeros((2, 2, 2)), 3, 3.0, True]
    for a in args:
        for b in args:
            if kernels._compile_key("k", (a,)) == kernels._compile_key("k", (b,)):
                assert numba.typeof(a) == numba.typeof(b), (a, b)
    assert len({kernels._compile_key("k", (a,)) for a in args}) == len(args)
    assert kernels._compile_key("k", (np.ones((9, 2)), 7)) == \
        kernels._compile_key("k", (base, 3))
    # numba's fingerprint does not tell byte orders apart: another byte order is keyed
    # by its dtype (numba then refuses it when compiling)
    swapped = base.astype(base.dtype.newbyteorder())
    assert kernels._compile_key("k", (swapped,)) == ("k", kernels._argument_key(swapped))
    assert kernels._compile_key("k", (swapped,)) != kernels._compile_key("k", (base,))


def test_the_numba_switch_follows_the_environment(monkeypatch):
    monkeypatch.delenv(kernels.NUMBA_VARIABLE, raising=False)
    assert kernels.default_implementation() == "numba"
    monkeypatch.setenv(kernels.NUMBA_VARIABLE, "0")
    assert kernels.default_implementation() == "numpy"
    monkeypatch.setenv(kernels.NUMBA_VARIABLE, " 1 ")
    assert kernels.default_implementation() == "numba"
    monkeypatch.setenv(kernels.NUMBA_VARIABLE, "0")
    monkeypatch.setattr(os, "environ", {kernels.NUMBA_VARIABLE: "1"})  # not os's
    assert kernels.default_implementation() == "numba"
