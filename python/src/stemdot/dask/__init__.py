"""stemdot on a Dask cluster: scans larger than one machine, on many nodes.

The cluster is the field's usual one (``dask scheduler`` and ``dask worker --nthreads 1``
on every node, see doc/dask.md). stemdot runs *inside* each Dask worker process:

* :class:`StemdotPlugin`, a Dask ``WorkerPlugin``, sets every worker up once: it loads
  libstemdot (in the worker process, never in the Nanny), finds the node's allowed CPUs,
  physical cores and GPUs, takes this worker's share of the node's cores, makes the plan
  once (pinned CPU workers; one core reserved per GPU worker, as on one machine), moves
  Dask's own threads off the pinned cores where the node has spare CPUs, and keeps each
  job's data (mask stack) and open datasets until the job ends. A worker restarted by
  its Nanny is set up again by Dask.
* :func:`bootstrap` registers the plugin (idempotent: safe twice, and from two clients at
  once) and waits until every worker reports ready, with its node's plan.
* :func:`apply_masks` returns exactly ``stemdot.apply_masks(stemdot.open(path,
  **open_options), masks)``: the scan is cut into frame ranges, one task each, sized from
  the executing node's plan (CPU workers × range_frames, GPU workers × GPU_RANGE_FACTOR ×
  range_frames) and, by default, after a node's first range from its measured rate
  (about RANGE_SECONDS of its work, shrinking toward the end of the scan so that the
  nodes finish together); nodes that finish sooner are handed more ranges. Workers read their
  frames from ``path`` (shared storage); the client sends the mask stack to each worker's
  plugin before its first range (no Dask data the run depends on lives on some workers
  only); only the results (frames × masks values) travel back, and they are written into
  the output by frame index. A client-side ledger owns each range exactly once: the
  ranges of a worker that died or retires are recomputed on the others (the run waits up
  to ``timeout`` for restarted workers when none is left); a range in flight longer than
  the hang timeout (``hang_timeout``, default max(HANG_FLOOR_S, HANG_FACTOR × its
  expected time)) is taken back and recomputed, its worker gets no new range until it
  answers again, and its late result is ignored; a node that cannot read the file (an
  I/O error, or a truncated copy: node-local errors) gets no more ranges, with a
  UserWarning naming it. A gone scheduler fails the run at once (one that does not
  answer: after SCHEDULER_ANSWER_S). At the end of a run every worker drops its data and
  closes its files.
  :func:`apply_masks` also takes an array instead of a path: a dask array (a lazy
  HyperSpy signal's) is computed block by block on the workers, each block where dask
  places it; a numpy array is sent from the client block by block.
* :func:`reduce` reduces the frames (sum, mean, max, std) the same way.
* :func:`live` applies masks to a DECTRIS detector's frames while the scan runs, on
  every node: the stream deals its frames out to one socket per Dask worker, the client
  arms the detector once every socket is connected and merges the workers' rows by
  frame index (see :mod:`stemdot.dask._live`).
* ``bootstrap_async``, ``apply_masks_async``, ``reduce_async`` and
  ``dataset_info_async`` are the twins for ``Client(asynchronous=True)``: the range
  loop is one coroutine on the client's event loop, which the synchronous functions run
  with ``client.sync`` (as distributed's own API does).

``python -m stemdot.dask --scheduler ADDRESS FILE --mask ... --out r.npy`` is the command
line. dask and distributed come from PyPI (``pip install "dask[distributed]"``).
"""

import asyncio
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
from distributed import WorkerPlugin, get_worker
from distributed.comm.addressing import get_address_host

import stemdot
from stemdot import _lib

__all__ = ["StemdotPlugin", "bootstrap", "apply_masks", "reduce", "dataset_info", "centre", "live", "bootstrap_async",
           "apply_masks_async", "reduce_async", "dataset_info_async", "live_async", "ClusterError", "RANGE_BYTES",
           "RANGE_SECONDS"]

#: The plugin's name on the workers (``dask_worker.plugins["stemdot"]``).
PLUGIN_NAME = "stemdot"

#: Frame bytes per stemdot worker in a node's first range of a job (and the least of its
#: later ranges, with the default range sizing): a range of a node with n workers holds
#: n × max(1, RANGE_BYTES // frame_bytes) frames (e.g. 1024 frames of 256×256 uint16 per
#: worker), a few tens of ms of work at page-cache speed, enough to measure the node's rate.
RANGE_BYTES = 128 << 20

#: Target seconds of work (in the node's applies, at its rate measured in the job) of one
#: range after a node's first, with the default range sizing (no ``range_frames``): long
#: enough that the per-task cost (about 10 ms: the scheduler's round trips, the engine's
#: start of an apply; see `make bench-dask`) is ~2 % of a range, short enough that a dead
#: worker's ranges (at most 2 in flight) are cheap to recompute. Toward the end of the scan
#: ranges shrink (guided self-scheduling: a node's range holds at most half its share, by
#: measured rate, of the frames not handed out yet), so that the nodes finish together.
RANGE_SECONDS = 0.5

#: Seconds between two looks at the scheduler's list of live workers during a run.
POLL_S = 0.5

#: Seconds before the job's data is sent again to a worker that refused it (its plugin
#: not ready, put_job failed, or client.run failed); doubled at each refusal in a row, up
#: to SEND_RETRY_MAX_S: each send relays the whole mask stack through the scheduler.
SEND_RETRY_S = 0.1
SEND_RETRY_MAX_S = 3.2

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
    the same CPUs without GPU workers). Per job (an apply_masks or reduce call) it keeps
    the data the client put (:meth:`put_job`) and the datasets its ranges opened, until
    the client ends the job (:meth:`end_job`). :meth:`teardown` cancels running applies
    and frees the datasets and the plans.
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
        self._datasets = OrderedDict()  # key → [Dataset, users, job id]
        self._runs = {}  # run handle → job id
        self._cancelled = set()  # job ids cancelled or ended
        self._jobs = {}  # job id → the job's data (its mask stack, shifts), see put_job
        self.lives = {}  # job id → this worker's share of a live stream (stemdot.dask.live)
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
    def dataset(self, path, options, job=None):
        """An open dataset of ``path`` with the ``stemdot.open`` options (a dict). With a
        job id, from the cache of that job's datasets (key: path, options and the file's
        size and modification time, so that a replaced file is opened again), which
        :meth:`end_job` closes: the ranges of one job share the open file, and no file
        stays open (or locked) after its job. Without a job, or for a job already ended,
        the dataset is opened for this use only."""
        try:
            st = os.stat(path)
        except OSError as e:
            raise stemdot.StemdotIOError(
                f"{path}: {e.strerror} (the file must be at this path on every Dask worker)",
                _lib.ERR_IO,
            ) from None
        with self._lock:
            cached = job is not None and job not in self._cancelled
        if not cached:
            opened = stemdot._open(path, options)
            try:
                yield opened
            finally:
                opened.close()
            return
        key = (job, os.path.abspath(path), tuple(sorted((k, repr(v)) for k, v in options.items())), st.st_size,
               st.st_mtime_ns)
        with self._lock:
            entry = self._datasets.get(key)
            if entry is not None:
                self._datasets.move_to_end(key)
                entry[1] += 1
        if entry is None:
            opened = stemdot._open(path, options)  # its warnings go to the client (dataset_info)
            with self._lock:
                entry = self._datasets.setdefault(key, [opened, 0, job])
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
        """Closes the unused datasets of ended jobs, and the least recently used ones
        beyond DATASET_CACHE (called with the lock held)."""
        unused = [k for k, (_, users, _) in self._datasets.items() if users == 0]
        ended = [k for k in unused if self._datasets[k][2] in self._cancelled]
        for k in ended + [k for k in unused if k not in ended][: max(0, len(self._datasets) - len(ended) - DATASET_CACHE)]:
            self._datasets.pop(k)[0].close()

    # -- jobs

    def put_job(self, job, data):
        """Keeps data (a dict: ``masks``, the mask stack; ``shifts``, None or the shifts
        of the whole scan) for the ranges of job, until :meth:`end_job`. The first range
        prepares the stack (:meth:`job_masks`)."""
        with self._lock:
            if job not in self._cancelled:
                self._jobs[job] = dict(data, prepared=None, prepare_lock=threading.Lock())

    def job_data(self, job):
        """The data of job put by the client; raises :class:`JobDataMissing` when this
        worker has none (it joined or restarted after the client sent it)."""
        with self._lock:
            data = self._jobs.get(job)
        if data is None:
            raise JobDataMissing(f"worker {self.worker.address} holds no data of job {job}")
        return data

    def job_masks(self, job):
        """The mask stack of job prepared in the library (stemdot._PreparedMasks: checked,
        in the form the engine applies it, with its counts), made by the first range of
        job on this worker (the others wait for it) and applied by every range of it, so
        that a range does not pass the dense stack to the library and the engine does not
        scan it again (22 ms of every range with the 128 masks of 256×256 of make
        bench-dask). It is freed when the job's data is dropped (:meth:`end_job`,
        teardown, data put again) and no range uses it any more. Raises
        :class:`JobDataMissing` as :meth:`job_data` does, and the library's error for
        weights it refuses (NaN or infinite: InvalidArgumentError)."""
        data = self.job_data(job)
        with data["prepare_lock"]:
            if data["prepared"] is None:
                data["prepared"] = stemdot._PreparedMasks(data["masks"])
                data["masks"] = None  # the library holds its own copy
            return data["prepared"]

    def end_job(self, job):
        """Ends job on this worker: cancels its applies still running, drops its data
        (its prepared mask stack is freed once no range uses it) and closes its datasets
        (those still in use when their range ends)."""
        self.cancel(job)
        with self._lock:
            self._jobs.pop(job, None)
            self._evict()
            run = self.lives.pop(job, None)
        if run is not None:
            run.close()

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
        """Applies masks (a stemdot._PreparedMasks, see :meth:`job_masks`) to frames
        [first, first+count) of path, moved by shifts (None, (dy, dx) for every frame, 2
        per frame of the range, or 2 per position of the whole scan: see
        stemdot.apply_masks); returns (values of shape (count, n_masks), this worker's
        address, its stemdot worker count, seconds spent in the apply, the run notes of
        the range's frames: _range_notes)."""
        node = self.wait_ready()
        started = time.perf_counter()
        out = np.empty((count, masks.shape[0]), dtype=dtype)
        with self._run(job) as run, self.dataset(path, dict(options, frames=(first, count)), job) as ds:
            masks.apply(ds, shifts, self.plan.handle, run, out)
            notes = _range_notes(ds)
        return out, node["address"], node["n_workers"], time.perf_counter() - started, notes

    def reduce(self, job, path, options, names, first, count):
        """Reduces frames [first, first+count) of path on this worker's CPU workers
        (``reduce_plan``, made at the first reduction: reductions run on CPU workers
        only): returns (a dict name → float64 array (sig_y, sig_x) of the reductions
        names, with the sum added for the mean and the std and the mean for the std, as
        :func:`_merge` needs them, and "frames": the number of frames reduced, those of
        the file (positions without a frame are left out, as stemdot.reduce leaves them
        out); this worker's address, its stemdot worker count, seconds spent, the run
        notes of the range's frames: _range_notes)."""
        node = self.wait_ready()
        with self._lock:
            if self.reduce_plan is None:
                self.reduce_plan = stemdot._Plan(self._cpus, None)
        started = time.perf_counter()
        names = stemdot._partials(names)
        with self._run(job) as run, self.dataset(path, dict(options, frames=(first, count)), job) as ds:
            out = {r: np.empty(ds.sig_shape, dtype=np.float64) for r in stemdot.REDUCTIONS if r in names}
            bufs = [out[r].ctypes.data_as(ctypes.POINTER(ctypes.c_double)) if r in out else None for r in stemdot.REDUCTIONS]
            stemdot._call(stemdot._LIB.stemdot_reduce, ds.handle, self.reduce_plan.handle, run, _lib.PROGRESS_FN(), None,
                          *bufs, ds.sig_shape[0] * ds.sig_shape[1])
            out["frames"] = ds.n_frames - sum(n for _, n in ds.positions_without_frame)
            notes = _range_notes(ds)
        return out, node["address"], node["n_workers"], time.perf_counter() - started, notes

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
            lives, self.lives = list(self.lives.values()), {}
        for run in lives:
            run.close()
        deadline = time.monotonic() + 30
        while self._runs and time.monotonic() < deadline:
            time.sleep(0.05)
        with self._lock:
            for ds, _, _ in self._datasets.values():
                with contextlib.suppress(stemdot.StemdotError):
                    ds.close()
            self._datasets.clear()
            self._jobs.clear()
            for plan in (self.plan, self.reduce_plan):
                if plan is not None:
                    plan.free()
            self.plan = self.reduce_plan = None
        if self._slot_file is not None:
            self._slot_file.close()  # releases the slot's lock
            self._slot_file = None


