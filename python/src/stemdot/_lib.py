"""Loading libstemdot.so and declaring its C functions (include/stemdot.h) for ctypes."""

import ctypes
import os
from pathlib import Path

ABI_VERSION = "0.3.0"  # STEMDOT_VERSION of the include/stemdot.h this binding follows

# stemdot_status (include/stemdot.h)
OK = 0
ERR_INVALID_ARGUMENT = 1
ERR_IO = 2
ERR_FORMAT = 3
ERR_SHAPE = 4
ERR_DTYPE = 5
ERR_PLAN = 6
ERR_CANCELLED = 7
ERR_BAD_HANDLE = 8
ERR_CUDA_UNAVAILABLE = 9
ERR_INTERNAL = 10
ERR_FORKED = 11

# stemdot_dtype: value → numpy name
DTYPES = {1: "uint8", 2: "uint16", 3: "uint32", 4: "int8", 5: "int16", 6: "int32", 7: "float32", 8: "float64"}
DTYPE_CODES = {name: code for code, name in DTYPES.items()}

MAX_NAV_DIMS = 8

PROGRESS_FN = ctypes.CFUNCTYPE(None, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_void_p)


# stemdot_cli_fn: (user, op, request, masks, masks_bytes, shifts, n_shifts, out, out_bytes) →
# the reply (a pointer to a NUL-terminated JSON text the callback keeps alive).
CLI_FN = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p,
                          ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t)


class CLIFlag(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("default_value", ctypes.c_char_p), ("usage", ctypes.c_char_p),
                ("repeatable", ctypes.c_int)]


class CLIBackend(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("use", ctypes.c_char_p), ("flags", ctypes.POINTER(CLIFlag)),
                ("n_flags", ctypes.c_size_t), ("call", CLI_FN), ("user", ctypes.c_void_p)]


class DatasetInfo(ctypes.Structure):
    _fields_ = [
        ("nav_ndim", ctypes.c_size_t),
        ("nav_shape", ctypes.c_size_t * MAX_NAV_DIMS),
        ("sig_shape", ctypes.c_size_t * 2),
        ("dtype", ctypes.c_int),
        ("n_frames", ctypes.c_uint64),
    ]


class LiveSnapshot(ctypes.Structure):
    """stemdot_live_snapshot."""
    _fields_ = [
        ("seq", ctypes.c_uint64),
        ("final", ctypes.c_int),
        ("partial", ctypes.c_int),
        ("nav_ndim", ctypes.c_size_t),
        ("nav_shape", ctypes.c_size_t * MAX_NAV_DIMS),
        ("n_masks", ctypes.c_size_t),
        ("n_frames", ctypes.c_uint64),
        ("done", ctypes.c_uint64),
        ("received", ctypes.c_uint64),
        ("missing", ctypes.c_uint64),
        ("late", ctypes.c_uint64),
        ("surplus", ctypes.c_uint64),
        ("repeated", ctypes.c_uint64),
        ("stalls", ctypes.c_uint64),
        ("elapsed", ctypes.c_double),
        ("rate", ctypes.c_double),
    ]


def candidates():
    """Where the library is looked for, in order: $STEMDOT_LIB, the package directory
    (a wheel built with Go), the repository's build/ directory (`make capi`)."""
    env = os.environ.get("STEMDOT_LIB")
    if env:
        return [Path(env)]
    here = Path(__file__).resolve().parent
    found = [here / "libstemdot.so"]
    for parent in here.parents:
        if (parent / "go.mod").is_file() and (parent / "cmd" / "libstemdot").is_dir():
            found.append(parent / "build" / "libstemdot.so")
            break
    return found


