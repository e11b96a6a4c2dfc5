"""Tests of datasets held on the GPU (stemdot.resident, Dataset.to_device): against
apply_masks and a float64 reference where a GPU is present, the CUDA error otherwise."""

import numpy as np
import pytest

import stemdot


def test_resident():
    rng = np.random.default_rng(5)
    frames = rng.integers(0, 1 << 16, size=(3, 4, 32, 32), dtype=np.uint16)
    masks = np.concatenate([rng.standard_normal((2, 32, 32)), stemdot.disk((32, 32), 16, 16, 6)]).astype(np.float32)
    with stemdot.from_array(frames) as ds:
        try:
            r = stemdot.resident(ds)
        except stemdot.CUDAUnavailableError as e:
            assert "GPU" in str(e)
            with pytest.raises(stemdot.CUDAUnavailableError):
                ds.to_device()
            return
        with r:
            f = frames.reshape(12, -1).astype(np.float64)
            m = masks.reshape(3, -1).astype(np.float64)
            want = (f @ m.T).reshape(3, 4, 3)
            scale = (np.abs(f) @ np.abs(m).T).reshape(3, 4, 3)
            for dtype in (np.float32, np.float64):
                for _ in range(2):
                    got = r.apply_masks(masks, dtype=dtype)
                    assert got.dtype == np.dtype(dtype) and got.shape == (3, 4, 3)
                    assert np.all(np.abs(got - want) <= 1e-5 * scale + 1e-6)
                cpu = stemdot.apply_masks(ds, masks, dtype=dtype)
                assert np.all(np.abs(got - cpu) <= 2e-5 * scale + 1e-6)
            with pytest.raises(stemdot.ShapeError):
                r.apply_masks(np.ones((1, 16, 32)))
        assert r.closed
        with pytest.raises(stemdot.BadHandleError):
            r.apply_masks(masks)
    with pytest.raises(TypeError):
        stemdot.resident(frames)