def _range_notes(ds):
    """The run notes of every frame of ds, a range's dataset just computed
    (stemdot.Dataset.run_notes), with the file they were read from ("path"): the client
    sums them by key over the ranges of the run (stemdot._sum_run_notes)."""
    return [dict(n, path=ds.path) for n in ds.run_notes()]


def _claim_slot(scheduler):
    """This worker's slot on its node: the first of slot-0.lock, slot-1.lock, ... in a
    directory per user and cluster that it can lock. The lock is held until the process
    ends (the kernel drops it when a worker dies), so a restarted worker takes the slot
    of the one it replaces. Returns (slot, open file holding the lock)."""
    cluster = re.sub(r"[^A-Za-z0-9_.-]+", "_", scheduler)
    directory = os.path.join(tempfile.gettempdir(), f"stemdot-dask-{os.getuid()}", cluster)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    for slot in itertools.count():
        f = stemdot._open_regular(os.path.join(directory, f"slot-{slot}.lock"), "stemdot.dask's slot lock file", "a+",
                                  os.O_RDWR | os.O_CREAT | os.O_APPEND)
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


class JobDataMissing(RuntimeError):
    """A range task reached a worker that holds no data of its job (the worker joined or
    was restarted at the same address after the client sent it): the client sends the
    data again and recomputes the range."""


def _range_task(job, path, options, first, count, dtype, shifts=None):
    """A range task: frames [first, first+count) of path, with the job's mask stack (and
    whole-scan shifts) that the client put on this worker (StemdotPlugin.put_job); shifts:
    those of the range's frames, when the job has them per frame. See
    StemdotPlugin.compute."""
    plugin = _plugin()
    plugin.wait_ready()
    data = plugin.job_data(job)
    if shifts is None:
        shifts = data["shifts"]
    return plugin.compute(job, path, options, plugin.job_masks(job), first, count, dtype, shifts)


def _reduce_task(job, path, options, names, first, count):
    """A reduction range task: frames [first, first+count) of path, see
    StemdotPlugin.reduce."""
    return _plugin().reduce(job, path, options, names, first, count)


def _info_task(path, options, job=None):
    """nav_shape, sig_shape, dtype name, frame count and warnings of path, opened on a
    worker (kept open for job's ranges, see StemdotPlugin.dataset); frame_positions: the
    scan position of each frame when they are not the whole scan (an ROI, a frames
    range), else None; positions_without_frame and calibration: as stemdot.Dataset's; size: the file's
    size in bytes on this worker. A stemdot error of opening it (a missing file, ...) is
    returned, {"error": exception}, not raised: it answers the client's question (which
    workers can read the file), and the worker would log a task that raises as "Compute
    Failed" with its traceback, on every worker asked, before the client's message."""
    plugin = _plugin()
    plugin.wait_ready()
    try:
        with plugin.dataset(path, options, job) as ds:
            part = int(np.prod(ds.scan_shape)) != ds.n_frames
            return {"nav_shape": ds.nav_shape, "sig_shape": ds.sig_shape, "dtype": ds.dtype.name, "n_frames": ds.n_frames,
                    "format": ds.format, "warnings": ds.warnings, "scan_shape": ds.scan_shape, "positions": ds.positions,
                    "frame_positions": ds._scan_positions() if part else None,
                    "positions_without_frame": ds.positions_without_frame, "size": _file_size(path),
                    "calibration": ds.calibration}
    except stemdot.StemdotError as e:
        return {"error": e}


def _file_size(path, dask_worker=None):
    """The size in bytes of path on this worker, None when it cannot be read."""
    try:
        return os.stat(path).st_size
    except OSError:
        return None


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


class _SparseMasks:
    """A mask stack as sent to the workers when at most a quarter of its values are
    non-zero (see _pack_masks): shape, dtype, the flat indices of the non-zero values
    (those whose bits are not all 0: -0.0 and NaN are kept) and the values."""

    def __init__(self, shape, dtype, indices, values):
        self.shape, self.dtype, self.indices, self.values = shape, dtype, indices, values

    def dense(self):
        out = np.zeros(self.shape, dtype=self.dtype)
        out.reshape(-1)[self.indices] = self.values
        return out


def _pack_masks(masks):
    """masks (a C-contiguous float array) as the client sends it to each worker: a
    _SparseMasks when at most a quarter of its values are non-zero, else masks. A job's
    data travels to every worker through the scheduler (client.run); the stacks of
    typical jobs (virtual detectors, the rings of a radial profile) are mostly zeros, and
    a dense 128 × 256 × 256 float32 stack (32 MiB) took ~0.3 s to reach 2 workers."""
    flat = masks.reshape(-1)
    nonzero = np.flatnonzero(flat.view(f"u{flat.itemsize}"))  # bit patterns: -0.0 is kept
    if nonzero.size > flat.size // 4:
        return masks
    indices = nonzero.astype(np.int32 if flat.size < 2**31 else np.int64)
    return _SparseMasks(masks.shape, masks.dtype, indices, flat[nonzero])


async def _put_job(job, data, dask_worker=None):
    """Keeps job's data on this worker's plugin (see StemdotPlugin.put_job); a mask
    stack sent as _SparseMasks is made dense again, off the event loop."""
    plugin = dask_worker.plugins.get(PLUGIN_NAME)
    if plugin is None or not hasattr(plugin, "ready"):
        raise RuntimeError(f"worker {dask_worker.address} has no stemdot plugin yet")
    if isinstance(data.get("masks"), _SparseMasks):
        masks = await asyncio.get_running_loop().run_in_executor(None, data["masks"].dense)
        data = dict(data, masks=masks)
    plugin.put_job(job, data)


async def _end_job(job, dask_worker=None):
    """Ends job on this worker (StemdotPlugin.end_job), off the event loop."""
    plugin = dask_worker.plugins.get(PLUGIN_NAME)
    if plugin is not None and hasattr(plugin, "ready"):
        await asyncio.get_running_loop().run_in_executor(None, plugin.end_job, job)


def _ping(dask_worker=None):
    return dask_worker.address


# ------------------------------------------------------------------- client side


#: Seconds the client waits for one answer of the scheduler (and, elsewhere, for workers
#: that may be stopped) before it asks again.
SCHEDULER_TIMEOUT_S = 5

