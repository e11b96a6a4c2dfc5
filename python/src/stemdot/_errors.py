"""The errors of stemdot and the calls into libstemdot: the exception classes, the
library handle ``_LIB`` (loaded at the first call, refused in a forked child) and ``_call``."""

import os
import re
import threading
import warnings

from . import _lib


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
