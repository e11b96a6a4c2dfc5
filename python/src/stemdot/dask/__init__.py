"""stemdot on a Dask cluster: scans larger than one machine, on many nodes.

The cluster is the field's usual one (``dask scheduler`` and ``dask worker --nthreads 1``
on every node, see the README). stemdot runs *inside* each Dask worker process:

* :class:`StemdotPlugin`, a Dask ``WorkerPlugin``, sets every worker up once: it loads
  libstemdot (in the worker process, never in the Nanny), finds the node's allowed CPUs,
  physical cores and GPUs, takes this worker's share of the node's cores, makes the plan
  once (pinned CPU workers; one core reserved per GPU worker, as on one machine), moves
  Dask's own threads off the pinned cores where the node has spare CPUs, and keeps open
  dataset handles. A worker restarted by its Nanny is set up again by Dask.
* :func:`bootstrap` registers the plugin (idempotent: safe twice, and from two clients at
  once) and waits until every worker reports ready, with its node's plan.
* :func:`apply_masks` returns exactly ``stemdot.apply_masks(stemdot.open(path,
  **open_options), masks)``: the scan is cut into frame ranges, one task each, sized as a
  multiple of the executing node's stemdot worker count; nodes that finish sooner are
  handed more ranges. Workers read their frames from ``path`` (shared storage); the mask
  stack is scattered once; only the results (frames × masks values) travel back, and they
  are written into the output by frame index. A client-side ledger of ranges recomputes
  the ranges of a worker that died on the workers still alive: it cancels their tasks as
  soon as the scheduler drops the worker, so no task waits for a dead worker's address.

``python -m stemdot.dask --scheduler ADDRESS FILE --mask ... --out r.npy`` is the command
line. dask and distributed come from PyPI (``pip install "dask[distributed]"``).
"""

import asyncio
import concurrent.futures
import contextlib
import ctypes
import fcntl
import itertools
import os
import re
import tempfile
import threading
import time
import uuid
import warnings
from collections import OrderedDict

import dask
import numpy as np
from dask.utils import format_bytes
from distributed import TimeoutError as DaskTimeoutError
from distributed import Future, WorkerPlugin, get_worker, wait
from distributed.comm.addressing import get_address_host

import stemdot
from stemdot import _lib

__all__ = ["StemdotPlugin", "bootstrap", "apply_masks", "reduce", "dataset_info", "ClusterError", "RANGE_BYTES"]

#: The plugin's name on the workers (``dask_worker.plugins["stemdot"]``).
PLUGIN_NAME = "stemdot"

#: Default frame bytes per stemdot worker in one range: a range of a node with n workers
#: holds n × max(1, RANGE_BYTES // frame_bytes) frames (e.g. 1024 frames of 256×256
#: uint16 per worker), long enough that the per-task overhead (about 10 ms, mostly the
#: engine's start of an apply; see `make bench-dask`) is small against the task, short
#: enough that a dead worker's ranges are cheap to recompute.
RANGE_BYTES = 128 << 20

#: Seconds between two looks at the scheduler's list of live workers during a run.
POLL_S = 0.5

#: Open dataset handles a worker keeps (least recently used ones are freed first).
DATASET_CACHE = 64


# ------------------------------------------------------------------- worker side


