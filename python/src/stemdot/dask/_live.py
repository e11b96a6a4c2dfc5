"""stemdot.dask.live: a DECTRIS detector's acquisition received and computed on every
node of a Dask cluster while the scan runs.

A DECTRIS detector's stream is a ZeroMQ PUSH socket that deals its messages out in turn
to every connected PULL socket. Each Dask worker of the run opens one, as the receiver of
a live run in shared mode (stemdot_live_start with option shared, in the worker's
StemdotPlugin, on the node's plan), and computes the frames it gets as they come. The
client:

1. starts the workers' runs and waits until every socket is connected (the barrier:
   frames sent before would go to the sockets connected then), then configures and arms
   the detector through its SIMPLON API (nimages 1, ntrigger the scan's positions, as
   stemdot live arms it), sending the triggers itself with trigger modes ints and inte;
2. every ``every`` seconds asks each worker for the rows it computed since the last
   time, with their frame indices (stemdot_live_take), and writes them into the image
   by frame index (NaN where no worker has the frame yet);
3. passes the series' header, which comes to one worker only, to the others
   (stemdot_live_share_give): it carries the frame shape, dtype and the pixel mask, so
   that every worker decodes its frames as the offline reader does; frames that come to
   a worker before it are kept until it comes;
4. passes the series' end, which comes to one worker only, to all; each then ends once
   its socket is quiet. The end is also given once every frame has come, and when no
   worker has received a frame for ``idle_timeout`` seconds after the first (the end
   message went to a worker that died).

The positions whose frame no worker computed are the acquisition's missing ones: NaN in
the result, listed (``positions_without_frame``), and a UserWarning names them. A worker
killed mid-scan takes its socket's frames with it (those it received and had not handed
over, and those the detector had sent to it): they are missing, never a wrong value;
its socket's share of the later frames goes to the others.
"""

import asyncio
import contextlib
import ctypes
import json
import math
import threading
import time
import types
import urllib.error
import urllib.request
import uuid

import numpy as np

import stemdot
from stemdot import _lib
from stemdot._live import LiveUpdate, _live_option

from . import (
    PLUGIN_NAME,
    SCHEDULER_TIMEOUT_S,
    ClusterError,
    _bootstrap,
    _cancel_everywhere,
    _end_everywhere,
    _live_async,
    _pack_masks,
    _SparseMasks,
    _synchronous,
    _warn,
    _within,
)

#: Source options of the workers' receivers that the client keeps: it configures and
#: arms the detector.
_CLIENT_OPTIONS = ("dectris_api", "trigger_mode", "nimages", "ntrigger", "passive", "shared", "record", "nav_shape")

#: Seconds to wait for a worker's answer to one poll before asking again.
POLL_ANSWER_S = SCHEDULER_TIMEOUT_S


# ------------------------------------------------------------------- worker side


