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

from . import _startup

_startup.handle_interrupts()  # python -m stemdot.dask: a Ctrl-C from here on exits 1

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

# The modules by concern, one for each part of the API. The names with a leading
# underscore are re-exported for stemdot.dask, stemdot._live, stemdot._view and the
# tests, which use them as stemdot._name.
from . import _lib  # noqa: E402
from ._errors import (  # noqa: E402
    _LIB,
    BadHandleError,
    CancelledError,
    CUDAUnavailableError,
    DTypeError,
    ForkedProcessError,
    FormatError,
    InternalError,
    InvalidArgumentError,
    PlanError,
    RunNoteWarning,
    ShapeError,
    StemdotError,
    StemdotIOError,
    _call,
    _printable,
    _warn,
)
from ._datasets import Dataset, _open, _option_value, _roi_option, _sum_run_notes, _text, from_array, open  # noqa: E402
from ._lazy import LAZY_BLOCK_BYTES, _frames_of, _is_dask, _is_signal, _nav_blocks, _progress_bar  # noqa: E402
from ._masks import (  # noqa: E402
    Centre,
    com,
    com_products,
    com_shifts,
    disk,
    find_centre,
    mask,
    mask_stack,
    point,
    rect,
    ring,
)
from ._plans import _custom_plan, _Plan, _PreparedMasks, _request, describe_plan  # noqa: E402
from ._results import (  # noqa: E402
    RESULT_FORMAT,
    RESULT_FORMAT_VERSION,
    Result,
    _open_regular,
    _result_info,
    load_result,
    to_hyperspy,
)
from ._compute import (  # noqa: E402
    REDUCTIONS,
    DescanFit,
    _apply,
    _check_sig,
    _dataset_of,
    _job,
    _mean_shift,
    _merge_reduction,
    _merged,
    _names,
    _partials,
    _place,
    _shifts,
    _workers,
    apply_masks,
    centre,
    descan_fit,
    pick,
    reduce,
)
from ._resident import Resident, resident  # noqa: E402


# Not in __all__ but used through the package (stemdot.centre, stemdot.RESULT_FORMAT; the
# private ones by stemdot.dask, stemdot._live, stemdot._view and the tests as stemdot._name):
# named here so that linters see them used.
_REEXPORTED = (
    _lib, _call, _printable, _warn, _open, _option_value, _roi_option, _sum_run_notes, _text,
    _frames_of, _is_dask, _is_signal, _nav_blocks, _progress_bar, _custom_plan, _Plan,
    _PreparedMasks, _request, RESULT_FORMAT, RESULT_FORMAT_VERSION, _open_regular, _result_info,
    _apply, _check_sig, _dataset_of, _job, _mean_shift, _merge_reduction, _merged, _names,
    _partials, _place, _shifts, _workers, centre,
)
from . import _compute, _datasets, _errors, _lazy, _masks, _plans, _resident, _results  # noqa: E402

# The classes the package names keep it as their module, as before its split into modules:
# tracebacks and reprs say stemdot.StemdotIOError, pickles refer to stemdot.Result.
for _module in (_errors, _datasets, _lazy, _masks, _plans, _results, _compute, _resident):
    for _name, _value in vars(_module).items():
        if isinstance(_value, type) and _value.__module__ == _module.__name__ and globals().get(_name) is _value:
            _value.__module__ = __name__


def __getattr__(name):
    """``stemdot.library_path``: the loaded library's path (loading it if needed)."""
    if name == "library_path":
        _LIB.load()
        return _LIB.path
    raise AttributeError(f"module 'stemdot' has no attribute {name!r}")


# ------------------------------------------------------------------- live streams

from ._live import Live, LiveUpdate, live  # noqa: E402

# ------------------------------------------------------------------------ the viewer

from ._view import View, view  # noqa: E402
