"""The runs over a dataset's frames: :func:`apply_masks`, :func:`descan_fit`,
:func:`reduce`, :func:`pick` and :func:`centre`."""

import collections
import ctypes
import os
import threading
import time

import numpy as np

from . import _lib
from ._errors import DTypeError, InvalidArgumentError, ShapeError, _LIB, _call, _error
from ._datasets import Dataset, _sum_run_notes, _warn_run_notes, from_array, open
from ._lazy import _block_progress, _frames_of, _is_dask, _is_signal, _lazy_blocks, _progress_bar
from ._masks import Centre, find_centre
from ._plans import _Plan, _custom_plan
from ._results import Result, _result_info, to_hyperspy


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