def load():
    tried = candidates()
    path = next((p for p in tried if p.is_file()), None)
    if path is None:
        raise ImportError(
            "stemdot: libstemdot.so not found (tried %s); set STEMDOT_LIB to its path, run "
            "`make capi` in the stemdot repository, or reinstall with Go on PATH" % ", ".join(map(str, tried))
        )
    # RTLD_LAZY: the library resolves NVIDIA's NVML (GPU discovery) at run time, after
    # loading libnvidia-ml itself; its NVML symbols are undefined until then.
    try:
        lib = ctypes.CDLL(str(path), mode=os.RTLD_LAZY | os.RTLD_LOCAL)
    except OSError as e:
        if "static TLS" not in str(e):
            raise
        # A library built with CUDA links NVIDIA's static runtime, whose thread-local
        # storage (4 KiB, page-aligned) glibc cannot place in a library loaded after
        # start-up; loaded at start-up it can.
        raise ImportError(
            f"stemdot: {path} is built with CUDA and cannot be loaded after Python has started "
            f"({e}); start Python with LD_PRELOAD={path}, or use a library built without CUDA"
        ) from e
    try:
        _declare(lib)
    except AttributeError as e:  # a function this package calls is missing (an older build?)
        raise ImportError(f"stemdot: {path} lacks a function this package calls ({e}): it is not a libstemdot of "
                          f"this version; rebuild it (make capi, or pip install ./python)") from e
    version = lib.stemdot_version().decode()
    if version != ABI_VERSION:
        raise ImportError(f"stemdot: {path} has ABI version {version}, this package needs {ABI_VERSION}")
    return lib, path


