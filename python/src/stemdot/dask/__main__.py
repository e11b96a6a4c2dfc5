"""python -m stemdot.dask: ``stemdot apply`` and ``stemdot sum`` on a Dask cluster.

    python -m stemdot.dask --scheduler tcp://head:8786 /shared/scan.mib \\
        --mask disk:auto --mask com --out result.npy --png img --com-shifts com.npy
    python -m stemdot.dask sum --scheduler tcp://head:8786 /shared/scan.mib \\
        --out sum.npy --mean mean.npy --max max.npy --std std.npy

The command is the stemdot binary's apply (the default) and sum commands, one definition
in Go (package cmd/internal/cli) run through the C ABI's ``stemdot_cli_main``: the same flags,
checks, mask stack (the --masks stacks first, then the --mask specs, in the order given),
centre of the auto specs, outputs (NPY, RESULT.json, PNGs, COM shift maps, written all or
nothing), warnings, messages ("stemdot.dask: ..." instead of "stemdot: ...") and exit
statuses (1 after an error or Ctrl-C). What differs: the frames are read and the masks
applied by the workers of the Dask cluster at --scheduler (the file at a path every
worker can read; this process need not), with the flags below instead of --cpus, --gpus
and the other plan flags, RESULT.json's "plan" (and the summary) counts the stemdot
workers that the job was given to, idle ones too, as stemdot apply counts the workers of
its plan (each once), and apply --workers prints a line per Dask worker that computed
frames.
A scheduler without workers is waited on for the first, up to --timeout. The backend's
callback (:class:`_Backend`) calls :func:`stemdot.dask.dataset_info`,
:func:`~stemdot.dask.centre`, :func:`~stemdot.dask.apply_masks` and
:func:`~stemdot.dask.reduce` on one Client.
"""

import contextlib
import ctypes
import json
import logging
import signal
import sys
import threading
import warnings

import numpy as np

import stemdot
import stemdot.dask as sdask
from stemdot import _lib, _startup

NAME = "stemdot.dask"
USE = "python -m stemdot.dask"

#: The flags of the Dask backend: name, default, usage, repeatable.
FLAGS = (
    ("scheduler", None, "the Dask scheduler's `ADDRESS`, e.g. tcp://head:8786 (required)", False),
    ("range-frames", None, "`N` frames per stemdot worker in one task (default: sized by each node's measured rate, see stemdot.dask.RANGE_SECONDS)", False),
    ("resources", None, "Dask resources every task needs, `NAME=N`, e.g. GPU=1 for the GPU nodes only (repeatable)", True),
    ("timeout", "120", "`SECONDS` to wait for the scheduler and for the workers' set-up", False),
)


