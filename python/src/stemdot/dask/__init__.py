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

__all__ = ["StemdotPlugin", "bootstrap", "apply_masks", "reduce", "dataset_info", "centre", "live", "bootstrap_async",
           "apply_masks_async", "reduce_async", "dataset_info_async", "live_async", "ClusterError", "RANGE_BYTES",
           "RANGE_SECONDS"]

# The modules by concern: the worker side and bootstrap, the range scheduler, the API.
# RANGE_BYTES and RANGE_SECONDS are read through the package (stemdot.dask.RANGE_BYTES = n
# sets them); the other constants where they are defined. The names with a leading
# underscore are re-exported for stemdot.dask._live, python -m stemdot.dask and the tests,
# which use them as stemdot.dask._name.
from ._plugin import (
    DATASET_CACHE,
    PLUGIN_NAME,
    POLL_S,
    SCHEDULER_ANSWER_S,
    SCHEDULER_TIMEOUT_S,
    ClusterError,
    JobDataMissing,
    StemdotPlugin,
    _bootstrap,
    _cancel_everywhere,
    _file_size,
    _info_task,
    _live_async,
    _live_workers,
    _pack_masks,
    _put_job,
    _scheduler_workers,
    _SparseMasks,
    _synchronous,
    _warn,
    _within,
    _workers_now,
    bootstrap,
    bootstrap_async,
)
from ._ranges import (
    GPU_RANGE_FACTOR,
    HANG_FACTOR,
    HANG_FIRST_S,
    HANG_FLOOR_S,
    RANGE_BYTES,
    RANGE_SECONDS,
    SEND_RETRY_MAX_S,
    SEND_RETRY_S,
    _client_options,
    _client_path,
    _dataset_info,
    _end_everywhere,
    _guided_size,
    _hang_limit,
    _range_size,
)
from ._api import (
    _merge,
    apply_masks,
    apply_masks_async,
    centre,
    dataset_info,
    dataset_info_async,
    reduce,
    reduce_async,
)
from . import _api, _plugin, _ranges

# The classes the package names keep it as their module, as before its split into modules:
# tracebacks and reprs say stemdot.dask.ClusterError, pickles refer to stemdot.dask.StemdotPlugin.
for _module in (_plugin, _ranges, _api):
    for _name, _value in vars(_module).items():
        if isinstance(_value, type) and _value.__module__ == _module.__name__ and globals().get(_name) is _value:
            _value.__module__ = __name__


# Not in __all__ but used through the package (the constants; the private names by
# stemdot.dask._live, python -m stemdot.dask and the tests): named here so that linters
# see them used.
_REEXPORTED = (
    DATASET_CACHE, PLUGIN_NAME, POLL_S, SCHEDULER_ANSWER_S, SCHEDULER_TIMEOUT_S, JobDataMissing,
    _bootstrap, _cancel_everywhere, _file_size, _info_task, _live_async, _live_workers, _pack_masks,
    _put_job, _scheduler_workers, _SparseMasks, _synchronous, _warn, _within, _workers_now,
    GPU_RANGE_FACTOR, HANG_FACTOR, HANG_FIRST_S, HANG_FLOOR_S, SEND_RETRY_MAX_S, SEND_RETRY_S,
    _client_options, _client_path, _dataset_info, _end_everywhere, _guided_size, _hang_limit,
    _range_size, _merge,
)

from ._live import live, live_async  # noqa: E402
