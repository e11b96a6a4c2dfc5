"""Results: :class:`Result` (an array with its mask names and run info), its files
(:func:`load_result`) and :func:`to_hyperspy`."""

import builtins
import json
import os
import stat

import numpy as np

from . import __version__, _lib
from ._errors import DTypeError, FormatError, ShapeError, StemdotIOError, _warn
from ._datasets import _option_value
from ._lazy import _is_signal


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
        like_shape = like.axes_manager.navigation_shape[::-1]  # a non-uniform axis's dict has no size
        if tuple(like_shape) != nav_shape:
            raise ShapeError(f"to_hyperspy: like= has the navigation shape {tuple(like_shape)} (numpy "
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