class _Backend:
    """The callback of stemdot_cli_main: the operations of Go's cli.Remote (check, open,
    centre, apply, reduce) on the workers of a Dask cluster, through one Client."""

    def __init__(self):
        self.client = None
        self.scheduler = self.range_frames = self.resources = None
        self.timeout = 120.0
        self.positions = None  # the dataset's ROI positions (open's reply), None without an ROI
        self.frames = None  # the frames of the file at the run's start (open), None if not known
        self.shapes = {}  # the dataset's scan_shape and nav_shape (open's reply)
        self.warnings = []  # the dataset's warnings, printed by the command at open
        self.reply = None  # the last reply, alive until the next call
        self.calling = False  # in a call: Ctrl-C raises KeyboardInterrupt
        self.interrupted = False  # Ctrl-C seen

    def on_interrupt(self, signum, frame):
        """SIGINT (SIGTERM, SIGHUP) while the command runs: KeyboardInterrupt in a call
        (which cancels its run on the workers and replies "interrupted"); outside one (Go's code: checks,
        writing the outputs, all or nothing) the next call replies "interrupted" at once,
        as stemdot's handled steps see an interrupt."""
        self.interrupted = True
        if self.calling:
            raise KeyboardInterrupt

    def __call__(self, user, op, request, masks, masks_bytes, shifts, n_shifts, out, out_bytes):
        self.calling = True
        try:
            if self.interrupted:
                raise KeyboardInterrupt
            req = json.loads(request)
            if n_shifts:
                req["shifts"] = np.ctypeslib.as_array(ctypes.cast(shifts, ctypes.POINTER(ctypes.c_double)), (n_shifts,)).copy()
            ops = {"check": self.check, "open": self.open, "centre": self.centre, "apply": self.apply, "reduce": self.reduce}
            reply = ops[op.decode()](req, _buffer(masks, masks_bytes), _buffer(out, out_bytes))
        except KeyboardInterrupt:  # apply_masks and reduce cancel their run on the workers
            reply = {"error": "interrupted", "status": _lib.ERR_CANCELLED}
        except stemdot.StemdotError as e:
            reply = {"error": str(e), "status": e.code}
        except BaseException as e:  # noqa: BLE001 (nothing may escape a ctypes callback)
            status = _lib.ERR_IO if isinstance(e, (OSError, TimeoutError)) else _lib.ERR_INTERNAL
            reply = {"error": str(e) or type(e).__name__, "status": status}
        finally:
            self.calling = False
            sys.stdout.flush()
            sys.stderr.flush()
        if self.interrupted:  # also one that library code swallowed, or that came after an error
            reply = {"error": "interrupted", "status": _lib.ERR_CANCELLED}
        self.reply = ctypes.create_string_buffer(json.dumps(reply).encode())
        return ctypes.addressof(self.reply)

    def check(self, req, masks, out):
        flags = req["flags"]
        self.scheduler = flags["scheduler"]
        if not self.scheduler:
            raise stemdot.InvalidArgumentError("--scheduler ADDRESS is required: the Dask scheduler, e.g. tcp://head:8786",
                                               _lib.ERR_INVALID_ARGUMENT)
        if flags["range-frames"]:
            try:
                self.range_frames = int(flags["range-frames"])
            except ValueError:
                self.range_frames = 0
            if self.range_frames < 1:
                raise stemdot.InvalidArgumentError(f"--range-frames {flags['range-frames']!r}: want a whole number of frames, "
                                                   "at least 1", _lib.ERR_INVALID_ARGUMENT)
        self.resources = {}
        for item in flags["resources"] or []:
            name, sep, value = item.partition("=")
            try:
                self.resources[name.strip()] = float(value)
            except ValueError:
                sep = ""
            if not sep or not name.strip():
                raise stemdot.InvalidArgumentError(f"--resources {item!r}: want NAME=N, e.g. GPU=1", _lib.ERR_INVALID_ARGUMENT)
        self.resources = self.resources or None
        try:
            self.timeout = float(flags["timeout"])
        except ValueError:
            self.timeout = 0
        if not self.timeout > 0:
            raise stemdot.InvalidArgumentError(f"--timeout {flags['timeout']!r}: want a positive number of seconds",
                                               _lib.ERR_INVALID_ARGUMENT)
        return {}

    def open(self, req, masks, out):
        if self.client is None:
            print(stemdot._printable(f"{NAME}: connecting to {self.scheduler} (waiting up to --timeout {self.timeout:g} s)"),
                  file=sys.stderr)
            self.client, nodes = _interruptible(self._connect)
            workers = sum(n["n_workers"] for n in nodes.values())
            print(f"{NAME}: {len(nodes)} Dask workers, {workers} stemdot workers", file=sys.stderr)
        info = sdask.dataset_info(self.client, req["path"], timeout=self.timeout, **req["options"])
        self.positions = info["positions"]
        self.shapes = {k: tuple(info[k]) for k in ("scan_shape", "nav_shape")}
        self.warnings = [f"stemdot: {w}" for w in info["warnings"]]
        # The file the workers read, as the sidecar of stemdot apply records it, and its
        # frames now, at the run's start (unknown where the worker asked cannot open it:
        # then the path given is recorded, and a shrinking file is not told apart).
        try:
            opened = self._opened(req)
        except Exception:  # noqa: BLE001
            opened = {"path": "", "frames": None}
        self.frames = opened["frames"]
        return {**{k: _plain(v) for k, v in info.items()}, "path": opened["path"]}

    def _opened(self, req):
        """_opened(path, options) of the request, on a worker."""
        path, options = sdask._client_path(req["path"]), sdask._client_options(req["options"])
        return self.client.submit(_opened, path, options, pure=False).result(timeout=self.timeout)

    @contextlib.contextmanager
    def _unshrunk(self, req):
        """A context for a run (centre, apply, reduce) that ends with the error saying so
        when the file then holds fewer frames than at the run's start (open), also after
        another error: a range task then opened a frames range beyond the file's new end,
        which its own error says in terms of a frames option the user never gave."""
        try:
            yield
        except Exception:
            self._check_frames(req)
            raise
        self._check_frames(req)

    def _check_frames(self, req):
        if self.frames is None:
            return
        try:
            now = self._opened(req)["frames"]
        except Exception:  # noqa: BLE001 (the file cannot be opened now: the run's own error, if any, stands)
            return
        if now is not None and now < self.frames:
            raise stemdot.StemdotIOError(f"{req['path']}: the file has {now} frames now, fewer than the {self.frames} it had "
                                         "when the run started: it was truncated or replaced during the run; run again "
                                         "once it is complete", _lib.ERR_IO) from None

    def _connect(self):
        """A Client of the scheduler and the set-up of its workers (stemdot.dask.bootstrap)."""
        from distributed import Client

        try:
            client = Client(self.scheduler, timeout=self.timeout)
        except ValueError as e:  # a malformed address
            raise stemdot.InvalidArgumentError(f"--scheduler {self.scheduler!r}: {e}", _lib.ERR_INVALID_ARGUMENT) from None
        except OSError as e:  # nothing listens there, or it did not answer in time
            raise stemdot.StemdotIOError(f"--scheduler {self.scheduler!r}: no Dask scheduler answered within --timeout "
                                         f"{self.timeout:g} s ({e})", _lib.ERR_IO) from None
        try:
            if not sdask._workers_now(client):  # e.g. just after the scheduler's restart
                print(f"{NAME}: the scheduler has no worker yet: waiting up to --timeout {self.timeout:g} s for the first",
                      file=sys.stderr)
                try:
                    client.wait_for_workers(1, timeout=self.timeout)
                except TimeoutError:
                    raise stemdot.StemdotIOError(f"--scheduler {self.scheduler!r}: no Dask worker joined the scheduler within "
                                                 f"--timeout {self.timeout:g} s: start Dask workers (dask worker "
                                                 f"{self.scheduler}) and run again", _lib.ERR_IO) from None
            return client, sdask.bootstrap(client, timeout=self.timeout)
        except BaseException:
            client.close()
            raise

    def _shifts(self, req, per):
        """The shifts of req in the shape that stemdot.dask takes them: (2,), (dy, dx) for
        every frame, or 2 per element of the dataset's shape per, "scan_shape" (stemdot
        sends centre the shifts of --shifts so) or "nav_shape" (apply: one per frame
        read); None without."""
        s = req.get("shifts")
        return s if s is None or s.size == 2 else s.reshape(self.shapes[per] + (2,))

    def centre(self, req, masks, out):
        with self._warnings(), self._unshrunk(req):
            c = sdask.centre(self.client, req["path"], shifts=self._shifts(req, "scan_shape"), resources=self.resources,
                             range_frames=self.range_frames, timeout=self.timeout, **req["options"])
        return {"x": c.x, "y": c.y, "r": c.r}

    def apply(self, req, masks, out):
        dtype = np.float64 if req["float64"] else np.float32
        stack = np.frombuffer(masks, dtype=dtype).reshape(req["n_masks"], *req["sig_shape"])
        roi = self.positions is not None
        report = {}
        with self._warnings(), self._unshrunk(req):
            result = sdask.apply_masks(self.client, req["path"], stack, out_dtype=dtype, progress=req["progress"],
                                       resources=self.resources, range_frames=self.range_frames, timeout=self.timeout,
                                       roi_compact=roi, shifts=self._shifts(req, "nav_shape"), report=report,
                                       **req["options"])
            if roi:
                result, _ = result
            np.frombuffer(out, dtype=dtype)[:] = np.asarray(result).reshape(-1)
        return _ran(report)

    def reduce(self, req, masks, out):
        names = req["reductions"]
        report = {}
        with self._warnings(), self._unshrunk(req):
            frames = sdask.reduce(self.client, req["path"], names, progress=req["progress"], resources=self.resources,
                                  range_frames=self.range_frames, timeout=self.timeout, report=report, **req["options"])
        np.frombuffer(out, dtype=np.float64)[:] = np.concatenate([frames[n].reshape(-1) for n in names])
        return _ran(report)

    @contextlib.contextmanager
    def _warnings(self):
        """A context in which stemdot.dask's warnings are printed as the command prints its
        own ("stemdot.dask: warning: ..."), but for the dataset's, which the command
        printed when it opened the dataset, and the run notes (stemdot.RunNoteWarning):
        the command prints those of apply and reduce from their reply after the run (a
        centre search reads the frames the apply after it reads)."""
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = self._show
            yield

    def _show(self, message, category, filename, lineno, file=None, line=None):
        text = str(message)
        if text in self.warnings or issubclass(category, stemdot.RunNoteWarning):
            return
        print(stemdot._printable(f"{NAME}: warning: {text.removeprefix('stemdot: ')}"), file=sys.stderr)

    def close(self):
        if self.client is None:
            return
        client, self.client = self.client, None
        # A client whose scheduler is gone is reconnecting; closing it cancels that, which
        # Dask logs as an ERROR with a traceback after the command's own message.
        log = logging.getLogger("distributed.client")
        level = log.level
        if client.status != "running":
            log.setLevel(logging.CRITICAL)
        try:
            client.close()
        finally:
            log.setLevel(level)


