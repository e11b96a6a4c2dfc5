"""The worker side (:class:`StemdotPlugin` and the tasks it runs) and the client's hold on
the cluster: the scheduler's workers, :class:`ClusterError`, :func:`bootstrap`."""

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
import warnings
from collections import OrderedDict

import dask
import numpy as np
from dask.utils import format_bytes
from distributed import WorkerPlugin, get_worker
from distributed.comm.addressing import get_address_host

import stemdot
from stemdot import _lib


#: The plugin's name on the workers (``dask_worker.plugins["stemdot"]``).
PLUGIN_NAME = "stemdot"


#: Seconds between two looks at the scheduler's list of live workers during a run.
POLL_S = 0.5


#: Open dataset handles a worker keeps (least recently used ones are freed first).
DATASET_CACHE = 64


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


#: Seconds the client waits for one answer of the scheduler (and, elsewhere, for workers
#: that may be stopped) before it asks again.
SCHEDULER_TIMEOUT_S = 5

#: Seconds the client goes on asking a scheduler that does not answer while its
#: connection stands before it calls it gone: a scheduler relaying a large mask stack to
#: the workers (client.run goes through it) is busy for seconds; a scheduler whose
#: process died closes the connection, which fails the run at once.
SCHEDULER_ANSWER_S = 60


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
