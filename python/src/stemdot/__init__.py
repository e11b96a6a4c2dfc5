"""stemdot: virtual detector images from 4D-STEM data.

A 4D-STEM scan holds one detector frame (``sig_shape = (sig_y, sig_x)`` pixels) at every
scan position of the navigation grid (``nav_shape``). :func:`apply_masks` computes, for
every frame and every mask of a stack (``n_masks × sig_y × sig_x``, float32), the dot
product ``Σ mask·frame``, as LiberTEM's ``ApplyMasksUDF`` does, on stemdot's pinned CPU
(and GPU) workers. The result has shape ``nav_shape + (n_masks,)``.

This package binds libstemdot's C ABI (``include/stemdot.h``) with ctypes::

    import numpy as np, stemdot
    with stemdot.open("scan.mib") as ds:
        masks = np.concatenate([stemdot.disk(ds.sig_shape, 42, 126, 30), stemdot.com(ds.sig_shape)])
        images = stemdot.apply_masks(ds, masks)          # (nav_y, nav_x, 4) float32

The mask helpers (:func:`disk`, :func:`ring`, :func:`point`, :func:`rect`, :func:`com`,
:func:`mask`) call the same Go generators as the ``stemdot`` CLI's ``--mask``, so their
weights are bit-identical to the CLI's. Errors are raised as :class:`StemdotError`
subclasses carrying the library's message. Ctrl-C cancels a running
:func:`apply_masks`. Child processes that use stemdot must be started with
``multiprocessing``'s "spawn" or "forkserver" method, not "fork" once the parent has
used it (:class:`ForkedProcessError`).
"""

import collections
import ctypes
import json
import operator
import os
import re
import sys
import threading
import time
import warnings

from . import _startup

_startup.handle_interrupts()  # python -m stemdot.dask: a Ctrl-C from here on exits 1

import numpy as np  # noqa: E402

from . import _lib  # noqa: E402

__version__ = "0.2.0"

__all__ = [
    "Dataset",
    "Resident",
    "resident",
    "StemdotError",
    "InvalidArgumentError",
    "StemdotIOError",
    "FormatError",
    "ShapeError",
    "DTypeError",
    "PlanError",
    "CancelledError",
    "BadHandleError",
    "CUDAUnavailableError",
    "InternalError",
    "ForkedProcessError",
    "open",
    "from_array",
    "apply_masks",
    "describe_plan",
    "mask",
    "mask_stack",
    "disk",
    "ring",
    "point",
    "rect",
    "com",
    "com_shifts",
    "descan_fit",
    "DescanFit",
    "library_path",
]



class _Library:
    """libstemdot, loaded at the first call rather than at import: a process that only
    imports stemdot (a Dask Nanny or scheduler unpickling :mod:`stemdot.dask`'s plugin,
    a parent that forks workers) never starts the library's Go runtime. Attribute
    access forwards to the loaded ctypes library; ``path`` is its file. In a child
    forked from a process that had loaded it, where the Go runtime cannot run, it raises
    :class:`ForkedProcessError` instead."""

    def __init__(self):
        self._cdll = None
        self.path = None
        self.forked = False
        self._lock = threading.Lock()
        os.register_at_fork(after_in_child=self._after_fork)

    def _after_fork(self):
        self.forked = self._cdll is not None

    def load(self):
        with self._lock:
            if self._cdll is None:
                self._cdll, self.path = _lib.load()
        return self._cdll

    def __getattr__(self, name):
        if self.forked:
            raise ForkedProcessError(_FORKED_MESSAGE, _lib.ERR_FORKED)
        return getattr(self._cdll or self.load(), name)


_LIB = _Library()


def __getattr__(name):
    """``stemdot.library_path``: the loaded library's path (loading it if needed)."""
    if name == "library_path":
        _LIB.load()
        return _LIB.path
    raise AttributeError(f"module 'stemdot' has no attribute {name!r}")


# --------------------------------------------------------------------------- errors


class StemdotError(Exception):
    """An error reported by libstemdot. ``code`` is the stemdot_status value, ``message``
    the library's message (the problem, and the option or argument that fixes it)."""

    def __init__(self, message, code=_lib.ERR_INTERNAL):
        super().__init__(message)
        self.code = code
        self.message = message

    def __reduce__(self):  # keeps the code when pickled (e.g. raised in a Dask task)
        return (type(self), (self.message, self.code))


class InvalidArgumentError(StemdotError, ValueError):
    """STEMDOT_ERR_INVALID_ARGUMENT: a bad argument, option string, mask spec or request."""


class StemdotIOError(StemdotError, OSError):
    """STEMDOT_ERR_IO: a file not found or unreadable, or a read error during a run."""


class FormatError(StemdotError, ValueError):
    """STEMDOT_ERR_FORMAT: file content that stemdot cannot read."""


class ShapeError(StemdotError, ValueError):
    """STEMDOT_ERR_SHAPE: sizes that do not match (arrays, masks, nav/sig shapes)."""


class DTypeError(StemdotError, TypeError):
    """STEMDOT_ERR_DTYPE: an unsupported or wrong dtype."""


class PlanError(StemdotError, ValueError):
    """STEMDOT_ERR_PLAN: a cpus/gpus request that cannot be planned on this machine."""


class CancelledError(StemdotError):
    """STEMDOT_ERR_CANCELLED: the run was cancelled."""


class BadHandleError(StemdotError, ValueError):
    """STEMDOT_ERR_BAD_HANDLE: a closed dataset or another invalid handle."""


class CUDAUnavailableError(StemdotError):
    """STEMDOT_ERR_CUDA_UNAVAILABLE: GPUs asked for, but no CUDA build or no GPU."""


class InternalError(StemdotError):
    """STEMDOT_ERR_INTERNAL: a bug in stemdot."""