def _declare(lib):
    c = ctypes
    status, size, u64, p = c.c_int, c.c_size_t, c.c_uint64, c.c_void_p
    sigs = {
        "stemdot_version": (c.c_char_p, []),
        "stemdot_last_error": (c.c_char_p, []),
        "stemdot_status_name": (c.c_char_p, [c.c_int]),
        "stemdot_open": (status, [c.c_char_p, c.c_char_p, c.POINTER(u64)]),
        "stemdot_dataset_from_memory": (status, [p, size, c.c_int, size, c.POINTER(size), size, size, c.POINTER(u64)]),
        "stemdot_dataset_get_info": (status, [u64, c.POINTER(DatasetInfo)]),
        "stemdot_dataset_free": (status, [u64]),
        "stemdot_plan_new": (status, [c.c_char_p, c.c_char_p, c.POINTER(u64)]),
        "stemdot_plan_new_options": (status, [c.c_char_p, c.POINTER(u64)]),
        "stemdot_plan_describe": (status, [u64, u64, c.c_char_p, size, c.POINTER(size)]),
        "stemdot_dataset_warnings": (status, [u64, c.c_char_p, size, c.POINTER(size)]),
        "stemdot_dataset_run_notes": (status, [u64, size, size, c.c_char_p, size, c.POINTER(size)]),
        "stemdot_dataset_select": (status, [u64, c.c_char_p, c.POINTER(u64)]),
        "stemdot_dataset_scan": (status, [u64, c.POINTER(c.c_int), c.POINTER(size), c.POINTER(size), c.POINTER(u64), size]),
        "stemdot_dataset_blanks": (status, [u64, c.POINTER(u64), size, c.POINTER(size)]),
        "stemdot_plan_free": (status, [u64]),
        "stemdot_run_new": (status, [c.POINTER(u64)]),
        "stemdot_run_cancel": (status, [u64]),
        "stemdot_run_reset": (status, [u64]),
        "stemdot_run_free": (status, [u64]),
        "stemdot_mask_parse": (status, [c.c_char_p, size, size, c.POINTER(c.c_float), size, c.POINTER(size)]),
        "stemdot_mask_parse_centred": (status, [c.c_char_p, size, size, c.POINTER(c.c_double), c.POINTER(c.c_float), size,
                                                c.POINTER(size)]),
        "stemdot_find_centre": (status, [c.POINTER(c.c_double), size, size, c.POINTER(c.c_double)]),
        "stemdot_mask_stack": (status, [c.POINTER(c.c_char_p), size, c.POINTER(c.c_char_p), size, size, size,
                                        c.POINTER(c.c_double), p, c.c_int, size,
                                        c.POINTER(size), c.c_char_p, size, c.POINTER(size)]),
        "stemdot_apply": (status, [u64, c.POINTER(c.c_float), size, size, size, u64, u64, PROGRESS_FN, p, p, c.c_int, size]),
        "stemdot_apply64": (status, [u64, c.POINTER(c.c_double), size, size, size, u64, u64, PROGRESS_FN, p, p, c.c_int, size]),
        "stemdot_to_device": (status, [u64, c.c_int, c.POINTER(u64)]),
        "stemdot_resident_apply": (status, [u64, c.POINTER(c.c_float), size, size, size, p, c.c_int, size]),
        "stemdot_resident_apply64": (status, [u64, c.POINTER(c.c_double), size, size, size, p, c.c_int, size]),
        "stemdot_resident_free": (status, [u64]),
        "stemdot_com_shifts": (status, [p, c.c_int, size, size, size, c.POINTER(c.c_double)]),
        "stemdot_reduce": (status, [u64, u64, u64, PROGRESS_FN, p] + [c.POINTER(c.c_double)] * 4 + [size]),
        "stemdot_pick": (status, [u64, c.POINTER(size), size, size, p, size]),
        "stemdot_dataset_format": (status, [u64, c.c_char_p, size, c.POINTER(size)]),
        "stemdot_dataset_calibration": (status, [u64, c.c_char_p, size, c.POINTER(size)]),
        "stemdot_dataset_path": (status, [u64, c.c_char_p, size, c.POINTER(size)]),
        "stemdot_com_products": (status, [c.POINTER(c.c_double), size, size, c.c_double, c.c_int] + [c.POINTER(c.c_double)] * 5
                                 + [c.c_char_p, size]),
        "stemdot_centre": (status, [u64, u64, c.POINTER(c.c_double), size, c.POINTER(c.c_double)]),
        "stemdot_masks_new": (status, [p, c.c_int, size, size, size, c.POINTER(u64)]),
        "stemdot_masks_free": (status, [u64]),
        "stemdot_apply_masks": (status, [u64, u64, c.POINTER(c.c_double), size, u64, u64, PROGRESS_FN, p, p, c.c_int, size]),
        "stemdot_apply_shifted": (status, [u64, p, c.c_int, size, size, size, c.POINTER(c.c_double), size, u64, u64, PROGRESS_FN, p, p, c.c_int, size]),
        "stemdot_cli_main": (c.c_int, [c.c_int, c.POINTER(c.c_char_p), c.POINTER(CLIBackend)]),
        "stemdot_live_start": (status, [c.c_char_p, c.c_char_p, p, c.c_int, size, size, size, u64, c.POINTER(u64)]),
        "stemdot_live_poll": (status, [u64, c.c_double, c.POINTER(LiveSnapshot), p, c.c_int, size]),
        "stemdot_live_wait": (status, [u64, c.POINTER(LiveSnapshot), p, c.c_int, size]),
        "stemdot_live_cancel": (status, [u64]),
        "stemdot_live_missing": (status, [u64, c.POINTER(u64), size, c.POINTER(size)]),
        "stemdot_live_warnings": (status, [u64, c.c_char_p, size, c.POINTER(size)]),
        "stemdot_live_info": (status, [u64, c.c_char_p, size, c.POINTER(size)]),
        "stemdot_live_free": (status, [u64]),
        "stemdot_live_share_state": (status, [u64, c.c_char_p, size, c.POINTER(size)]),
        "stemdot_live_share_give": (status, [u64, c.c_char_p]),
        "stemdot_live_take": (status, [u64, c.c_double, c.POINTER(LiveSnapshot), p, c.c_int, size, c.POINTER(u64), c.POINTER(size)]),
        "stemdot_view_start": (status, [u64, c.c_char_p, c.POINTER(u64)]),
        "stemdot_view_url": (status, [u64, c.c_char_p, size, c.POINTER(size)]),
        "stemdot_view_free": (status, [u64]),
        "stemdot_descan_fit": (status, [u64, c.c_char_p, u64, c.POINTER(c.c_double), c.POINTER(c.c_double), size, c.POINTER(size)]),
    }
    for name, (restype, argtypes) in sigs.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
