"""stemdot.live: virtual detector images of a detector's acquisition while it runs
(libstemdot's stemdot_live_* functions, include/stemdot.h)."""

import ctypes
import json
import math
import os

import numpy as np

from . import (
    _LIB,
    Result,
    _call,
    _custom_plan,
    _job,
    _names,
    _option_value,
    _text,
    _warn,
)
from . import _lib
from ._datasets import _Closing


class LiveUpdate:
    """One item of :func:`live`: the run at one moment.

    ``result``: the images so far, a new array of shape ``nav_shape + (n_masks,)`` and
    the run's dtype, NaN at the scan positions not computed yet (a position's values,
    once computed, do not change); on the last item (``final``) the final result, a
    :class:`Result` with ``names`` and ``info`` (the sidecar ``stemdot live`` writes:
    ``info["live"]`` gives the source, detector, counts, ``partial``, ``ended_by``,
    ``positions_without_frame`` and ``record``). ``damage``: bool of ``nav_shape``, True
    at the positions computed (LiberTEM's ``UDFResults.damage``). ``done``: frames
    computed; ``n_frames``: scan positions; ``received``, ``missing``, ``late`` and
    ``stalls``: the receiver's counts (frames received; positions whose frame the stream
    skipped or, at the end, that never came; frames that came after they were counted
    missing; times the receiver waited for the workers, no frame lost); ``rate``: frames
    computed per second since the previous item; ``elapsed``: seconds since the
    acquisition's header arrived. ``final``: True on the last item; ``partial``: True
    when the acquisition ended before every frame came (NaN at those positions);
    ``positions_without_frame``: those positions as (first, count) runs of flat scan
    positions in C order (final only; empty otherwise).
    """

    __slots__ = ("result", "done", "n_frames", "received", "missing", "late", "stalls", "rate", "elapsed", "final",
                 "partial", "positions_without_frame")

    def __init__(self, result, snap, positions_without_frame=()):
        self.result = result
        self.done, self.n_frames = int(snap.done), int(snap.n_frames)
        self.received, self.missing, self.late, self.stalls = (int(snap.received), int(snap.missing), int(snap.late),
                                                               int(snap.stalls))
        self.rate, self.elapsed = float(snap.rate), float(snap.elapsed)
        self.final, self.partial = bool(snap.final), bool(snap.partial)
        self.positions_without_frame = tuple(positions_without_frame)

    @property
    def damage(self):
        # A computed position is never NaN in every mask: live frames are integer counts
        # and the weights are finite.
        return ~np.isnan(np.asarray(self.result)).all(axis=-1)

    def __repr__(self):
        state = ("final, partial" if self.partial else "final") if self.final else f"{self.rate:.0f} frames/s"
        return (f"<stemdot.LiveUpdate {self.done}/{self.n_frames} frames done ({state}), received {self.received}, "
                f"missing {self.missing}, late {self.late}, stalls {self.stalls}>")


class Live(_Closing):
    """A live run (:func:`live`): an iterator of :class:`LiveUpdate` and a context
    manager. Leaving it early (``break``, an exception, Ctrl-C) or :meth:`close` cancels
    the run (in active mode the detector's acquisition is stopped) and frees it; the
    iterator ends after the final item, whose result is then also ``Live.result``."""

    def __init__(self, source, masks, names, dtype, every, options, plan):
        self.source = source
        self.result = None  # the final Result, once iterated to the end
        self._names = names
        self._dtype = dtype
        self._wait = min(every, 0.25)  # each poll's wait: Ctrl-C is seen between polls
        self._seq = 0
        self._out = None
        self._handle = None
        handle = ctypes.c_uint64()
        _call(_LIB.stemdot_live_start, os.fsencode(source), options.encode(), ctypes.c_void_p(masks.ctypes.data),
              _lib.DTYPE_CODES[masks.dtype.name], *masks.shape, plan.handle if plan is not None else 0, ctypes.byref(handle))
        self._handle = handle.value

    def __iter__(self):
        return self

    def __next__(self):
        if self._handle is None:
            raise StopIteration
        try:
            while True:
                snap = self._poll(self._wait)
                if snap.seq > self._seq:
                    self._seq = snap.seq
                    return self._final(snap) if snap.final else LiveUpdate(self._values(), snap)
        except BaseException:  # an error of the run, Ctrl-C: the run is cancelled and freed
            self.close()
            raise

    def _poll(self, timeout):
        snap = _lib.LiveSnapshot()
        out = self._out
        ptr, n = (ctypes.c_void_p(out.ctypes.data), out.size) if out is not None else (None, 0)
        _call(_LIB.stemdot_live_poll, self._handle, timeout, ctypes.byref(snap), ptr, _lib.DTYPE_CODES[self._dtype.name], n)
        if out is None and snap.seq > 0:  # the first snapshot: the result's shape is known
            self._out = np.empty(int(snap.n_frames) * int(snap.n_masks), self._dtype)
            self._shape = tuple(int(n) for n in snap.nav_shape[:snap.nav_ndim]) + (int(snap.n_masks),)
            return self._poll(0)
        return snap

    def _values(self):
        return self._out.reshape(self._shape).copy()

    def _final(self, snap):
        """The last item: the final Result with its names, info and warnings; the run is
        freed."""
        info = json.loads(_text(_LIB.stemdot_live_info, self._handle))
        info["masks"] = [{"column": i, "name": n, "index": i} for i, n in enumerate(self._names)]
        for w in filter(None, _text(_LIB.stemdot_live_warnings, self._handle).split("\n")):
            _warn(f"stemdot: {w}", stacklevel=3)
        without = tuple(tuple(r) for r in info["live"].get("positions_without_frame", ()))
        self.result = Result(self._values(), self._names, info)
        self.close()
        return LiveUpdate(self.result, snap, without)

    @property
    def closed(self):
        return self._handle is None

    def close(self):
        """Cancels the run if it still runs and frees it (idempotent); returns once the
        library's threads of the run have stopped (promptly)."""
        if self._handle is not None:
            handle, self._handle = self._handle, None
            _call(_LIB.stemdot_live_free, handle)

    def __reduce__(self):
        raise TypeError(f"stemdot.Live {self.source} is a run of this process and cannot be pickled")

    def __repr__(self):
        return f"<stemdot.Live {self.source}: {'closed' if self.closed else 'running'}>"