class _SharedRun:
    """A worker's share of a live stream: its live run (option shared) and the rows it
    computed so far, in the order they were computed, with their frame indices (at most
    n: the scan's positions)."""

    def __init__(self, handle, n, n_masks, dtype):
        self.handle = handle
        self.rows = np.empty((n, n_masks), dtype)
        self.indices = np.empty(n, np.uint64)
        self.count = 0
        self.lock = threading.Lock()
        self.snap = _lib.LiveSnapshot()
        self.final = False
        self.error = None
        self.end = None  # at the end: the run's detector and warnings

    def poll(self, since, give):
        """Gives the message give (JSON text, or None), takes the rows computed since the
        last take, and returns the rows from since on with the run's state (see _report)."""
        with self.lock:
            if self.handle is None:
                return {"gone": True}
            try:
                if give is not None:
                    stemdot._call(stemdot._LIB.stemdot_live_share_give, self.handle, give.encode())
                if not self.final and self.error is None:
                    self._take()
            except stemdot.StemdotError as e:
                self.error = e
            return self._report(since)

    def _take(self):
        room = len(self.rows) - self.count
        n = ctypes.c_size_t()
        rows = ctypes.c_void_p(self.rows[self.count:].ctypes.data) if room else None
        idx = self.indices[self.count:].ctypes.data_as(ctypes.POINTER(ctypes.c_uint64)) if room else None
        stemdot._call(stemdot._LIB.stemdot_live_take, self.handle, 0.0, ctypes.byref(self.snap), rows,
                      _lib.DTYPE_CODES[self.rows.dtype.name], room, idx, ctypes.byref(n))
        self.count += n.value
        if self.snap.final:
            self.final = True
            info = json.loads(stemdot._text(stemdot._LIB.stemdot_live_info, self.handle))["live"]
            warnings = [w for w in stemdot._text(stemdot._LIB.stemdot_live_warnings, self.handle).split("\n") if w]
            self.end = {"detector": info.get("detector", ""), "ended_by": info.get("ended_by"), "warnings": warnings}

    def _report(self, since):
        """connected, header (the series' header message if it came here), end_seen,
        received and stalls (the receiver's counts), rows and indices (from since on),
        final (the run has ended and every row is in rows), end, error."""
        state = json.loads(stemdot._text(stemdot._LIB.stemdot_live_share_state, self.handle))
        return {"connected": state["connected"], "header": state["header"], "end_seen": state["end_seen"],
                "received": int(self.snap.received), "stalls": int(self.snap.stalls),
                "rows": self.rows[since:self.count].copy(), "indices": self.indices[since:self.count].astype(np.int64),
                "final": self.final, "end": self.end, "error": self.error}

    def close(self):
        """Cancels the run if it still runs and frees it."""
        with self.lock:
            handle, self.handle = self.handle, None
        if handle is not None:
            with contextlib.suppress(stemdot.StemdotError):
                stemdot._call(stemdot._LIB.stemdot_live_free, handle)


def _plugin_of(dask_worker):
    plugin = dask_worker.plugins.get(PLUGIN_NAME)
    if plugin is None or not hasattr(plugin, "lives"):
        raise RuntimeError(f"worker {dask_worker.address} has no stemdot plugin: call stemdot.dask.bootstrap(client) first")
    return plugin


async def _live_start(job, source, options, masks, dtype, n, dask_worker=None):
    """Starts this worker's share of the stream at source for job: a live run with the
    options text (shared, passive) of masks on the node's plan."""
    plugin = _plugin_of(dask_worker)
    loop = asyncio.get_running_loop()

    def start():
        plugin.wait_ready()
        m = masks.dense() if isinstance(masks, _SparseMasks) else masks
        handle = ctypes.c_uint64()
        stemdot._call(stemdot._LIB.stemdot_live_start, source.encode(), options.encode(), ctypes.c_void_p(m.ctypes.data),
                      _lib.DTYPE_CODES[m.dtype.name], *m.shape, plugin.plan.handle, ctypes.byref(handle))
        run = _SharedRun(handle.value, n, m.shape[0], np.dtype(dtype))
        with plugin._lock:
            old = plugin.lives.pop(job, None)
            plugin.lives[job] = run
        if old is not None:
            old.close()

    await loop.run_in_executor(None, start)


async def _live_poll(job, since, give=None, dask_worker=None):
    """This worker's report of its share of job (_SharedRun.poll), {"gone": True} when it
    has none (a worker restarted since)."""
    plugin = _plugin_of(dask_worker)
    run = plugin.lives.get(job)
    if run is None:
        return {"gone": True}
    return await asyncio.get_running_loop().run_in_executor(None, run.poll, since, give)


# ------------------------------------------------------------------- the detector