def _opened(path, options):
    """On a worker: "path", the file that stemdot opening path with options reads
    (stemdot.Dataset.path: e.g. an EMI file's SER file), and "frames", the frames that
    file holds (opened without the options that pick frames or shape the scan: frames,
    roi, nav_shape), None where it cannot be opened so; "" and None where path cannot be
    opened (returned, not raised: see stemdot.dask._info_task)."""
    try:
        with stemdot._open(path, options) as ds:
            opened = ds.path
    except stemdot.StemdotError:
        return {"path": "", "frames": None}
    try:
        with stemdot._open(path, {k: v for k, v in options.items() if k not in ("frames", "roi", "nav_shape")}) as ds:
            frames = ds.n_frames
    except stemdot.StemdotError:
        frames = None
    return {"path": opened, "frames": frames}


def _ran(report):
    """The reply of apply and reduce from the report of their run (stemdot.dask's
    report=): the stemdot workers of the Dask workers that its ranges were offered to
    (idle ones too, as stemdot apply counts the workers of its plan; not those whose
    node cannot read the file, unless they computed frames before), each counted once (a
    Dask worker restarted by its Nanny, or one that left and joined again, runs the same
    pinned workers of its node: counted by host and CPU or GPU), and per Dask worker
    that computed frames its frames, ranges and busy seconds (apply --workers); the run
    notes of the frames read, summed over the ranges, where there are any."""
    nodes, ran = report["nodes"], {a: n for a, n in report["frames"].items() if n > 0}
    given = set(report["offered"]).difference(report["excluded"]).union(ran)
    pinned = {(nodes[a]["host"], "gpu" if "gpu" in w else "cpu", w.get("gpu", w["cpu"]))
              for a in given if a in nodes for w in nodes[a]["plan"]["workers"]}
    gpu = sum(kind == "gpu" for _, kind, _ in pinned)
    workers = []
    for address, frames in sorted(ran.items()):
        rate = report["rates"].get(address)
        workers.append({"name": address, "frames": frames, "ranges": sum(r[2] == address for r in report["ranges"]),
                        "seconds": frames / rate if rate else 0.0})
    reply = {"cpu_workers": len(pinned) - gpu, "gpu_workers": gpu, "workers": workers}
    if report.get("run_notes"):
        reply["run_notes"] = [{k: n[k] for k in ("key", "text", "count", "frames")} for n in report["run_notes"]]
    return reply


