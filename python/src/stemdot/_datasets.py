"""Datasets: :func:`open`, :func:`from_array`, :class:`Dataset`, the format options and
the run notes a file's reader leaves."""

import ctypes
import json
import os

import numpy as np

from . import _lib
from ._errors import BadHandleError, DTypeError, InvalidArgumentError, RunNoteWarning, ShapeError, _LIB, _call, _warn


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


from ._resident import Resident  # noqa: E402  (a Dataset's to_device; _resident imports this module)
