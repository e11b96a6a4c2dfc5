"""A mask stack prepared once in the library (stemdot._PreparedMasks over
stemdot_masks_new and stemdot_apply_masks), as stemdot.dask's workers apply it to every
range of a job: bit-identical to stemdot.apply_masks (stemdot_apply, stemdot_apply64,
stemdot_apply_shifted) on the same weights."""

import numpy as np
import pytest

import stemdot
from stemdot import _lib

SIG = (24, 20)


def stacks(rng):
    """Dense random weights (float64, not exact in float32), a sparse stack (a ring, two
    pixels, one weight 1/3), the three centre-of-mass masks with a disk."""
    dense = rng.normal(size=(3,) + SIG)
    sparse = np.zeros((3,) + SIG)
    sparse[0] = stemdot.ring(SIG, 10, 12, 3, 5)[0]
    sparse[1, 4, 7], sparse[2, 20, 3] = 1 / 3, -2.5
    com = np.concatenate([stemdot.com(SIG), stemdot.disk(SIG, 10, 12, 4)]).astype(np.float64)
    return {"dense": dense, "sparse": sparse, "com": com}


def test_prepared_masks_bit_identical():
    """Random frames; three kinds of masks; float32 weights with float32 and float64
    results, float64 weights with float64 results (as stemdot._job makes them);
    unshifted, a whole-pixel constant shift, sub-pixel shifts per frame; applied twice."""
    rng = np.random.default_rng(3)
    frames = rng.integers(0, 4096, size=(5, 6) + SIG, dtype=np.uint16)
    shifts = rng.uniform(-1.5, 1.5, size=(5, 6, 2))
    with stemdot.from_array(frames) as ds:
        for name, masks in stacks(rng).items():
            for weights, dtype in ((np.float32, np.float32), (np.float32, np.float64), (np.float64, np.float64)):
                _, m = stemdot._job(masks.astype(weights), dtype)  # as apply_masks and stemdot.dask send them
                assert m.dtype == weights
                prepared = stemdot._PreparedMasks(m)
                for sh in (None, (2, -1), shifts):
                    want = stemdot.apply_masks(ds, m, dtype=dtype, shifts=sh)
                    for _ in range(2):
                        out = np.empty((30, m.shape[0]), dtype=dtype)
                        c = None if sh is None else np.ascontiguousarray(sh, dtype=np.float64).reshape(-1)
                        prepared.apply(ds, c, 0, 0, out)
                        assert out.tobytes() == want.reshape(out.shape).tobytes(), (name, weights, sh, dtype)
                prepared.free()
                with pytest.raises(stemdot.BadHandleError, match="already freed"):
                    stemdot._call(stemdot._LIB.stemdot_masks_free, prepared.handle)


def test_tiny_float64_masks_refused():
    """A float64 mask whose weights are all under 2**-102 is refused naming it (its float32
    rounding would be 0 or lose precision); at 1e-30 the weights keep float64 precision."""
    frames = np.full((3,) + SIG, 1e30)
    masks = np.zeros((2,) + SIG)
    masks[0] = 1.0
    masks[1] = 1e-50
    with pytest.raises(stemdot.InvalidArgumentError, match=r"mask 1: its largest weight, 1e-50, is under 2⁻¹⁰²"):
        stemdot.apply_masks(frames, masks, dtype=np.float64)
    masks[1] = 3e-30
    got = stemdot.apply_masks(frames, masks, dtype=np.float64)
    np.testing.assert_allclose(got, np.tile([SIG[0] * SIG[1] * 1e30, SIG[0] * SIG[1] * 3.0], (3, 1)), rtol=1e-14)


def test_prepared_masks_refused_and_freed_when_dropped():
    """Infinite weights are refused naming the mask and pixel; the library's copy is
    freed with the object; a stack of another sig_shape and shifts of a wrong length are
    refused by the apply."""
    bad = np.zeros((2,) + SIG, dtype=np.float32)
    bad[1, 3, 4] = np.inf
    with pytest.raises(stemdot.InvalidArgumentError, match=r'mask 1 \("mask1"\) has weight \+Inf at pixel \(y=3, x=4\)'):
        stemdot._PreparedMasks(bad)
    big = np.zeros((2,) + SIG)
    big[1, 3, 4] = 1e300  # float64 beyond float32's range: named as given, not as its float32 rounding +Inf
    with pytest.raises(stemdot.InvalidArgumentError, match=r'mask 1 \("mask1"\) has weight 1e\+300 at pixel \(y=3, x=4\): '
                       r"weights must be finite and within float32's range, ±3.403e\+38"):
        stemdot._PreparedMasks(big)
    prepared = stemdot._PreparedMasks(np.ones((1,) + SIG, dtype=np.float32))
    handle = prepared.handle
    del prepared  # the library's copy is freed with the object
    assert stemdot._LIB.stemdot_masks_free(handle) == _lib.ERR_BAD_HANDLE
    with stemdot.from_array(np.zeros((2,) + SIG, dtype=np.uint8)) as ds:
        prepared = stemdot._PreparedMasks(np.ones((1,) + SIG[::-1], dtype=np.float32))
        with pytest.raises(stemdot.ShapeError, match="sig_shape"):
            prepared.apply(ds, None, 0, 0, np.empty((2, 1), dtype=np.float32))
        shifts = np.zeros(3)
        with pytest.raises(stemdot.ShapeError, match="shifts"):
            stemdot._PreparedMasks(np.ones((1,) + SIG, dtype=np.float32)).apply(ds, shifts, 0, 0, np.empty((2, 1), dtype=np.float32))
