"""Lazy and foreign arrays: dask arrays (computed one block of frames at a time) and
HyperSpy or pyxem signals as frames."""

import os
import sys

import numpy as np

import stemdot

from . import _lib
from ._errors import ShapeError
from ._datasets import Dataset, _frames_dtype


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
    if isinstance(data, (Dataset, np.ndarray, str, os.PathLike)):
        return data
    if _is_dask(data):
        if any(n != n for n in data.shape):  # NaN: a size dask knows only once computed
            raise ShapeError(f"{what}: a dask array of unknown chunk sizes, shape {data.shape} (after boolean "
                             "indexing, say): x.compute_chunk_sizes() gives them", _lib.ERR_SHAPE)
        return data
    if _is_signal(data):
        am = data.axes_manager
        if am.signal_dimension != 2:
            raise ShapeError(f"{what}: a HyperSpy signal of signal dimension {am.signal_dimension} "
                             f"({type(data).__name__}, axes {am.signal_shape}): want frames, a Signal2D (e.g. pyxem's "
                             "Diffraction2D); s.transpose(signal_axes=2) makes two axes the signal's", _lib.ERR_SHAPE)
        return _frames_of(data.data, what)
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
    x, blocks = _nav_blocks(x, stemdot.LAZY_BLOCK_BYTES)  # through the package: stemdot.LAZY_BLOCK_BYTES = n sets it
    for idx, index in blocks:
        yield index, np.asarray(x.blocks[idx].compute())


def _block_progress(progress, first, total):
    """The progress callback of a block whose frames start at frame first of total, or
    False (none)."""
    if not progress:
        return False
    report = _progress_bar if progress is True else progress
    return lambda done, _n: report(first + done, total)


def _progress_bar(done, total):
    width = 40
    filled = width * done // total if total else width
    sys.stderr.write(f"\rstemdot [{'#' * filled}{'.' * (width - filled)}] {done}/{total} frames")
    if done == total:
        sys.stderr.write("\n")
    sys.stderr.flush()