class StemdotPlugin(WorkerPlugin):
    """Sets a Dask worker up for stemdot, once (``idempotent``: registering it again, from
    this client or another, changes nothing on the workers).

    cpus: None (default) = this worker's share of its node's usable physical cores: the
      node's Dask workers share them out in equal slices (a worker's slot on the node is
      held by a lock file for the life of its process, so a restarted worker takes the
      free slot); a count or a list of logical CPU ids = that request on every worker
      (see :func:`stemdot.describe_plan`).
    gpus: None (default) = "auto" on a node with one Dask worker; with several, the
      node's GPUs shared out by slot like the cores (device d to slot d mod workers);
      none when the library has no CUDA or the node no GPU (a worker that declares a Dask
      ``GPU`` resource then reports a warning); a count, a list of device ids, "auto", or
      0 = that request on every worker.

    :meth:`setup` runs on the worker's event loop and returns at once: the set-up
    (loading the library, detecting the topology, planning) runs in a thread, so that
    heartbeats never stall; :func:`bootstrap` waits for it. ``node`` is then the node's
    description (a dict: ``address``, ``host``, ``slot``, ``local_workers``, ``cpus``,
    ``plan`` (the plan's dict, see :func:`stemdot.describe_plan`), ``n_workers``,
    ``dask_cpus`` (CPUs left to Dask's threads), ``warnings``); ``plan`` is the plan
    object, made once per worker process (and, at the first reduction, ``reduce_plan``:
    the same CPUs without GPU workers). :meth:`teardown` cancels running applies and
    frees the datasets and the plans.
    """

    name = PLUGIN_NAME
    idempotent = True

    def __init__(self, cpus=None, gpus=None):
        self.cpus = cpus
        self.gpus = gpus

    # -- set-up, on the worker

    async def setup(self, worker):
        self.worker = worker
        self.node = None
        self.plan = self.reduce_plan = None
        self.error = None
        self.ready = threading.Event()
        self._lock = threading.Lock()
        self._datasets = OrderedDict()  # key → [Dataset, users]
        self._runs = {}  # run handle → job id
        self._cancelled = set()  # job ids
        self._slot_file = None
        host = get_address_host(worker.address)
        try:
            info = await worker.scheduler.identity(n_workers=-1)
            local = sum(1 for w in info["workers"].values() if w.get("host") == host)
        except Exception:  # an old scheduler: one worker per node
            local = 1
        gpu_resource = float(worker.state.total_resources.get("GPU", 0)) > 0
        args = (worker.address, host, worker.scheduler.address, max(local, 1), gpu_resource)
        threading.Thread(target=self._set_up, args=args, name="stemdot-setup", daemon=True).start()

    def _set_up(self, address, host, scheduler, local, gpu_resource):
        try:
            self.node = self._make_node(address, host, scheduler, local, gpu_resource)
        except BaseException as e:  # reported by bootstrap and by every task
            self.error = e
        finally:
            self.ready.set()

    def _make_node(self, address, host, scheduler, local, gpu_resource):
        stemdot._LIB.load()
        slot, self._slot_file = _claim_slot(scheduler)
        warnings = []
        full = stemdot.describe_plan()  # one CPU worker per usable physical core
        node_cpus = sorted(w["cpu"] for w in full["workers"])
        cpus, gpus = self.cpus, self.gpus
        if cpus is None:
            cpus = _share(node_cpus, slot, local)
        if gpus is None:
            try:
                auto = stemdot.describe_plan(gpus="auto")
                devices, why = sorted({w["gpu"] for w in auto["workers"] if "gpu" in w}), "; ".join(auto.get("warnings", []))
            except stemdot.StemdotError as e:
                devices, why = [], e.message
            if gpu_resource and not devices:
                warnings.append(f"the worker declares a GPU resource, but stemdot uses no GPU here: {why or 'none found'}")
            if local == 1 and devices:
                gpus = "auto"  # the planner picks GPU workers per job (none for small or memory-bound ones)
            else:
                gpus = [d for d in devices if d % local == slot % local] or None
        self.plan = stemdot._Plan(cpus, gpus)
        self._cpus = cpus
        plan = self.plan.describe()
        pinned = {w["cpu"] for w in plan["workers"]} | set(node_cpus)
        dask_cpus = _threads_off(pinned)
        if not dask_cpus:
            warnings.append("every allowed CPU of the node is pinned by stemdot: Dask's threads share them")
        return {
            "address": address,
            "host": host,
            "pid": os.getpid(),
            "slot": slot,
            "local_workers": local,
            "cpus": sorted(w["cpu"] for w in plan["workers"]),
            "plan": plan,
            "n_workers": len(plan["workers"]),
            "dask_cpus": sorted(dask_cpus),
            "warnings": warnings + plan.get("warnings", []),
        }

    def wait_ready(self, timeout=None):
        """Waits for the set-up; returns ``node`` or raises the set-up's error."""
        if not self.ready.wait(timeout):
            raise TimeoutError(f"stemdot set-up of worker {self.worker.address} not finished after {timeout} s")
        if self.error is not None:
            raise RuntimeError(f"stemdot set-up of worker {self.worker.address} failed: {self.error}") from self.error
        return self.node

    # -- datasets

    @contextlib.contextmanager
    def dataset(self, path, options):
        """An open dataset of ``path`` with the ``stemdot.open`` options (a dict), from the
        cache (key: path, options and the file's size and modification time, so that a
        replaced file is opened again)."""
        try:
            st = os.stat(path)
        except OSError as e:
            raise stemdot.StemdotIOError(
                f"{path}: {e.strerror} (on worker {self.worker.address}: the file must be at this path on every worker)",
                _lib.ERR_IO,
            ) from None
        key = (os.path.abspath(path), tuple(sorted((k, repr(v)) for k, v in options.items())), st.st_size, st.st_mtime_ns)
        with self._lock:
            entry = self._datasets.get(key)
            if entry is not None:
                self._datasets.move_to_end(key)
                entry[1] += 1
        if entry is None:
            opened = stemdot._open(path, options)  # its warnings go to the client (dataset_info)
            with self._lock:
                entry = self._datasets.setdefault(key, [opened, 0])
                entry[1] += 1
                self._evict()
            if entry[0] is not opened:  # another thread opened it meanwhile
                opened.close()
        try:
            yield entry[0]
        finally:
            with self._lock:
                entry[1] -= 1
                self._evict()

    def _evict(self):
        unused = [k for k, (_, users) in self._datasets.items() if users == 0]
        for k in unused[: max(0, len(self._datasets) - DATASET_CACHE)]:
            self._datasets.pop(k)[0].close()

    # -- ranges

    @contextlib.contextmanager
    def _run(self, job):
        """A run handle for one range of job, cancelled when job is (:meth:`cancel`)."""
        run = ctypes.c_uint64()
        stemdot._call(stemdot._LIB.stemdot_run_new, ctypes.byref(run))
        run = run.value
        try:
            with self._lock:
                if job in self._cancelled:
                    stemdot._LIB.stemdot_run_cancel(run)
                self._runs[run] = job
            yield run
        finally:
            with self._lock:
                del self._runs[run]
            stemdot._LIB.stemdot_run_free(run)

    def compute(self, job, path, options, masks, first, count, dtype, shifts=None):
        """Applies masks to frames [first, first+count) of path, moved by shifts (None,
        (dy, dx) for every frame, 2 per frame of the range, or 2 per position of the
        whole scan: see stemdot.apply_masks); returns (values of shape (count, n_masks),
        this worker's address, its stemdot worker count, seconds spent in the apply)."""
        node = self.wait_ready()
        started = time.perf_counter()
        out = np.empty((count, masks.shape[0]), dtype=dtype)
        weights, suffix = stemdot._weights(masks)  # float32, or float64 (see stemdot._job)
        with self._run(job) as run, self.dataset(path, dict(options, frames=(first, count))) as ds:
            tail = (self.plan.handle, run, _lib.PROGRESS_FN(), None, ctypes.c_void_p(out.ctypes.data),
                    _lib.DTYPE_CODES[out.dtype.name], out.size)
            if shifts is None:
                stemdot._call(getattr(stemdot._LIB, "stemdot_apply" + suffix), ds.handle, weights, *masks.shape, *tail)
            else:
                stemdot._call(stemdot._LIB.stemdot_apply_shifted, ds.handle, ctypes.c_void_p(masks.ctypes.data),
                              _lib.DTYPE_CODES[masks.dtype.name], *masks.shape,
                              shifts.ctypes.data_as(ctypes.POINTER(ctypes.c_double)), shifts.size, *tail)
        return out, node["address"], node["n_workers"], time.perf_counter() - started

    def reduce(self, job, path, options, names, first, count):
        """Reduces frames [first, first+count) of path on this worker's CPU workers
        (``reduce_plan``, made at the first reduction: reductions run on CPU workers
        only): returns (a dict name → float64 array (sig_y, sig_x) of the reductions
        names, with the sum added for the mean and the std and the mean for the std, as
        :func:`_merge` needs them; this worker's address, its stemdot worker count,
        seconds spent)."""
        node = self.wait_ready()
        with self._lock:
            if self.reduce_plan is None:
                self.reduce_plan = stemdot._Plan(self._cpus, None)
        started = time.perf_counter()
        names = set(names)
        names |= {"sum"} if names & {"mean", "std"} else set()
        names |= {"mean"} if "std" in names else set()
        with self._run(job) as run, self.dataset(path, dict(options, frames=(first, count))) as ds:
            out = {r: np.empty(ds.sig_shape, dtype=np.float64) for r in stemdot.REDUCTIONS if r in names}
            bufs = [out[r].ctypes.data_as(ctypes.POINTER(ctypes.c_double)) if r in out else None for r in stemdot.REDUCTIONS]
            stemdot._call(stemdot._LIB.stemdot_reduce, ds.handle, self.reduce_plan.handle, run, _lib.PROGRESS_FN(), None,
                          *bufs, ds.sig_shape[0] * ds.sig_shape[1])
        return out, node["address"], node["n_workers"], time.perf_counter() - started

    def cancel(self, job):
        """Cancels the applies of job running on this worker, and its later ranges."""
        with self._lock:
            self._cancelled.add(job)
            for run, j in self._runs.items():
                if j == job:
                    stemdot._LIB.stemdot_run_cancel(run)

    async def teardown(self, worker):
        """Cancels running applies, waits for them (up to 30 s), frees datasets and plan;
        in a thread, off the event loop."""
        if getattr(self, "ready", None) is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._tear_down)

    def _tear_down(self):
        if not self.ready.wait(60):
            return
        with self._lock:
            for run in self._runs:
                stemdot._LIB.stemdot_run_cancel(run)
        deadline = time.monotonic() + 30
        while self._runs and time.monotonic() < deadline:
            time.sleep(0.05)
        with self._lock:
            for ds, _ in self._datasets.values():
                with contextlib.suppress(stemdot.StemdotError):
                    ds.close()
            self._datasets.clear()
            for plan in (self.plan, self.reduce_plan):
                if plan is not None:
                    plan.free()
            self.plan = self.reduce_plan = None
        if self._slot_file is not None:
            self._slot_file.close()  # releases the slot's lock
            self._slot_file = None