#: Seconds the client goes on asking a scheduler that does not answer while its
#: connection stands before it calls it gone: a scheduler relaying a large mask stack to
#: the workers (client.run goes through it) is busy for seconds; a scheduler whose
#: process died closes the connection, which fails the run at once.
SCHEDULER_ANSWER_S = 60

#: The hang timeout's floor, and the factor on a range's expected time (see apply_masks).
HANG_FLOOR_S = 30
HANG_FACTOR = 10

#: The hang timeout of a range before any range of the job has finished (no rate known).
HANG_FIRST_S = 120

#: Frames of a range per GPU worker of a node, in units of the frames per CPU worker
#: (range_frames): a GPU worker computes a range several times faster than a CPU worker,
#: and its per-range cost (the transfer of the mask stack, the start of a kernel) is
#: higher; at the default range_frames, 8 × RANGE_BYTES = 1 GiB of frames per GPU.
GPU_RANGE_FACTOR = 8


def _workers_now(client):
    """Address → scheduler info of every worker, asked of the scheduler now (for a
    synchronous client; see _scheduler_workers). Not ``client.scheduler_info()``: that
    returns the client's cache, which the client's periodic update (distributed 2026.x)
    refills without the workers, so that, read just after, it can list none."""
    return client.sync(_scheduler_workers, client)


def _live_workers(client):
    """Address → scheduler info of the running workers (_workers_now)."""
    return {a: w for a, w in _workers_now(client).items() if w.get("status", "running") == "running"}


async def _scheduler_workers(client):
    """Address → scheduler info of every worker the scheduler knows (any status); raises
    ClusterError at once when the client's connection to the scheduler is lost, and after
    SCHEDULER_ANSWER_S when the scheduler does not answer (asked every
    SCHEDULER_TIMEOUT_S)."""
    address = getattr(client.scheduler, "address", None) or "?"
    deadline = time.monotonic() + SCHEDULER_ANSWER_S
    while True:
        if client.status not in ("running", "newly-created"):
            raise ClusterError(f"the Dask scheduler at {address} is gone (the client lost its connection to it; client "
                               f"status {client.status!r}): restart the scheduler and its workers, and run again")
        try:
            identity = await _within(client.scheduler.identity(n_workers=-1), SCHEDULER_TIMEOUT_S)
            return identity["workers"]
        except asyncio.TimeoutError:  # before OSError: since Python 3.11 TimeoutError is one
            if time.monotonic() >= deadline:
                raise ClusterError(f"the Dask scheduler at {address} is gone: no answer within {SCHEDULER_ANSWER_S:g} "
                                   "s (a hung scheduler, or a network cut): restart the scheduler and its workers, and "
                                   "run again") from None
        except OSError as e:
            raise ClusterError(f"the Dask scheduler at {address} is gone ({type(e).__name__}: {e}): restart the "
                               "scheduler and its workers, and run again") from None


async def _within(awaitable, seconds):
    """The result of awaitable, or asyncio.TimeoutError after seconds (it is then
    cancelled). As asyncio.wait_for, except that a cancel of the caller that arrives as
    awaitable completes is raised: wait_for before Python 3.12 returned the result and
    dropped the cancel (a job cancelled during its set-up then ran to its end)."""
    task = asyncio.ensure_future(awaitable)
    try:
        done, _ = await asyncio.wait({task}, timeout=seconds)
    except BaseException:
        task.cancel()
        raise
    if not done:
        task.cancel()
        raise asyncio.TimeoutError
    return task.result()


async def _live_async(client):
    """_live_workers, on the client's event loop."""
    workers = await _scheduler_workers(client)
    return {a: w for a, w in workers.items() if w.get("status", "running") == "running"}


class ClusterError(RuntimeError):
    """The Dask cluster cannot run or finish the job: it has no running worker (none
    connected, or all paused because their memory is above Dask's pause threshold, for
    longer than the ``timeout``), the workers of the run left the cluster during it and
    none came back, a range was lost ``max_attempts`` times, no worker can read the file
    (the nodes' errors are named), or the scheduler is gone. The message names the
    workers, their memory_limit, and what helps."""


async def _cluster_error(client, what, started=None):
    """A ClusterError: what went wrong, the workers that left since the run started
    (started: the scheduler's workers then, address → info) or are paused, and why this
    happens and what helps."""
    try:
        workers = await _scheduler_workers(client)
    except ClusterError as e:
        return ClusterError(f"{what}; {e}")
    started = started or {}
    gone = sorted(set(started) - set(workers))
    paused = sorted(a for a, w in workers.items() if w.get("status") == "paused")
    limits = sorted({w["memory_limit"] for w in [*workers.values(), *started.values()] if w.get("memory_limit")})
    limit = " or ".join(map(format_bytes, limits)) if limits else "none"
    pause, terminate = (dask.config.get(f"distributed.worker.memory.{k}") for k in ("pause", "terminate"))
    facts = [what]
    if gone:
        facts.append(f"{len(gone)} of the {len(started)} Dask workers of the run left the cluster ({', '.join(gone)})")
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
    return ClusterError("; ".join(facts) + "." + why + " Give each worker the memory it needs (the mask stack and its "
                        "ranges' results): dask worker --memory-limit, LocalCluster(memory_limit=...); or use fewer or "
                        "smaller masks; then run again")


def _synchronous(client, name, twin=None):
    """Refuses a call of the synchronous function name from the event loop of an
    asynchronous client, whose client.sync would hand back a coroutine instead of the
    result: raises InvalidArgumentError naming the twin to await (default name_async)."""
    if client.asynchronous:
        twin = twin or f"await stemdot.dask.{name}_async(client, ...)"
        raise stemdot.InvalidArgumentError(
            f"stemdot.dask.{name}: the client is asynchronous (Client(asynchronous=True)): {twin} instead",
            _lib.ERR_INVALID_ARGUMENT)


def _sync(client, coroutine_function, *args, **kwargs):
    """Runs coroutine_function(*args, **kwargs) on client's event loop (client.sync, as
    distributed's own synchronous API does) and returns its result; the warnings it
    collects (kwargs["notes"], a list) are issued here, in the caller's thread, also when
    it fails. Ctrl-C (KeyboardInterrupt) cancels the coroutine, which cancels the job
    (kwargs["job"]) everywhere."""
    notes = kwargs.setdefault("notes", [])
    try:
        return client.sync(coroutine_function, *args, **kwargs)
    except KeyboardInterrupt:
        if kwargs.get("job") is not None:
            _cancel_everywhere(client, kwargs["job"])
        raise
    finally:
        for note in notes:
            _warn(note, stacklevel=4)


def _issue(notes):
    """Issues the warnings collected by an async call (see _sync) in the caller's task."""
    for note in notes:
        _warn(note, stacklevel=4)


def _warn(note, stacklevel):
    """Issues a note collected by a call: a UserWarning, or a warning of its own category
    (stemdot.RunNoteWarning), from the caller's caller at stacklevel."""
    category = type(note) if isinstance(note, Warning) else UserWarning
    warnings.warn(stemdot._printable(str(note)), category, stacklevel=stacklevel)


def bootstrap(client, plugin=None, timeout=120):
    """Registers ``plugin`` (default ``StemdotPlugin()``) on every worker of ``client``'s
    cluster and returns when every worker has finished its set-up: a dict worker address
    → node description (see :class:`StemdotPlugin`). Safe to call again and from several
    clients at once: the plugin is registered once (idempotent), and the workers keep
    their set-up (the same plan object). Workers that join later, or are restarted by
    their Nanny, are set up by Dask on arrival. A worker that dies meanwhile is left
    out (its connection error is not the run's). Raises RuntimeError naming the worker
    whose set-up failed, TimeoutError after ``timeout`` seconds; :func:`bootstrap_async`
    is its twin for ``Client(asynchronous=True)``.
    """
    _synchronous(client, "bootstrap")
    return client.sync(_bootstrap, client, plugin, timeout)


async def bootstrap_async(client, plugin=None, timeout=120):
    """:func:`bootstrap` for an asynchronous client: ``await bootstrap_async(client)``."""
    return await _bootstrap(client, plugin, timeout)


async def _bootstrap(client, plugin, timeout, grace=None):
    """bootstrap on the client's loop. Each worker is asked on its own, so that one that
    died (a connection error: it is left out once the scheduler drops it, and the others
    asked again) or hangs does not hold up the rest. grace: None, every worker is waited
    for up to timeout; else, once one worker is ready, the others get grace more seconds
    (a run sets up the late ones when they answer, see _probe)."""
    await client.register_plugin(plugin if plugin is not None else StemdotPlugin(), name=PLUGIN_NAME)
    deadline = time.monotonic() + timeout
    nodes, asking = {}, {}

    async def ask(address, left, delay):
        await asyncio.sleep(delay)
        answers = await client.run(_node_ready, timeout=max(1.0, left), workers=[address], on_error="return")
        return answers.get(address, OSError(f"worker {address} did not answer"))

    while True:
        workers = await _scheduler_workers(client)
        for address in list(asking):
            if address not in workers:
                asking.pop(address).cancel()
        todo = [a for a, w in workers.items() if a not in nodes and w.get("status") not in _LEAVING]
        if not todo:
            return nodes
        left = deadline - time.monotonic()
        if left <= 0:
            for task in asking.values():
                task.cancel()
            if grace is not None and nodes:
                return nodes
            raise TimeoutError(f"stemdot set-up of the workers {', '.join(todo)} did not finish within {timeout} s")
        for address in todo:
            if address not in asking:
                asking[address] = asyncio.ensure_future(ask(address, left, 0))
        await asyncio.wait([asking[a] for a in todo], timeout=min(left, POLL_S), return_when=asyncio.FIRST_COMPLETED)
        for address in todo:
            task = asking[address]
            if not task.done():
                continue
            answer = task.exception() or task.result()
            if not isinstance(answer, BaseException):
                del asking[address]
                nodes[address] = answer
                if grace is not None:
                    deadline = min(deadline, time.monotonic() + grace)
            elif isinstance(answer, OSError) and not isinstance(answer, TimeoutError):  # a worker that died
                asking[address] = asyncio.ensure_future(ask(address, left, 0.2))
            else:
                for task in asking.values():
                    task.cancel()
                raise answer