def _live_option(key, value):
    """An option value as the text of stemdot_live_start's option string: a float (every,
    start_timeout, idle_timeout) as its repr, others as :func:`stemdot.open`'s options."""
    if isinstance(value, (float, np.floating)):
        return repr(float(value))
    return _option_value(key, value)


def live(source, masks, *, nav_shape=None, passive=False, record=None, dtype=np.float32, every=0.1, names=None,
         cpus=None, gpus=None, **source_options):
    """Applies a mask stack to the frames of a detector's acquisition while the scan
    runs, as ``stemdot live`` does, and returns a :class:`Live`: an iterator of
    :class:`LiveUpdate` (the images so far, the frames done and the receiver's counts,
    about every ``every`` seconds) whose last item is the final result, and a context
    manager. As LiberTEM-live's ``ctx.run_udf_iter``::

        masks = np.stack([stemdot.disk((256, 256), 128, 128, 40), stemdot.ring((256, 256), 128, 128, 50, 120)])
        with stemdot.live("merlin://10.0.0.5", masks, nav_shape=(128, 128)) as run:
            for update in run:
                show(update.result[..., 0])          # NaN where not computed yet
        images = update.result                       # a stemdot.Result, as apply_masks gives

    The final result equals :func:`apply_masks` on the same frames (a file of them, e.g.
    the ``record``) bit for bit.

    source: ``"merlin://HOST[:PORT]"`` (Quantum Detectors Merlin's TCP data port, default
      6342) or ``"dectris://HOST[:PORT]"`` (a DECTRIS detector's SIMPLON ZeroMQ stream,
      default port 31001 for stream v2, 9999 for v1).
    masks: as for :func:`apply_masks` (n_masks, sig_y, sig_x) of the detector's frame
      shape (else the run raises :class:`ShapeError` once the stream says its shape).
    nav_shape: the scan shape, e.g. (256, 256): the stream's where it gives one (Merlin's
      acquisition header), else this, else one row of the frames announced.
    passive: False (default): start the acquisition here (active mode: Merlin's control
      port, DECTRIS's SIMPLON API, ``dectris_api=``), with as many frames as nav_shape
      has positions; True: only listen for one that someone else starts.
    record: a file to record what is received to (merlin: a .mib with its .hdr; dectris:
      an .npy), which :func:`open` reads to the same result.
    dtype: np.float32 (default) or np.float64. every: seconds between updates (0.1).
    names: the masks' names (default "mask0", ...). cpus, gpus: as for
      :func:`apply_masks`.
    source_options: the protocol's own options by key: merlin ``control`` ("HOST[:PORT]",
      default HOST:6341), ``soft_trigger`` (bool), ``idle_timeout`` (seconds); dectris
      ``stream`` ("v1" or "v2"), ``dectris_api`` ("HOST[:PORT]", needed in active mode),
      ``channel``, ``pixel_mask`` (False keeps the flagged pixels' values),
      ``trigger_mode`` ("ints", "inte", "exts", "exte"), ``nimages``, ``ntrigger``,
      ``start_timeout`` (seconds).

    An acquisition that ends early (aborted, the connection lost, fewer frames than the
    scan) is no error: the final item has ``partial`` True, NaN at the positions without
    a frame (``positions_without_frame``), and a UserWarning says so. Raises (at once, or
    from the iteration for what happens during the run) :class:`InvalidArgumentError`
    (a bad source or option, an option of another protocol), :class:`StemdotIOError`
    (connection refused or lost before the acquisition started), :class:`FormatError` (a
    malformed stream), :class:`ShapeError` (masks of another frame shape, a nav_shape
    that does not fit), :class:`DTypeError`. Leaving the loop early (break, an
    exception, Ctrl-C) cancels the run and frees it.
    """
    if not isinstance(source, str):
        raise TypeError(f"source must be a str such as 'merlin://127.0.0.1', got {type(source).__name__}")
    out_dtype, masks = _job(masks, dtype)
    names = _names(names, masks.shape[0])
    if not isinstance(every, (int, float, np.integer, np.floating)) or isinstance(every, bool) or not math.isfinite(every):
        raise TypeError(f"every={every!r}: want the seconds between updates, e.g. 0.1")
    options = {"passive": passive, "nav_shape": nav_shape, "record": None if record is None else os.fspath(record),
               "float64": out_dtype == np.float64, "every": float(every), **source_options}
    text = ";".join(f"{k}={_live_option(k, v)}" for k, v in options.items() if v is not None)
    plan = _custom_plan(cpus, gpus, False, None)
    try:
        if plan is not None:
            plan.warn()
        return Live(source, masks, names, out_dtype, float(every), text, plan)
    finally:
        if plan is not None:
            plan.free()