def _claim_slot(scheduler):
    """This worker's slot on its node: the first of slot-0.lock, slot-1.lock, ... in a
    directory per user and cluster that it can lock. The lock is held until the process
    ends (the kernel drops it when a worker dies), so a restarted worker takes the slot
    of the one it replaces. Returns (slot, open file holding the lock)."""
    cluster = re.sub(r"[^A-Za-z0-9_.-]+", "_", scheduler)
    directory = os.path.join(tempfile.gettempdir(), f"stemdot-dask-{os.getuid()}", cluster)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    for slot in itertools.count():
        f = open(os.path.join(directory, f"slot-{slot}.lock"), "a+")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return slot, f
        except BlockingIOError:
            f.close()


def _share(cpus, slot, local):
    """Slot's equal share of the node's worker CPUs (one per physical core) among local
    Dask workers; a list of CPU ids. With more workers than cores, slots share cores."""
    n = len(cpus)
    k = slot % local
    mine = cpus[k * n // local : (k + 1) * n // local]
    return mine or [cpus[k % n]]


def _threads_off(pinned):
    """Moves every thread of this process (Dask's event loop, executor and comm threads;
    the Go runtime's idle threads) to the allowed CPUs that stemdot does not pin, and
    returns them; when there are none, the threads are left where they are (empty set).
    stemdot's pinned workers set their own affinity when they start."""
    spare = os.sched_getaffinity(0) - pinned
    if spare:
        for tid in os.listdir("/proc/self/task"):
            with contextlib.suppress(OSError):  # a thread that ended meanwhile
                os.sched_setaffinity(int(tid), spare)
    return spare


def _plugin():
    """The StemdotPlugin of the worker running the calling task."""
    worker = get_worker()
    plugin = worker.plugins.get(PLUGIN_NAME)
    if plugin is None:
        raise RuntimeError(f"worker {worker.address} has no stemdot plugin: call stemdot.dask.bootstrap(client) first")
    return plugin


def _range_task(job, path, options, masks, first, count, dtype, shifts=None):
    """A range task: frames [first, first+count) of path, see StemdotPlugin.compute."""
    return _plugin().compute(job, path, options, masks, first, count, dtype, shifts)


def _reduce_task(job, path, options, names, first, count):
    """A reduction range task: frames [first, first+count) of path, see
    StemdotPlugin.reduce."""
    return _plugin().reduce(job, path, options, names, first, count)


def _info_task(path, options):
    """nav_shape, sig_shape, dtype name, frame count and warnings of path, opened on a
    worker; frame_positions: the scan position of each frame when they are not the
    whole scan (an ROI, a frames range), else None."""
    plugin = _plugin()
    plugin.wait_ready()
    with plugin.dataset(path, options) as ds:
        part = int(np.prod(ds.scan_shape)) != ds.n_frames
        return {"nav_shape": ds.nav_shape, "sig_shape": ds.sig_shape, "dtype": ds.dtype.name, "n_frames": ds.n_frames,
                "format": ds.format, "warnings": ds.warnings, "scan_shape": ds.scan_shape, "positions": ds.positions,
                "frame_positions": ds._scan_positions() if part else None}


async def _node_ready(dask_worker, timeout):
    """Waits (off the event loop) for the plugin to arrive and finish its set-up; returns
    its node description."""
    deadline = time.monotonic() + timeout
    while (plugin := dask_worker.plugins.get(PLUGIN_NAME)) is None or not hasattr(plugin, "ready"):
        if time.monotonic() > deadline:
            raise TimeoutError(f"worker {dask_worker.address}: the stemdot plugin did not arrive within {timeout} s")
        await asyncio.sleep(0.05)
    left = max(0.0, deadline - time.monotonic())
    return await asyncio.get_running_loop().run_in_executor(None, plugin.wait_ready, left)


async def _cancel_job(job, dask_worker=None):
    plugin = dask_worker.plugins.get(PLUGIN_NAME)
    if plugin is not None and hasattr(plugin, "ready") and plugin.ready.is_set() and plugin.error is None:
        plugin.cancel(job)


# ------------------------------------------------------------------- client side


def _live_workers(client):
    """Address → scheduler info of the running workers (all of them: n_workers=-1)."""
    workers = client.scheduler_info(n_workers=-1)["workers"]
    return {a: w for a, w in workers.items() if w.get("status", "running") == "running"}


class ClusterError(RuntimeError):
    """The Dask cluster cannot run or finish the job: it has no running worker (none
    connected, or all paused because their memory is above Dask's pause threshold), or
    the workers of the run left the cluster during it, taking the mask stack scattered
    to them. The message names the workers, their memory_limit, and what helps."""


def _cluster_error(client, what, started=None, stack_bytes=None):
    """A ClusterError: what went wrong, the workers that left since the run started
    (started: the scheduler's workers then, address → info) or are paused, and why this
    happens and what helps."""
    try:
        workers = client.scheduler_info(n_workers=-1)["workers"]
    except Exception as e:
        return ClusterError(f"{what}; the scheduler does not answer ({e})")
    started = started or {}
    gone = sorted(set(started) - set(workers))
    paused = sorted(a for a, w in workers.items() if w.get("status") == "paused")
    limits = sorted({w["memory_limit"] for w in [*workers.values(), *started.values()] if w.get("memory_limit")})
    limit = " or ".join(map(format_bytes, limits)) if limits else "none"
    pause, terminate = (dask.config.get(f"distributed.worker.memory.{k}") for k in ("pause", "terminate"))
    facts = [what]
    if gone:
        facts.append(f"{len(gone)} of the {len(started)} Dask workers of the run left the cluster ({', '.join(gone)})"
                     + (", and with them the mask stack scattered to them" if stack_bytes else ""))
    if paused:
        facts.append(f"{len(paused)} of the {len(workers)} Dask workers are paused ({', '.join(paused)}): their memory "
                     f"use is above {pause:.0%} of their memory_limit ({limit}; Dask's distributed.worker.memory.pause)")
    if not gone and not workers:
        return ClusterError("; ".join(facts + ["the scheduler has no worker: start Dask workers (dask worker SCHEDULER "
                                               "--nthreads 1) and run again"]))
    if not gone and not paused:
        return ClusterError("; ".join(facts))
    if not workers:
        facts.append("no worker is connected now")
    why = ""
    if gone:
        nanny = f", or restarted by its Nanny at {terminate:.0%} of its memory_limit ({limit})" if terminate else ""
        why = (f" A Dask worker leaves when its process dies: killed (e.g. by the kernel's out-of-memory killer){nanny}; "
               "the workers' logs say which.")
    holds = f" (it holds the mask stack, {format_bytes(stack_bytes)}, and its ranges' results)" if stack_bytes else ""
    return ClusterError("; ".join(facts) + "." + why + f" Give each worker the memory it needs{holds}: dask worker "
                        "--memory-limit, LocalCluster(memory_limit=...); or use fewer or smaller masks; then run again")


def _cancel_reasons(exc):
    """The reasons the scheduler gives for cancelling futures (distributed's
    FutureCancelledError, FuturesCancelledError), or the exception's text."""
    reasons = [getattr(g, "reason", None) for g in getattr(exc, "error_groups", [exc])]
    return ", ".join(sorted({r for r in reasons if r})) or str(exc) or type(exc).__name__


def bootstrap(client, plugin=None, timeout=120):
    """Registers ``plugin`` (default ``StemdotPlugin()``) on every worker of ``client``'s
    cluster and returns when every worker has finished its set-up: a dict worker address
    → node description (see :class:`StemdotPlugin`). Safe to call again and from several
    clients at once: the plugin is registered once (idempotent), and the workers keep
    their set-up (the same plan object). Workers that join later, or are restarted by
    their Nanny, are set up by Dask on arrival. Raises RuntimeError naming the worker
    whose set-up failed, TimeoutError after ``timeout`` seconds.
    """
    client.register_plugin(plugin if plugin is not None else StemdotPlugin(), name=PLUGIN_NAME)
    return client.run(_node_ready, timeout=timeout)


def dataset_info(client, path, *, timeout=120, **open_options):
    """Opens ``path`` on a worker (as :func:`stemdot.open` with ``open_options``) and
    returns a dict with ``nav_shape``, ``sig_shape``, ``dtype`` (numpy name),
    ``n_frames``, ``format`` (as read: "mib", "hdf5", ...), ``warnings`` (the dataset's, see ``stemdot.Dataset.warnings``),
    ``scan_shape`` and ``positions`` (a region of interest's selected scan positions,
    else None: see ``stemdot.Dataset``). The
    client needs no access to the file; a relative ``path``, or ``roi`` NPY file, that
    exists on the client is made absolute there (:func:`_client_path`). Raises
    :class:`ClusterError` when no worker has been running for ``timeout`` seconds (none
    connected, or all paused)."""
    path = _client_path(path)
    future = client.submit(_info_task, path, _client_options(open_options), pure=False)
    stalled = None  # since when no worker runs
    while True:
        try:
            wait([future], timeout=1)
            return future.result()
        except DaskTimeoutError:
            pass
        if _live_workers(client):
            stalled = None
        elif stalled is None:
            stalled = time.monotonic()
        elif time.monotonic() - stalled > timeout:
            future.cancel()
            raise _cluster_error(client, f"no Dask worker has run for {timeout:g} s to open {path}")


def _client_path(path):
    """path (str or os.PathLike) as a str, made absolute when it is relative and exists on
    the client: the workers would resolve it in their own working directories. A
    relative path the client does not see is sent as it is (a file on the workers'
    storage only)."""
    path = os.fspath(path)
    if not os.path.isabs(path) and os.path.exists(path):
        path = os.path.abspath(path)
    return path


def _client_options(open_options):
    """open_options as sent to the workers: an roi array as its text
    (stemdot._roi_option: small to send, and a key of the workers' dataset cache that
    tells two arrays apart), an roi NPY file by :func:`_client_path`."""
    roi = open_options.get("roi")
    if roi is None:
        return open_options
    roi = stemdot._roi_option(roi)
    if not roi.strip().startswith(("rect:", "bits:")):
        roi = _client_path(roi)
    return dict(open_options, roi=roi)


def _first_frame(frames):
    """The first frame of a frames option already accepted by the library: (first,
    count) as a sequence or as its text "FIRST,COUNT"."""
    if isinstance(frames, str):
        return int(frames.strip().strip("()[] ").split(",")[0])
    return int(frames[0])


class _Ledger:
    """The client's record of the scan's frame ranges: pending (not handed out), in
    flight (frames of a submitted task, by future) and done. A range whose worker died
    goes back to pending, to be cut again for the next worker that asks."""

    def __init__(self, n_frames):
        self.pending = [(0, n_frames)]  # [first, end) intervals, in order
        self.flight = {}  # future → (first, count, worker address, attempt)
        self.attempts = {}  # first frame → tries so far
        self.done = 0

    def take(self, size):
        """The next range of at most size frames, or None."""
        if not self.pending:
            return None
        first, end = self.pending[0]
        count = min(size, end - first)
        if first + count == end:
            self.pending.pop(0)
        else:
            self.pending[0] = (first + count, end)
        return first, count

    def give_back(self, first, count):
        self.pending.append((first, first + count))
        self.pending.sort()

    def busy(self, address):
        return sum(1 for (_, _, a, _) in self.flight.values() if a == address)


def _prepare(client, path, open_options, range_frames, timeout):
    """The set-up of a job over the frames of path: the path (made absolute where it
    exists here), the nodes (:func:`bootstrap`), the scheduler's workers the run starts
    with, the dataset's info (its warnings issued), the open options without frames,
    the first frame of the frames option (the ranges are cut from its span: each range
    task opens frames (first + range's first, range's count) of the whole scan) and the
    frames per stemdot worker of a range."""
    path = _client_path(path)
    nodes = bootstrap(client, timeout=timeout)
    if not nodes:
        raise _cluster_error(client, "the cluster has no Dask worker")
    workers = client.scheduler_info(n_workers=-1)["workers"]  # those the run starts with
    open_options = _client_options(open_options)
    info = dataset_info(client, path, timeout=timeout, **open_options)
    for w in info["warnings"]:
        warnings.warn(f"stemdot: {w}", stacklevel=3)
    open_options = dict(open_options)
    frames = open_options.pop("frames", None)
    first_frame = _first_frame(frames) if frames is not None else 0
    frame_bytes = int(np.prod(info["sig_shape"])) * np.dtype(info["dtype"]).itemsize
    per_worker = int(range_frames) if range_frames else max(1, RANGE_BYTES // frame_bytes)
    if per_worker < 1:
        raise ValueError(f"range_frames={range_frames}: want at least 1 frame per worker")
    return path, nodes, workers, info, open_options, first_frame, per_worker


def centre(client, path, *, shifts=None, resources=None, range_frames=None, timeout=120, **open_options):
    """The direct beam's centre and radius of the file at ``path``, as
    ``stemdot.centre(stemdot.open(path, **open_options), shifts=shifts)`` gives it:
    without shifts, in the sum frame reduced on the cluster (:func:`reduce`); with shifts,
    on one worker, which moves every frame back by its shift (see
    :func:`stemdot.centre`). Returns a :class:`stemdot.Centre`."""
    if shifts is None:
        total = reduce(client, path, ["sum"], resources=resources, range_frames=range_frames, timeout=timeout,
                       **open_options)["sum"]
        return stemdot.find_centre(total)
    path = _client_path(path)
    bootstrap(client, timeout=timeout)
    future = client.submit(_centre_task, path, _client_options(open_options), np.asarray(shifts, dtype=np.float64), resources=resources,
                           pure=False)
    return stemdot.Centre(*future.result())


def _centre_task(path, options, shifts):
    """stemdot.centre of path with shifts, on a worker's CPU workers."""
    plugin = _plugin()
    plugin.wait_ready()
    with plugin.dataset(path, options) as ds:
        return tuple(stemdot.centre(ds, cpus=plugin._cpus, shifts=shifts))


def reduce(
    client,
    path,
    reductions=("sum",),
    *,
    progress=False,
    resources=None,
    prefer=None,
    range_frames=None,
    max_attempts=4,
    timeout=120,
    report=None,
    **open_options,
):
    """Reduces every frame of the file at ``path`` on the workers of ``client``'s cluster:
    returns the same dict as ``stemdot.reduce(stemdot.open(path, **open_options),
    reductions)``, name → float64 array (sig_y, sig_x) of the sum, mean, maximum and
    standard-deviation frames asked (any of :data:`stemdot.REDUCTIONS`).

    The scan is cut into frame ranges as by :func:`apply_masks` (path, open_options,
    progress, resources, prefer, range_frames, max_attempts, timeout and report alike);
    each range is reduced on its worker's CPU workers and only its frames (a few
    sig_shape arrays) travel back. The ranges' partial reductions are merged here as the
    engine merges its workers': sums added (integer sums stay exact up to 2**53), maxima
    compared (NaN kept), and for the std each range's (count, mean, M2 = count·std²)
    merged by Chan et al.'s pairwise update, so the result is numerically stable.
    """
    if isinstance(reductions, str):
        reductions = (reductions,)
    names = list(reductions)
    if not names or any(r not in stemdot.REDUCTIONS for r in names):
        raise stemdot.InvalidArgumentError(f"reductions={reductions!r}: want one or more of {', '.join(stemdot.REDUCTIONS)}",
                                           _lib.ERR_INVALID_ARGUMENT)
    started = time.monotonic()
    path, nodes, workers, info, open_options, first_frame, per_worker = _prepare(client, path, open_options, range_frames,
                                                                                timeout)
    total = {}  # the merged partials: "n", and the names computed by the ranges

    def store(first, count, part):
        _merge(total, count, part)

    _run_ranges(
        client, path, info["n_frames"], nodes, workers, per_worker,
        lambda job, first, count: (_reduce_task, job, path, open_options, names, first_frame + first, count),
        store, progress=progress, resources=resources, prefer=prefer, max_attempts=max_attempts, timeout=timeout,
        stack_bytes=0, report=report, started=started,
    )
    n, out = total["n"], {}
    for r in [r for r in stemdot.REDUCTIONS if r in names]:
        if r == "mean":
            out[r] = total["sum"] / n
        elif r == "std":
            out[r] = np.sqrt(total["m2"] / n)
        else:
            out[r] = total[r]
    return out


def _merge(total, count, part):
    """Merges the partial reduction part of count frames (name → array; the sum included
    with the mean and the std, the mean with the std: see StemdotPlugin.reduce) into
    total, in place: sums added, maxima compared with NaN kept, and (n, mean, M2) merged
    by Chan, Golub and LeVeque's update: with δ = mean_b − mean_a, mean = mean_a +
    δ·n_b/n and M2 = M2_a + M2_b + δ²·n_a·n_b/n."""
    m2 = part["std"] ** 2 * count if "std" in part else None
    if not total:
        total.update(part, n=count)
        if m2 is not None:
            total["m2"] = m2
        return
    na, nb = total["n"], count
    n = na + nb
    with np.errstate(invalid="ignore"):  # +Inf and -Inf meet: NaN, as numpy gives
        if "sum" in part:
            total["sum"] = total["sum"] + part["sum"]
        if "max" in part:
            total["max"] = np.where(np.isnan(part["max"]) | (part["max"] > total["max"]), part["max"], total["max"])
        if m2 is not None:
            delta = part["mean"] - total["mean"]
            total["mean"] = total["mean"] + delta * (nb / n)
            total["m2"] = total["m2"] + m2 + delta * delta * (na * nb / n)
    total["n"] = n


def apply_masks(
    client,
    path,
    masks,
    *,
    out_dtype=np.float32,
    progress=False,
    resources=None,
    prefer=None,
    range_frames=None,
    max_attempts=4,
    timeout=120,
    report=None,
    roi_compact=False,
    shifts=None,
    names=None,
    **open_options,
):
    """Applies a mask stack to every frame of the file at ``path`` on the workers of
    ``client``'s cluster: returns the same :class:`stemdot.Result` as
    ``stemdot.apply_masks(stemdot.open(path, **open_options), masks, dtype=out_dtype,
    roi_compact=roi_compact, shifts=shifts, names=names)``, shape ``nav_shape +
    (n_masks,)``, with the masks' ``names`` and the ``info`` of its sidecar (the
    dataset's path, made absolute, format and open options; ``plan``: the stemdot
    workers of all the cluster's nodes that ran it; ``roi``, ``shifts``), the dict that
    ``python -m stemdot.dask`` writes as RESULT.json. With ``roi`` (a region of interest,
    as for :func:`stemdot.open`) the tasks cover the selected frames only, and the
    result has the scan's nav shape with NaN outside the ROI, or, ``roi_compact=True``,
    is ``(images, positions)`` of the selected positions, images a Result.

    path: a file every worker can read at this path (shared storage); the client need
      not see it. A relative path that exists on the client is made absolute there (the
      workers' working directories differ from the client's), and so is an ``roi`` NPY
      file. open_options: those of :func:`stemdot.open` (format, nav_shape, sig_shape,
      dtype, ..., frames: only frames first..first+count-1 of the scan, a result of
      nav_shape (count,)).
    masks: (n_masks, sig_y, sig_x) or (sig_y, sig_x), or mask factories, as for
      stemdot.apply_masks (factories are called here); scattered to the workers once.
    names: the masks' names, one per mask (e.g. those :func:`stemdot.mask_stack`
      returns); None: "mask0", "mask1", ...
    out_dtype: np.float32 or np.float64 (float64 accumulates in float64).
    progress: False; True (a tqdm bar when tqdm is installed, else a bar on stderr); or
      a callable ``f(done, total)`` called on the client with the frames done. An
      exception raised by it cancels the run and is re-raised.
    resources: Dask resources every range task needs, e.g. ``{"GPU": 1}`` to compute on
      the nodes started with ``--resources GPU=1`` only; ranges go only to workers that
      declare them.
    prefer: worker addresses or hosts that hold a local copy of the file: they are handed
      ranges first and keep two ranges queued, the others one.
    range_frames: frames per stemdot worker in one range (default: RANGE_BYTES of
      frames); a range of a node with n stemdot workers holds n × range_frames frames
      (the scan's last range may be shorter).
    shifts: None, or the masks moved with the diffraction pattern, as for
      :func:`stemdot.apply_masks`: ``(dy, dx)`` for every frame, or one shift per scan
      position (``nav_shape + (2,)``; with ``frames``, of the whole scan or of the frames
      read); each range task gets the shifts of its frames only.
    max_attempts: tries of one range before the run fails (a range whose worker died
      is tried again elsewhere).
    timeout: seconds to wait for the workers' set-up (:func:`bootstrap`).
    report: a dict, filled when given with ``ranges`` (a list of (first, count, worker
      address, attempt, seconds in the worker's apply) of the ranges computed), ``lost``
      ((first, count, worker address, attempt) of the ranges recomputed after their worker
      died), ``nodes`` (the node descriptions) and ``seconds`` (the whole call).

    The dataset's warnings (a guessed nav shape, frames that do not fit the scan, the
    HDF5 dataset chosen) are issued as UserWarning, as :func:`stemdot.open` issues them.
    Ctrl-C (KeyboardInterrupt) cancels the run: pending tasks are cancelled and the
    workers stop their running applies. Errors of a range (a stemdot error on a worker)
    cancel the run and are raised as they were raised on the worker.
    """
    out_dtype, masks = stemdot._job(masks, out_dtype)
    names = stemdot._names(names, masks.shape[0])
    shifts = stemdot._shifts(shifts)
    started = time.monotonic()
    given = _client_options(open_options)  # as the sidecar records them
    path, nodes, workers, info, open_options, first_frame, per_worker = _prepare(client, path, given, range_frames,
                                                                                timeout)
    if roi_compact and info["positions"] is None:
        raise stemdot.InvalidArgumentError("roi_compact=True needs a region of interest (roi=)", _lib.ERR_INVALID_ARGUMENT)
    if tuple(masks.shape[1:]) != tuple(info["sig_shape"]):
        raise stemdot.ShapeError(
            f"masks of sig shape {tuple(masks.shape[1:])} do not match the sig shape {tuple(info['sig_shape'])} of {path}",
            _lib.ERR_SHAPE,
        )
    n_frames, n_masks = info["n_frames"], masks.shape[0]
    # The shifts of a range task: (dy, dx) for all; one per frame of the dataset as opened,
    # sliced by range; or one per position of the whole scan, sent to every task (the
    # library maps each task's frames to their scan positions: frames option, ROI).
    positions = int(np.prod(info["scan_shape"]))
    if shifts is not None and shifts.size not in (2, 2 * n_frames, 2 * positions):
        raise stemdot.ShapeError(
            f"shifts hold {shifts.size} values: want 2 (dy, dx), 2 per frame read ({2 * n_frames}) or 2 per scan "
            f"position, nav_shape {tuple(info['scan_shape'])} + (2,) = {2 * positions}", _lib.ERR_SHAPE)
    sent = shifts  # the array, sliced per range, or scattered once when it is the whole scan's
    if shifts is not None and shifts.size not in (2, 2 * n_frames):
        sent = client.scatter(shifts, broadcast=True, hash=False)

    def shifts_of(first, count):
        if sent is None or not isinstance(sent, np.ndarray) or sent.size == 2:
            return sent
        return np.ascontiguousarray(sent[2 * first : 2 * (first + count)])
    out = np.empty((n_frames, n_masks), dtype=out_dtype)
    if not _live_workers(client):
        raise _cluster_error(client, "no Dask worker is running", workers)
    try:
        masks_future = client.scatter(masks, broadcast=True, hash=False)
    except (ValueError, DaskTimeoutError) as e:  # "Can not use replicate ...", "No valid workers found": none running
        raise _cluster_error(client, f"the mask stack could not be sent to the workers ({e})", workers) from e

    def store(first, count, values):
        out[first : first + count] = values

    try:
        _run_ranges(
            client, path, n_frames, nodes, workers, per_worker,
            lambda job, first, count: (_range_task, job, path, open_options, masks_future, first_frame + first, count,
                                       out_dtype.name, shifts_of(first, count)),
            store, progress=progress, resources=resources, prefer=prefer, max_attempts=max_attempts, timeout=timeout,
            stack_bytes=masks.nbytes, report=report, started=started,
        )
    finally:
        with contextlib.suppress(Exception):
            client.cancel([masks_future] + ([sent] if isinstance(sent, Future) else []))
    placed = stemdot._place(out, info["nav_shape"], info["scan_shape"], info["positions"], roi_compact)
    images, positions = placed if roi_compact else (placed, None)
    plans = [w for n in nodes.values() for w in n["plan"]["workers"]]  # the nodes of the run, joined ones included
    gpu_workers = sum("gpu" in w for w in plans)
    roi = None
    if info["positions"] is not None:
        roi = {"scan_shape": info["scan_shape"], "selected": len(info["positions"]), "compact": roi_compact}
    moved = None
    if shifts is not None:
        moved = {"mean": stemdot._mean_shift(shifts, n_frames, info["frame_positions"]),
                 "constant": shifts if shifts.size == 2 else None}
    result_info = stemdot._result_info(images.shape, images.dtype, info["sig_shape"], [{"name": n} for n in names], path,
                                       info["format"], given, len(plans) - gpu_workers, gpu_workers, roi=roi, shifts=moved)
    result = stemdot.Result(images, names, result_info)
    return (result, positions) if roi_compact else result


def _run_ranges(client, path, n_frames, nodes, workers, per_worker, task, store, *, progress, resources, prefer,
                max_attempts, timeout, stack_bytes, report, started):
    """Runs a job over the frames [0, n_frames) of path as range tasks on the workers of
    the cluster (see :func:`apply_masks`): a range for a node holds
    ``nodes[address]["n_workers"] × per_worker`` frames; ``task(job, first, count)`` gives
    the function and arguments of its task, whose result is (values, worker address,
    stemdot workers, seconds), and ``store(first, count, values)`` takes the values of
    each range computed. A range whose worker died is cut again for the live workers;
    a failed range cancels the job everywhere and its error is raised. stack_bytes: the
    data scattered for the job, named in the errors of lost workers (0: none)."""
    job = uuid.uuid4().hex
    ledger = _Ledger(n_frames)
    record = {"ranges": [], "lost": [], "nodes": nodes}
    preferred = set(prefer or ())
    notify = _progress(progress, n_frames)
    probing = {}  # address → future of its readiness (a worker that joined or restarted)

    def depth(address, worker):
        return 2 if not preferred or address in preferred or worker.get("host") in preferred else 1

    def eligible(worker):
        have = worker.get("resources") or {}
        return all(have.get(r, 0) >= n for r, n in (resources or {}).items())

    def submit(address, first, count):
        attempt = ledger.attempts.get(first, 0) + 1
        ledger.attempts[first] = attempt
        future = client.submit(
            *task(job, first, count),
            key=f"stemdot-range-{job}-{first}-{count}-{attempt}",
            # Sized for this worker, so it runs there only; if the worker leaves the
            # cluster, the ledger cancels the task and cuts the range again for the live
            # workers (below): no task outlives its worker's address, and the scheduler
            # never reruns a range on a node it was not sized for.
            workers=[address],
            allow_other_workers=False,
            resources=resources,
            pure=False,
        )
        ledger.flight[future] = (first, count, address, attempt)

    live, polled = {}, -POLL_S
    try:
        while ledger.done < n_frames:
            if time.monotonic() - polled >= POLL_S:
                live, polled = _live_workers(client), time.monotonic()
            for future, (first, count, address, attempt) in list(ledger.flight.items()):
                if address not in live:  # its worker died: the ledger recomputes the range
                    del ledger.flight[future]
                    future.cancel()
                    record["lost"].append((first, count, address, attempt))
                    ledger.give_back(first, count)
            for address in [a for a in probing if a not in live]:
                probing.pop(address).cancel()
            for address, worker in sorted(live.items(), key=lambda aw: depth(*aw), reverse=True):
                if address not in nodes:
                    _probe(client, address, probing, nodes, timeout)
                    continue
                if not eligible(worker):
                    continue
                while ledger.busy(address) < depth(address, worker):
                    taken = ledger.take(nodes[address]["n_workers"] * per_worker)
                    if taken is None:
                        break
                    if ledger.attempts.get(taken[0], 0) >= max_attempts:
                        raise _cluster_error(
                            client, f"frames [{taken[0]}, {taken[0] + taken[1]}) of {path} were lost {max_attempts} times "
                            "with their workers (raise max_attempts to try again)", workers, stack_bytes)
                    submit(address, *taken)
            if not ledger.flight:
                if not live:
                    raise _cluster_error(client, "no Dask worker is running", workers, stack_bytes)
                if not any(eligible(w) for w in live.values()):
                    raise ClusterError(f"no running worker of the cluster has the resources {resources}: start workers "
                                       "that declare them (dask worker SCHEDULER --resources NAME=N), or drop resources")
                time.sleep(0.1)  # waiting for a worker's set-up
                continue
            try:
                try:
                    finished = wait(list(ledger.flight), timeout=POLL_S, return_when="FIRST_COMPLETED").done
                except DaskTimeoutError:  # no range finished within POLL_S: look at the workers again
                    continue
                for future in finished:
                    first, count, address, attempt = ledger.flight.pop(future)
                    if future.status == "error" and _worker_lost(future.exception()):
                        record["lost"].append((first, count, address, attempt))
                        ledger.give_back(first, count)
                        continue
                    values, ran_on, _, seconds = future.result()  # raises a range's error
                    store(first, count, values)
                    ledger.done += count
                    record["ranges"].append((first, count, ran_on, attempt, seconds))
                    notify(ledger.done)
            except concurrent.futures.CancelledError as e:
                # The scheduler dropped the run's tasks, seen while waiting or as a finished
                # range's result (their dependency, the mask stack, was lost with its workers).
                raise _cluster_error(client, f"the scheduler cancelled the run's tasks ({_cancel_reasons(e)})", workers,
                                     stack_bytes) from e
    except BaseException:
        client.cancel(list(ledger.flight))
        _cancel_everywhere(client, job)
        raise
    finally:
        notify(None)
        for future in probing.values():
            future.cancel()
        if report is not None:
            record["seconds"] = time.monotonic() - started
            report.update(record)


def _cancel_everywhere(client, job, timeout=10):
    """Tells every worker to stop job's applies; gives up after timeout seconds (a worker
    that is dying may not answer), since the caller is already failing or interrupted."""

    def run():
        with contextlib.suppress(Exception):
            client.run(_cancel_job, job, on_error="ignore")

    thread = threading.Thread(target=run, name="stemdot-cancel", daemon=True)
    thread.start()
    thread.join(timeout)


def _worker_lost(exc):
    """Whether a range failed because its worker died (not because of its data)."""
    from distributed.scheduler import KilledWorker

    return isinstance(exc, (KilledWorker, OSError)) and not isinstance(exc, stemdot.StemdotError)


def _probe(client, address, probing, nodes, timeout):
    """Starts (once) waiting for the set-up of a worker that joined or was restarted,
    without blocking the client's loop; its node description lands in ``nodes``."""
    future = probing.get(address)
    if future is None:
        probing[address] = client.submit(
            _probe_task, timeout, workers=[address], allow_other_workers=True, pure=False, key=f"stemdot-probe-{uuid.uuid4().hex}"
        )
        return
    if future.done():
        del probing[address]
        if future.status == "finished" and future.result()["address"] == address:
            nodes[address] = future.result()


def _probe_task(timeout):
    return _plugin().wait_ready(timeout)


def _progress(progress, total):
    """A function done → None that reports progress (None: close)."""
    if not progress:
        return lambda done: None
    if callable(progress):
        return lambda done: done is not None and progress(done, total)
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return lambda done: done is not None and stemdot._progress_bar(done, total)
    bar = tqdm(total=total, unit="frame", desc="stemdot")

    def update(done):
        if done is None:
            bar.close()
        else:
            bar.update(done - bar.n)

    return update