class ForkedProcessError(StemdotError, RuntimeError):
    """STEMDOT_ERR_FORKED: stemdot called in a child forked (without exec) from a process
    that had used it, e.g. by ``multiprocessing`` with the "fork" start method (the
    default on Linux before Python 3.14): the library's Go runtime does not survive
    fork. Start such children with "spawn" or "forkserver"."""


_FORKED_MESSAGE = (
    "stemdot cannot be used in a process forked from one that had loaded it (the library's Go runtime "
    "does not survive fork); start the child with exec: multiprocessing.get_context('spawn') or "
    "'forkserver' (or multiprocessing.set_start_method('spawn'))"
)


_ERRORS = {
    _lib.ERR_INVALID_ARGUMENT: InvalidArgumentError,
    _lib.ERR_IO: StemdotIOError,
    _lib.ERR_FORMAT: FormatError,
    _lib.ERR_SHAPE: ShapeError,
    _lib.ERR_DTYPE: DTypeError,
    _lib.ERR_PLAN: PlanError,
    _lib.ERR_CANCELLED: CancelledError,
    _lib.ERR_BAD_HANDLE: BadHandleError,
    _lib.ERR_CUDA_UNAVAILABLE: CUDAUnavailableError,
    _lib.ERR_INTERNAL: InternalError,
    _lib.ERR_FORKED: ForkedProcessError,
}


def _error(code, message):
    # The C ABI names its function first ("stemdot_apply: ..."); a Python user called none.
    message = re.sub(r"^stemdot_[a-z0-9_]+: ", "", message)
    return _ERRORS.get(code, StemdotError)(message, code)


def _call(fn, *args):
    """Calls a libstemdot function; raises the error of a nonzero status. The message is
    read on the same thread, right after the call (it is thread-local)."""
    code = fn(*args)
    if code != _lib.OK:
        raise _error(code, _LIB.stemdot_last_error().decode(errors="replace"))


# -------------------------------------------------------------------------- datasets


class _Closing:
    """Context manager and finaliser of an object with an idempotent close()."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class Dataset(_Closing):
    """An opened dataset: a file (:func:`open`) or a numpy array (:func:`from_array`).

    Attributes: ``nav_shape`` and ``sig_shape`` (tuples of ints), ``dtype`` (numpy dtype
    of the stored pixels), ``n_frames``, ``warnings`` (what a user should know about how
    the file was read, one string each, as ``stemdot apply`` prints them: a guessed nav
    shape, surplus or missing frames, a sync offset, the HDF5 dataset chosen). Close it
    with :meth:`close` or use it as a context manager; a closed dataset raises
    :class:`BadHandleError`. A dataset opened from a file pickles as its absolute path
    and its options: unpickling opens the file again (in that process, at that path);
    one made by :func:`from_array` does not pickle (pickle the array).
    """

    def __init__(self, handle, source, keepalive=None, reopen=None):
        self._handle = handle
        self._keepalive = keepalive  # the array whose memory a from_array dataset reads
        self._reopen = reopen  # (path, format_options) of a dataset opened from a file
        self.source = source
        info = _lib.DatasetInfo()
        _call(_LIB.stemdot_dataset_get_info, handle, ctypes.byref(info))
        self.nav_shape = tuple(int(n) for n in info.nav_shape[: info.nav_ndim])
        self.sig_shape = (int(info.sig_shape[0]), int(info.sig_shape[1]))
        self.dtype = np.dtype(_lib.DTYPES[info.dtype])
        self.n_frames = int(info.n_frames)
        self.warnings = _dataset_warnings(handle)

    @property
    def closed(self):
        return self._handle is None

    @property
    def handle(self):
        """The libstemdot dataset handle; BadHandleError once closed."""
        if self._handle is None:
            raise BadHandleError(f"dataset {self.source} is closed", _lib.ERR_BAD_HANDLE)
        return self._handle

    def close(self):
        """Closes the dataset (idempotent). Raises InvalidArgumentError, leaving it open,
        while apply_masks runs on it in another thread."""
        if self._handle is not None:
            _call(_LIB.stemdot_dataset_free, self._handle)
            self._handle = None
            self._keepalive = None

    def to_device(self, device=0):
        """Copies every frame into the memory of GPU ``device`` once and returns a
        :class:`Resident` whose :meth:`Resident.apply_masks` computes on them there. See
        :func:`resident`."""
        return Resident(self, device)

    def __repr__(self):
        state = "closed" if self.closed else f"nav_shape={self.nav_shape}, sig_shape={self.sig_shape}, dtype={self.dtype}"
        return f"<stemdot.Dataset {self.source}: {state}>"

    def __reduce__(self):
        # The handle is a number valid in this process only: pickle how to open the file.
        if self._reopen is None:
            raise TypeError(f"stemdot.Dataset {self.source} (from_array) cannot be pickled: pickle the array and call from_array on it")
        path, options = self._reopen
        return (_reopen, (path, options))


def _reopen(path, options):
    """Unpickles a Dataset: opens its file again with the same options."""
    return open(path, **options)


def _option_value(key, value):
    """An option value as text for the "key=value;..." strings of stemdot_open and
    stemdot_plan_new_options, which the library parses and checks (the same parser as
    the CLI's flags): a sequence of integers (tuple, list, numpy array; numpy integers
    included) as "a,b", an integer (int or numpy integer) as its digits, a bool as "true"
    or "false", a numpy dtype or type as its name, a string as it is. Other values
    (floats, sequences of anything but integers) raise TypeError naming the option."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]  # a numpy scalar
    if isinstance(value, (bool, np.bool_)):
        text = "true" if value else "false"
    elif isinstance(value, (np.dtype, type)):
        text = np.dtype(value).name
    elif isinstance(value, (int, np.integer)):
        text = str(int(value))
    elif isinstance(value, str):
        text = value
    elif isinstance(value, (tuple, list, np.ndarray)):
        items = list(value)
        if isinstance(value, np.ndarray) and value.ndim != 1 or not all(isinstance(n, (int, np.integer)) and not isinstance(n, (bool, np.bool_)) for n in items):
            raise TypeError(f"option {key}={value!r}: want a sequence of integers such as (64, 64), not of "
                            f"{', '.join(sorted({type(n).__name__ for n in items}))}")
        text = ",".join(str(int(n)) for n in items)
    else:
        raise TypeError(f"option {key}={value!r}: want an integer, a string or a sequence of integers, not {type(value).__name__}")
    if any(c in text for c in ";=\0"):
        raise ValueError(f"option {key}={text!r} contains ';', '=' or NUL")
    return text


