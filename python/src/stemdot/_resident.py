"""Data on the GPU: :func:`resident` frames kept in a device's memory for many runs."""

import ctypes
import operator

import numpy as np

from . import _lib
from ._errors import BadHandleError, InvalidArgumentError, _LIB, _call
from ._datasets import Dataset, _Closing, _warn_run_notes
from ._compute import _job, _place, _weights


class Resident(_Closing):
    """A dataset whose frames are held in GPU memory, made by :meth:`Dataset.to_device`
    or :func:`resident`: :meth:`apply_masks` computes on them at device speed, as often
    as wanted, moving only the masks and the results. Free the GPU memory with
    :meth:`close` or by using it as a context manager. The dataset stays open and owned by
    the caller.

    Raises CUDAUnavailableError without a CUDA build or a GPU, PlanError (with the bytes
    needed and free) when the frames do not fit in the device's free memory, DTypeError
    for frames that are not uint8, uint16, uint32 or float32.
    """

    def __init__(self, dataset, device=0):
        handle = ctypes.c_uint64()
        device = operator.index(device)
        if not 0 <= device < 2**31:  # ctypes would pass 2^32 + 1 as GPU 1
            raise InvalidArgumentError(f"device {device}: GPU devices are numbered from 0", _lib.ERR_INVALID_ARGUMENT)
        _call(_LIB.stemdot_to_device, dataset.handle, device, ctypes.byref(handle))
        self._handle = handle.value
        self.device = device
        self.nav_shape = dataset.nav_shape
        self.sig_shape = dataset.sig_shape
        self.source = dataset.source
        self._scan = (dataset.scan_shape, dataset.positions)  # where an ROI's results go
        self._run_notes = dataset.run_notes()  # of the frames read to the GPU, which every apply computes

    @property
    def closed(self):
        return self._handle is None

    def apply_masks(self, masks, dtype=np.float32, roi_compact=False):
        """As :func:`apply_masks` (same masks, dtype, roi_compact and result), on the
        resident frames."""
        out_dtype, masks = _job(masks, dtype, self.sig_shape)
        if self._handle is None:
            raise BadHandleError(f"resident dataset {self.source} is closed", _lib.ERR_BAD_HANDLE)
        if roi_compact and self._scan[1] is None:
            raise InvalidArgumentError("roi_compact=True needs a region of interest (roi=)", _lib.ERR_INVALID_ARGUMENT)
        out = np.empty(self.nav_shape + (masks.shape[0],), dtype=out_dtype)
        weights, suffix = _weights(masks)
        _call(
            getattr(_LIB, "stemdot_resident_apply" + suffix),
            self._handle,
            weights,
            masks.shape[0],
            masks.shape[1],
            masks.shape[2],
            ctypes.c_void_p(out.ctypes.data),
            _lib.DTYPE_CODES[out.dtype.name],
            out.size,
        )
        _warn_run_notes(self._run_notes, stacklevel=2)
        return _place(out, self.nav_shape, *self._scan, roi_compact)

    def close(self):
        """Frees the GPU memory (idempotent)."""
        if self._handle is not None:
            _call(_LIB.stemdot_resident_free, self._handle)
            self._handle = None

    def __reduce__(self):
        raise TypeError(f"stemdot.Resident {self.source} holds GPU memory of this process and cannot be pickled")

    def __repr__(self):
        state = "closed" if self.closed else f"GPU {self.device}, nav_shape={self.nav_shape}, sig_shape={self.sig_shape}"
        return f"<stemdot.Resident {self.source}: {state}>"


def resident(data, device=0):
    """Holds the frames of ``data`` (a :class:`Dataset`) in the memory of GPU ``device``::

        with stemdot.open("scan.mib") as ds, stemdot.resident(ds) as r:
            bf = r.apply_masks(stemdot.disk(ds.sig_shape, 128, 128, 20))
            adf = r.apply_masks(stemdot.ring(ds.sig_shape, 128, 128, 40, 100))

    Returns a :class:`Resident` (a context manager that frees the GPU memory on exit).
    """
    if not isinstance(data, Dataset):
        raise TypeError(f"resident wants a stemdot.Dataset, got {type(data).__name__}")
    return Resident(data, device)
