"""The API on a cluster: :func:`dataset_info`, :func:`centre`, :func:`reduce`,
:func:`apply_masks` (of a file or of an array) and their async twins."""

import asyncio
import os
import uuid
import warnings

import numpy as np
from distributed import get_worker

import stemdot
from stemdot import _lib

from ._plugin import (
    PLUGIN_NAME,
    _issue,
    _pack_masks,
    _plugin,
    _range_task,
    _reduce_task,
    _sync,
    _synchronous,
    bootstrap,
)
from ._ranges import _client_options, _client_path, _dataset_info_notes, _job, _progress


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
    blocks, parts = stemdot._nav_blocks(x if lazy else dask.array.from_array(x, chunks=-1), stemdot.dask.RANGE_BYTES)
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