def open(path, **format_options):
    """Opens a 4D-STEM file (Merlin .mib/.hdr, NanoMEGAS .blo, HDF5, EMPAD .xml, .npy, or
    raw) and returns a :class:`Dataset`.

    ``format_options`` (all optional): ``format`` ("raw", "npy", "mib", "blo", "hdf5",
    "empad"; default detected), ``nav_shape`` (tuple; overrides the file's scan shape when
    it has as many positions, or as many as the file has frames; another raises
    :class:`ShapeError`), ``sig_shape`` (tuple, raw), ``dtype``
    (numpy dtype or name, raw), ``byte_order`` ("little" or "big", raw), ``offset``
    (header bytes to skip, raw), ``frame_header`` and ``frame_footer`` (bytes before and
    after every frame, raw), ``sync_offset`` (scan position p reads the file's frame
    p + sync_offset: positive skips leading frames, negative inserts blank ones),
    ``flyback`` (flyback frames of each scan row, read as no scan position: "start" or
    "end" for one per row, "start:N" or "end:N", "none", or "auto", the default: one per
    row when the file holds (nav_x+1)·nav_y frames, with a warning: where the frame
    headers set it apart in every row, else at the end of each row of a scan of 3 or
    more rows),
    ``dataset_path`` (HDF5: the dataset of frames), ``allow_fill`` (HDF5: ``True`` reads
    storage that is missing or was never written, such as a virtual dataset's missing
    source file, as the fill value with a warning, instead of raising), ``frames``
    (``(first, count)``: only frames ``first .. first+count-1`` in scan order, after
    ``nav_shape`` and ``sync_offset``, as a dataset of nav_shape ``(count,)``; the rest of
    the file is not read). Raises :class:`StemdotIOError` for a missing file,
    :class:`FormatError` for content that cannot be read, :class:`InvalidArgumentError`
    for unknown options. What the CLI warns about (a guessed nav shape, frames that do
    not fit the scan, the HDF5 dataset chosen) is issued as UserWarning and kept in
    ``Dataset.warnings``.
    """
    ds = _open(path, format_options)
    for w in ds.warnings:
        warnings.warn(f"stemdot: {w}", stacklevel=2)
    return ds


def _open(path, format_options):
    """open() without issuing the dataset's warnings (stemdot.dask's workers report them
    to the client instead)."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    spath = os.fspath(path)
    if "\0" in spath:
        raise ValueError(f"path {spath!r} contains a NUL character")
    for key, value in format_options.items():
        if isinstance(value, str) and not value.strip():  # the library would read it as not given
            raise InvalidArgumentError(f"option {key}={value!r} is empty: give a value, or leave the option out (None) "
                                       "for its default", _lib.ERR_INVALID_ARGUMENT)
    items = [f"{key}={_option_value(key, value)}" for key, value in format_options.items() if value is not None]
    handle = ctypes.c_uint64()
    _call(_LIB.stemdot_open, spath.encode(), ";".join(items).encode(), ctypes.byref(handle))
    return Dataset(handle.value, spath, reopen=(os.path.abspath(spath), dict(format_options)))


def _dataset_warnings(handle):
    """The dataset's warnings (a guessed nav shape, surplus or missing frames, ...)."""
    needed = ctypes.c_size_t()
    _call(_LIB.stemdot_dataset_warnings, handle, None, 0, ctypes.byref(needed))  # the length
    buf = ctypes.create_string_buffer(needed.value + 1)
    _call(_LIB.stemdot_dataset_warnings, handle, buf, len(buf), ctypes.byref(needed))
    text = buf.value.decode()
    return text.split("\n") if text else []


def from_array(frames):
    """Wraps a numpy array of frames, shape ``nav_shape + (sig_y, sig_x)``, as a
    :class:`Dataset` without copying when it is C-contiguous, in native byte order and of
    a supported dtype (uint8, uint16, uint32, int8, int16, int32, float32, float64). A
    non-contiguous or byte-swapped array is copied once into a native C-contiguous one.
    Other dtypes raise :class:`DTypeError`. The dataset reads the array's memory while it
    is open (keep it unchanged meanwhile); it keeps a reference to the array.
    """
    if not isinstance(frames, np.ndarray):
        raise TypeError(f"from_array wants a numpy.ndarray, got {type(frames).__name__}")
    if frames.ndim < 3:
        raise ShapeError(
            f"frames of shape {frames.shape}: want nav_shape + (sig_y, sig_x) with at least one nav dimension "
            "(use frames[np.newaxis] for a single frame)",
            _lib.ERR_SHAPE,
        )
    name = frames.dtype.name  # the same for both byte orders: ">u2" is "uint16"
    if frames.dtype.kind not in "uif" or name not in _lib.DTYPE_CODES:
        raise DTypeError(
            f"frames dtype {frames.dtype} is not supported (want one of {', '.join(_lib.DTYPE_CODES)})",
            _lib.ERR_DTYPE,
        )
    if not frames.dtype.isnative or not frames.flags.c_contiguous:
        frames = np.ascontiguousarray(frames, dtype=np.dtype(name))
    nav = frames.shape[:-2]
    nav_arr = (ctypes.c_size_t * max(len(nav), 1))(*nav)
    handle = ctypes.c_uint64()
    _call(
        _LIB.stemdot_dataset_from_memory,
        ctypes.c_void_p(frames.ctypes.data),
        frames.nbytes,
        _lib.DTYPE_CODES[name],
        len(nav),
        nav_arr,
        frames.shape[-2],
        frames.shape[-1],
        ctypes.byref(handle),
    )
    return Dataset(handle.value, f"<array {frames.shape} {frames.dtype}>", keepalive=frames)


