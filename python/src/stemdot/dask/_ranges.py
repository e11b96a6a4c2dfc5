"""The range scheduler: a file's info asked of the workers, ranges sized by each node's
rate, the client's ledger of ranges in flight, and the faults (dead, hung or
unreadable workers) it recovers from."""

import asyncio
import contextlib
import os
import time
import uuid

import numpy as np

import stemdot

from ._plugin import (
    ClusterError,
    JobDataMissing,
    POLL_S,
    SCHEDULER_TIMEOUT_S,
    _bootstrap,
    _cluster_error,
    _end_job,
    _file_size,
    _info_task,
    _live_async,
    _ping,
    _plugin,
    _put_job,
    _scheduler_workers,
)


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


#: Seconds before the job's data is sent again to a worker that refused it (its plugin
#: not ready, put_job failed, or client.run failed); doubled at each refusal in a row, up
#: to SEND_RETRY_MAX_S: each send relays the whole mask stack through the scheduler.
SEND_RETRY_S = 0.1
SEND_RETRY_MAX_S = 3.2


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
    per_worker = int(range_frames) if range_frames else max(1, stemdot.dask.RANGE_BYTES // frame_bytes)
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
            range_seconds=None if range_frames else stemdot.dask.RANGE_SECONDS)
        notes.extend(_exclusion_notes(path, excluded))
        summed = stemdot._sum_run_notes(run_notes, run_notes[0]["path"] if run_notes else path)
        notes.extend(stemdot.RunNoteWarning(f"stemdot: {n['warning']}") for n in summed)
        if report is not None:
            report["run_notes"] = summed
        return info, nodes, summed
    finally:
        await _end_everywhere(client, job, nodes, suspects)


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