class _Simplon:
    """The SIMPLON REST API of a DECTRIS detector control unit (DECTRIS SIMPLON API
    manual; stemdot's live/dectris.Client, LiberTEM-live's DEigerClient): a parameter is
    read by GET /<module>/api/1.8.0/config/<param> ({"value": ...}) and set by PUT of
    {"value": ...}; a command is a PUT to /detector/api/1.8.0/command/<command>."""

    def __init__(self, address):
        address = address if "://" in address else "http://" + address
        self.base = address.rstrip("/")

    def _do(self, method, path, value=None, body=False):
        url = f"{self.base}/{path}"
        data = json.dumps({"value": value}).encode() if body else None
        req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"} if body else {})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                text = r.read(1 << 20)
        except urllib.error.HTTPError as e:
            raise stemdot.StemdotIOError(f"SIMPLON {method} {url}: {e.code} {e.reason}: "
                                         f"{e.read(4096).decode(errors='replace').strip()!r}", _lib.ERR_IO) from None
        except (urllib.error.URLError, OSError) as e:
            raise stemdot.StemdotIOError(f"SIMPLON {method} {url}: {getattr(e, 'reason', e)} (is the detector control unit's "
                                         f"API at {self.base}? dectris_api=)", _lib.ERR_IO) from None
        return json.loads(text) if text.strip() else None

    def config(self, module, param):
        return (self._do("GET", f"{module}/api/1.8.0/config/{param}") or {}).get("value")

    def set(self, module, param, value):
        """Sets param unless it has that value already (LiberTEM-live's simulator refuses
        to set most)."""
        with contextlib.suppress(stemdot.StemdotIOError):
            if self.config(module, param) == value:
                return
        self._do("PUT", f"{module}/api/1.8.0/config/{param}", value, body=True)

    def command(self, cmd):
        return self._do("PUT", f"detector/api/1.8.0/command/{cmd}") or {}


def _images_asked(nimages, ntrigger, mode):
    """The images a series of the SIMPLON configuration gives: ntrigger with trigger modes
    exte and inte (one image per trigger), nimages·ntrigger with exts and ints."""
    return int(ntrigger) if mode in ("exte", "inte") else int(nimages) * int(ntrigger)


def _arm(api, stream, n, trigger_mode, nimages, ntrigger, stop):
    """Configures the detector for a series of n images (the stream enabled in the
    stream's format; trigger_mode where given; nimages and ntrigger, default 1 and n, as
    stemdot live and LiberTEM-live arm a STEM scan), arms it and, with trigger modes ints
    and inte, sends its triggers from a thread until stop is set. Raises
    InvalidArgumentError when the configuration gives another number of images."""
    api.set("stream", "mode", "enabled")
    fmt = "legacy" if stream == "v1" else "cbor"
    with contextlib.suppress(stemdot.StemdotIOError):  # LiberTEM-live's simulator knows no format
        if api.config("stream", "format") not in (None, fmt):
            api.set("stream", "format", fmt)
    if trigger_mode:
        api.set("detector", "trigger_mode", trigger_mode)
    if nimages is None and ntrigger is None:
        nimages, ntrigger = 1, n
    for name, value in (("nimages", nimages), ("ntrigger", ntrigger)):
        if value is not None:
            api.set("detector", name, value)
    mode = api.config("detector", "trigger_mode")
    asked = _images_asked(api.config("detector", "nimages"), api.config("detector", "ntrigger"), mode)
    if asked != n:
        raise stemdot.InvalidArgumentError(
            f"the detector at {api.base} is set to send {asked} images (nimages × ntrigger, trigger_mode {mode}), the "
            f"scan has {n} positions: give nimages and ntrigger of {n} images, or nav_shape of {asked} positions",
            _lib.ERR_INVALID_ARGUMENT)
    api.command("arm")
    if mode in ("ints", "inte"):
        count = int(api.config("detector", "ntrigger") or 1)

        def triggers():
            for _ in range(count):
                if stop.is_set():
                    return
                api.command("trigger")

        threading.Thread(target=triggers, name="stemdot-triggers", daemon=True).start()


# ------------------------------------------------------------------- client side


def _runs(positions):
    """Ascending flat positions as (first, count) runs."""
    runs = []
    for p in positions.tolist():
        if runs and runs[-1][0] + runs[-1][1] == p:
            runs[-1][1] += 1
        else:
            runs.append([p, 1])
    return [tuple(r) for r in runs]


def _ranges(runs, most=8):
    """Runs as text: "0-9, 12, 40-63 (and 5 more ranges)"."""
    text = ", ".join(f"{a}-{a + n - 1}" if n > 1 else f"{a}" for a, n in runs[:most])
    return text + (f" (and {len(runs) - most} more ranges)" if len(runs) > most else "")