def _interruptible(fn):
    """fn() run in a thread of its own (a daemon) and waited for here in steps of 0.1 s, so
    that Ctrl-C (KeyboardInterrupt, raised by the signal handler in this, the main, thread)
    ends the wait at once: library code run here could swallow it (distributed's Client()
    calls uuid.getnode, whose bare except catches it). The thread is then left to end
    on its own. Returns fn's result, raises its exception."""
    done = {}

    def target():
        try:
            done["result"] = fn()
        except BaseException as e:  # noqa: BLE001 (raised in the caller's thread)
            done["error"] = e

    thread = threading.Thread(target=target, name=f"{NAME} {getattr(fn, '__name__', 'call')}", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(0.1)
    if "error" in done:
        raise done["error"]
    return done["result"]


def _buffer(address, size):
    """The memory of a callback's pointer argument as a writable buffer (empty for none)."""
    if not address or not size:
        return bytearray()
    return (ctypes.c_char * size).from_address(address)


def _plain(value):
    """value as JSON takes it (numpy arrays and integers as lists and ints)."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, tuple):
        return list(value)
    return value


def run(argv):
    """Runs the command line argv (without the program name) and returns its exit status."""
    lib = stemdot._LIB
    backend = _Backend()
    flags = (_lib.CLIFlag * len(FLAGS))(*[
        _lib.CLIFlag(name.encode(), default.encode() if default is not None else None, usage.encode(), repeatable)
        for name, default, usage, repeatable in FLAGS])
    call = _lib.CLI_FN(backend)
    spec = _lib.CLIBackend(NAME.encode(), USE.encode(), flags, len(FLAGS), call, None)
    args = (ctypes.c_char_p * (len(argv) + 1))(USE.encode(), *[a.encode() for a in argv])
    sys.stdout.flush()
    sys.stderr.flush()
    # SIGTERM (a batch system's time limit) and SIGHUP end the command as Ctrl-C does, as
    # they end stemdot apply: status 1, no output left behind.
    previous = {sig: signal.signal(sig, backend.on_interrupt) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        return lib.stemdot_cli_main(len(argv) + 1, args, ctypes.byref(spec))
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        backend.close()


def main(argv=None):
    """The command; returns its exit status. Ctrl-C anywhere ends it with status 1 and a
    message (see stemdot._startup for the imports before it)."""
    if signal.getsignal(signal.SIGINT) is _startup.interrupted:
        signal.signal(signal.SIGINT, signal.default_int_handler)  # KeyboardInterrupt from here on
    try:
        return run(sys.argv[1:] if argv is None else argv)
    except KeyboardInterrupt:
        print(_startup.MESSAGE, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