#: Scheduler statuses of workers that are leaving the cluster.
_LEAVING = ("closing", "closing_gracefully", "closed")


def dataset_info(client, path, *, timeout=120, **open_options):
    """Opens ``path`` on a worker (as :func:`stemdot.open` with ``open_options``) and
    returns a dict with ``nav_shape``, ``sig_shape``, ``dtype`` (numpy name),
    ``n_frames``, ``format`` (as read: "mib", "hdf5", ...), ``warnings`` (the dataset's,
    see ``stemdot.Dataset.warnings``), ``scan_shape``, ``positions`` (a region of
    interest's selected scan positions, else None) and ``positions_without_frame`` (see
    ``stemdot.Dataset``), ``size``
    (the file's bytes on that worker). The client needs no access to the file; a
    relative ``path``, or ``roi`` NPY file, that exists on the client is made absolute
    there (:func:`_client_path`). A worker whose node cannot read the file (see
    :func:`apply_masks`, node-local errors) is warned about and another is asked.
    Raises :class:`ClusterError` when no worker has been running for ``timeout`` seconds
    (none connected, or all paused), or the nodes' error when none can read the file."""
    _synchronous(client, "dataset_info")
    return _sync(client, _dataset_info_notes, client, _client_path(path), _client_options(open_options), timeout)


async def dataset_info_async(client, path, *, timeout=120, **open_options):
    """:func:`dataset_info` for an asynchronous client."""
    notes = []
    try:
        return await _dataset_info_notes(client, _client_path(path), _client_options(open_options), timeout, notes=notes)
    finally:
        _issue(notes)


async def _dataset_info_notes(client, path, options, timeout, notes):
    excluded = {}
    info = await _dataset_info(client, path, options, timeout, excluded=excluded)
    notes.extend(_exclusion_notes(path, excluded))
    return info


async def _dataset_info(client, path, options, timeout, job=None, excluded=None, nodes=None):
    """dataset_info on the client's loop, asking one worker at a time (of nodes, the
    workers set up, when given and live: not one that hangs); excluded: address → error of the
    workers whose node cannot read the file (filled here; their warnings are the
    caller's to issue, see _exclusion_notes)."""
    excluded = {} if excluded is None else excluded
    stalled = None  # since when no worker runs
    while True:
        live = await _live_async(client)
        candidates = sorted(a for a in live if a not in excluded)
        readers = [a for a in candidates if nodes is None or a in nodes] or candidates
        if not readers:
            if live:
                raise _unreadable(path, excluded)
            if stalled is None:
                stalled = time.monotonic()
            elif time.monotonic() - stalled > timeout:
                raise await _cluster_error(client, f"no Dask worker has run for {timeout:g} s to open {path}")
            await asyncio.sleep(POLL_S)
            continue
        stalled = None
        address = readers[0]
        future = client.submit(_info_task, path, options, job, workers=[address], allow_other_workers=False, pure=False,
                               key=f"stemdot-info-{uuid.uuid4().hex}")
        try:
            while not future.done():
                await _wait_any([future], POLL_S)
                if not future.done() and address not in await _live_async(client):
                    break  # its worker left: ask another
        finally:
            if not future.done():
                await client.cancel([future])
        if future.status == "finished":
            info = await future.result()
            if "error" not in info:
                return info
            exc = info["error"]  # the worker cannot open the file (see _info_task)
        elif future.status == "error":
            exc = await future.exception()
            if _worker_lost(exc):
                continue
        else:
            continue
        if not await _node_local(client, exc, address, path, None, live):
            raise exc
        excluded[address] = _Unreadable(live[address].get("host"), exc)


class _Unreadable:
    """The error of a worker whose node cannot read the file (a node-local error)."""

    def __init__(self, host, error):
        self.host, self.error = host, error

    def __str__(self):
        return f"{type(self.error).__name__}: {self.error}"


async def _node_local(client, exc, address, path, size, live):
    """Whether exc, raised by a task on the worker at address, is its node's own (the
    file can be read elsewhere), not the data's. Node-local are the I/O errors
    (stemdot.StemdotIOError: a missing file, no permission, a failed or short read) and
    format or shape errors of a file whose size on that node differs from size (the
    size where the dataset was opened first; None: from the sizes of the file on the
    other live workers): a truncated or stale copy. A format error of a file of the
    same size everywhere is the data's own."""
    if isinstance(exc, stemdot.StemdotIOError):
        return True
    if not isinstance(exc, (stemdot.FormatError, stemdot.ShapeError)):
        return False
    asking = {a: asyncio.ensure_future(client.run(_file_size, path, workers=[a], on_error="return")) for a in live}
    await asyncio.wait(asking.values(), timeout=SCHEDULER_TIMEOUT_S)  # a stopped worker does not answer
    sizes = {}
    for a, t in asking.items():
        if t.done() and not t.cancelled() and t.exception() is None:
            sizes.update(t.result())
        t.cancel()
    here = sizes.get(address)
    if size is not None:
        return here != size
    return any(isinstance(s, int) and s != here for a, s in sizes.items() if a != address)


def _exclusion_notes(path, excluded):
    return [f"stemdot: worker {a} (node {u.host}) cannot read {path}, its ranges went to other workers: {u}"
            for a, u in sorted(excluded.items())]


def _unreadable(path, excluded):
    """The error when no live worker can read path: of the class of the nodes' errors
    when they are all of one class (e.g. StemdotIOError for a file missing everywhere),
    else a ClusterError; the message names each node's error."""
    by_error = {}  # the same error on several workers is named once
    for a, u in sorted(excluded.items()):
        by_error.setdefault(str(u.error), []).append(f"{a} (node {u.host})")
    errors = "; ".join(f"{e} (on worker{'s' if len(ws) > 1 else ''} {', '.join(ws)})" for e, ws in by_error.items())
    what = f"no live Dask worker can read {path}: {errors}"
    kinds = {type(u.error) for u in excluded.values()}
    if len(kinds) == 1:
        kind = kinds.pop()
        if issubclass(kind, stemdot.StemdotError):
            return kind(what, next(iter(excluded.values())).error.code)
    return ClusterError(what)