# ---------------------------------------------------------------------------- masks


def _float(v):
    v = float(v)
    if v != v or v in (float("inf"), float("-inf")):
        raise InvalidArgumentError(f"mask parameter {v} is not finite", _lib.ERR_INVALID_ARGUMENT)
    return repr(v)


def _int(v):
    return str(operator.index(v))


def mask(spec, sig_shape):
    """Masks of a CLI ``--mask`` spec (``disk:CX,CY,R``, ``ring:CX,CY,RI,RO``,
    ``point:X,Y``, ``rect:X,Y,W,H``, ``com``, ``com:CX,CY[,R]``; x = column, y = row, in
    pixels) for frames of ``sig_shape``: float32 array (n, sig_y, sig_x), from the same
    Go generators as the CLI. Raises :class:`InvalidArgumentError` for a bad spec, and
    TypeError when the arguments are not a spec string and a (sig_y, sig_x) pair (the
    helpers :func:`disk`, :func:`ring`, :func:`com` take ``sig_shape`` first)."""
    if not isinstance(spec, str) or isinstance(sig_shape, str) or len(tuple(sig_shape)) != 2:
        raise TypeError(f"mask(spec, sig_shape) wants a spec string such as 'disk:16,16,5' and a (sig_y, sig_x) pair, got {spec!r}, {sig_shape!r}")
    sig_y, sig_x = (int(n) for n in sig_shape)
    n = ctypes.c_size_t()
    _call(_LIB.stemdot_mask_parse, spec.encode(), sig_y, sig_x, None, 0, ctypes.byref(n))
    out = np.empty((n.value, sig_y, sig_x), dtype=np.float32)
    _call(
        _LIB.stemdot_mask_parse,
        spec.encode(),
        sig_y,
        sig_x,
        out.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
        out.size,
        ctypes.byref(n),
    )
    return out


def mask_stack(sig_shape, files=(), specs=(), dtype=np.float32):
    """The mask stack of NPY mask ``files`` and then mask ``specs`` (as for :func:`mask`),
    in that order, for frames of ``sig_shape``: the stack ``stemdot apply --masks FILE ...
    --mask SPEC ...`` and ``python -m stemdot.dask`` apply, built by the library (the Go
    API's ``stemdot.MasksFrom``, ``stemdot_mask_stack``). A file holds one mask (sig_y,
    sig_x) or a stack (n, sig_y, sig_x) of bool, integer or float dtype; ``files`` and
    ``specs`` are a path or spec, or sequences of them.

    Returns ``(masks, names)``: an array (n_masks, sig_y, sig_x) of ``dtype`` (float32,
    or float64 to keep float64 weights of a file for ``apply_masks(...,
    dtype=np.float64)``) and the masks' names (``"stack[0]"`` for mask 0 of stack.npy,
    ``"disk"``, ``"com_sum"``, ...). Raises StemdotIOError or FormatError for a file,
    DTypeError for a file of another dtype (complex, object, ...) or a ``dtype`` other
    than float32 and float64, InvalidArgumentError for a spec or no masks at all,
    ShapeError for masks of another sig shape."""
    out_dtype = np.dtype(dtype)
    if out_dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise DTypeError(f"mask_stack: dtype {out_dtype} is not float32 or float64", _lib.ERR_DTYPE)
    files = [os.fsencode(f) for f in ([files] if isinstance(files, (str, bytes, os.PathLike)) else files)]
    specs = [s.encode() for s in ([specs] if isinstance(specs, str) else specs)]
    if not files and not specs:
        raise InvalidArgumentError("mask_stack: no masks: give NPY mask files (files=) or mask specs (specs=)", _lib.ERR_INVALID_ARGUMENT)
    sig_y, sig_x = (operator.index(n) for n in sig_shape)
    file_list = (ctypes.c_char_p * max(len(files), 1))(*files)
    spec_list = (ctypes.c_char_p * max(len(specs), 1))(*specs)
    n, needed = ctypes.c_size_t(), ctypes.c_size_t()

    def build(out, names):
        _call(
            _LIB.stemdot_mask_stack, file_list, len(files), spec_list, len(specs), sig_y, sig_x,
            None if out is None else ctypes.c_void_p(out.ctypes.data), _lib.DTYPE_CODES[out_dtype.name],
            0 if out is None else out.size, ctypes.byref(n), names, 0 if names is None else len(names), ctypes.byref(needed),
        )

    build(None, None)  # the sizes
    masks = np.empty((n.value, sig_y, sig_x), dtype=out_dtype)
    names = ctypes.create_string_buffer(needed.value + 1)
    build(masks, names)
    return masks, names.value.decode().split("\n")


def disk(sig_shape, cx, cy, r):
    """Virtual bright field: 1 where (x−cx)² + (y−cy)² ≤ r² (LiberTEM's rule), shape
    (1, sig_y, sig_x) float32."""
    return mask(f"disk:{_float(cx)},{_float(cy)},{_float(r)}", sig_shape)


