"""Plans: the CPU and GPU workers a run uses (:func:`describe_plan`), and masks prepared
once for many runs."""

import ctypes
import json
import operator
import weakref

import numpy as np

from . import _lib
from ._errors import InvalidArgumentError, _LIB, _call, _warn
from ._datasets import _option_value


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