async def _wait_any(futures, timeout, tasks=()):
    """Waits until one of the Dask futures or asyncio tasks is done, or timeout seconds."""
    waiters = [asyncio.ensure_future(f._state.wait()) for f in futures]
    if not waiters and not tasks:
        await asyncio.sleep(timeout)
        return
    try:
        await asyncio.wait(waiters + list(tasks), timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()


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


def _range_size(node, per_worker, gpus=True):
    """Frames of one range for node (a node description, see StemdotPlugin): its CPU
    workers × per_worker + (gpus) its GPU workers × GPU_RANGE_FACTOR × per_worker, at
    least per_worker. Without gpus (reductions, which run on CPU workers only): every
    worker of its plan × per_worker."""
    workers = node["plan"]["workers"]
    n_gpu = sum("gpu" in w for w in workers) if gpus else 0
    return max(per_worker, (len(workers) - n_gpu) * per_worker + n_gpu * GPU_RANGE_FACTOR * per_worker)


def _hang_limit(count, rate, hang_timeout):
    """Seconds a range of count frames may stay in flight on one worker before it is
    taken back: hang_timeout when given, else max(HANG_FLOOR_S, HANG_FACTOR × count /
    rate) with rate the frames per second measured on that worker (or on the whole
    cluster) in this job, HANG_FIRST_S before any range finished."""
    if hang_timeout is not None:
        return float(hang_timeout)
    if not rate:
        return float(HANG_FIRST_S)
    return max(float(HANG_FLOOR_S), HANG_FACTOR * count / rate)


class _Ledger:
    """The client's record of the scan's frame ranges: pending (not handed out), in
    flight (frames of a submitted task, by future) and done. A range is in exactly one of
    them: one whose worker died, hung or cannot read the file goes back to pending (its
    task cancelled, so that a late result of it is never seen), to be cut again for the
    next worker that asks."""

    def __init__(self, n_frames):
        self.pending = [(0, n_frames)]  # [first, end) intervals, in order
        self.flight = {}  # future → _Flight
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

    def give_back(self, future):
        """Takes future's range out of flight, back to pending; returns its record."""
        f = self.flight.pop(future)
        self.pending.append((f.first, f.first + f.count))
        self.pending.sort()
        return f

    def busy(self, address):
        return sum(1 for f in self.flight.values() if f.address == address)


class _Flight:
    """A range in flight: its frames, worker, attempt, and since when it may run there
    (its submission, or the end of the range before it on that worker)."""

    def __init__(self, first, count, address, attempt, since):
        self.first, self.count, self.address, self.attempt, self.since = first, count, address, attempt, since

    def record(self):
        return self.first, self.count, self.address, self.attempt


async def _prepare(client, job, path, open_options, range_frames, timeout, excluded):
    """The set-up of a job over the frames of path: the nodes (:func:`bootstrap`), the
    scheduler's workers the run starts with, the dataset's info (opened for job on a
    worker that can read it; its warnings are the caller's), the open options without
    frames, the first frame of the frames option (the ranges are cut from its span: each
    range task opens frames (first + range's first, range's count) of the whole scan)
    and the frames per stemdot worker of a range."""
    nodes = await _bootstrap(client, None, timeout, grace=SCHEDULER_TIMEOUT_S)
    if not nodes:
        raise await _cluster_error(client, "the cluster has no Dask worker")
    workers = await _scheduler_workers(client)  # those the run starts with
    info = await _dataset_info(client, path, open_options, timeout, job=job, excluded=excluded, nodes=nodes)
    open_options = dict(open_options)
    frames = open_options.pop("frames", None)
    first_frame = _first_frame(frames) if frames is not None else 0
    frame_bytes = int(np.prod(info["sig_shape"])) * np.dtype(info["dtype"]).itemsize
    per_worker = int(range_frames) if range_frames else max(1, RANGE_BYTES // frame_bytes)
    if per_worker < 1:
        raise ValueError(f"range_frames={range_frames}: want at least 1 frame per worker")
    return nodes, workers, info, open_options, first_frame, per_worker


def _guided_size(base, rate, rates, left, target, multiple=1):
    """Frames of a node's next range with the default range sizing: base (its first
    range's size, see _range_size) until its rate is measured; then target seconds at its
    rate, but at most half its share of the left frames (not handed out yet) by rate among
    rates (those of the nodes that take ranges; one not measured yet counts as their mean),
    rounded down to a multiple of multiple (the node's stemdot workers), and never below
    base. rate: frames per second, None before its first range ended."""
    if not rate:
        return base
    known = [r for r in rates if r]
    total = sum(r or sum(known) / len(known) for r in rates) or rate
    size = min(int(rate * target), int(-(-left * rate // (2 * total))))
    return max(base, size // multiple * multiple)


async def _run_ranges(client, job, path, n_frames, nodes, workers, size_of, task, store, data, *, progress, resources,
                      prefer, max_attempts, timeout, hang_timeout, report, started, excluded, size, suspects, run_notes,
                      range_seconds=None):
    """Runs job over the frames [0, n_frames) of path as range tasks on the workers of
    the cluster (see :func:`apply_masks`), as a coroutine on the client's event loop: a
    range for a node holds ``size_of(nodes[address])`` frames, or, with range_seconds,
    that many at first and then about range_seconds of its measured work (see
    _guided_size); ``task(first, count)``
    gives the function and arguments of its task, whose result is (values, worker
    address, stemdot workers, seconds, run notes), and ``store(first, count, values)``
    takes the values of each range computed; run_notes (a list) gets the run notes of
    each range stored (a range computed twice counts once: only its stored result's).
    data (None, or a dict for _put_job, its mask stack
    packed by _pack_masks) is sent to each worker before its first range of the job. A
    range whose worker died,
    hung (see _hang_limit) or cannot read the file (excluded: address → _Unreadable, see
    _node_local; size: the file's bytes where it was opened first) is cut again for the
    other workers; any other error of a range cancels the job everywhere and is raised.
    suspects: address → asyncio task pinging a worker whose range hung (filled here)."""
    ledger = _Ledger(n_frames)
    record = {"ranges": [], "lost": [], "hung": [], "nodes": nodes}
    preferred = set(prefer or ())
    notify = _progress(progress, n_frames)
    probing = {}  # address → (future, asyncio task) of its readiness (a worker that joined or restarted), see _probe
    holding = set()  # addresses holding the job's data
    sending = {}  # address → asyncio task sending it the job's data
    refused = {}  # address → sends of the job's data it refused in a row
    gathering = {}  # future → asyncio task fetching the values of its finished range
    done_by = {}  # address → [frames, seconds in the apply] of the ranges it computed
    offered = set()  # the workers set up for the job that ranges were offered to (with the resources, not excluded)
    idle_since = None  # since when no range is in flight

    def depth(address, worker):
        return 2 if not preferred or address in preferred or worker.get("host") in preferred else 1

    def eligible(worker):
        have = worker.get("resources") or {}
        return all(have.get(r, 0) >= n for r, n in (resources or {}).items())

    def rate(address):
        frames, seconds = done_by.get(address) or [sum(d[0] for d in done_by.values()), sum(d[1] for d in done_by.values())]
        return frames / seconds if seconds > 0 else None

    async def cancel(futures):
        if futures:
            with contextlib.suppress(Exception):
                await client.cancel(list(futures))

    async def send(address):
        """Puts the job's data on the worker at address; whether it took it."""
        try:
            answers = await client.run(_put_job, job, data, workers=[address], on_error="return")
        except Exception:  # client.run itself failed (the scheduler's connection): as a refusal
            answers = {}
        if address in answers and not isinstance(answers[address], BaseException):
            refused.pop(address, None)
            return True
        # The loop, woken by this send's end, sends again: not at once, and less often while
        # the worker keeps refusing (each send relays the whole stack through the scheduler).
        refused[address] = refused.get(address, 0) + 1
        await asyncio.sleep(min(SEND_RETRY_S * 2 ** (refused[address] - 1), SEND_RETRY_MAX_S))
        return False

    def ready_for(address):
        """Whether the worker at address holds the job's data; starts sending it (in a
        task: a stopped worker must not stall the loop) when it does not."""
        if data is None or address in holding:
            return True
        if address not in sending:
            sending[address] = asyncio.ensure_future(send(address))
        return False

    def submit(address, first, count):
        attempt = ledger.attempts.get(first, 0) + 1
        ledger.attempts[first] = attempt
        future = client.submit(
            *task(first, count),
            key=f"stemdot-range-{job}-{first}-{count}-{attempt}",
            # Sized for this worker, so it runs there only; if the worker leaves the
            # cluster, hangs or cannot read the file, the ledger cancels the task and cuts
            # the range again for the other workers (below): no task outlives its
            # worker's address, and the scheduler never reruns a range on a node it was
            # not sized for.
            workers=[address],
            allow_other_workers=False,
            resources=resources,
            pure=False,
        )
        ledger.flight[future] = _Flight(first, count, address, attempt, time.monotonic())

    def range_for(address, live):
        base = size_of(nodes[address])
        if range_seconds is None:
            return base
        own = done_by.get(address)
        takers = [a for a, w in live.items() if a in nodes and a not in excluded and a not in suspects and eligible(w)]
        rates = [d[0] / d[1] if (d := done_by.get(a)) and d[1] > 0 else None for a in takers]
        left = sum(end - first for first, end in ledger.pending)
        return _guided_size(base, own[0] / own[1] if own and own[1] > 0 else None, rates, left, range_seconds,
                            nodes[address]["n_workers"])

    async def ping(address, delay):
        await asyncio.sleep(delay)
        await client.run(_ping, workers=[address])

    live, polled = {}, -POLL_S
    try:
        while ledger.done < n_frames:
            now = time.monotonic()
            if now - polled >= POLL_S:
                live, polled = await _live_async(client), now
            gone = [f for f, fl in ledger.flight.items() if fl.address not in live]
            for future in gone:  # its worker died or is retiring: the ledger recomputes the range
                record["lost"].append(ledger.give_back(future).record())
            hung = [f for f, fl in ledger.flight.items() if now - fl.since > _hang_limit(fl.count, rate(fl.address), hang_timeout)]
            for future in hung:  # taken back; no new range there until the worker answers again
                fl = ledger.give_back(future)
                record["hung"].append(fl.record())
                if fl.address not in suspects:
                    suspects[fl.address] = asyncio.ensure_future(ping(fl.address, 0))
            await cancel(gone + hung)
            for address, pinger in list(suspects.items()):
                if pinger.done():
                    if pinger.cancelled() or pinger.exception() is None or address not in live:
                        del suspects[address]  # it answers again (or left)
                    else:
                        suspects[address] = asyncio.ensure_future(ping(address, POLL_S))
            for address in [a for a in probing if a not in live]:
                future, settle = probing.pop(address)
                settle.cancel()
                await cancel([future])
            for address, sender in list(sending.items()):
                if sender.done():
                    del sending[address]
                    if not sender.cancelled() and sender.exception() is None and sender.result():
                        holding.add(address)
            holding &= set(live)
            for address, worker in sorted(live.items(), key=lambda aw: depth(*aw), reverse=True):
                if address in excluded or address in suspects or not eligible(worker):
                    continue
                if address not in nodes:
                    _probe(client, address, probing, nodes, timeout)
                    continue
                offered.add(address)
                while ledger.busy(address) < depth(address, worker):
                    if not ledger.pending or not ready_for(address):
                        break
                    taken = ledger.take(range_for(address, live))
                    if ledger.attempts.get(taken[0], 0) >= max_attempts:
                        raise await _cluster_error(
                            client, f"frames [{taken[0]}, {taken[0] + taken[1]}) of {path} were lost {max_attempts} times "
                            "with their workers (raise max_attempts to try again)", workers)
                    submit(address, *taken)
            if not ledger.flight:
                if live and not any(eligible(w) for w in live.values()):
                    raise ClusterError(f"no running worker of the cluster has the resources {resources}: start workers "
                                       "that declare them (dask worker SCHEDULER --resources NAME=N), or drop resources=")
                if live and all(a in excluded for a, w in live.items() if eligible(w)):
                    raise _unreadable(path, {a: u for a, u in excluded.items() if a in live})
                # No worker can take a range now: all died (their Nannies may restart
                # them), are paused, hung, or not set up yet. Wait up to timeout.
                idle_since = idle_since or now
                if now - idle_since > timeout:
                    waiting = sorted(set(live) - set(excluded))
                    what = (f"no Dask worker took a range for {timeout:g} s (" + (
                        f"the running ones, {', '.join(waiting)}, hang or are not set up: {len(suspects)} did not "
                        "answer" if waiting else "none is running") + ")")
                    raise await _cluster_error(client, what, workers)
                # Waiting for a worker's set-up, the job's data to land, or an answer.
                await _wait_any((), 0.1, [*sending.values(), *(t for _, t in probing.values())])
                continue
            idle_since = None
            # Also woken by a send of the job's data that lands: that worker takes its
            # first range at once, not when some other range ends.
            await _wait_any([f for f in ledger.flight if f not in gathering], POLL_S,
                            [*gathering.values(), *sending.values()])
            for future in [f for f in ledger.flight if f.done() and f not in gathering]:
                fl = ledger.flight.get(future)
                if fl is None:  # taken back above with its worker's other ranges (a node-local error)
                    continue
                if future.status == "finished":
                    # Fetched in a task: a fetch from a worker that dies meanwhile waits
                    # for the range's recomputation, which the ledger does (above).
                    gathering[future] = asyncio.ensure_future(future.result())
                    continue
                exc = None if future.cancelled() else await future.exception()
                if exc is None or _worker_lost(exc):
                    record["lost"].append(ledger.give_back(future).record())
                elif isinstance(exc, JobDataMissing):
                    holding.discard(fl.address)
                    ledger.give_back(future)
                elif await _node_local(client, exc, fl.address, path, size, live):
                    excluded[fl.address] = _Unreadable(live.get(fl.address, {}).get("host"), exc)
                    ledger.attempts[fl.first] -= 1  # not the range's fault
                    for f in [f for f, o in ledger.flight.items() if o.address == fl.address]:
                        ledger.give_back(f)
                        await cancel([f])
                else:
                    raise exc
            for future, fetch in [(f, t) for f, t in gathering.items() if t.done()]:
                del gathering[future]
                if future not in ledger.flight:  # taken back meanwhile: its late values are not used
                    continue
                if fetch.cancelled() or fetch.exception() is not None:
                    record["lost"].append(ledger.give_back(future).record())
                    continue
                values, ran_on, _, seconds, notes = fetch.result()
                fl = ledger.flight.pop(future)
                store(fl.first, fl.count, values)
                run_notes.extend(notes)
                ledger.done += fl.count
                record["ranges"].append((fl.first, fl.count, ran_on, fl.attempt, seconds))
                frames_seconds = done_by.setdefault(fl.address, [0, 0.0])
                frames_seconds[0] += fl.count
                frames_seconds[1] += seconds
                now = time.monotonic()
                for other in ledger.flight.values():
                    if other.address == fl.address:
                        other.since = max(other.since, now)
                notify(ledger.done)
    except BaseException:
        await cancel(ledger.flight)
        raise
    finally:
        notify(None)
        for task in [*suspects.values(), *sending.values(), *gathering.values(), *(s for _, s in probing.values())]:
            task.cancel()
        await cancel([f for f, _ in probing.values()])
        if report is not None:
            record["seconds"] = time.monotonic() - started
            record["frames"] = {a: d[0] for a, d in done_by.items()}
            record["rates"] = {a: d[0] / d[1] if d[1] > 0 else None for a, d in done_by.items()}
            record["excluded"] = {a: str(u) for a, u in excluded.items()}
            record["offered"] = sorted(offered)
            report.update(record)


async def _end_everywhere(client, job, nodes, suspects, timeout=10):
    """Ends job on every worker (StemdotPlugin.end_job: its applies cancelled, its data
    dropped, its files closed): waits up to timeout seconds for the nodes of the run that
    answer; for the others (suspects: workers that did not answer during the run, and
    workers never set up for it) the message is left on its way, so that a stopped
    worker ends the job when it wakes."""
    with contextlib.suppress(Exception):
        workers = await _scheduler_workers(client)
        answering = [a for a in workers if a in nodes and a not in suspects]
        late = [a for a in workers if a not in answering]
        if late:
            _background(client.run(_end_job, job, workers=late, on_error="ignore"))
        if answering:
            await asyncio.wait([_background(client.run(_end_job, job, workers=answering, on_error="ignore"))],
                               timeout=timeout)


def _cancel_everywhere(client, job, timeout=10):
    """Tells every worker to stop job's applies, from a thread other than the client's
    loop (after Ctrl-C); gives up after timeout seconds (a worker that is dying may not
    answer), since the caller is already failing or interrupted."""

    def run():
        with contextlib.suppress(Exception):
            client.run(_end_job, job, on_error="ignore")

    thread = threading.Thread(target=run, name="stemdot-cancel", daemon=True)
    thread.start()
    thread.join(timeout)


def _worker_lost(exc):
    """Whether a range failed because its worker died (not because of its data)."""
    from distributed.scheduler import KilledWorker

    return isinstance(exc, (KilledWorker, OSError)) and not isinstance(exc, stemdot.StemdotError)


def _probe(client, address, probing, nodes, timeout):
    """Starts (once) waiting for the set-up of a worker that joined or was restarted,
    without blocking the client's loop; its node description lands in ``nodes``.
    probing: address → (future of its probe task, asyncio task awaiting it)."""
    if address in probing:
        return
    future = client.submit(_probe_task, timeout, workers=[address], allow_other_workers=False, pure=False,
                           key=f"stemdot-probe-{uuid.uuid4().hex}")

    async def settle():
        try:
            node = await future.result()
            if node["address"] == address:
                nodes[address] = node
        except Exception:  # its set-up failed, or it left: asked again at the next look
            await asyncio.sleep(POLL_S)
        finally:
            probing.pop(address, None)

    probing[address] = (future, asyncio.ensure_future(settle()))


def _probe_task(timeout):
    return _plugin().wait_ready(timeout)


#: Tasks left running on the client's loop (an end of a job queued for a stopped worker).
_BACKGROUND = set()


def _background(awaitable):
    task = asyncio.ensure_future(awaitable)
    _BACKGROUND.add(task)
    task.add_done_callback(_settled)
    return task


def _settled(task):
    """Forgets a background task, its failure read: the end of a job queued for a worker
    that never answers fails when the client closes, which is expected, not an asyncio
    "Task exception was never retrieved" traceback."""
    _BACKGROUND.discard(task)
    if not task.cancelled():
        task.exception()


def centre(client, path, *, shifts=None, resources=None, range_frames=None, timeout=120, **open_options):
    """The direct beam's centre and radius of the file at ``path``, as
    ``stemdot.centre(stemdot.open(path, **open_options), shifts=shifts)`` gives it:
    without shifts, in the sum frame reduced on the cluster (:func:`reduce`); with shifts,
    on one worker, which moves every frame back by its shift (see
    :func:`stemdot.centre`). Returns a :class:`stemdot.Centre`."""
    _synchronous(client, "centre", "stemdot.find_centre((await stemdot.dask.reduce_async(client, path, ['sum']))['sum'])")
    if shifts is None:
        total = reduce(client, path, ["sum"], resources=resources, range_frames=range_frames, timeout=timeout,
                       **open_options)["sum"]
        return stemdot.find_centre(total)
    path = _client_path(path)
    bootstrap(client, timeout=timeout)
    future = client.submit(_centre_task, path, _client_options(open_options), np.asarray(shifts, dtype=np.float64), resources=resources,
                           pure=False)
    centre, run_notes = future.result()
    _issue(stemdot.RunNoteWarning(f"stemdot: {n['warning']}") for n in run_notes)
    return stemdot.Centre(*centre)


def _centre_task(path, options, shifts):
    """stemdot.centre of path with shifts, on a worker's CPU workers, and the run notes
    of its frames (for the client to issue)."""
    plugin = _plugin()
    plugin.wait_ready()
    with plugin.dataset(path, options) as ds, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tuple(stemdot.centre(ds, cpus=plugin._cpus, shifts=shifts)), ds.run_notes()


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
    hang_timeout=None,
    report=None,
    **open_options,
):
    """Reduces every frame of the file at ``path`` on the workers of ``client``'s cluster:
    returns the same dict as ``stemdot.reduce(stemdot.open(path, **open_options),
    reductions)``, name → float64 array (sig_y, sig_x) of the sum, mean, maximum and
    standard-deviation frames asked (any of :data:`stemdot.REDUCTIONS`).

    The scan is cut into frame ranges as by :func:`apply_masks` (path, open_options,
    progress, resources, prefer, range_frames, max_attempts, timeout, hang_timeout and
    report alike, faults handled alike); each range is reduced on its worker's CPU
    workers (a range holds the node's stemdot worker count × range_frames frames, or,
    without range_frames, is sized by the node's measured rate as by apply_masks) and
    only its frames (a few sig_shape arrays) travel back. The ranges' partial reductions
    are merged here as the engine merges its workers': sums added (integer sums stay
    exact up to 2**53), maxima compared (NaN kept), and for the std each range's (count,
    mean, std) merged by Chan et al.'s pairwise update (scaled so that it stays finite for
    any finite frames), so the result is numerically stable. :func:`reduce_async` is its
    twin for an asynchronous client.
    """
    _synchronous(client, "reduce")
    return _sync(client, _reduce, client, path, reductions, job=uuid.uuid4().hex, progress=progress, resources=resources,
                 prefer=prefer, range_frames=range_frames, max_attempts=max_attempts, timeout=timeout,
                 hang_timeout=hang_timeout, report=report, **open_options)


async def reduce_async(client, path, reductions=("sum",), **kwargs):
    """:func:`reduce` for an asynchronous client (``Client(asynchronous=True)``):
    ``await reduce_async(client, path, ["sum"], ...)``, with the keywords of reduce."""
    notes = []
    try:
        return await _reduce(client, path, reductions, job=uuid.uuid4().hex, notes=notes, **kwargs)
    finally:
        _issue(notes)


async def _reduce(client, path, reductions=("sum",), *, job, notes, progress=False, resources=None, prefer=None,
                  range_frames=None, max_attempts=4, timeout=120, hang_timeout=None, report=None, **open_options):
    path, open_options = _client_path(path), _client_options(open_options)
    if isinstance(reductions, str):
        reductions = (reductions,)
    names = list(reductions)
    if not names or any(r not in stemdot.REDUCTIONS for r in names):
        raise stemdot.InvalidArgumentError(f"reductions={reductions!r}: want one or more of {', '.join(stemdot.REDUCTIONS)}",
                                           _lib.ERR_INVALID_ARGUMENT)
    total = {}  # the merged partials: "n", and the names computed by the ranges

    def store(first, count, part):
        _merge(total, part.pop("frames"), part)

    def task(first_frame, options):
        return lambda first, count: (_reduce_task, job, path, options, names, first_frame + first, count)

    await _job(client, job, path, open_options, None, task, store, notes, progress=progress, resources=resources,
               prefer=prefer, range_frames=range_frames, max_attempts=max_attempts, timeout=timeout,
               hang_timeout=hang_timeout, report=report, gpus=False)
    return stemdot._merged(total, names)


#: Merges a range's partial reduction into the total (see stemdot._merge_reduction).
_merge = stemdot._merge_reduction


async def _job(client, job, path, open_options, check, task, store, notes, *, progress, resources, prefer, range_frames,
               max_attempts, timeout, hang_timeout, report, gpus):
    """One job over the frames of path on the cluster, on the client's loop: its set-up
    (_prepare; the dataset's warnings and the nodes that cannot read the file go to
    notes), check(info) (a coroutine: raises on a bad request; returns data for the
    workers, or None), the ranges (_run_ranges with task(first_frame, options)(first,
    count)), and, also on error or cancel, its end on every worker (_end_everywhere: its data
    dropped and its files closed). Returns the dataset's info, the nodes that took part
    (joined ones included) and the run notes of the frames read, summed over the ranges
    (their warnings go to notes, after the dataset's)."""
    started = time.monotonic()
    excluded, suspects, nodes, run_notes = {}, {}, {}, []
    try:
        ready, workers, info, options, first_frame, per_worker = await _prepare(client, job, path, open_options,
                                                                                range_frames, timeout, excluded)
        nodes.update(ready)
        notes.extend(f"stemdot: {w}" for w in info["warnings"])
        data = await check(info) if check is not None else None
        await _run_ranges(
            client, job, path, info["n_frames"], nodes, workers, lambda node: _range_size(node, per_worker, gpus),
            task(first_frame, options), store, data, progress=progress, resources=resources, prefer=prefer,
            max_attempts=max_attempts, timeout=timeout, hang_timeout=hang_timeout, report=report, started=started,
            excluded=excluded, size=info["size"], suspects=suspects, run_notes=run_notes,
            range_seconds=None if range_frames else RANGE_SECONDS)
        notes.extend(_exclusion_notes(path, excluded))
        summed = stemdot._sum_run_notes(run_notes, run_notes[0]["path"] if run_notes else path)
        notes.extend(stemdot.RunNoteWarning(f"stemdot: {n['warning']}") for n in summed)
        if report is not None:
            report["run_notes"] = summed
        return info, nodes, summed
    finally:
        await _end_everywhere(client, job, nodes, suspects)


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
    hang_timeout=None,
    report=None,
    roi_compact=False,
    shifts=None,
    names=None,
    as_signal=False,
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
      Or an array of frames, nav_shape + (sig_y, sig_x), with none of open_options,
      roi_compact, prefer, range_frames, hang_timeout and report (they apply to a
      file): a dask array (a lazy HyperSpy or pyxem signal's too) is cut into blocks of
      whole frames along its nav axes (dask's "auto" chunks of at most RANGE_BYTES, the
      sig axes whole), one task each, run where the scheduler places it (beside its
      chunks when the array is persisted on the cluster; the client never holds its
      frames); a numpy array, a non-lazy signal or an object with __array__ is sent
      from the client one block at a time (client.scatter), each block held by a worker
      until its task has run. Each task applies the masks on its worker's stemdot plan
      (bootstrap's; the library's default plan on a worker without the plugin) and only
      its values (frames × masks) travel back, written into the result by scan
      position: the result equals ``stemdot.apply_masks(x, masks)``, bit for bit; its
      info records format "dask" or "memory" and no path. A task that fails fails the
      run; the blocks of a dask array whose worker died are recomputed by dask, those
      of a numpy array that it held are lost and the run fails (give a file or a dask
      array where workers may die).
    masks: (n_masks, sig_y, sig_x) or (sig_y, sig_x), or mask factories, as for
      stemdot.apply_masks (factories are called here); sent by the client to each
      worker's plugin before its first range (again to a worker that joins or restarts),
      and dropped from every worker at the end of the run.
    names: the masks' names, one per mask (e.g. those :func:`stemdot.mask_stack`
      returns); None: "mask0", "mask1", ...
    as_signal: return the result as a HyperSpy signal (:func:`stemdot.to_hyperspy`), with
      the nav axes of ``path`` when it is a signal.
    out_dtype: np.float32 or np.float64 (float64 accumulates in float64).
    progress: False; True (a tqdm bar when tqdm is installed, else a bar on stderr); or
      a callable ``f(done, total)`` called on the client with the frames done. An
      exception raised by it cancels the run and is re-raised.
    resources: Dask resources every range task needs, e.g. ``{"GPU": 1}`` to compute on
      the nodes started with ``--resources GPU=1`` only; ranges go only to workers that
      declare them.
    prefer: worker addresses or hosts that hold a local copy of the file: they are handed
      ranges first and keep two ranges queued, the others one.
    range_frames: frames per stemdot worker in one range; a range of a node with n
      stemdot workers holds n × range_frames frames (the scan's last range may be
      shorter); a node whose plan has GPU workers gets ranges of its CPU workers ×
      range_frames + its GPU workers × GPU_RANGE_FACTOR × range_frames frames. None
      (default): a node's first range is sized so with RANGE_BYTES of frames per stemdot
      worker; its later ones hold about RANGE_SECONDS (0.5 s) of its work at the rate
      measured in this run, but at most half its share (by rate) of the frames not handed
      out yet, and at least its first range's size (guided self-scheduling: few tasks,
      nodes that finish together).
    shifts: None, or the masks moved with the diffraction pattern, as for
      :func:`stemdot.apply_masks`: ``(dy, dx)`` for every frame, or one shift per scan
      position (``nav_shape + (2,)``; with ``frames``, of the whole scan or of the frames
      read); each range task gets the shifts of its frames only, or the whole scan's
      are sent with the masks.
    max_attempts: tries of one range before the run fails (a range whose worker died
      or hung is tried again elsewhere).
    timeout: seconds to wait for the workers' set-up (:func:`bootstrap`), and for a
      worker to take a range when none can (all died, e.g. while their Nannies restart
      them, are paused, or hang) before the run fails with a ClusterError.
    hang_timeout: seconds a range may stay in flight on one worker (from its submission,
      or the end of the range before it there) before it is taken back and recomputed on
      the other workers. None (default): max(HANG_FLOOR_S, HANG_FACTOR × the range's
      expected time at the rate measured in this run, on that worker or else the whole
      cluster), HANG_FIRST_S (120 s) before any range finished: with 30 s and 10, a
      stopped worker (SIGSTOP, a stalled NFS read, its network down) costs its ranges
      at least 30 s. The hung worker gets no new range until it answers the client
      again; its late result, if it wakes, is dropped (its task was cancelled): every
      range is stored and counted once.
    report: a dict, filled when given with ``ranges`` (a list of (first, count, worker
      address, attempt, seconds in the worker's apply) of the ranges computed), ``lost``
      ((first, count, worker address, attempt) of the ranges recomputed after their worker
      died or retired), ``hung`` (the same, of the ranges taken back from a hung worker),
      ``frames`` (worker address → frames it computed), ``rates`` (worker address →
      frames per second of its applies), ``excluded`` (worker address → the error of a
      node that cannot read the file), ``offered`` (the addresses of the workers that
      ranges were offered to: set up, with the resources, not yet excluded; idle ones
      too), ``nodes`` (the node descriptions), ``run_notes``
      (the run notes of the frames read, as below) and ``seconds`` (the whole call).

    The dataset's warnings (a guessed nav shape, frames that do not fit the scan, the
    HDF5 dataset chosen) are issued as UserWarning, as :func:`stemdot.open` issues them;
    so are, after the run, what the workers' readers counted in the frames of their
    ranges (:meth:`stemdot.Dataset.run_notes`: e.g. a DECTRIS detector's saturated
    pixels), summed by key over the ranges stored (a range recomputed counts once), as
    :func:`stemdot.apply_masks` issues them for the whole scan; the result's
    ``info["run_notes"]`` records them.
    Ctrl-C (KeyboardInterrupt) cancels the run: pending tasks are cancelled and the
    workers stop their running applies. Errors of a range (a stemdot error on a worker)
    cancel the run and are raised as they were raised on the worker, except the
    node-local ones: an I/O error (stemdot.StemdotIOError: the file missing, unreadable,
    a failed or short read) or a format or shape error of a file whose size on that node
    differs from its size where it was first opened (a truncated copy). Such a node gets
    no more ranges of the run (nor the dataset's opening), with a UserWarning naming
    the worker, its node and the error; the run fails only when no live worker can
    read the file, with each node's error (a stemdot error of their class when they are
    all of one, else a ClusterError). A format error of a file of the same size
    everywhere is the data's own: raised at once.

    Faults: a worker that dies or retires takes no range with it (its ranges are
    recomputed on the others, and no data of the run lives only on one worker);
    a worker that joins is set up and gets ranges; the scheduler gone fails the run
    with a ClusterError naming its address, at once when its connection is lost, after
    SCHEDULER_ANSWER_S when it does not answer (a busy one is waited for). At the end of
    the run (also on error or cancel) every worker drops the run's masks and closes the
    files it opened for it: no file stays open or locked after apply_masks returns.
    :func:`apply_masks_async` is its twin for an asynchronous client.
    """
    _synchronous(client, "apply_masks")
    return _sync(client, _apply_masks, client, path, masks, job=uuid.uuid4().hex, out_dtype=out_dtype,
                 progress=progress, resources=resources, prefer=prefer, range_frames=range_frames,
                 max_attempts=max_attempts, timeout=timeout, hang_timeout=hang_timeout, report=report,
                 roi_compact=roi_compact, shifts=shifts, names=names, as_signal=as_signal, **open_options)


async def apply_masks_async(client, path, masks, **kwargs):
    """:func:`apply_masks` for an asynchronous client (``Client(asynchronous=True)``):
    ``await apply_masks_async(client, path, masks, ...)``, with the keywords of
    apply_masks; the same range loop, run on the client's event loop."""
    notes = []
    try:
        return await _apply_masks(client, path, masks, job=uuid.uuid4().hex, notes=notes, **kwargs)
    finally:
        _issue(notes)


async def _apply_masks(client, path, masks, *, job, notes, out_dtype=np.float32, progress=False, resources=None,
                       prefer=None, range_frames=None, max_attempts=4, timeout=120, hang_timeout=None, report=None,
                       roi_compact=False, shifts=None, names=None, as_signal=False, **open_options):
    if not isinstance(path, (str, os.PathLike)):
        refused = {"prefer": prefer, "range_frames": range_frames, "hang_timeout": hang_timeout, "report": report,
                   "roi_compact": roi_compact, **open_options}
        return await _apply_array(client, path, masks, out_dtype=out_dtype, progress=progress, resources=resources,
                                  shifts=shifts, names=names, as_signal=as_signal,
                                  refused=[k for k, v in refused.items() if v is not None and v is not False])
    if as_signal and roi_compact:
        raise stemdot.InvalidArgumentError("stemdot.dask.apply_masks: as_signal=True with roi_compact=True: a compact "
                                           "result has no scan axes; leave one of them out", _lib.ERR_INVALID_ARGUMENT)
    out_dtype, masks = stemdot._job(masks, out_dtype)
    names = stemdot._names(names, masks.shape[0])
    given = _client_options(open_options)  # as the sidecar records them
    path = _client_path(path)
    out = None
    per_range = False  # the shifts sliced per range (one per frame read, or a constant (dy, dx))

    # The stack as sent to the workers, packed off the loop while the job is set up.
    packing = asyncio.get_running_loop().run_in_executor(None, _pack_masks, masks)

    async def check(info):
        nonlocal out, per_range, shifts
        if roi_compact and info["positions"] is None:
            raise stemdot.InvalidArgumentError("roi_compact=True needs a region of interest (roi=)", _lib.ERR_INVALID_ARGUMENT)
        if tuple(masks.shape[1:]) != tuple(info["sig_shape"]):
            raise stemdot.ShapeError(
                f"masks of sig shape {tuple(masks.shape[1:])} do not match the sig shape {tuple(info['sig_shape'])} of "
                f"{path}", _lib.ERR_SHAPE)
        n_frames = info["n_frames"]
        # The shifts of a range task: (dy, dx) for all; one per frame of the dataset as
        # opened, sliced by range; or one per position of the whole scan, sent with the
        # masks (the library maps each task's frames to their scan positions: frames
        # option, ROI).
        shifts = stemdot._shifts(shifts, info["scan_shape"], info["nav_shape"])
        per_range = shifts is not None and shifts.size in (2, 2 * n_frames)
        out = np.empty((n_frames, masks.shape[0]), dtype=out_dtype)
        return {"masks": await packing, "shifts": None if per_range else shifts}

    def shifts_of(first, count):
        if not per_range or shifts.size == 2:
            return shifts if per_range else None
        return np.ascontiguousarray(shifts[2 * first : 2 * (first + count)])

    def task(first_frame, options):
        return lambda first, count: (_range_task, job, path, options, first_frame + first, count, out_dtype.name,
                                     shifts_of(first, count))

    def store(first, count, values):
        out[first : first + count] = values

    info, nodes, run_notes = await _job(client, job, path, given, check, task, store, notes, progress=progress,
                             resources=resources, prefer=prefer, range_frames=range_frames, max_attempts=max_attempts,
                             timeout=timeout, hang_timeout=hang_timeout, report=report, gpus=True)
    n_frames = info["n_frames"]
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
                                       info["format"], given, len(plans) - gpu_workers, gpu_workers, roi=roi, shifts=moved,
                                       without_frame=info["positions_without_frame"], run_notes=run_notes,
                                       calibration=info.get("calibration"))
    result = stemdot.Result(images, names, result_info)
    if as_signal:
        return stemdot.to_hyperspy(result)
    return (result, positions) if roi_compact else result


def _array_task(frames, masks, dtype, shifts):
    """The task of a block of frames of an array (see _apply_array): the masks applied to
    frames (nav shape + sig_shape) on this worker's plan (its StemdotPlugin's, when
    bootstrapped; else the library's default plan), as stemdot.apply_masks applies them to
    a numpy array; returns (values of shape frames' nav shape + (n_masks,), this worker's
    address, its stemdot workers)."""
    worker = get_worker()
    plugin = worker.plugins.get(PLUGIN_NAME)
    plan = plugin.plan if plugin is not None and plugin.wait_ready() else None
    out = np.empty(frames.shape[:-2] + (masks.shape[0],), dtype=dtype)
    with stemdot.from_array(frames) as ds:
        stemdot._apply(ds, masks, plan, False, out, shifts)
        return out, worker.address, stemdot._workers(plan, ds)


async def _apply_array(client, x, masks, *, out_dtype, progress, resources, shifts, names, as_signal, refused):
    """apply_masks of an array x (dask, numpy, a HyperSpy signal, an object with
    __array__) on the cluster: one task per block of frames (stemdot._nav_blocks of about
    RANGE_BYTES, sig axes whole), its values written into the result by their scan
    positions."""
    if refused:
        raise stemdot.InvalidArgumentError(f"stemdot.dask.apply_masks: {', '.join(refused)} apply to a file (path), "
                                           "not to an array", _lib.ERR_INVALID_ARGUMENT)
    signal = x if stemdot._is_signal(x) else None
    x = stemdot._frames_of(x, "stemdot.dask.apply_masks", paths=False)
    if isinstance(x, stemdot.Dataset):
        raise TypeError(f"stemdot.dask.apply_masks: a stemdot.Dataset ({x.source}) is open in this process only: give "
                        "its file's path (the workers open it), or an array")
    out_dtype, masks = stemdot._job(masks, out_dtype, x.shape[-2:])
    stemdot._check_sig(masks, x)
    names = stemdot._names(names, masks.shape[0])
    nav_shape = tuple(int(n) for n in x.shape[:-2])
    shifts = stemdot._shifts(shifts, nav_shape, nav_shape)
    if shifts is not None and shifts.size > 2:
        shifts = shifts.reshape(nav_shape + (2,))
    import dask.array  # here, not at import: a worker (restarted ones too) starts 1 s sooner without it

    lazy = stemdot._is_dask(x)
    blocks, parts = stemdot._nav_blocks(x if lazy else dask.array.from_array(x, chunks=-1), RANGE_BYTES)
    delayed = blocks.to_delayed() if lazy else None
    masks_ref = (await client.scatter([masks], broadcast=True, hash=False))[0]
    futures = []
    try:
        for idx, index in parts:
            moved = shifts if shifts is None or shifts.size == 2 else np.ascontiguousarray(shifts[index]).reshape(-1)
            if lazy:  # computed where dask places it: beside its chunks when x is persisted on the cluster
                task = dask.delayed(_array_task, pure=False)(delayed[idx][0, 0], masks_ref, out_dtype.name, moved)
                futures.append(client.compute(task, resources=resources))
            else:  # sent from here, one block at a time
                frames = (await client.scatter([x[index]], hash=False))[0]
                futures.append(client.submit(_array_task, frames, masks_ref, out_dtype.name, moved, resources=resources,
                                             pure=False))
        out = np.empty(nav_shape + (masks.shape[0],), dtype=out_dtype)
        report, done, plans = _progress(progress, int(np.prod(nav_shape))), 0, {}
        try:
            for (_, index), future in zip(parts, futures):
                values, address, workers = await future.result()
                out[index] = values
                plans[address] = workers
                done += values.size // masks.shape[0]
                report(done)
        finally:
            report(None)
    finally:
        await client.cancel([f for f in futures if not f.done()])
    plan = [w for workers in plans.values() for w in workers]
    gpu_workers = sum("gpu" in w for w in plan)
    moved = None
    if shifts is not None:
        moved = {"mean": stemdot._mean_shift(shifts, out[..., 0].size, None), "constant": shifts if shifts.size == 2 else None}
    info = stemdot._result_info(out.shape, out.dtype, x.shape[-2:], [{"name": n} for n in names], "",
                                "dask" if lazy else "memory", {}, len(plan) - gpu_workers, gpu_workers, shifts=moved)
    result = stemdot.Result(out, names, info)
    return stemdot.to_hyperspy(result, like=signal) if as_signal else result


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


from ._live import live, live_async  # noqa: E402
