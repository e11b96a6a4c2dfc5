"""Masks (virtual detectors) made by the library's generators, the beam's centre in a
frame, centre-of-mass shifts and their products."""

import collections
import ctypes
import operator
import os

import numpy as np

from . import _lib
from ._errors import DTypeError, InvalidArgumentError, ShapeError, _LIB, _call, _warn


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