def _arguments(source, masks, nav_shape, dectris_api, stream, dtype, every, names, source_options):
    """The arguments of live checked: (masks as the workers get them, their dtype,
    names, nav_shape as a tuple, the workers' options text); raises InvalidArgumentError
    or TypeError naming the argument."""
    if not isinstance(source, str) or not source.lower().startswith("dectris://"):
        raise stemdot.InvalidArgumentError(f"source {source!r}: stemdot.dask.live receives a DECTRIS stream, "
                                           "dectris://HOST[:PORT], which deals its frames out to every node's socket",
                                           _lib.ERR_INVALID_ARGUMENT)
    if not dectris_api:
        raise stemdot.InvalidArgumentError("stemdot.dask.live arms the detector once every node's socket is connected: give "
                                           "dectris_api, the SIMPLON API's HOST[:PORT]", _lib.ERR_INVALID_ARGUMENT)
    taken = sorted(k for k in source_options if k in _CLIENT_OPTIONS)
    if taken:
        raise stemdot.InvalidArgumentError(f"stemdot.dask.live: option {taken[0]} is not one of the workers' receivers: "
                                           "each receives a share of the stream (passive, shared), and the client arms the "
                                           "detector (dectris_api, trigger_mode, nimages, ntrigger)", _lib.ERR_INVALID_ARGUMENT)
    if nav_shape is None:
        raise stemdot.InvalidArgumentError("stemdot.dask.live: give nav_shape, the scan's shape (the detector is armed "
                                           "for as many frames)", _lib.ERR_INVALID_ARGUMENT)
    if stream not in ("v1", "v2"):
        raise stemdot.InvalidArgumentError(f"stream={stream!r}: want 'v2' or 'v1'", _lib.ERR_INVALID_ARGUMENT)
    if isinstance(every, bool) or not isinstance(every, (int, float)) or not (math.isfinite(every) and every > 0):
        raise TypeError(f"every={every!r}: want the seconds between updates, e.g. 0.25")
    out_dtype, masks = stemdot._job(masks, dtype)
    names = stemdot._names(names, masks.shape[0])
    nav_shape = tuple(int(k) for k in (nav_shape if hasattr(nav_shape, "__len__") else (nav_shape,)))
    options = {"passive": True, "shared": True, "nav_shape": nav_shape, "float64": out_dtype == np.float64,
               "every": float(min(every, 0.1)), "stream": stream, **source_options}
    text = ";".join(f"{k}={_live_option(k, v)}" for k, v in options.items() if v is not None)
    return masks, out_dtype, names, nav_shape, text