def ring(sig_shape, cx, cy, r_inner, r_outer):
    """Annular dark field: 1 where r_inner² < (x−cx)² + (y−cy)² ≤ r_outer², shape
    (1, sig_y, sig_x) float32."""
    return mask(f"ring:{_float(cx)},{_float(cy)},{_float(r_inner)},{_float(r_outer)}", sig_shape)


def point(sig_shape, x, y):
    """1 at pixel (row y, column x), shape (1, sig_y, sig_x) float32."""
    return mask(f"point:{_int(x)},{_int(y)}", sig_shape)


def rect(sig_shape, x, y, w, h):
    """1 where x ≤ column < x+w and y ≤ row < y+h, shape (1, sig_y, sig_x) float32."""
    return mask(f"rect:{_int(x)},{_int(y)},{_int(w)},{_int(h)}", sig_shape)


def com(sig_shape, cx=None, cy=None, r=None):
    """Centre-of-mass masks, shape (3, sig_y, sig_x) float32: the sum mask and the
    first moments (y−cy) and (x−cx), within radius r of (cx, cy) (whole frame when r is
    None). Without cx, cy the centre is (sig_x//2, sig_y//2). The centre of mass of a
    frame is (y_moment/sum + cy, x_moment/sum + cx)."""
    if cx is None and cy is None:
        if r is not None:
            raise InvalidArgumentError("com: a radius needs a centre (cx, cy)", _lib.ERR_INVALID_ARGUMENT)
        return mask("com", sig_shape)
    if cx is None or cy is None:
        raise InvalidArgumentError("com: give both cx and cy, or neither", _lib.ERR_INVALID_ARGUMENT)
    spec = f"com:{_float(cx)},{_float(cy)}" + (f",{_float(r)}" if r is not None else "")
    return mask(spec, sig_shape)


def com_shifts(images, index):
    """Centre-of-mass shift maps in pixels from the result of :func:`apply_masks` whose
    masks ``index``, ``index+1``, ``index+2`` are those of :func:`com` (sum, y moment,
    x moment): ``out[..., 0] = y moment / sum`` and ``out[..., 1] = x moment / sum``, as
    LiberTEM's CoM analysis gives them (NaN where the sum is 0). ``images`` has shape
    ``nav_shape + (n_masks,)``, float32 or float64; returns float64 of shape
    ``nav_shape + (2,)``. Computed by the library (``stemdot_com_shifts``), as the CLI's
    ``--com-shifts``."""
    images = np.asarray(images)
    if images.dtype not in (np.dtype(np.float32), np.dtype(np.float64)) or images.ndim < 2:
        raise DTypeError(
            f"images of dtype {images.dtype} and shape {images.shape}: want the float32 or float64 "
            "result of apply_masks, shape nav_shape + (n_masks,)",
            _lib.ERR_DTYPE,
        )
    images = np.ascontiguousarray(images)
    index = operator.index(index)
    if index < 0:
        index += images.shape[-1]
    if index < 0:
        raise InvalidArgumentError(f"com mask index {index} is out of range", _lib.ERR_INVALID_ARGUMENT)
    out = np.empty(images.shape[:-1] + (2,), np.float64)
    code = _lib.DTYPE_CODES[images.dtype.name]
    _call(
        _LIB.stemdot_com_shifts,
        ctypes.c_void_p(images.ctypes.data),
        code,
        images.size // images.shape[-1],
        images.shape[-1],
        index,
        out.ctypes.data_as(ctypes.POINTER(ctypes.c_double)),
    )
    return out


# ---------------------------------------------------------------------------- plans


