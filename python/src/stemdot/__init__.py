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

:func:`reduce` gives the sum, mean, maximum and standard-deviation frames over all frames
in one pass (LiberTEM's SumUDF, StdDevUDF), :func:`pick` the frames at given scan
positions (PickUDF). They take a file, a numpy array, a dask array (computed one block of
frames at a time: :data:`LAZY_BLOCK_BYTES`), a HyperSpy or pyxem signal (lazy or not) or an
object with ``__array__``; :func:`to_hyperspy` gives a result as a HyperSpy signal with the
scan's axes. :func:`live` applies masks to a detector's frames while the scan runs
(Merlin, DECTRIS), an iterator of the images so far (LiberTEM-live's run_udf_iter).
:func:`view` shows the interactive virtual detector of ``stemdot view`` inline in a
notebook (or prints its URL).

The mask helpers (:func:`disk`, :func:`ring`, :func:`point`, :func:`rect`, :func:`com`,
:func:`mask`) call the same Go generators as the ``stemdot`` CLI's ``--mask``, so their
weights are bit-identical to the CLI's. Errors are raised as :class:`StemdotError`
subclasses carrying the library's message. Ctrl-C cancels a running
:func:`apply_masks`. Child processes that use stemdot must be started with
``multiprocessing``'s "spawn" or "forkserver" method, not "fork" once the parent has
used it (:class:`ForkedProcessError`).
"""

import builtins
import collections
import ctypes
import json
import operator
import os
import re
import stat
import sys
import threading
import time
import warnings
import weakref

from . import _startup

_startup.handle_interrupts()  # python -m stemdot.dask: a Ctrl-C from here on exits 1

import numpy as np  # noqa: E402

from . import _lib  # noqa: E402

__version__ = "0.3.0"

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
    "RunNoteWarning",
    "open",
    "from_array",
    "apply_masks",
    "LAZY_BLOCK_BYTES",
    "to_hyperspy",
    "reduce",
    "REDUCTIONS",
    "pick",
    "describe_plan",
    "mask",
    "mask_stack",
    "Centre",
    "find_centre",
    "disk",
    "ring",
    "point",
    "rect",
    "com",
    "com_shifts",
    "com_products",
    "Result",
    "load_result",
    "descan_fit",
    "DescanFit",
    "library_path",
    "live",
    "Live",
    "LiveUpdate",
    "view",
    "View",
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

# The terminal control characters: C0 but newline and tab, DEL, C1; and the lone
# surrogates by which Python holds the bytes of a file name that are not UTF-8.
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\udc80-\udcff]")


def _printable(text):
    """text with every character that a terminal may act on escaped, as the library
    escapes its messages (Go's internal/safetext): C0 control characters but newline and
    tab, and DEL, as \\x1b; C1 ones as \\u009b; a byte of a file name that is not UTF-8
    (a lone surrogate) as \\x9b. Messages of stemdot's exceptions and warnings pass
    through it: a file name or a note from a file cannot recolour, clear or retitle the
    terminal that shows them."""
    def escape(m):
        c = ord(m.group())
        return f"\\x{c & 0xff:02x}" if c < 0x80 or c >= 0xdc80 else f"\\u{c:04x}"

    return _CONTROLS.sub(escape, str(text))


def _warn(message, stacklevel, category=UserWarning):
    """warnings.warn of message, escaped (_printable), from the caller's caller at
    stacklevel (as warnings.warn counts it from the caller of _warn)."""
    warnings.warn(_printable(message), category, stacklevel=stacklevel + 1)


class RunNoteWarning(UserWarning):
    """What a dataset's reader counted in the frames a run read (:meth:`Dataset.run_notes`:
    e.g. a DECTRIS detector's saturated pixels), issued after the run by the functions that
    read frames."""


class StemdotError(Exception):
    """An error reported by libstemdot. ``code`` is the stemdot_status value, ``message``
    the library's message (the problem, and the option or argument that fixes it), its
    terminal control characters escaped (ESC as ``\\x1b``)."""

    def __init__(self, message, code=_lib.ERR_INTERNAL):
        message = _printable(message)
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
    of the stored pixels), ``n_frames``, ``format`` (the format it was read as: "mib",
    "hdf5", ..., "memory" for :func:`from_array`), ``path`` (the file its frames are read
    from, as the opening resolved it, e.g. an EMI file's <name>_1.ser;
    "" for :func:`from_array`), ``warnings`` (what a user should know about how
    the file was read, one string each, as ``stemdot apply`` prints them: a guessed nav
    shape, surplus or missing frames, a sync offset, the HDF5 dataset chosen). A dataset
    of a region of interest (``roi=``) has ``roi`` True, ``nav_shape`` ``(n_selected,)``,
    ``scan_shape`` the whole scan's nav shape and ``positions`` (int64, the selected
    scan positions: flat indices in C order over ``scan_shape``, ascending); otherwise
    ``roi`` is False and ``scan_shape`` is ``nav_shape``. ``positions_without_frame``
    lists the scan positions of its frames that have no frame in the file, as (first,
    count) runs of flat scan positions over ``scan_shape`` (empty when every position has
    one): a sync offset (``sync_offset=``, LiberTEM's) moves the file's frames off the
    first positions (negative) or the last ones (positive); they read as blank (all-zero)
    frames, so :func:`apply_masks` gives 0 there, and :func:`reduce` leaves them out
    (its mean, max and std are over the file's frames, as LiberTEM's). What its reader
    counts in the frames it reads (a DECTRIS detector's saturated pixels) is in
    :meth:`run_notes`; the functions that read its frames issue it as warnings.
    ``calibration`` is what the file's metadata states of its axes, a dict of the result
    sidecar's "calibration" section: ``nav`` (one dict per axis of ``scan_shape``:
    ``name``, and ``scale``, ``offset``, ``units`` where known), ``sig`` (``ky``, ``kx``)
    and ``camera_length_m``, each key absent when unknown ({} when the file states none).
    Close it
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
        self.format = _text(_LIB.stemdot_dataset_format, handle)
        self.calibration = json.loads(_text(_LIB.stemdot_dataset_calibration, handle))
        self.path = _text(_LIB.stemdot_dataset_path, handle)
        is_roi, ndim, scan = ctypes.c_int(), ctypes.c_size_t(), (ctypes.c_size_t * _lib.MAX_NAV_DIMS)()
        _call(_LIB.stemdot_dataset_scan, handle, ctypes.byref(is_roi), ctypes.byref(ndim), scan, None, 0)
        self.roi = bool(is_roi.value)
        self.scan_shape = tuple(int(n) for n in scan[: ndim.value])
        self._positions = None
        self.positions_without_frame = _blanks(handle)

    @property
    def positions(self):
        """The scan positions of the frames (int64, flat indices in C order over
        ``scan_shape``), for a dataset of a region of interest; None otherwise."""
        return self._scan_positions() if self.roi else None

    def _scan_positions(self):
        """The scan positions of the frames in ``scan_shape``, for any dataset (a frames
        range's too)."""
        if self._positions is None:
            pos = np.empty(self.n_frames, dtype=np.uint64)
            is_roi, ndim, scan = ctypes.c_int(), ctypes.c_size_t(), (ctypes.c_size_t * _lib.MAX_NAV_DIMS)()
            _call(_LIB.stemdot_dataset_scan, self.handle, ctypes.byref(is_roi), ctypes.byref(ndim), scan,
                  pos.ctypes.data_as(ctypes.POINTER(ctypes.c_uint64)), pos.size)
            self._positions = pos.astype(np.int64)
        return self._positions.copy()

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

    def run_notes(self, first=0, count=None):
        """What the dataset's reader counted in frames [first, first+count) (default: to
        the last) when it last read them (run notes: e.g. a DECTRIS detector's saturated
        pixels, values 2^N-1 that its pixel_mask does not flag), a list of dicts: ``key``
        (what is counted), ``count``, ``frames`` (those holding any), ``text`` (the
        sentence with "{count}" and "{frames}" in place of the numbers) and ``warning``
        (the sentence with them, after the file). After a run, those of the frames it
        read: :func:`apply_masks`, :func:`reduce`, :func:`centre`, :func:`descan_fit`,
        :func:`pick` and :meth:`Resident.apply_masks` issue them as
        :class:`RunNoteWarning`. A frame counts once in each run that reads it: a dataset
        applied twice warns of each run's count, not a running total. Raises
        :class:`ShapeError` for frames outside the dataset's."""
        count = self.n_frames - first if count is None else count
        if first < 0 or count < 0:
            raise ShapeError(f"run_notes: frames [{first}, {first}+{count}) are not within the dataset's {self.n_frames} "
                             "frames", _lib.ERR_SHAPE)
        needed = ctypes.c_size_t()
        _call(_LIB.stemdot_dataset_run_notes, self.handle, first, count, None, 0, ctypes.byref(needed))
        buf = ctypes.create_string_buffer(needed.value + 1)
        _call(_LIB.stemdot_dataset_run_notes, self.handle, first, count, buf, len(buf), ctypes.byref(needed))
        return json.loads(buf.value.decode(errors="surrogateescape"))

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
    (floats, sequences of anything but integers) raise TypeError naming the option.
    Option roi takes its own forms (:func:`_roi_option`)."""
    if key == "roi":
        value = _roi_option(value)
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


def _roi_option(roi):
    """The text of option roi: a string or path as it is ("rect:X,Y,W,H" or an NPY file),
    a numpy array of booleans (or of integers 0 and 1) as "bits:SHAPE:HEX" (the positions
    packed 8 a byte, numpy.packbits order)."""
    if isinstance(roi, (str, os.PathLike)):
        return os.fspath(roi)
    if not isinstance(roi, np.ndarray):
        raise TypeError(f"roi: want a numpy boolean array of the scan's nav shape, 'rect:X,Y,W,H' or an NPY file path, "
                        f"not {type(roi).__name__}")
    if roi.ndim == 0 or roi.size == 0:
        raise ShapeError(f"roi: an array of shape {roi.shape} selects no scan position: want the scan's nav shape", _lib.ERR_SHAPE)
    if roi.dtype.kind in "iu":
        if ((roi != 0) & (roi != 1)).any():
            raise InvalidArgumentError("roi: an integer array must hold only 0 and 1 (false and true)", _lib.ERR_INVALID_ARGUMENT)
    elif roi.dtype.kind != "b":
        raise InvalidArgumentError(f"roi: dtype {roi.dtype} is not boolean: want a bool array (or integers 0 and 1) of the "
                                   "scan's nav shape", _lib.ERR_INVALID_ARGUMENT)
    bits = np.packbits(np.ascontiguousarray(roi, dtype=bool).ravel()).tobytes().hex()
    return f"bits:{','.join(str(n) for n in roi.shape)}:{bits}"


def open(path, **format_options):
    """Opens a 4D-STEM file of any format of doc/formats.md's table (Merlin .mib/.hdr,
    NanoMEGAS .blo, HDF5, DECTRIS masters, Gatan .dm3/.dm4 and K2 IS, TIA .ser/.emi, MRC,
    TVIPS, SEQ, FRMS6, EMPAD .xml, LiberTEM's raw_csr .toml, stempy counts, .npy, or raw)
    and returns a :class:`Dataset`.

    ``format_options`` (all optional): ``format`` (a format's name, e.g. "mib", "hdf5",
    "dectris", "dm", "ser", "mrc", "tvips", "raw"; default detected), a format's own
    options by key (``pixel_mask=False``, ``dm_image=1``, ``rotator_index=False``,
    ``frms6_raw=True``, ``seq_corrections=True``, ...: doc/formats.md's table lists them),
    ``nav_shape`` (tuple of 1 to 3 sizes: ``(n,)``, ``(y, x)`` or ``(z, y, x)``; overrides
    the file's scan shape, which is an array's nav axes as stored, when it has as many
    positions, or as many as the file has frames; another raises :class:`ShapeError`),
    ``sig_shape`` (tuple, raw), ``dtype``
    (numpy dtype or name, raw), ``byte_order`` ("little" or "big", raw), ``offset``
    (header bytes to skip, raw), ``frame_header`` and ``frame_footer`` (bytes before and
    after every frame, raw), ``sync_offset`` (scan position p reads the file's frame
    p + sync_offset, as LiberTEM's: positive skips leading frames, negative inserts blank
    ones; the nav shape is kept, the positions without a frame read as blank frames and
    :func:`reduce` leaves them out: ``Dataset.positions_without_frame``),
    ``flyback`` (flyback frames of each scan row, read as no scan position: "start" or
    "end" for one per row, "start:N" or "end:N", "none", or "auto", the default: one per
    row when the file holds (nav_x+1)·nav_y frames, with a warning: where the frame
    headers set it apart in every row, else at the end of each row of a scan of 3 or
    more rows),
    ``dataset_path`` (HDF5: the dataset of frames), ``allow_fill`` (HDF5: ``True`` reads
    storage that is missing or was never written, such as a virtual dataset's missing
    source file, as the fill value with a warning, instead of raising), ``frames``
    (``(first, count)``: only frames ``first .. first+count-1`` in scan order, after
    ``nav_shape``, ``sync_offset`` and ``flyback`` (of the positions ``roi`` selects when
    given), as a dataset of nav_shape ``(count,)``; the rest of the file is not read),
    ``roi`` (a region of interest: a numpy boolean array, or integers 0 and 1, of the
    scan's nav shape, ``"rect:X,Y,W,H"`` for scan columns X..X+W-1 and rows Y..Y+H-1 (of
    every plane of a 3-D nav shape), or
    the path of an NPY file of booleans; only the positions selected are read, as a
    dataset of nav_shape ``(n_selected,)`` whose ``positions`` say where they lie, and
    :func:`apply_masks` returns the scan's nav shape with NaN elsewhere; a mask of
    another shape or a rect outside the scan raises :class:`ShapeError`, one that
    selects nothing or is not boolean :class:`InvalidArgumentError`). Raises
    :class:`StemdotIOError` for a missing file, :class:`FormatError` for content that
    cannot be read, :class:`InvalidArgumentError` for unknown options. What the CLI warns about (a guessed nav shape, frames that do
    not fit the scan, the HDF5 dataset chosen) is issued as UserWarning and kept in
    ``Dataset.warnings``.
    """
    ds = _open(path, format_options)
    for w in ds.warnings:
        _warn(f"stemdot: {w}", stacklevel=2)
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
    items = [f"{key}={_option_value(key, value)}"
             for key, value in format_options.items() if value is not None]
    handle = ctypes.c_uint64()
    _call(_LIB.stemdot_open, os.fsencode(spath), ";".join(items).encode(), ctypes.byref(handle))
    return Dataset(handle.value, spath, reopen=(os.path.abspath(spath), dict(format_options)))


def _text(fn, handle):
    """The text a library function of the stemdot_dataset_warnings kind writes (a length
    query, then the text)."""
    needed = ctypes.c_size_t()
    _call(fn, handle, None, 0, ctypes.byref(needed))  # the length
    buf = ctypes.create_string_buffer(needed.value + 1)
    _call(fn, handle, buf, len(buf), ctypes.byref(needed))
    return os.fsdecode(buf.value)  # a path's bytes that are not UTF-8 kept, as os does


def _blanks(handle):
    """The positions without a frame of a dataset handle: (first, count) runs of flat
    scan positions (stemdot_dataset_blanks)."""
    n = ctypes.c_size_t()
    _call(_LIB.stemdot_dataset_blanks, handle, None, 0, ctypes.byref(n))
    if n.value == 0:
        return []
    runs = (ctypes.c_uint64 * (2 * n.value))()
    _call(_LIB.stemdot_dataset_blanks, handle, runs, len(runs), ctypes.byref(n))
    return [(int(runs[2 * i]), int(runs[2 * i + 1])) for i in range(n.value)]


def _run_note_sentence(note):
    """A run note's sentence (Dataset.run_notes) with its numbers in place."""
    return note["text"].replace("{count}", str(note["count"])).replace("{frames}", str(note["frames"]))


def _sum_run_notes(notes, path):
    """Run notes (dicts of key, text, count, frames: Dataset.run_notes, of frame ranges
    read by several processes) summed by key, in the order each key first comes, each with
    its ``warning``, the sentence after path (as the library writes it)."""
    summed = {}
    for n in notes:
        s = summed.setdefault(n["key"], {"key": n["key"], "text": n["text"], "count": 0, "frames": 0})
        s["count"] += int(n["count"])
        s["frames"] += int(n["frames"])
    return [dict(s, warning=f"{path}: {_run_note_sentence(s)}") for s in summed.values()]


def _warn_run_notes(notes, stacklevel):
    """Issues the warnings of run notes, as the dataset's warnings are issued."""
    for n in notes:
        _warn(f"stemdot: {n['warning']}", stacklevel=stacklevel + 1, category=RunNoteWarning)


def _dataset_warnings(handle):
    """The dataset's warnings (a guessed nav shape, surplus or missing frames, ...)."""
    text = _text(_LIB.stemdot_dataset_warnings, handle)
    return text.split("\n") if text else []


def from_array(frames, roi=None):
    """Wraps a numpy array of frames, shape ``nav_shape + (sig_y, sig_x)``, as a
    :class:`Dataset` without copying when it is C-contiguous, in native byte order and of
    a supported dtype (uint8, uint16, uint32, int8, int16, int32, float32, float64). A
    non-contiguous or byte-swapped array is copied once into a native C-contiguous one.
    Other dtypes raise :class:`DTypeError`. The dataset reads the array's memory while it
    is open (keep it unchanged meanwhile); it keeps a reference to the array. ``roi``
    selects scan positions of ``nav_shape`` as for :func:`open`.
    """
    if not isinstance(frames, np.ndarray):
        raise TypeError(f"from_array wants a numpy.ndarray, got {type(frames).__name__}")
    if frames.ndim < 3:
        raise ShapeError(
            f"frames of shape {frames.shape}: want nav_shape + (sig_y, sig_x) with at least one nav dimension "
            "(use frames[np.newaxis] for a single frame)",
            _lib.ERR_SHAPE,
        )
    name = _frames_dtype(frames.dtype)
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
    if roi is not None:
        view = ctypes.c_uint64()
        try:
            _call(_LIB.stemdot_dataset_select, handle.value, _roi_option(roi).encode(), ctypes.byref(view))
        except BaseException:
            _call(_LIB.stemdot_dataset_free, handle.value)
            raise
        handle = view
    return Dataset(handle.value, f"<array {frames.shape} {frames.dtype}>", keepalive=frames)


def _frames_dtype(dtype):
    """The name of a supported frames dtype (the same for both byte orders: ">u2" is
    "uint16"); DTypeError for another."""
    if dtype.kind not in "uif" or dtype.name not in _lib.DTYPE_CODES:
        raise DTypeError(f"frames dtype {dtype} is not supported (want one of {', '.join(_lib.DTYPE_CODES)})",
                         _lib.ERR_DTYPE)
    return dtype.name


# ------------------------------------------------------------ lazy and foreign arrays

#: Frame bytes (in the array's dtype) of one block of a dask array (a lazy HyperSpy or
#: pyxem signal's ``.data``) that :func:`apply_masks`, :func:`reduce` and :func:`centre`
#: compute at a time: the array is rechunked along its nav axes (dask's "auto" chunks
#: under this limit, the sig axes whole) and its blocks are computed one after the other,
#: each applied by the engine as an in-memory dataset (:func:`from_array`) and dropped.
LAZY_BLOCK_BYTES = 256 << 20


def _is_dask(x):
    """Whether x is a dask array (without importing dask where it is not loaded)."""
    da = sys.modules.get("dask.array")
    return da is not None and isinstance(x, da.Array)


def _is_signal(x):
    """Whether x is a HyperSpy signal (hyperspy.signal.BaseSignal and its subclasses:
    pyxem's, kikuchipy's, ...)."""
    return any(c.__module__.split(".")[0] == "hyperspy" and c.__name__ == "BaseSignal" for c in type(x).__mro__)


def _frames_of(data, what, paths=True):
    """data as frames the engine takes: a Dataset or a path as they are; a dask array or a
    numpy array of shape nav_shape + (sig_y, sig_x); a HyperSpy signal's ``data`` (its
    numpy order is nav_shape + (sig_y, sig_x): HyperSpy lists the axes the other way
    round); any other object with ``__array__`` (numpy.asarray of it). Raises ShapeError
    for a signal that is not of signal dimension 2, TypeError for a path when not paths
    and for anything else."""
    if isinstance(data, (str, os.PathLike)) and not paths:
        raise TypeError(f"{what} wants a stemdot.Dataset or an array, got a path ({type(data).__name__}): open it with "
                        "stemdot.open(path, ...)")
    if isinstance(data, (Dataset, np.ndarray, str, os.PathLike)) or _is_dask(data):
        return data
    if _is_signal(data):
        am = data.axes_manager
        if am.signal_dimension != 2:
            raise ShapeError(f"{what}: a HyperSpy signal of signal dimension {am.signal_dimension} "
                             f"({type(data).__name__}, axes {am.signal_shape}): want frames, a Signal2D (e.g. pyxem's "
                             "Diffraction2D); s.transpose(signal_axes=2) makes two axes the signal's", _lib.ERR_SHAPE)
        return data.data
    if hasattr(data, "__array__"):
        return np.asarray(data)
    raise TypeError(f"{what} wants a stemdot.Dataset{', a path' if paths else ''}, a numpy or dask array, a HyperSpy "
                    f"signal or an object with __array__, got {type(data).__name__}")


def _nav_blocks(x, limit):
    """Dask array x (nav_shape + (sig_y, sig_x)) rechunked into blocks of whole frames of
    at most limit bytes (or one frame): dask's "auto" chunks along the nav axes (merging
    or cutting the source's chunks), the sig axes whole; and its blocks, a list of
    (block index, the tuple of slices of nav_shape the block covers). ShapeError for an
    array of no nav axis, DTypeError for frames of a dtype the engine does not read."""
    if x.ndim < 3:
        raise ShapeError(f"frames of shape {x.shape}: want nav_shape + (sig_y, sig_x) with at least one nav dimension "
                         "(use frames[np.newaxis] for a single frame)", _lib.ERR_SHAPE)
    _frames_dtype(x.dtype)  # before any block is computed
    nav = x.ndim - 2
    x = x.rechunk({**{i: "auto" for i in range(nav)}, nav: -1, nav + 1: -1}, block_size_limit=limit)
    starts = [np.cumsum((0,) + c) for c in x.chunks[:nav]]
    return x, [(idx, tuple(slice(int(s[i]), int(s[i + 1])) for s, i in zip(starts, idx)))
               for idx in np.ndindex(*x.numblocks[:nav])]


def _lazy_blocks(x):
    """The blocks of dask array x (_nav_blocks of LAZY_BLOCK_BYTES), computed one after
    the other: yields (index, frames), index the slices of nav_shape a block covers,
    frames a numpy array of its frames (the block's nav shape + sig_shape)."""
    x, blocks = _nav_blocks(x, LAZY_BLOCK_BYTES)
    for idx, index in blocks:
        yield index, np.asarray(x.blocks[idx].compute())


def _block_progress(progress, first, total):
    """The progress callback of a block whose frames start at frame first of total, or
    False (none)."""
    if not progress:
        return False
    report = _progress_bar if progress is True else progress
    return lambda done, _n: report(first + done, total)


# ---------------------------------------------------------------------------- masks


def _float(v):
    v = float(v)
    if v != v or v in (float("inf"), float("-inf")):
        raise InvalidArgumentError(f"mask parameter {v} is not finite", _lib.ERR_INVALID_ARGUMENT)
    return repr(v)


def _int(v):
    return str(operator.index(v))


def _sig_shape(sig_shape):
    """sig_shape as two Python ints (sig_y, sig_x), each from 1 to 2^31 − 1; a ShapeError
    naming it as given otherwise (a negative size reached the library's size_t as 2^64 −
    1 and was reported so)."""
    shape = tuple(operator.index(n) for n in sig_shape)
    if len(shape) != 2 or not all(1 <= n < 2**31 for n in shape):
        raise ShapeError(f"sig_shape {shape}: want two sizes (sig_y, sig_x), each from 1 to 2^31 − 1", _lib.ERR_SHAPE)
    return shape


#: The direct beam's disk (:func:`find_centre`): centre ``x`` (column) and ``y`` (row) in
#: the masks' pixel coordinates (pixel centres at integers) and radius ``r`` in pixels.
Centre = collections.namedtuple("Centre", ["x", "y", "r"])


def find_centre(frame):
    """The direct beam's disk in ``frame`` (a 2-D array (sig_y, sig_x); in practice the
    scan's sum frame), as a :class:`Centre` ``(x, y, r)`` in pixels: the maximally stable
    bright region holding the brightest pixel (after a 3×3 median filter), measured at
    half maximum above its surroundings: its intensity-weighted centroid and radius
    √(area/π), or the circle fitted to its edge where the frame's edge cuts the disk (the
    Go API's ``masks.FindCentre`` documents the method). Raises
    :class:`InvalidArgumentError` when there is no disk to find (a flat frame, noise
    only, NaN or infinite values, a disk cut by the frame's edge that shows half its
    circle or less) and :class:`ShapeError` for an array that is not 2-D."""
    frame = np.ascontiguousarray(frame, dtype=np.float64)
    if frame.ndim != 2:
        raise ShapeError(f"find_centre: a frame of shape {frame.shape}: want (sig_y, sig_x)", _lib.ERR_SHAPE)
    out = (ctypes.c_double * 3)()
    _call(_LIB.stemdot_find_centre, frame.ctypes.data_as(ctypes.POINTER(ctypes.c_double)), frame.shape[0], frame.shape[1], out)
    return Centre(out[0], out[1], out[2])


def centre(data, cpus=None, progress=False, shifts=None, **format_options):
    """The direct beam's centre and radius in the sum frame of ``data`` (a path opened
    with ``format_options``, a :class:`Dataset` or an array, as for :func:`reduce`):
    ``find_centre(reduce(data, "sum", ...)["sum"])``, the centre ``stemdot info --centre``
    prints and about which ``stemdot apply --mask disk:auto`` makes its masks. With
    ``shifts`` (as for :func:`apply_masks`), every frame is moved back by its shift
    first: the centre at zero shift, about which masks moved by the shifts follow the
    beam (``stemdot apply --mask disk:auto --shifts ...``); ``progress`` is not reported
    then. Raises as :func:`reduce` and :func:`find_centre`."""
    if shifts is None:
        return find_centre(reduce(data, ("sum",), cpus=cpus, progress=progress, **format_options)["sum"])
    if not format_options:
        data = _frames_of(data, "centre")
    if _is_dask(data):
        raise InvalidArgumentError("centre: shifts= with a dask array (a lazy signal) is not supported: the frames moved "
                                   "back are summed by the library in one run; give a file (stemdot.open) or a numpy "
                                   "array", _lib.ERR_INVALID_ARGUMENT)
    ds, own = _dataset_of(data, format_options, "centre")
    try:
        shifts = _shifts(shifts, ds.scan_shape, ds.nav_shape)
        plan = _Plan(cpus, None) if cpus is not None else None
        out = (ctypes.c_double * 3)()
        try:
            _call(_LIB.stemdot_centre, ds.handle, plan.handle if plan is not None else 0,
                  shifts.ctypes.data_as(ctypes.POINTER(ctypes.c_double)), shifts.size, out)
        finally:
            if plan is not None:
                plan.free()
        _warn_run_notes(ds.run_notes(), stacklevel=2)
        return Centre(out[0], out[1], out[2])
    finally:
        if own:
            ds.close()


def mask(spec, sig_shape, centre=None):
    """Masks of a CLI ``--mask`` spec (``disk:CX,CY,R``, ``ring:CX,CY,RI,RO``,
    ``point:X,Y``, ``rect:X,Y,W,H``, ``com``, ``com:CX,CY[,R]``; x = column, y = row, in
    pixels) for frames of ``sig_shape``: float32 array (n, sig_y, sig_x), from the same
    Go generators as the CLI. With ``centre``, the direct beam's ``(x, y, r)`` (as
    :func:`find_centre` gives it), also the auto specs about it: ``disk:auto`` (radius
    r), ``disk:auto,R``, ``ring:auto,RI,RO``, ``com:auto``, ``com:auto,R``; without it
    they raise :class:`InvalidArgumentError` saying they need the centre. Raises
    :class:`InvalidArgumentError` for a bad spec, and TypeError when the arguments are
    not a spec string and a (sig_y, sig_x) pair (the helpers :func:`disk`, :func:`ring`,
    :func:`com` take ``sig_shape`` first)."""
    if not isinstance(spec, str) or isinstance(sig_shape, str) or len(tuple(sig_shape)) != 2:
        raise TypeError(f"mask(spec, sig_shape) wants a spec string such as 'disk:16,16,5' and a (sig_y, sig_x) pair, got {spec!r}, {sig_shape!r}")
    sig_y, sig_x = _sig_shape(sig_shape)
    if centre is None:
        fn, head = _LIB.stemdot_mask_parse, ()
    else:
        c = tuple(float(v) for v in centre)
        if len(c) != 3:
            raise TypeError(f"centre={centre!r}: want (x, y, r), as find_centre gives it")
        fn, head = _LIB.stemdot_mask_parse_centred, ((ctypes.c_double * 3)(*c),)
    n = ctypes.c_size_t()
    _call(fn, spec.encode(), sig_y, sig_x, *head, None, 0, ctypes.byref(n))
    out = np.empty((n.value, sig_y, sig_x), dtype=np.float32)
    _call(fn, spec.encode(), sig_y, sig_x, *head, out.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), out.size, ctypes.byref(n))
    return out


def mask_stack(sig_shape, files=(), specs=(), dtype=np.float32, centre=None):
    """The mask stack of NPY mask ``files`` and then mask ``specs`` (as for :func:`mask`),
    in that order, for frames of ``sig_shape``: the stack ``stemdot apply --masks FILE ...
    --mask SPEC ...`` and ``python -m stemdot.dask`` apply, built by the library (the Go
    API's ``stemdot.MasksFrom``, ``stemdot_mask_stack``). A file holds one mask (sig_y,
    sig_x) or a stack (n, sig_y, sig_x) of bool, integer or float dtype; ``files`` and
    ``specs`` are a path or spec, or sequences of them. With ``centre``, the direct beam's
    ``(x, y, r)`` (:func:`find_centre`), the specs may also be auto specs (``disk:auto``,
    ..., as for :func:`mask`).

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
    sig_y, sig_x = _sig_shape(sig_shape)
    centre_c = None
    if centre is not None:
        c = tuple(float(v) for v in centre)
        if len(c) != 3:
            raise TypeError(f"centre={centre!r}: want (x, y, r), as find_centre gives it")
        centre_c = (ctypes.c_double * 3)(*c)
    file_list = (ctypes.c_char_p * max(len(files), 1))(*files)
    spec_list = (ctypes.c_char_p * max(len(specs), 1))(*specs)
    n, needed = ctypes.c_size_t(), ctypes.c_size_t()

    def build(out, names):
        _call(
            _LIB.stemdot_mask_stack, file_list, len(files), spec_list, len(specs), sig_y, sig_x, centre_c,
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
    """Annular dark field: 1 where r_inner² < (x−cx)² + (y−cy)² ≤ r_outer², 0 ≤ r_inner <
    r_outer (r_inner 0: the disk less its centre pixel when the centre is a pixel, as
    libertem.masks.ring), shape (1, sig_y, sig_x) float32."""
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
    ``--com-shifts``. ``index`` counts from the end when negative, as numpy's indices do
    (-3: the last three columns); one whose three columns are not all in the result
    raises :class:`InvalidArgumentError` naming it as given."""
    images = np.asarray(images)
    if images.dtype not in (np.dtype(np.float32), np.dtype(np.float64)) or images.ndim < 2:
        raise DTypeError(
            f"images of dtype {images.dtype} and shape {images.shape}: want the float32 or float64 "
            "result of apply_masks, shape nav_shape + (n_masks,)",
            _lib.ERR_DTYPE,
        )
    images = np.ascontiguousarray(images)
    given = operator.index(index)
    n = images.shape[-1]
    index = given + n if given < 0 else given
    if not 0 <= index <= n - 3:
        raise InvalidArgumentError(
            f"com_shifts: index {given}: the com masks are 3 columns from index (sum, y moment, x moment), but the "
            f"result has {n} masks (columns 0 to {n - 1}): " + (f"give an index from 0 to {n - 3} (or {-n} to -3, "
            "counted from the end)" if n >= 3 else "apply the com masks (stemdot.com) to get them"),
            _lib.ERR_INVALID_ARGUMENT)
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


def com_products(shifts, rotation=0.0, flip_y=False):
    """CoM products of shift maps as :func:`com_shifts` returns them (and ``stemdot apply
    --com-shifts`` writes them): ``shifts`` of shape ``(nav_y, nav_x, 2)``, y then x, in
    pixels, at least 2 × 2 scan positions. The shifts are first flipped along y
    (``flip_y``: y → −y) and then rotated by ``rotation`` degrees (y' = cos θ·y + sin θ·x,
    x' = −sin θ·y + cos θ·x: positive turns the vectors clockwise), as LiberTEM's CoM
    analysis (``scan_rotation``, ``flip_y``).

    Returns a dict of float64 arrays of shape ``(nav_y, nav_x)``: ``"magnitude"``
    √(y² + x²); ``"divergence"`` ∂y/∂row + ∂x/∂column and ``"curl"`` ∂y/∂column −
    ∂x/∂row (``numpy.gradient``'s differences, per scan step; LiberTEM's divergence and
    curl_2d); ``"icom"``, the integrated CoM, the phase φ with ∇φ = field by Fourier
    integration, φ = F⁻¹[(k_x·F[x] + k_y·F[y]) / (2πi·|k|²)], k in cycles per scan step
    (``numpy.fft.fftfreq``), zero mean, in pixels × scan steps (Lazić et al.,
    Ultramicroscopy 160 (2016) 265; Ishizuka et al., Microscopy 66 (2017) 397); and
    ``"field"``, the corrected shifts, shape ``(nav_y, nav_x, 2)``. Computed by the
    library (``stemdot_com_products``), as ``stemdot com``. Positions without a finite
    shift (frames summing to 0) are read as 0 by the iCoM, with a UserWarning naming
    them. Raises ShapeError for another shape (the shift maps of a 3-D nav shape: give
    one plane's, ``shifts[z]``; LiberTEM's CoMUDF too takes 2-D scans only),
    InvalidArgumentError for a rotation that is not finite."""
    shifts = np.asarray(shifts)
    if shifts.ndim == 4 and shifts.shape[3] == 2:
        raise ShapeError(f"shifts of shape {shifts.shape}: the shift maps of a scan of planes (nav_z, nav_y, nav_x, 2); "
                         "CoM products are of a 2-D scan (derivatives along its rows and columns), as LiberTEM's CoMUDF: "
                         "give one plane's maps, shifts[z]", _lib.ERR_SHAPE)
    if shifts.ndim != 3 or shifts.shape[2] != 2 or shifts.dtype.kind not in "biuf":
        raise ShapeError(f"shifts of shape {shifts.shape} and dtype {shifts.dtype}: want the shift maps of com_shifts, "
                         "numbers of shape (nav_y, nav_x, 2)", _lib.ERR_SHAPE)
    shifts = np.ascontiguousarray(shifts, dtype=np.float64)
    ny, nx = shifts.shape[:2]
    out = {k: np.empty((ny, nx), np.float64) for k in ("magnitude", "divergence", "curl", "icom")}
    out["field"] = np.empty((ny, nx, 2), np.float64)
    warning = ctypes.create_string_buffer(1024)
    ptr = lambda a: a.ctypes.data_as(ctypes.POINTER(ctypes.c_double))  # noqa: E731
    _call(_LIB.stemdot_com_products, ptr(shifts), ny, nx, float(rotation), int(bool(flip_y)), ptr(out["field"]),
          ptr(out["magnitude"]), ptr(out["divergence"]), ptr(out["curl"]), ptr(out["icom"]), warning, len(warning))
    if warning.value:
        _warn(f"stemdot: {warning.value.decode(errors='replace')}", stacklevel=2)
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
            _warn(f"stemdot: {w}", stacklevel=3)

    def free(self):
        _call(_LIB.stemdot_plan_free, self.handle)


class _PreparedMasks:
    """A mask stack prepared once in the library (stemdot_masks_new) for many applies
    (the ranges of a stemdot.dask job on one worker): masks, a C-contiguous float32 or
    float64 array (n_masks, sig_y, sig_x), is checked (NaN or infinite weights refused,
    InvalidArgumentError) and copied there, in the form every apply runs it, so that an
    apply (:meth:`apply`) does not scan the weights again. The library's copy is freed by
    :meth:`free`, or when the object is dropped (an apply running with it keeps it)."""

    def __init__(self, masks):
        handle = ctypes.c_uint64()
        _call(_LIB.stemdot_masks_new, ctypes.c_void_p(masks.ctypes.data), _lib.DTYPE_CODES[masks.dtype.name], *masks.shape,
              ctypes.byref(handle))
        self.shape = masks.shape
        self.handle = handle.value
        self._free = weakref.finalize(self, _LIB.stemdot_masks_free, self.handle)

    def apply(self, dataset, shifts, plan, run, out):
        """Applies the stack to every frame of dataset (a Dataset), moved by shifts (None,
        or a C-contiguous float64 array of (dy, dx) pairs, see stemdot_apply_masks), with
        the plan and run handles (0: default, none), into out (n_frames, n_masks), float32
        or float64, C-contiguous: results bit-identical to stemdot_apply's."""
        sh = None if shifts is None else shifts.ctypes.data_as(ctypes.POINTER(ctypes.c_double))
        _call(_LIB.stemdot_apply_masks, dataset.handle, self.handle, sh, 0 if shifts is None else shifts.size, plan, run,
              _lib.PROGRESS_FN(), None, ctypes.c_void_p(out.ctypes.data), _lib.DTYPE_CODES[out.dtype.name], out.size)

    def free(self):
        self._free()


def _custom_plan(cpus, gpus, oversubscribe, partition_size):
    """A :class:`_Plan` of the options given, or None (the library's default plan) when
    every option has its default (None, and oversubscribe False)."""
    if cpus is None and gpus is None and oversubscribe is False and partition_size is None:
        return None
    return _Plan(cpus, gpus, oversubscribe, partition_size)


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


# --------------------------------------------------------------------------- results

#: The format tag and version of a result's JSON sidecar (the Go API's ResultInfo).
RESULT_FORMAT, RESULT_FORMAT_VERSION = "stemdot-result", 1


class Result(np.ndarray):
    """The result of :func:`apply_masks`: a numpy array of shape ``nav_shape + (n_masks,)``
    (``(n_selected, n_masks)`` for a compact region of interest, ``roi_compact``)
    (a plain ``ndarray`` subclass, so every numpy use of the array works as before) that
    also carries ``names``, the masks' names in column order (a tuple of str), and
    ``info``, a dict of the sidecar schema that ``stemdot apply`` writes beside its NPY
    (``RESULT.json``; the Go API's ``ResultInfo``): ``format``, ``format_version``,
    ``stemdot_version``, ``shape``, ``dtype``, ``nav_shape``, ``sig_shape``, ``masks``
    (per column: ``column``, ``name``, ``spec`` or ``file``, ``index``), ``dataset``
    (``path``, ``format``, ``options``), ``plan`` (``cpu_workers``, ``gpu_workers``)
    and, where they apply, ``com_shifts`` (the CoM shift maps' file), ``roi`` (a region of
    interest: ``scan_shape``, ``selected``, ``compact``, ``positions``), ``centre`` (of
    auto specs: ``x``, ``y``, ``r``, ``source``), ``shifts`` (masks moved with the
    pattern: ``mean`` and ``constant`` or ``file``) and ``positions_without_frame``
    ([first, count] runs of the flat scan positions that have no frame in the file, a
    sync offset's: their values are 0). ``column(name)`` is the image of the
    mask of that name.

    ``names`` and ``info`` describe this array's columns only: arrays derived from it
    (slices, arithmetic, copies) have ``names = info = None``. Pickling keeps them.
    """

    def __new__(cls, data, names=None, info=None):
        obj = np.asarray(data).view(cls)
        obj.names = tuple(names) if names is not None else None
        obj.info = info
        return obj

    def __array_finalize__(self, obj):
        # A view or a derived array may hold other columns, or none: it is unnamed.
        self.names = None
        self.info = None

    def column(self, name):
        """The image (``nav_shape``) of the mask named ``name``, as a plain ndarray.
        KeyError when no mask, or more than one, has that name."""
        found = [i for i, n in enumerate(self.names or ()) if n == name]
        if len(found) != 1:
            raise KeyError(f"{name!r}: {'no mask' if not found else f'{len(found)} masks'} of that name "
                           f"(names: {', '.join(self.names or ()) or 'none'})")
        return np.asarray(self)[..., found[0]]

    def __reduce__(self):
        return (_result, (np.asarray(self), self.names, self.info))


def _result(data, names, info):
    """Unpickles a Result."""
    return Result(data, names, info)


def _result_info(shape, dtype, sig_shape, masks, path, fmt, options, cpu_workers, gpu_workers, roi=None, centre=None,
                 shifts=None, without_frame=None, run_notes=None, calibration=None):
    """The sidecar dict of a result (the Go API's ResultInfo; stemdot apply's
    RESULT.json): masks is a list of dicts with name and, when known, spec or file and
    index; options the open options given, key → value (formatted as the library reads
    them); roi, for a result of a region of interest, a dict of scan_shape, selected,
    compact and, when written, positions (the file); centre, when auto specs were made,
    a dict of x, y, r and source ("sum frame", "sum frame of the frames moved back by
    their shifts" or "given"); shifts, for masks moved with
    the pattern, a dict of mean (dy, dx) and, when given so, constant or file;
    without_frame, the (first, count) runs of the scan positions without a frame
    (Dataset.positions_without_frame); run_notes, those of the frames read
    (Dataset.run_notes); calibration, the file's (Dataset.calibration), its nav axes
    left out where the result's nav shape is not the scan's (a compact ROI)."""
    info = {
        "format": RESULT_FORMAT,
        "format_version": RESULT_FORMAT_VERSION,
        "stemdot_version": __version__,
        "shape": [int(n) for n in shape],
        "dtype": np.dtype(dtype).name,
        "nav_shape": [int(n) for n in shape[:-1]],
        "sig_shape": [int(n) for n in sig_shape],
        "masks": [{"column": i, **{k: m[k] for k in ("name", "spec", "file") if m.get(k) is not None},
                   "index": int(m.get("index", i))} for i, m in enumerate(masks)],
        "dataset": {"path": os.path.abspath(path) if path else "", "format": fmt,
                    "options": {k: _option_value(k, v) for k, v in options.items() if v is not None}},
        "plan": {"cpu_workers": int(cpu_workers), "gpu_workers": int(gpu_workers)},
    }
    if roi is not None:
        info["roi"] = {"scan_shape": [int(n) for n in roi["scan_shape"]], "selected": int(roi["selected"]),
                       "compact": bool(roi["compact"]), **({"positions": roi["positions"]} if roi.get("positions") else {})}
    if centre is not None:
        info["centre"] = {"x": float(centre["x"]), "y": float(centre["y"]), "r": float(centre["r"]), "source": centre["source"]}
    if shifts is not None:
        info["shifts"] = {**({"constant": [float(v) for v in shifts["constant"]]} if shifts.get("constant") is not None else {}),
                          **({"file": os.path.abspath(shifts["file"])} if shifts.get("file") else {}),
                          "mean": [float(v) for v in shifts["mean"]]}
    if without_frame:
        info["positions_without_frame"] = [[int(a), int(n)] for a, n in without_frame]
    if run_notes:
        info["run_notes"] = [{k: n[k] for k in ("key", "count", "frames", "warning")} for n in run_notes]
    if calibration:
        cal = dict(calibration)
        if len(cal.get("nav", [])) != len(info["nav_shape"]) or roi is not None and roi["compact"]:
            cal.pop("nav", None)
        if any("scale" in a for a in cal.get("nav", []) + cal.get("sig", [])) or cal.get("camera_length_m"):
            info["calibration"] = cal
    return info


def _sidecar_path(path):
    """RESULT.json beside RESULT.npy (the Go API's SidecarPath)."""
    root, ext = os.path.splitext(path)
    return (root if ext.lower() == ".npy" else path) + ".json"


def _open_regular(path, what, mode="rb", flags=os.O_RDONLY, missing_ok=False):
    """The file object of the regular file at path, opened with os.open flags and then as
    mode (as builtins.open), or None for a missing one when missing_ok. It is opened
    non-blocking and checked (fstat) before anything is read: a FIFO, whose open or read
    would wait for a writer forever, a directory or a device raise StemdotIOError naming
    what and path, as does any other OSError (for which the OSError is the cause)."""
    try:
        fd = os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
    except FileNotFoundError:
        if missing_ok:
            return None
        raise StemdotIOError(f"{what} {path}: file does not exist", _lib.ERR_IO) from None
    except OSError as e:
        raise StemdotIOError(f"{what} {path}: {e.strerror or e}", _lib.ERR_IO) from e
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = ("a directory" if stat.S_ISDIR(st.st_mode) else "a FIFO (named pipe)" if stat.S_ISFIFO(st.st_mode)
                    else "a socket" if stat.S_ISSOCK(st.st_mode) else "a device" if stat.S_ISCHR(st.st_mode) or
                    stat.S_ISBLK(st.st_mode) else "not a file")
            raise StemdotIOError(f"{what} {path} is {kind}, not a regular file", _lib.ERR_IO)
        os.set_blocking(fd, True)
        return builtins.open(fd, mode, encoding=None if "b" in mode else "utf-8")
    except BaseException:
        os.close(fd)
        raise


def load_result(path):
    """Reads a result NPY written by ``stemdot apply`` or ``python -m stemdot.dask`` and
    its JSON sidecar (the same name with ``.json``), and returns a :class:`Result`: the
    array with ``names`` and ``info`` (the sidecar). An NPY without a sidecar (written
    by another program, or by stemdot before 0.3.0, which added the sidecar) is returned with
    ``names = info = None`` and a UserWarning saying so. Raises :class:`FormatError`
    for a sidecar that is not stemdot's result JSON or is of a newer format version,
    :class:`ShapeError` or :class:`DTypeError` for a sidecar that does not describe the
    NPY (another shape, dtype or number of columns: the two files are not of one run),
    :class:`StemdotIOError` naming the path for either file missing (the NPY), unreadable
    or not a regular file (a directory; a FIFO is refused at once, not waited on).
    """
    path = os.fspath(path)
    with _open_regular(path, "result") as f:
        data = np.load(f)
    sidecar = _sidecar_path(path)
    f = _open_regular(sidecar, "sidecar", "r", missing_ok=True)
    if f is None:
        _warn(f"stemdot: {path} has no sidecar {sidecar}: its columns are unnamed (Result.names and "
              "Result.info are None)", stacklevel=2)
        return Result(data)
    with f:
        try:
            text = f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise StemdotIOError(f"sidecar {sidecar}: {e}", _lib.ERR_IO) from e
    try:
        info = json.loads(text)
    except ValueError as e:
        raise FormatError(f"{sidecar}: not JSON ({e}): not the sidecar of a stemdot result", _lib.ERR_FORMAT) from None
    if not isinstance(info, dict) or info.get("format") != RESULT_FORMAT:
        raise FormatError(f"{sidecar}: no \"format\": \"{RESULT_FORMAT}\" tag: not the sidecar of a stemdot result",
                          _lib.ERR_FORMAT)
    version = info.get("format_version")
    if not isinstance(version, int) or version < 1 or version > RESULT_FORMAT_VERSION:
        raise FormatError(f"{sidecar}: format_version {version!r}: this stemdot ({__version__}) reads versions 1 to "
                          f"{RESULT_FORMAT_VERSION}; a newer stemdot wrote it: upgrade stemdot", _lib.ERR_FORMAT)
    masks = info.get("masks")
    if info.get("shape") != list(data.shape):
        raise ShapeError(f"{sidecar} describes shape {tuple(info.get('shape') or ())}, but {path} holds "
                         f"{data.shape}: the two files are not of one run", _lib.ERR_SHAPE)
    if info.get("dtype") != data.dtype.name:
        raise DTypeError(f"{sidecar} describes dtype {info.get('dtype')}, but {path} holds {data.dtype}: the two "
                         "files are not of one run", _lib.ERR_DTYPE)
    if not isinstance(masks, list) or data.ndim < 1 or len(masks) != data.shape[-1] or \
            [m.get("column") if isinstance(m, dict) else None for m in masks] != list(range(len(masks))):
        raise ShapeError(f"{sidecar} names {len(masks) if isinstance(masks, list) else 'no'} columns (0, 1, ... in "
                         f"order), but {path} has {data.shape[-1] if data.ndim else 0}: the two files are not of one run",
                         _lib.ERR_SHAPE)
    return Result(data, [m.get("name") for m in masks], info)


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


def _shifts(shifts, scan_shape, nav_shape):
    """The shifts keyword as a C-contiguous float64 array of (dy, dx) pairs, or None, for
    a dataset of scan_shape (Dataset.scan_shape) and nav_shape: of shape (2,), (dy, dx)
    for every frame; scan_shape + (2,), one per scan position (as ``stemdot apply
    --shifts`` takes them); or, for a dataset that reads part of its scan (frames=,
    roi=), nav_shape + (2,), one per frame read. Any other shape is a ShapeError, one of
    as many values too: a map transposed, (nav_x, nav_y, 2), is not read in flat order."""
    if shifts is None:
        return None
    try:
        a = np.asarray(shifts)
    except (TypeError, ValueError) as e:
        raise DTypeError(f"shifts: {e}: want (dy, dx) or an array of shape nav_shape + (2,)", _lib.ERR_DTYPE) from e
    if a.dtype.kind not in "iuf":
        raise DTypeError(f"shifts of dtype {a.dtype}: want (dy, dx) in pixels or a float array of shape nav_shape + (2,)",
                         _lib.ERR_DTYPE)
    scan, nav = tuple(scan_shape) + (2,), tuple(nav_shape) + (2,)
    if a.shape not in ((2,), scan, nav):
        read = f", or one per frame read, {nav}" if nav != scan else ""
        raise ShapeError(f"shifts of shape {a.shape}: want (dy, dx) for every frame, shape (2,), or one shift per scan "
                         f"position, nav_shape {tuple(scan_shape)} + (2,) = {scan}{read}; y then x", _lib.ERR_SHAPE)
    return np.ascontiguousarray(a, dtype=np.float64).reshape(-1)


DescanFit = collections.namedtuple("DescanFit", ["dy", "dx", "rms", "used", "shifts"])
DescanFit.__doc__ = """The descan plane of :func:`descan_fit`: ``dy = dy[0] + dy[1]·y + dy[2]·x`` and
``dx = dx[0] + dx[1]·y + dx[2]·x`` in pixels, (y, x) the scan row and column from 0;
``rms``: the rms residuals (y, x) in pixels; ``used``: the scan positions fitted;
``shifts``: the plane at every scan position, float64 of shape scan_shape + (2,) (the
whole scan's, also for a dataset of an ROI or a frames range), y then
x, for ``apply_masks(..., shifts=fit.shifts)``."""


def descan_fit(data, com=None, cpus=None, gpus=None, oversubscribe=False, partition_size=None):
    """Fits the descan plane to the centre-of-mass shift map of ``data`` (a
    :class:`Dataset` or an array of shape nav_shape + (sig_y, sig_x): numpy, a non-lazy
    HyperSpy signal or an object with ``__array__``), as ``stemdot descan
    fit``: the :func:`com` masks of spec ``com`` (None: "com", about (sig_x//2,
    sig_y//2) over the whole frame; "com:CX,CY,R": within R of (CX, CY); "com:auto,R":
    within R of the direct beam's centre in the sum frame) applied, their
    shifts fitted by least squares per component, frames without counts left out.
    Returns a :class:`DescanFit`; fit a reference scan (e.g. in vacuum) and pass its
    ``shifts`` to :func:`apply_masks` for a scan of the same nav shape. Raises
    InvalidArgumentError when too few frames have counts to fit a plane."""
    data = _frames_of(data, "descan_fit", paths=False)
    if _is_dask(data):
        raise InvalidArgumentError("descan_fit: a dask array (a lazy signal) is not supported: give a file "
                                   "(stemdot.open) or a numpy array", _lib.ERR_INVALID_ARGUMENT)
    ds, own = (data, False) if isinstance(data, Dataset) else (from_array(data), True)
    try:
        plan = _custom_plan(cpus, gpus, oversubscribe, partition_size)
        coeffs = (ctypes.c_double * 8)()
        shifts = np.empty(tuple(ds.scan_shape) + (2,), np.float64)
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
        _warn_run_notes(ds.run_notes(), stacklevel=2)
        c = list(coeffs)
        return DescanFit(tuple(c[0:3]), tuple(c[3:6]), tuple(c[6:8]), used.value, shifts)
    finally:
        if own:
            ds.close()


def _mean_shift(shifts, n_frames, frame_positions):
    """The mean (dy, dx) of the shifts of n_frames frames (the Go API's MeanShift): shifts
    (dy, dx), 2 per frame, or 2 per scan position (frame_positions: each frame's, None
    when the frames are the whole scan in order)."""
    s = np.asarray(shifts, dtype=np.float64).reshape(-1, 2)
    if len(s) not in (1, n_frames) and frame_positions is not None:
        s = s[frame_positions]
    return tuple(float(v) for v in s.mean(axis=0))


def _place(out, nav_shape, scan_shape, positions, roi_compact):
    """The result of an apply: ``out`` (n_frames × n_masks values) in ``nav_shape``, or,
    for a region of interest (``positions`` not None), placed in ``scan_shape`` with NaN
    elsewhere (or, roi_compact, ``(out, positions)``)."""
    n_masks = out.shape[-1]
    if positions is None:
        return out.reshape(tuple(nav_shape) + (n_masks,))
    out = out.reshape(len(positions), n_masks)
    if roi_compact:
        return out, positions
    whole = np.full(tuple(scan_shape) + (n_masks,), np.nan, dtype=out.dtype)
    whole.reshape(-1, n_masks)[positions] = out
    return whole


def apply_masks(data, masks, cpus=None, gpus=None, progress=False, dtype=np.float32, oversubscribe=False, partition_size=None,
                names=None, roi=None, roi_compact=False, shifts=None, as_signal=False):
    """Applies a mask stack to every frame: ``out[..., m] = Σ_{y,x} masks[m, y, x] ·
    frame[y, x]``.

    data: a :class:`Dataset`, or a numpy array of shape ``nav_shape + (sig_y, sig_x)``
      (passed zero-copy when C-contiguous and native byte order; otherwise copied once,
      see :func:`from_array`); or a dask array of that shape, computed one block of
      frames (at most :data:`LAZY_BLOCK_BYTES`, cut along the nav axes) at a time, each
      block applied and dropped before the next is computed, so that the scan is never
      whole in memory (only a block, and the source chunks dask reads for it; ``roi``
      is not taken: select the positions in the array); or a HyperSpy signal of signal
      dimension 2 (e.g. pyxem's Diffraction2D), lazy (its dask array) or not, whose
      ``data`` is in numpy order, ``nav_shape`` the reverse of
      ``axes_manager.navigation_shape``; or any object with ``__array__`` (made a numpy
      array). Each frame's values are those of the same frames given as a numpy
      array, bit for bit.
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
    names: the masks' names, one per mask (e.g. the names :func:`mask_stack` returns);
      None: "mask0", "mask1", ...
    roi: for numpy array data, a region of interest (as for :func:`open`: a boolean
      array of nav_shape, "rect:X,Y,W,H" or an NPY file); a Dataset takes it when opened.
    roi_compact: for a region of interest, return ``(images, positions)``: images of
      shape (n_selected, n_masks) and their scan positions (int64 flat indices in C order
      over the scan's nav shape, ``np.unravel_index(positions, nav_shape)`` gives rows
      and columns) instead of the scan's nav shape with NaN at the positions left out.
    shifts: None, or move the masks with the diffraction pattern (descan compensation):
      ``(dy, dx)`` in pixels for every frame, or an array of shape ``nav_shape + (2,)``
      (y then x; for a dataset opened with ``frames`` or ``roi``, of the whole scan,
      ``scan_shape + (2,)``, or of the frames read), e.g. :func:`descan_fit`'s
      ``shifts``; any other shape raises :class:`ShapeError`, also one of as many values
      (a map transposed). The masks of a frame are applied moved by its
      shift, ``out[..., m] = Σ masks[m](y − dy, x − dx) · frame[y, x]``, mask pixels moved
      outside the frame dropped, as LiberTEM's ``ApplyMasksUDF(shifts=...)`` (positive dy
      moves the masks down, dx right); integer shifts exactly, sub-pixel ones by bilinear
      interpolation of the mask (LiberTEM truncates them to integers).

    as_signal: return the result as a HyperSpy signal (:func:`to_hyperspy`), with the nav
      axes of ``data`` when it is a signal.

    Returns a :class:`Result`, a numpy array of ``dtype`` and shape ``nav_shape +
    (n_masks,)`` (the whole scan's for a region of interest, NaN outside it) that
    carries the masks' ``names`` and the ``info`` of a result's sidecar (its dataset,
    options given and the plan's workers as planned for the dataset; ``run_notes``: what
    the reader counted in the frames read, :meth:`Dataset.run_notes`, also issued as
    :class:`RunNoteWarning`). Raises
    :class:`StemdotError` subclasses (ShapeError for masks of another sig shape, ...).
    Ctrl-C cancels the run and raises KeyboardInterrupt; an exception raised by a
    progress callable cancels the run and is re-raised.
    """
    signal = data if _is_signal(data) else None
    data = _frames_of(data, "apply_masks", paths=False)
    sig_shape = data.sig_shape if isinstance(data, Dataset) else data.shape[-2:]
    out_dtype, masks = _job(masks, dtype, sig_shape)
    names = _names(names, masks.shape[0])
    if _is_dask(data):
        if roi is not None or roi_compact:
            raise InvalidArgumentError("apply_masks: roi= and roi_compact= are not taken with a dask array (a lazy "
                                       "signal): select the scan positions in the array, or compute it first",
                                       _lib.ERR_INVALID_ARGUMENT)
        result = _apply_lazy(data, masks, names, out_dtype, cpus, gpus, progress, oversubscribe, partition_size, shifts)
        return to_hyperspy(result, like=signal) if as_signal else result
    if as_signal and roi_compact:
        raise InvalidArgumentError("apply_masks: as_signal=True with roi_compact=True: a compact result has no scan "
                                   "axes; leave one of them out", _lib.ERR_INVALID_ARGUMENT)
    if isinstance(data, Dataset):
        if roi is not None:
            raise InvalidArgumentError("apply_masks: roi= is for numpy array data: give a Dataset its roi when it is "
                                       "opened, stemdot.open(path, roi=...)", _lib.ERR_INVALID_ARGUMENT)
        ds, own = data, False
    else:
        ds, own = from_array(data, roi), True
    try:
        if roi_compact and not ds.roi:
            raise InvalidArgumentError("roi_compact=True needs a region of interest (roi=)", _lib.ERR_INVALID_ARGUMENT)
        shifts = _shifts(shifts, ds.scan_shape, ds.nav_shape)
        out = np.empty(ds.nav_shape + (masks.shape[0],), dtype=out_dtype)
        plan = _custom_plan(cpus, gpus, oversubscribe, partition_size)
        try:
            if plan is not None:
                plan.warn()
            _apply(ds, masks, plan, progress, out, shifts)
            workers = _workers(plan, ds)
        finally:
            if plan is not None:
                plan.free()
        run_notes = ds.run_notes()
        _warn_run_notes(run_notes, stacklevel=2)
        path, options = ds._reopen or ("", {})
        gpu_workers = sum("gpu" in w for w in workers)
        placed = _place(out, ds.nav_shape, ds.scan_shape, ds.positions, roi_compact)
        images, positions = placed if roi_compact else (placed, None)
        roi = {"scan_shape": ds.scan_shape, "selected": ds.n_frames, "compact": roi_compact} if ds.roi else None
        moved = None
        if shifts is not None:
            part = int(np.prod(ds.scan_shape)) != ds.n_frames
            moved = {"mean": _mean_shift(shifts, ds.n_frames, ds._scan_positions() if part else None),
                     "constant": shifts if shifts.size == 2 else None}
        info = _result_info(images.shape, images.dtype, ds.sig_shape, [{"name": n} for n in names], path, ds.format, options,
                            len(workers) - gpu_workers, gpu_workers, roi=roi, shifts=moved,
                            without_frame=ds.positions_without_frame, run_notes=run_notes, calibration=ds.calibration)
        result = Result(images, names, info)
        if as_signal:
            return to_hyperspy(result, like=signal)
        return (result, positions) if roi_compact else result
    finally:
        if own:
            ds.close()


def _check_sig(masks, x):
    """ShapeError unless masks (n_masks, sig_y, sig_x) fit the frames of array x, before
    any of its blocks is computed."""
    if tuple(masks.shape[1:]) != tuple(x.shape[-2:]):
        raise ShapeError(f"masks of sig_shape {tuple(masks.shape[1:])} do not match the frames of the array of shape "
                         f"{tuple(x.shape)} (nav_shape + (sig_y, sig_x))", _lib.ERR_SHAPE)


def _apply_lazy(x, masks, names, out_dtype, cpus, gpus, progress, oversubscribe, partition_size, shifts):
    """apply_masks of dask array x, one block of frames at a time (_lazy_blocks): each
    block applied by the engine as an in-memory dataset into its part of the result, so
    that each frame's values are those of the whole array's apply, bit for bit."""
    _check_sig(masks, x)
    nav_shape = tuple(int(n) for n in x.shape[:-2])
    n_frames = int(np.prod(nav_shape))
    shifts = _shifts(shifts, nav_shape, nav_shape)
    if shifts is not None and shifts.size > 2:
        shifts = shifts.reshape(nav_shape + (2,))
    out = np.empty(nav_shape + (masks.shape[0],), dtype=out_dtype)
    plan = _custom_plan(cpus, gpus, oversubscribe, partition_size)
    workers, done = None, 0
    try:
        if plan is not None:
            plan.warn()
        for index, frames in _lazy_blocks(x):
            part = np.empty(frames.shape[:-2] + (masks.shape[0],), dtype=out_dtype)
            moved = shifts if shifts is None or shifts.size == 2 else np.ascontiguousarray(shifts[index]).reshape(-1)
            with from_array(frames) as ds:
                _apply(ds, masks, plan, _block_progress(progress, done, n_frames), part, moved)
                workers = workers or _workers(plan, ds)
            out[index] = part
            done += ds.n_frames
            del frames, part
    finally:
        if plan is not None:
            plan.free()
    gpu_workers = sum("gpu" in w for w in workers)
    moved = None
    if shifts is not None:
        moved = {"mean": _mean_shift(shifts, n_frames, None), "constant": shifts if shifts.size == 2 else None}
    info = _result_info(out.shape, out.dtype, x.shape[-2:], [{"name": n} for n in names], "", "dask", {},
                        len(workers) - gpu_workers, gpu_workers, shifts=moved)
    return Result(out, names, info)


def to_hyperspy(result, like=None):
    """The result of :func:`apply_masks` (a :class:`Result` or an array of shape
    ``nav_shape + (n_masks,)``) as a HyperSpy ``Signal1D``: its navigation axes are the
    scan's, its signal axis (named "mask", index 0, 1, ...) the masks', and its
    ``metadata.stemdot`` holds the masks' ``names`` and the result's ``info`` (as JSON
    text, ``info_json``), its title the names.

    The scan axes (name, scale, offset, units) are those of ``like``'s navigation axes, a
    HyperSpy signal (the one the result was computed from); else those of
    ``result.info["calibration"]["nav"]`` (a list in numpy order, one dict per nav axis,
    as a file's reader records the scan's calibration), where there is one per nav axis;
    else uncalibrated. HyperSpy lists axes the other way round from numpy
    (``axes_manager.navigation_shape`` is ``nav_shape`` reversed, x first): the signal's
    ``data`` is the result in numpy order, unchanged. Raises ShapeError when ``like``'s
    navigation shape is not the result's (e.g. a compact ROI result), ImportError without
    HyperSpy (``pip install "stemdot[hyperspy]"``).
    """
    try:
        from hyperspy.signals import Signal1D
    except ImportError as e:
        raise ImportError(f"stemdot.to_hyperspy needs HyperSpy ({e}): pip install 'stemdot[hyperspy]'") from e
    data = np.asarray(result)
    if data.ndim < 2:
        raise ShapeError(f"to_hyperspy: a result of shape {data.shape}: want nav_shape + (n_masks,)", _lib.ERR_SHAPE)
    nav_shape = data.shape[:-1]
    info = getattr(result, "info", None) or {}
    if like is not None:
        if not _is_signal(like):
            raise TypeError(f"to_hyperspy: like= wants a HyperSpy signal, got {type(like).__name__}")
        axes = [dict(a.get_axis_dictionary(), navigate=True) for a in like.axes_manager.navigation_axes[::-1]]
        if tuple(a["size"] for a in axes) != nav_shape:
            raise ShapeError(f"to_hyperspy: like= has the navigation shape {tuple(a['size'] for a in axes)} (numpy "
                             f"order), the result {nav_shape}", _lib.ERR_SHAPE)
    else:
        calibration = (info.get("calibration") or {}).get("nav") or []
        if len(calibration) != len(nav_shape):
            calibration = [{}] * len(nav_shape)
        axes = [{"size": n, "navigate": True, **{k: c[k] for k in ("name", "scale", "offset", "units") if k in c}}
                for n, c in zip(nav_shape, calibration)]
    axes.append({"size": data.shape[-1], "name": "mask", "scale": 1.0, "offset": 0.0, "units": "", "navigate": False})
    signal = Signal1D(data, axes=axes)
    names = list(getattr(result, "names", None) or [])
    signal.metadata.General.title = ", ".join(names) if names else "stemdot virtual detectors"
    signal.metadata.set_item("stemdot.names", names)
    signal.metadata.set_item("stemdot.info_json", json.dumps(info))
    return signal


def _workers(plan, ds):
    """The workers plan (None: the library's default plan) has for dataset ds."""
    p = plan if plan is not None else _Plan(None, None)
    try:
        return p.describe(ds)["workers"]
    finally:
        if plan is None:
            p.free()


def _names(names, n_masks):
    """The masks' names: names given (n_masks strings), or "mask0", "mask1", ...
    (the library's default names)."""
    if names is None:
        return [f"mask{m}" for m in range(n_masks)]
    if isinstance(names, str) or not all(isinstance(n, str) for n in names):
        raise TypeError(f"names={names!r:.80}: want a sequence of strings, one per mask")
    names = list(names)
    if len(names) != n_masks:
        raise ShapeError(f"names: {len(names)} names for {n_masks} masks: give one name per mask", _lib.ERR_SHAPE)
    return names


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
    weights, suffix = _weights(masks)

    def call(run, callback):
        tail = (plan.handle if plan is not None else 0, run, callback, None, ctypes.c_void_p(out.ctypes.data),
                _lib.DTYPE_CODES[out.dtype.name], out.size)
        if shifts is None:
            return getattr(_LIB, "stemdot_apply" + suffix)(ds.handle, weights, *masks.shape, *tail)
        return _LIB.stemdot_apply_shifted(ds.handle, ctypes.c_void_p(masks.ctypes.data), _lib.DTYPE_CODES[masks.dtype.name],
                                          *masks.shape, shifts.ctypes.data_as(ctypes.POINTER(ctypes.c_double)),
                                          shifts.size, *tail)

    _cancellable(call, progress, "apply")


def _cancellable(call, progress, what):
    """Runs ``call(run, callback)``, a C call of a run handle and a progress callback
    (stemdot_apply, stemdot_reduce) returning its status, cancellably: on the main thread
    the call runs on a worker thread, so that Ctrl-C (KeyboardInterrupt) cancels the run;
    an exception raised by progress cancels it too and is re-raised; a nonzero status
    raises its error."""
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
            code = call(run, callback)
            outcome.append((code, _LIB.stemdot_last_error().decode(errors="replace") if code != _lib.OK else ""))
        except BaseException as e:  # e.g. a ctypes argument error: re-raised by the caller
            outcome.append(e)
        finally:
            done.set()

    try:
        if threading.current_thread() is threading.main_thread():
            # The call runs on a worker thread so that the main thread stays free to
            # receive Ctrl-C (KeyboardInterrupt), which cancels the run.
            worker = threading.Thread(target=target, name="stemdot-" + what, daemon=True)
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


# ------------------------------------------------------------------ reductions and pick

#: The reductions of :func:`reduce`, in the order it returns them.
REDUCTIONS = ("sum", "mean", "max", "std")


def _dataset_of(data, format_options, what):
    """The Dataset of data (a Dataset, a numpy array of frames, or a path opened with
    format_options; what _frames_of takes, but a dask array) and whether the caller owns
    it (closes it)."""
    if format_options and not isinstance(data, (str, os.PathLike)):
        raise TypeError(f"{what}: format options ({', '.join(format_options)}) apply to a path only")
    data = _frames_of(data, what)
    if isinstance(data, Dataset):
        return data, False
    if isinstance(data, np.ndarray):
        return from_array(data), True
    if isinstance(data, (str, os.PathLike)):
        return open(data, **format_options), True
    raise TypeError(f"{what} takes no dask array here (a lazy signal): compute it first")


def _merge_reduction(total, count, part):
    """Merges the partial reduction part of count frames (name → array; the sum included
    with the mean and the std, the mean with the std) into total, in place: sums added,
    maxima compared with NaN kept, and (n, mean, std) merged by Chan, Golub and LeVeque's
    update, M2 = M2_a + M2_b + δ²·n_a·n_b/n with δ = mean_b − mean_a, divided by n: std² =
    w_a·std_a² + w_b·std_b² + w_a·w_b·δ² (w = n_part/n), each term scaled per pixel by a
    power of two 1/c ≥ the means and stds, as the engine merges its workers
    (engine/reduce.go, mergeStd): M2 = count·std² and δ² overflow for finite frames near
    1e154 and above. A part of no frame (a range of positions without a frame: its sum
    0, the rest NaN) counts only while no other came. Used by stemdot.dask.reduce for its
    ranges and by reduce for the blocks of a dask array."""
    if total and count == 0:
        return
    if not total or total["n"] == 0:
        total.clear()
        total.update(part, n=count)
        return
    na, nb = total["n"], count
    n = na + nb
    with np.errstate(invalid="ignore", over="ignore"):  # +Inf and -Inf meet: NaN, as numpy gives
        if "sum" in part:
            total["sum"] = total["sum"] + part["sum"]
        if "max" in part:
            total["max"] = np.where(np.isnan(part["max"]) | (part["max"] > total["max"]), part["max"], total["max"])
        if "std" in part:
            wa, wb = na / n, nb / n
            c = np.maximum.reduce([total["std"], part["std"], np.abs(total["mean"]), np.abs(part["mean"])])
            f = np.where((c > 0) & (c <= np.finfo(np.float64).max), np.ldexp(1.0, -np.frexp(c)[1]), 1.0)
            a, b, x, y = total["mean"] * f, part["mean"] * f, total["std"] * f, part["std"] * f
            d = b - a
            total["mean"] = (a + d * wb) / f
            total["std"] = np.sqrt(wa * x * x + wb * y * y + wa * wb * d * d) / f
    total["n"] = n


def _partials(names):
    """The reductions a part computes so that _merge_reduction can merge the names asked:
    the sum with the mean and the std, the mean with the std."""
    names = set(names)
    names |= {"sum"} if names & {"mean", "std"} else set()
    names |= {"mean"} if "std" in names else set()
    return names


def _merged(total, names):
    """The reductions names of the merged total, in the order of REDUCTIONS: the mean the
    sum over the frames (NaN for none)."""
    out = {}
    for r in [r for r in REDUCTIONS if r in names]:
        with np.errstate(invalid="ignore", divide="ignore"):  # no frame (n = 0): NaN, as stemdot.reduce
            out[r] = total["sum"] / total["n"] if r == "mean" else total[r]
    return out


def _reduce_lazy(x, names, plan, progress):
    """reduce of dask array x, one block at a time (_lazy_blocks), the blocks' partial
    reductions merged by _merge_reduction as the engine merges its workers'."""
    total, done = {}, 0
    n_frames = int(np.prod(x.shape[:-2]))
    for _, frames in _lazy_blocks(x):
        with from_array(frames) as ds:
            part = {r: np.empty(ds.sig_shape, dtype=np.float64) for r in REDUCTIONS if r in _partials(names)}
            _reduce(ds, plan, _block_progress(progress, done, n_frames), part)
            done += ds.n_frames
        del frames
        _merge_reduction(total, ds.n_frames, part)
    return _merged(total, names)


def reduce(data, reductions=("sum",), cpus=None, progress=False, oversubscribe=False, partition_size=None, **format_options):
    """Reduces every frame in one pass on pinned CPU workers: the sum, mean, maximum and
    standard-deviation frames named in ``reductions`` (any of :data:`REDUCTIONS`; only
    those are computed).

    data: a :class:`Dataset`, an array of shape ``nav_shape + (sig_y, sig_x)`` (numpy,
      dask, a HyperSpy signal or an object with ``__array__``, as for
      :func:`apply_masks`), or a path opened with ``format_options`` (those of
      :func:`open`). A dask array is reduced one block at a time (:data:`LAZY_BLOCK_BYTES`)
      and the blocks' reductions merged as the engine merges its workers': the sum and max
      of integer frames are those of the numpy array's, bit for bit; float sums, the mean
      and std agree to rounding (their order of summation differs).
    reductions: names from "sum" (Σ_f frame_f, LiberTEM's SumUDF), "mean" (sum / number
      of frames), "max" (per pixel), "std" (sqrt(Σ_f (frame_f − mean)² / n): the
      population standard deviation, ddof 0, as LiberTEM's StdDevUDF and ``numpy.std``),
      over the frames of the file: the positions without a frame of a sync offset
      (``Dataset.positions_without_frame``) are left out, as LiberTEM's StdDevUDF leaves
      them out (none left: a zero sum, NaN mean, max and std).
    cpus, progress, oversubscribe, partition_size: as for :func:`apply_masks`.
      Reductions are bound by memory bandwidth and run on CPU workers only: there is no
      ``gpus``.

    Returns a dict name → float64 array of shape (sig_y, sig_x), in the order of
    :data:`REDUCTIONS`. Integer frames are summed exactly (up to 2**53); the std is
    computed from shifted sums per worker, merged by Chan et al.'s update (numerically
    stable). A NaN pixel in any frame makes that pixel NaN in each; ±Inf gives ±Inf
    sums, means and maxima (NaN where both occur) and a NaN std, as numpy does. Raises
    :class:`InvalidArgumentError` for an unknown or no reduction, :class:`StemdotError`
    subclasses as :func:`apply_masks`; Ctrl-C cancels the run.
    """
    if isinstance(reductions, str):
        reductions = (reductions,)
    names = list(reductions)
    unknown = [r for r in names if r not in REDUCTIONS]
    if unknown or not names:
        raise InvalidArgumentError(f"reductions={reductions!r}: want one or more of {', '.join(REDUCTIONS)}",
                                   _lib.ERR_INVALID_ARGUMENT)
    if not format_options:
        data = _frames_of(data, "reduce")
    if _is_dask(data):
        plan = _custom_plan(cpus, None, oversubscribe, partition_size)
        try:
            if plan is not None:
                plan.warn()
            return _reduce_lazy(data, names, plan, progress)
        finally:
            if plan is not None:
                plan.free()
    ds, own = _dataset_of(data, format_options, "reduce")
    try:
        out = {r: np.empty(ds.sig_shape, dtype=np.float64) for r in REDUCTIONS if r in names}
        plan = _custom_plan(cpus, None, oversubscribe, partition_size)
        try:
            if plan is not None:
                plan.warn()
            _reduce(ds, plan, progress, out)
        finally:
            if plan is not None:
                plan.free()
        _warn_run_notes(ds.run_notes(), stacklevel=2)
        return out
    finally:
        if own:
            ds.close()


def _reduce(ds, plan, progress, out):
    """stemdot_reduce into the float64 arrays of out (name → array), cancellably."""
    size = ds.sig_shape[0] * ds.sig_shape[1]

    def buf(name):
        a = out.get(name)
        return a.ctypes.data_as(ctypes.POINTER(ctypes.c_double)) if a is not None else None

    def call(run, callback):
        return _LIB.stemdot_reduce(ds.handle, plan.handle if plan is not None else 0, run, callback, None,
                                   *(buf(r) for r in REDUCTIONS), size)

    _cancellable(call, progress, "reduce")


def pick(data, at, **format_options):
    """The frames at the scan positions ``at``, as LiberTEM's PickUDF: a numpy array of
    shape (k, sig_y, sig_x) in the frames' dtype, in the order given.

    data: as for :func:`reduce`; of a dask array only the chunks that hold the frames
      picked are computed.
    at: a sequence of scan positions, each (y, x) for a 2-D nav shape, (z, y, x) for a
      3-D one or n (or (n,)) for a 1-D one; or an integer array of shape (k, nav_ndim).

    Raises :class:`ShapeError` naming the position for one outside the nav shape (each
    coordinate from 0 to its size − 1; negative ones are refused too) or with another
    number of coordinates, :class:`InvalidArgumentError` for no position.
    """
    if not format_options:
        data = _frames_of(data, "pick")
    if _is_dask(data):
        pos = _pick_positions(at, data.shape[:-2])
        outside = (pos >= np.array(data.shape[:-2], dtype=np.uintp)).any(axis=1)
        if outside.any():
            raise ShapeError(f"at: scan position {tuple(int(c) for c in pos[outside][0])} is outside the nav shape "
                             f"{tuple(data.shape[:-2])}: each coordinate runs from 0 to its size − 1", _lib.ERR_SHAPE)
        # Only the frames picked are computed: those of the chunks that hold them.
        frames = np.asarray(data.vindex[tuple(pos.T.astype(np.intp))].compute())
        return pick(frames, np.arange(len(frames)))  # the dtype checked and made native as for a numpy array
    ds, own = _dataset_of(data, format_options, "pick")
    try:
        pos = _pick_positions(at, ds.nav_shape)
        frames = np.empty((pos.shape[0],) + tuple(ds.sig_shape), dtype=ds.dtype)
        _call(_LIB.stemdot_pick, ds.handle, pos.ctypes.data_as(ctypes.POINTER(ctypes.c_size_t)), pos.shape[0],
              pos.shape[1], ctypes.c_void_p(frames.ctypes.data), frames.nbytes)
        picked = np.unique(np.ravel_multi_index(tuple(pos.T.astype(np.intp)), ds.nav_shape))  # a frame picked twice once
        _warn_run_notes(_sum_run_notes([n for f in picked for n in ds.run_notes(int(f), 1)], ds.path), stacklevel=2)
        return frames
    finally:
        if own:
            ds.close()


def _pick_positions(at, nav_shape):
    """The scan positions at of pick as a C-contiguous uintp array (k, len(nav_shape));
    InvalidArgumentError for none, ShapeError for a ragged or non-integer at, one of
    another number of coordinates, or a negative coordinate (the library checks the
    upper bounds)."""
    ndim = len(nav_shape)
    try:
        pos = np.asarray(at)
        if pos.ndim == 1 and ndim == 1:
            pos = pos[:, np.newaxis]
    except (ValueError, TypeError):  # ragged
        pos = None
    if pos is not None and pos.size == 0:
        raise InvalidArgumentError("at: no scan position to pick: give at least one", _lib.ERR_INVALID_ARGUMENT)
    if pos is None or pos.dtype.kind not in "iu" or pos.ndim != 2:
        raise ShapeError(f"at={at!r}: want a sequence of scan positions, each of the nav shape's {ndim} coordinates "
                         f"({ {1: 'n', 2: 'y, x', 3: 'z, y, x'}.get(ndim, 'one per nav axis') }), as whole numbers",
                         _lib.ERR_SHAPE) from None
    if (pos < 0).any():
        bad = tuple(int(c) for c in pos[(pos < 0).any(axis=1)][0])
        raise ShapeError(f"at: scan position {bad} is outside the nav shape {tuple(nav_shape)}: each coordinate "
                         "runs from 0 to its size − 1", _lib.ERR_SHAPE)
    return np.ascontiguousarray(pos, dtype=np.uintp)


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


# ------------------------------------------------------------------- live streams

from ._live import Live, LiveUpdate, live  # noqa: E402

# ------------------------------------------------------------------------ the viewer

from ._view import View, view  # noqa: E402