async def _live(client, source, masks, *, job, notes, nav_shape, dectris_api, stream="v2", dtype=np.float32, every=0.25,
                names=None, workers=None, timeout=120, idle_timeout=10.0, trigger_mode=None, nimages=None, ntrigger=None,
                report=None, **source_options):
    """The updates of a live run on the cluster: an async generator of LiveUpdate, the last
    final (see live)."""
    masks, out_dtype, names, nav_shape, text = _arguments(source, masks, nav_shape, dectris_api, stream, dtype, every,
                                                          names, source_options)
    text += f";start_timeout={float(timeout)!r}"
    n, n_masks = math.prod(nav_shape), masks.shape[0]
    api = _Simplon(dectris_api)
    loop = asyncio.get_running_loop()
    record = {"workers": [], "frames": {}, "lost": [], "repeated": 0, "header_from": None, "end": None}
    nodes = {}
    armed, stop_triggers = False, threading.Event()
    finished = False
    try:
        nodes = await _bootstrap(client, None, timeout)
        addresses = sorted(nodes) if workers is None else list(workers)
        unknown = [a for a in addresses if a not in nodes]
        if not addresses or unknown:
            raise ClusterError(f"stemdot.dask.live: no such Dask worker set up: {', '.join(unknown) or '(none given)'} "
                               f"(the cluster's: {', '.join(sorted(nodes)) or 'none'})")
        record["workers"] = addresses
        packed = await loop.run_in_executor(None, _pack_masks, masks)
        started = await client.run(_live_start, job, source, text, packed, out_dtype.name, n, workers=addresses,
                                   on_error="return")
        for a in addresses:
            answer = started.get(a, OSError(f"worker {a} did not answer"))
            if isinstance(answer, BaseException):
                raise answer

        out = np.full((n, n_masks), np.nan, out_dtype)
        have = np.zeros(n, bool)
        since = dict.fromkeys(addresses, 0)
        state = {a: {} for a in addresses}
        lost = []
        gives = {}  # address → what to give it at the next poll

        async def poll(a):
            give = gives.pop(a, None)
            try:
                answers = await _within(client.run(_live_poll, job, since[a], give and json.dumps(give), workers=[a],
                                                   on_error="return"), POLL_ANSWER_S)
                answer = answers.get(a, OSError(f"worker {a} did not answer"))
            except (asyncio.TimeoutError, OSError) as e:
                answer = e
            if isinstance(answer, BaseException) and give is not None:
                gives[a] = {**give, **gives.get(a, {})}  # given again at the next poll
            return a, answer

        async def poll_all():
            """Polls the workers of the stream and merges their rows (state: their reports)."""
            live = await _live_async(client)
            for a, answer in await asyncio.gather(*(poll(a) for a in addresses if a not in lost)):
                if isinstance(answer, dict) and answer.get("gone") or isinstance(answer, BaseException) and a not in live:
                    lost.append(a)
                    continue
                if isinstance(answer, BaseException):  # a worker that did not answer this time
                    continue
                if answer["error"] is not None:
                    raise answer["error"]
                idx = answer["indices"]
                if len(idx):
                    new = ~have[idx]
                    record["repeated"] += int(len(idx) - new.sum())
                    out[idx[new]] = answer["rows"][new]
                    have[idx[new]] = True
                    since[a] += len(idx)
                    record["frames"][a] = since[a]
                state[a] = answer
            if len(lost) == len(addresses):
                raise ClusterError(f"stemdot.dask.live: every Dask worker of the stream left the cluster "
                                   f"({', '.join(addresses)}): no frame of {source} can be received")

        def snapshot(now, missing, stalls, final):
            """The run as a LiveUpdate shows it at now: the frames done, and their rate since the last update."""
            done = int(have.sum())
            return types.SimpleNamespace(done=done, n_frames=n, received=received, missing=missing, late=0, stalls=stalls,
                                         rate=(done - last_done) / max(now - last_t, 1e-9), elapsed=now - t0, final=final,
                                         partial=bool(missing))

        # The barrier: the detector is armed once every socket is connected.
        deadline = time.monotonic() + timeout
        while not all(state[a].get("connected") for a in addresses if a not in lost):
            if time.monotonic() > deadline:
                late = [a for a in addresses if a not in lost and not state[a].get("connected")]
                raise ClusterError(f"stemdot.dask.live: the stream at {source} is not connected from the Dask workers "
                                   f"{', '.join(late)} after {timeout:g} s: can their nodes reach it?")
            await poll_all()
            await asyncio.sleep(0.02)
        await loop.run_in_executor(None, _arm, api, stream, n, trigger_mode, nimages, ntrigger, stop_triggers)
        armed = True
        t0 = last_t = time.monotonic()
        received, received_at, last_done = 0, t0, 0
        header_given = end_given = False
        while True:
            tick = time.monotonic()
            await poll_all()
            running = [a for a in addresses if a not in lost]
            now = time.monotonic()
            total = sum(state[a].get("received", 0) for a in running)
            if total != received:
                received, received_at = total, now
            if not header_given:
                holder = next((a for a in running if state[a].get("header")), None)
                if holder is not None:
                    for a in running:
                        if a != holder:
                            gives.setdefault(a, {})["header"] = state[holder]["header"]
                    header_given, record["header_from"] = True, holder
            if not end_given:
                seen = next((a for a in running if state[a].get("end_seen")), None)
                why = (f"the end message came to {seen}" if seen else "every frame came" if have.all() else
                       f"no frame for {idle_timeout:g} s" if (received or lost) and now - received_at > idle_timeout else None)
                if why is not None:
                    for a in running:
                        gives.setdefault(a, {})["end"] = True
                    end_given, record["end"] = True, why
            if all(state[a].get("final") for a in running):
                break
            snap = snapshot(now, 0, sum(state[a].get("stalls", 0) for a in running), False)
            last_done, last_t = snap.done, now
            yield LiveUpdate(out.reshape(nav_shape + (n_masks,)).copy(), snap)
            await asyncio.sleep(max(0.0, every - (time.monotonic() - tick)))
        finished = True
        missing = np.flatnonzero(~have)
        without = _runs(missing)
        ends = [state[a]["end"] for a in addresses if a not in lost and state[a].get("end")]
        for w in dict.fromkeys(w for e in ends for w in e["warnings"]):
            notes.append(f"stemdot: {w}")
        record["lost"] = list(lost)
        if len(missing):
            why = f"the Dask workers {', '.join(lost)} left the cluster during the scan" if lost else "they never came"
            notes.append(f"stemdot: {source}: partial result, {len(missing)} of {n} scan positions have no frame (NaN; "
                         f"{why}): {_ranges(without)}")
        plans = [w for a in addresses for w in nodes[a]["plan"]["workers"]]
        gpu_workers = sum("gpu" in w for w in plans)
        images = out.reshape(nav_shape + (n_masks,))
        info = stemdot._result_info(images.shape, out_dtype, masks.shape[1:], [{"name": m} for m in names], "", "live", {},
                                    len(plans) - gpu_workers, gpu_workers)
        info["dataset"]["path"] = source
        info["live"] = {"source": source, "detector": ends[0]["detector"] if ends else "", "partial": bool(len(missing)),
                        "received": int(have.sum()), "missing": int(len(missing)), "late": 0, "surplus": 0,
                        "repeated": record["repeated"], "stalls": sum(state[a].get("stalls", 0) for a in addresses),
                        "workers": {a: since[a] for a in addresses}, "lost_workers": list(lost)}
        if without:
            info["live"]["positions_without_frame"] = [list(r) for r in without]
        result = stemdot.Result(images, names, info)
        yield LiveUpdate(result, snapshot(time.monotonic(), int(len(missing)), info["live"]["stalls"], True), without)
    finally:
        stop_triggers.set()
        if armed:
            with contextlib.suppress(Exception):
                if not finished:
                    await loop.run_in_executor(None, api.command, "abort")
                await loop.run_in_executor(None, api.command, "disarm")
        if report is not None:
            report.update(record)
        if nodes:
            await _end_everywhere(client, job, nodes, {})