def _request(value, name):
    """A cpus/gpus argument as the CLI's string: None → "", int N → "N", "auto", or a
    sequence of ids → "a,b,c" (a single id as "a,", since "a" is a count)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    wrong = InvalidArgumentError(
        f"{name}={value!r}: want None, a count, a list of ids" + (' or "auto"' if name == "gpus" else ""),
        _lib.ERR_INVALID_ARGUMENT,
    )
    if isinstance(value, (bool, np.bool_)):
        raise wrong
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    try:
        ids = [str(operator.index(v)) for v in value]
    except TypeError:
        raise wrong from None
    if not ids:
        raise InvalidArgumentError(f"{name}: empty list of ids", _lib.ERR_INVALID_ARGUMENT)
    return ",".join(ids) + ("," if len(ids) == 1 else "")


class _Plan:
    def __init__(self, cpus, gpus, oversubscribe=False, partition_size=None):
        if not isinstance(oversubscribe, (bool, np.bool_)):
            raise InvalidArgumentError(f"oversubscribe={oversubscribe!r}: want True or False", _lib.ERR_INVALID_ARGUMENT)
        options = {"cpus": _request(cpus, "cpus"), "gpus": _request(gpus, "gpus"), "oversubscribe": str(bool(oversubscribe))}
        if partition_size is not None:
            options["partition_size"] = partition_size
        handle = ctypes.c_uint64()
        text = ";".join(f"{k}={_option_value(k, v)}" for k, v in options.items())
        _call(_LIB.stemdot_plan_new_options, text.encode(), ctypes.byref(handle))
        self.handle = handle.value

    def describe(self, dataset=None):
        """The plan as a dict (see describe_plan)."""
        ds = dataset.handle if dataset is not None else 0
        needed = ctypes.c_size_t()
        _call(_LIB.stemdot_plan_describe, self.handle, ds, None, 0, ctypes.byref(needed))  # the length
        buf = ctypes.create_string_buffer(needed.value + 1)
        _call(_LIB.stemdot_plan_describe, self.handle, ds, buf, len(buf), ctypes.byref(needed))
        return json.loads(buf.value.decode())

    def warn(self):
        """Issues the plan's warnings (e.g. gpus="auto" without a GPU: CPU workers only)
        as Python warnings."""
        for w in self.describe().get("warnings", []):
            warnings.warn(f"stemdot: {w}", stacklevel=3)

    def free(self):
        _call(_LIB.stemdot_plan_free, self.handle)


def describe_plan(cpus=None, gpus=None, dataset=None, oversubscribe=False, partition_size=None):
    """The resource plan for this machine as a dict ({"cores_usable", "workers",
    "partitions", "warnings"}), with partitions when a :class:`Dataset` is given.
    ``cpus``: None (all usable cores), a count, or a list of CPU ids; ``gpus``: None, a
    count, a list of device ids, or "auto" (GPUs where there are; none, with a warning
    in the plan, on a machine without GPU); ``oversubscribe``: allow more CPU workers
    than usable physical cores (with a warning); ``partition_size``: target partition
    size in decoded float32 bytes, an int or a string such as "512MiB"."""
    plan = _Plan(cpus, gpus, oversubscribe, partition_size)
    try:
        return plan.describe(dataset)
    finally:
        plan.free()


# ---------------------------------------------------------------------------- apply


def _progress_bar(done, total):
    width = 40
    filled = width * done // total if total else width
    sys.stderr.write(f"\rstemdot [{'#' * filled}{'.' * (width - filled)}] {done}/{total} frames")
    if done == total:
        sys.stderr.write("\n")
    sys.stderr.flush()


_WANT_MASKS = (
    "want an array (n_masks, sig_y, sig_x) or (sig_y, sig_x), a mask factory (a callable returning one), "
    "or a list of mask factories each returning one mask (sig_y, sig_x), as LiberTEM's mask_factories"
)


def _dense(m):
    """m as a numpy array; sparse masks (scipy.sparse, pydata sparse) made dense."""
    if hasattr(m, "toarray"):  # scipy.sparse
        m = m.toarray()
    elif hasattr(m, "todense") and not isinstance(m, np.ndarray):  # pydata sparse
        m = m.todense()
    return np.asarray(m)


def _factory_name(f):
    return getattr(f, "__qualname__", None) or repr(f)


def _called(factory, what):
    """The array that a mask factory returns; TypeError when it returns none."""
    r = factory()
    try:
        m = _dense(r)
    except (TypeError, ValueError):  # e.g. a ragged list
        m = None
    if m is None or m.dtype.kind not in "biuf":
        raise TypeError(f"{what} returned {type(r).__name__}: want an array of mask weights")
    return m


def _masks_of(masks):
    """The masks as an array, and the factory named in shape errors (None for an array):
    masks is an array-like (dense or sparse), or LiberTEM's mask_factories: a callable
    returning a stack or one mask, or a list of callables each returning one mask."""
    if callable(masks):
        what = f"mask factory {_factory_name(masks)}"
        return _called(masks, what), what
    if isinstance(masks, (list, tuple)) and any(callable(m) for m in masks):
        if not all(callable(m) for m in masks):
            raise TypeError("masks: a list of mask factories (callables) and arrays: give factories only, or arrays only")
        parts = []
        for i, f in enumerate(masks):
            what = f"mask factory {i} ({_factory_name(f)}) of the list"
            m = _called(f, what)
            if m.ndim != 2:
                raise ShapeError(f"{what} returned shape {m.shape}: each factory of a list returns one mask "
                                 "(sig_y, sig_x); a single factory may return a stack", _lib.ERR_SHAPE)
            if parts and m.shape != parts[0].shape:
                raise ShapeError(f"{what} returned shape {m.shape}, the first one {parts[0].shape}: the masks of "
                                 "one job have one shape", _lib.ERR_SHAPE)
            parts.append(m)
        return np.stack(parts), "mask factories"
    if isinstance(masks, (str, bytes, dict, set)) or masks is None:
        hint = ": for a mask spec, use stemdot.mask(spec, sig_shape) or stemdot.mask_stack" if isinstance(masks, str) else ""
        raise TypeError(f"masks: {_WANT_MASKS}; got {type(masks).__name__} {masks!r:.60}{hint}")
    m = _dense(masks)
    if m.dtype == object and not isinstance(masks, np.ndarray):  # e.g. a list of non-arrays
        raise TypeError(f"masks: {_WANT_MASKS}; got {type(masks).__name__}")
    return m, None


def _job(masks, dtype, sig_shape=None):
    """The result dtype (float32 or float64) and the masks (n_masks, sig_y, sig_x), C
    order: float32, or float64 for a float64 result from masks that are not float32 (the
    library then keeps their float64 precision); DTypeError or ShapeError otherwise.
    masks may be mask factories (see _masks_of); their masks are checked against
    sig_shape, when given, to name the factory."""
    out_dtype = np.dtype(dtype)
    if out_dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise DTypeError(f"result dtype {out_dtype} is not float32 or float64", _lib.ERR_DTYPE)
    masks, factory = _masks_of(masks)
    if masks.dtype.kind not in "biuf":
        what = {"O": " (Python objects)", "c": " (complex)", "U": " (strings)", "S": " (bytes)"}.get(masks.dtype.kind, "")
        raise DTypeError(f"masks of dtype {masks.dtype}{what} are not supported: want bool, integer or float weights "
                         "(e.g. masks.astype(np.float32))", _lib.ERR_DTYPE)
    if masks.ndim == 2:
        masks = masks[np.newaxis]
    if masks.ndim != 3:
        raise ShapeError(f"{factory + ' returned' if factory else 'masks of'} shape {masks.shape}: {_WANT_MASKS}", _lib.ERR_SHAPE)
    if factory and sig_shape is not None and masks.shape[1:] != tuple(sig_shape):
        raise ShapeError(f"{factory} returned masks of sig_shape {masks.shape[1:]}, but the frames' sig_shape is "
                         f"{tuple(sig_shape)}", _lib.ERR_SHAPE)
    weights = np.float64 if out_dtype == np.float64 and masks.dtype != np.float32 else np.float32
    return out_dtype, np.ascontiguousarray(masks, dtype=weights)


def _weights(masks):
    """The ctypes pointer to masks' weights and the suffix of the C function that takes
    them: "" for float32, "64" for float64."""
    if masks.dtype == np.float64:
        return masks.ctypes.data_as(ctypes.POINTER(ctypes.c_double)), "64"
    return masks.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), ""


def _shifts(shifts):
    """The shifts keyword as a C-contiguous float64 array of (dy, dx) pairs, or None:
    (dy, dx) for every frame, or an array of shape nav_shape + (2,) (the library checks
    its size against the scan)."""
    if shifts is None:
        return None
    try:
        a = np.asarray(shifts)
    except (TypeError, ValueError) as e:
        raise DTypeError(f"shifts: {e}: want (dy, dx) or an array of shape nav_shape + (2,)", _lib.ERR_DTYPE) from e
    if a.dtype.kind not in "iuf":
        raise DTypeError(f"shifts of dtype {a.dtype}: want (dy, dx) in pixels or a float array of shape nav_shape + (2,)",
                         _lib.ERR_DTYPE)
    if a.ndim == 0 or a.shape[-1] != 2:
        raise ShapeError(f"shifts of shape {a.shape}: want (dy, dx) or shape nav_shape + (2,), y then x", _lib.ERR_SHAPE)
    return np.ascontiguousarray(a, dtype=np.float64).reshape(-1)


DescanFit = collections.namedtuple("DescanFit", ["dy", "dx", "rms", "used", "shifts"])
DescanFit.__doc__ = """The descan plane of :func:`descan_fit`: ``dy = dy[0] + dy[1]·y + dy[2]·x`` and
``dx = dx[0] + dx[1]·y + dx[2]·x`` in pixels, (y, x) the scan row and column from 0;
``rms``: the rms residuals (y, x) in pixels; ``used``: the scan positions fitted;
``shifts``: the plane at every scan position, float64 of shape nav_shape + (2,), y then
x, for ``apply_masks(..., shifts=fit.shifts)``."""


def descan_fit(data, com=None, cpus=None, gpus=None, oversubscribe=False, partition_size=None):
    """Fits the descan plane to the centre-of-mass shift map of ``data`` (a
    :class:`Dataset` or an array of shape nav_shape + (sig_y, sig_x)), as ``stemdot descan
    fit``: the :func:`com` masks of spec ``com`` (None: "com", about (sig_x//2,
    sig_y//2) over the whole frame; "com:CX,CY,R": within R of (CX, CY)) applied, their
    shifts fitted by least squares per component, frames without counts left out.
    Returns a :class:`DescanFit`; fit a reference scan (e.g. in vacuum) and pass its
    ``shifts`` to :func:`apply_masks` for a scan of the same nav shape. Raises
    InvalidArgumentError when too few frames have counts to fit a plane."""
    if isinstance(data, Dataset):
        ds, own = data, False
    elif isinstance(data, np.ndarray):
        ds, own = from_array(data), True
    else:
        raise TypeError(f"descan_fit wants a stemdot.Dataset or a numpy.ndarray, got {type(data).__name__}")
    try:
        custom = cpus is not None or gpus is not None or oversubscribe is not False or partition_size is not None
        plan = _Plan(cpus, gpus, oversubscribe, partition_size) if custom else None
        coeffs = (ctypes.c_double * 8)()
        shifts = np.empty(tuple(ds.nav_shape) + (2,), np.float64)
        used = ctypes.c_size_t()
        try:
            if plan is not None:
                plan.warn()
            _call(
                _LIB.stemdot_descan_fit,
                ds.handle,
                (com or "com").encode(),
                plan.handle if plan is not None else 0,
                coeffs,
                shifts.ctypes.data_as(ctypes.POINTER(ctypes.c_double)),
                shifts.size,
                ctypes.byref(used),
            )
        finally:
            if plan is not None:
                plan.free()
        c = list(coeffs)
        return DescanFit(tuple(c[0:3]), tuple(c[3:6]), tuple(c[6:8]), used.value, shifts)
    finally:
        if own:
            ds.close()


def apply_masks(data, masks, cpus=None, gpus=None, progress=False, dtype=np.float32, oversubscribe=False, partition_size=None,
                shifts=None):
    """Applies a mask stack to every frame: ``out[..., m] = Σ_{y,x} masks[m, y, x] ·
    frame[y, x]``.

    data: a :class:`Dataset`, or a numpy array of shape ``nav_shape + (sig_y, sig_x)``
      (passed zero-copy when C-contiguous and native byte order; otherwise copied once,
      see :func:`from_array`).
    masks: array (n_masks, sig_y, sig_x) or (sig_y, sig_x), converted to float32 C order
      (float64 weights keep their float64 precision with ``dtype=np.float64``); or, as
      LiberTEM's ``ApplyMasksUDF(mask_factories=...)``, a callable returning such an
      array (or a list of masks), or a list of callables each returning one mask (sig_y,
      sig_x), in order; sparse masks (scipy.sparse, pydata sparse) are made dense.
    cpus: None (every usable core), a count, or a list of logical CPU ids.
    gpus: None (none), a count, a list of device ids, or "auto".
    progress: False, True (a bar on stderr), or a callable ``f(done, total)`` called with
      the frames done (on the thread running the apply, not the caller's).
    dtype: np.float32 (default) or np.float64 (accumulates in float64 too).
    oversubscribe: allow more CPU workers than usable physical cores (with a warning).
    partition_size: target partition size in decoded float32 bytes, an int or a string
      such as "512MiB" (None: the planner's default).
    shifts: None, or move the masks with the diffraction pattern (descan compensation):
      ``(dy, dx)`` in pixels for every frame, or an array of shape ``nav_shape + (2,)``
      (y then x; for a dataset opened with ``frames``, of the whole scan), e.g.
      :func:`descan_fit`'s ``shifts``. The masks of a frame are applied moved by its
      shift, ``out[..., m] = Σ masks[m](y − dy, x − dx) · frame[y, x]``, mask pixels moved
      outside the frame dropped, as LiberTEM's ``ApplyMasksUDF(shifts=...)`` (positive dy
      moves the masks down, dx right); integer shifts exactly, sub-pixel ones by bilinear
      interpolation of the mask (LiberTEM truncates them to integers).

    Returns an array of ``dtype``, shape ``nav_shape + (n_masks,)``. Raises
    :class:`StemdotError` subclasses (ShapeError for masks of another sig shape, ...).
    Ctrl-C cancels the run and raises KeyboardInterrupt; an exception raised by a
    progress callable cancels the run and is re-raised.
    """
    sig_shape = data.sig_shape if isinstance(data, Dataset) else data.shape[-2:] if isinstance(data, np.ndarray) else None
    out_dtype, masks = _job(masks, dtype, sig_shape)
    shifts = _shifts(shifts)

    if isinstance(data, Dataset):
        ds, own = data, False
    elif isinstance(data, np.ndarray):
        ds, own = from_array(data), True
    else:
        raise TypeError(f"apply_masks wants a stemdot.Dataset or a numpy.ndarray, got {type(data).__name__}")
    try:
        out = np.empty(ds.nav_shape + (masks.shape[0],), dtype=out_dtype)
        custom = cpus is not None or gpus is not None or oversubscribe is not False or partition_size is not None
        plan = _Plan(cpus, gpus, oversubscribe, partition_size) if custom else None
        try:
            if plan is not None:
                plan.warn()
            _apply(ds, masks, plan, progress, out, shifts)
        finally:
            if plan is not None:
                plan.free()
        return out
    finally:
        if own:
            ds.close()


def _wait_for_apply(done, worker):
    """Waits, ignoring further Ctrl-Cs, until the apply thread has finished: until then it
    reads the frames and writes the result, whose buffers must not go. A thread that was
    never created (an interrupt before it) is given up after a second."""
    deadline = time.monotonic() + 1.0
    while not done.is_set():
        if worker.ident is None and time.monotonic() > deadline:
            return
        try:
            done.wait(0.05)
        except KeyboardInterrupt:
            pass
    try:
        worker.join(1.0)  # the thread exits right after done is set
    except (KeyboardInterrupt, RuntimeError):  # RuntimeError: it never started
        pass


def _apply(ds, masks, plan, progress, out, shifts=None):
    run = ctypes.c_uint64()
    _call(_LIB.stemdot_run_new, ctypes.byref(run))
    run = run.value
    raised = []

    def on_progress(done, total, _user):
        try:
            if progress is True:
                _progress_bar(done, total)
            else:
                progress(done, total)
        except BaseException as e:  # re-raised by the caller after cancelling the run
            raised.append(e)
            _LIB.stemdot_run_cancel(run)

    callback = _lib.PROGRESS_FN(on_progress) if progress else _lib.PROGRESS_FN()  # NULL: none
    outcome = []
    done = threading.Event()

    def target():
        try:
            outcome.append(_apply_call())
        except BaseException as e:  # e.g. a ctypes argument error: re-raised by the caller
            outcome.append(e)
        finally:
            done.set()

    def _apply_call():
        weights, suffix = _weights(masks)
        tail = (plan.handle if plan is not None else 0, run, callback, None, ctypes.c_void_p(out.ctypes.data),
                _lib.DTYPE_CODES[out.dtype.name], out.size)
        if shifts is None:
            code = getattr(_LIB, "stemdot_apply" + suffix)(ds.handle, weights, *masks.shape, *tail)
        else:
            code = _LIB.stemdot_apply_shifted(ds.handle, ctypes.c_void_p(masks.ctypes.data), _lib.DTYPE_CODES[masks.dtype.name],
                                              *masks.shape, shifts.ctypes.data_as(ctypes.POINTER(ctypes.c_double)),
                                              shifts.size, *tail)
        message = _LIB.stemdot_last_error().decode(errors="replace") if code != _lib.OK else ""
        return code, message

    try:
        if threading.current_thread() is threading.main_thread():
            # The apply runs on a worker thread so that the main thread stays free to
            # receive Ctrl-C (KeyboardInterrupt), which cancels the run.
            worker = threading.Thread(target=target, name="stemdot-apply", daemon=True)
            try:
                worker.start()
                while not done.wait(0.25):
                    pass
                worker.join()
            except BaseException:  # KeyboardInterrupt, also one raised inside start()
                _LIB.stemdot_run_cancel(run)
                _wait_for_apply(done, worker)
                raise
        else:
            target()
    finally:
        _LIB.stemdot_run_free(run)
    if raised:
        raise raised[0]
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    code, message = outcome[0]
    if code != _lib.OK:
        raise _error(code, message)


# -------------------------------------------------------------------------- data on the GPU


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
        _call(_LIB.stemdot_to_device, dataset.handle, operator.index(device), ctypes.byref(handle))
        self._handle = handle.value
        self.device = device
        self.nav_shape = dataset.nav_shape
        self.sig_shape = dataset.sig_shape
        self.source = dataset.source

    @property
    def closed(self):
        return self._handle is None

    def apply_masks(self, masks, dtype=np.float32):
        """As :func:`apply_masks` (same masks, dtype and result), on the resident frames."""
        out_dtype, masks = _job(masks, dtype, self.sig_shape)
        if self._handle is None:
            raise BadHandleError(f"resident dataset {self.source} is closed", _lib.ERR_BAD_HANDLE)
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
        return out

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