class Live:
    """A live run on a Dask cluster (:func:`live`): an iterator of
    :class:`stemdot.LiveUpdate` and a context manager, as :class:`stemdot.Live`. Leaving
    it early (``break``, an exception, Ctrl-C) or :meth:`close` aborts the acquisition
    (SIMPLON abort and disarm) and ends the workers' runs; the iterator ends after the
    final item, whose result is then also ``Live.result``."""

    def __init__(self, client, source, agen, notes, job, api):
        self.source = source
        self.result = None
        self._client, self._agen, self._notes, self._job, self._api = client, agen, notes, job, api

    def __iter__(self):
        return self

    def __next__(self):
        if self._agen is None:
            raise StopIteration
        try:
            update = self._client.sync(self._agen.__anext__)
        except StopAsyncIteration:
            self._agen = None
            raise StopIteration from None
        except BaseException:
            self.close()
            raise
        finally:
            self._issue()
        if update.final:
            self.result = update.result
            self.close()
        return update

    def _issue(self):
        notes, self._notes[:] = list(self._notes), []
        for note in notes:
            _warn(note, stacklevel=4)

    @property
    def closed(self):
        return self._agen is None

    def close(self):
        """Ends the run (idempotent): the acquisition aborted if it still runs, the
        workers' runs ended."""
        agen, self._agen = self._agen, None
        if agen is None:
            return
        try:
            self._client.sync(agen.aclose)
        except RuntimeError:  # interrupted while it ran (Ctrl-C): end it from here
            _cancel_everywhere(self._client, self._job)
            with contextlib.suppress(Exception):
                self._api.command("abort")
                self._api.command("disarm")
        finally:
            self._issue()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"<stemdot.dask.Live {self.source}: {'closed' if self.closed else 'running'}>"


def live(client, source, masks, *, nav_shape, dectris_api, stream="v2", dtype=np.float32, every=0.25, names=None,
         workers=None, timeout=120, idle_timeout=10.0, trigger_mode=None, nimages=None, ntrigger=None, report=None,
         **source_options):
    """Applies a mask stack to the frames of a DECTRIS detector's acquisition on every
    node of ``client``'s cluster while the scan runs, and returns a :class:`Live`: an
    iterator of :class:`stemdot.LiveUpdate` (the images so far, merged from the
    workers' rows by frame index, NaN where no worker has the frame yet; the frames
    done; the frames received), whose last item is the final result, and a context
    manager, as :func:`stemdot.live`::

        client = Client("tcp://scheduler:8786")
        with stemdot.dask.live(client, "dectris://10.0.0.5:31001", masks, nav_shape=(256, 256),
                               dectris_api="10.0.0.5:80") as run:
            for update in run:
                show(update.result[..., 0])
        images = update.result            # a stemdot.Result, as stemdot.apply_masks gives

    How: each Dask worker (``workers``: addresses, default all of them, e.g. one per
    node) receives a share of the stream (the detector's ZeroMQ PUSH socket deals its
    frames out in turn to every connected socket) and computes it on its node's plan; the
    client arms the detector once every socket is connected, passes the series' header
    and end (each comes to one worker) to the others, and merges the rows (see the module
    doc). The final result equals :func:`stemdot.apply_masks` on the same frames (a file
    of them) bit for bit, each frame computed once.

    source: ``"dectris://HOST[:PORT]"``, the stream (port 31001 for stream v2, 9999 for
      v1), as every worker's node reaches it. dectris_api: the SIMPLON API's
      ``HOST[:PORT]``, as the client reaches it: the client configures (the stream
      enabled, its format; nimages 1 and ntrigger the scan's positions unless nimages or
      ntrigger are given; trigger_mode where given), arms and at the end disarms it; with
      trigger modes ints and inte it sends the triggers.
    nav_shape: the scan's shape (the series sends as many frames). stream: "v2" or "v1".
    masks, dtype, names: as for :func:`stemdot.live`. every: seconds between updates.
    source_options: the workers' receivers' (channel, pixel_mask).
    timeout: seconds for the workers' set-up, for every socket to connect (else a
      ClusterError naming the workers), and for the series' header to come.
    idle_timeout: seconds without a frame at any worker, after the first frame, after
      which the series is taken as ended (its end message went to a worker that died).
    report: a dict, filled with ``workers`` (the stream's), ``frames`` (worker → frames
      it computed), ``lost`` (workers that left during the scan), ``repeated`` (frames
      that came to two workers: kept once), ``header_from`` (the worker the header came
      to) and ``end`` (why the series was taken as ended).

    A worker that dies mid-scan (killed, its node gone) takes the frames it had received
    and not yet handed over with it: the final item is ``partial``, NaN at those
    positions (``positions_without_frame``, also in ``result.info["live"]``, with
    ``lost_workers``), a UserWarning names them; the values of every other position are
    apply_masks'. Raises :class:`stemdot.InvalidArgumentError` (a source that is not
    DECTRIS, no dectris_api or nav_shape, an option the client keeps, a detector
    configured for another number of images), :class:`ClusterError` (no worker, a socket
    that does not connect, every worker of the stream gone), the workers' errors
    (:class:`stemdot.ShapeError` for masks of another frame shape, StemdotIOError for a
    header that did not come, ...), StemdotIOError for the SIMPLON API. The synchronous
    twin of :func:`live_async`.
    """
    _synchronous(client, "live", "async for update in stemdot.dask.live_async(client, ...)")
    _arguments(source, masks, nav_shape, dectris_api, stream, dtype, every, names, source_options)
    notes, job = [], uuid.uuid4().hex
    agen = _live(client, source, masks, job=job, notes=notes, nav_shape=nav_shape, dectris_api=dectris_api, stream=stream,
                 dtype=dtype, every=every, names=names, workers=workers, timeout=timeout, idle_timeout=idle_timeout,
                 trigger_mode=trigger_mode, nimages=nimages, ntrigger=ntrigger, report=report, **source_options)
    return Live(client, source, agen, notes, job, _Simplon(dectris_api))


async def live_async(client, source, masks, **kwargs):
    """:func:`live` for an asynchronous client: ``async for update in
    stemdot.dask.live_async(client, source, masks, ...)``, with the keywords of live; its
    warnings are issued as the updates come."""
    notes = []
    agen = _live(client, source, masks, job=uuid.uuid4().hex, notes=notes, **kwargs)
    try:
        async for update in agen:
            for note in notes:
                _warn(note, stacklevel=2)
            notes.clear()
            yield update
    finally:
        await agen.aclose()
        for note in notes:
            _warn(note, stacklevel=2)
