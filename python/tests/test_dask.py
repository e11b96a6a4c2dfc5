"""stemdot.dask on a LocalCluster of 2 worker processes × 1 thread: results equal to the
single-process ones, set-up once, small messages, a killed worker, resource routing."""

import asyncio
import json
import os
import pickle
import signal
import shutil
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")

from distributed import Client, LocalCluster, WorkerPlugin  # noqa: E402
from distributed.diagnostics.plugin import SchedulerPlugin  # noqa: E402

import stemdot  # noqa: E402
import stemdot.dask as sdask  # noqa: E402

SIG = (256, 256)
BIG_FRAMES = 4096  # 4096 frames of 256×256 uint16: 512 MiB
TIMEOUT = 180  # generous: a loaded 2-core machine


def make_cluster(**kwargs):
    return LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=40, **kwargs
    )


@pytest.fixture(scope="module")
def cluster():
    with make_cluster() as c:
        yield c


@pytest.fixture(scope="module")
def client(cluster):
    with Client(cluster, timeout=TIMEOUT) as c:
        c.wait_for_workers(2, timeout=TIMEOUT)
        yield c


@pytest.fixture(scope="module")
def big_file(tmp_path_factory):
    """A 512 MiB NPY scan (64×64 positions of 256×256 uint16 frames) of random counts
    with a moving bright disk, and its masks."""
    path = tmp_path_factory.mktemp("big") / "scan.npy"
    data = np.lib.format.open_memmap(path, mode="w+", dtype=np.uint16, shape=(64, 64) + SIG)
    rng = np.random.default_rng(7)
    yy, xx = np.mgrid[: SIG[0], : SIG[1]]
    for row in range(64):
        frames = rng.integers(0, 50, size=(64,) + SIG, dtype=np.uint16)
        cy, cx = 128 + (row - 32), 128
        frames[:, (yy - cy) ** 2 + (xx - cx) ** 2 <= 400] += np.uint16(1000)
        data[row] = frames
    data.flush()
    del data
    assert path.stat().st_size >= 512 << 20
    masks = np.concatenate([stemdot.disk(SIG, 128, 128, 20), stemdot.ring(SIG, 128, 128, 30, 100), stemdot.com(SIG)])
    return path, masks


@pytest.fixture(scope="module")
def big_reference(big_file):
    path, masks = big_file
    with stemdot.open(path) as ds:
        return stemdot.apply_masks(ds, masks)


def real_files(data_dir):
    """Every real detector file: MIB (all pixel depths), BLO, HDF5 (unless the library was
    built without HDF5: then with a warning)."""
    files = sorted((data_dir / "mib").glob("*.mib")) + sorted(data_dir.glob("blo/*.blo"))
    hdf5 = sorted(data_dir.glob("hdf5/*.hdf5"))
    if hdf5:
        try:
            stemdot.open(hdf5[0]).close()
        except stemdot.FormatError as e:
            if "built without HDF5" not in str(e):
                raise
            warnings.warn(f"{len(hdf5)} HDF5 files left out: {e}")
            hdf5 = []
    return files + hdf5


def plan_ids(dask_worker):
    plugin = dask_worker.plugins["stemdot"]
    return id(plugin.plan), plugin.node["pid"]


def test_real_files_equal_single_process(client, data_dir):
    files = real_files(data_dir)
    assert len(files) >= 10
    for path in files:
        with stemdot.open(path) as ds:
            masks = np.concatenate([stemdot.disk(ds.sig_shape, ds.sig_shape[1] / 2, ds.sig_shape[0] / 2, 40), stemdot.com(ds.sig_shape)])
            want = stemdot.apply_masks(ds, masks)
            want64 = stemdot.apply_masks(ds, masks, dtype=np.float64)
        report = {}
        got = sdask.apply_masks(client, path, masks, range_frames=2, report=report)
        assert got.dtype == np.float32 and got.shape == want.shape
        np.testing.assert_array_equal(got, want, err_msg=path.name)
        assert got.info.get("calibration") == want.info.get("calibration"), path.name  # the file's (issue #35)
        assert sum(r[1] for r in report["ranges"]) == int(np.prod(want.shape[:-1]))
        got64 = sdask.apply_masks(client, path, masks, out_dtype=np.float64, range_frames=3)
        np.testing.assert_array_equal(got64, want64, err_msg=path.name)


def test_nav_shape_option_and_numpy_reference(client, data_dir):
    path = data_dir / "mib" / "001_4x2_6bit.mib"
    raw = np.fromfile(path, dtype=np.uint8).reshape(8, 384 + 256 * 256)[:, 384:].reshape(8, *SIG)
    masks = np.concatenate([stemdot.disk(SIG, 42, 126, 30), stemdot.ring(SIG, 128, 128, 10, 60)])
    want = np.einsum("fyx,myx->fm", raw.astype(np.float64), masks.astype(np.float64)).reshape(2, 4, 2)
    got = sdask.apply_masks(client, path, masks, nav_shape=(2, 4), range_frames=1)
    assert got.shape == (2, 4, 2)
    np.testing.assert_array_equal(got, want.astype(np.float32))


def test_scan_of_planes(client, tmp_path):
    """A 5-D NPY file keeps its nav shape (2, 3, 4) (#33): frame ranges that cross rows and
    planes, an ROI of that shape and shifts of nav_shape + (2,), against numpy."""
    rng = np.random.default_rng(33)
    frames = rng.integers(0, 500, size=(2, 3, 4, 8, 9), dtype=np.uint16)
    path = tmp_path / "planes.npy"
    np.save(path, frames)
    masks = rng.standard_normal((2, 8, 9))
    want = np.einsum("...yx,myx->...m", frames.astype(np.float64), masks)
    got = sdask.apply_masks(client, path, masks, out_dtype=np.float64, range_frames=5)
    assert got.shape == (2, 3, 4, 2)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-3)
    roi = np.zeros((2, 3, 4), bool)
    roi[0, 2, 1:] = roi[1, 0, :2] = True
    part = sdask.apply_masks(client, path, masks, out_dtype=np.float64, range_frames=2, roi=roi)
    np.testing.assert_allclose(part[roi], want[roi], rtol=1e-6, atol=1e-3)
    assert np.isnan(part[~roi]).all()
    shifts = np.zeros((2, 3, 4, 2))
    shifts[..., 1] = 1  # right one column: the point mask at (x=4, y=5) reads x = 5
    moved = sdask.apply_masks(client, path, stemdot.point((8, 9), 4, 5), out_dtype=np.float64, range_frames=7, shifts=shifts)
    np.testing.assert_array_equal(moved[..., 0], frames[..., 5, 5].astype(np.float64))


def test_big_synthetic_file(client, big_file, big_reference):
    path, masks = big_file
    report = {}
    done = []
    got = sdask.apply_masks(client, path, masks, progress=lambda d, t: done.append((d, t)), report=report)
    np.testing.assert_array_equal(got, big_reference)
    # independent float64 reference on a few frames
    frames = np.load(path, mmap_mode="r")
    for y, x in [(0, 0), (31, 17), (63, 63)]:
        ref = np.einsum("yx,myx->m", frames[y, x].astype(np.float64), masks.astype(np.float64))
        np.testing.assert_allclose(got[y, x], ref, rtol=1e-6)
    # ranges: multiples of the executing node's worker count, covering every frame once
    nodes = report["nodes"]
    covered = np.zeros(BIG_FRAMES, dtype=int)
    for first, count, worker, _, _ in report["ranges"]:
        covered[first : first + count] += 1
        if first + count < BIG_FRAMES:
            assert count % nodes[worker]["n_workers"] == 0
    assert (covered == 1).all()
    assert len({r[2] for r in report["ranges"]}) == 2, "both workers computed ranges"
    assert done[-1] == (BIG_FRAMES, BIG_FRAMES) and [d for d, _ in done] == sorted(d for d, _ in done)


def test_guided_range_sizes():
    # before a rate is measured: the first range's size
    assert sdask._guided_size(100, None, [None, None], 10_000, 0.5) == 100
    # target seconds at the node's rate (1000 frames/s × 0.5 s), while far from the end
    assert sdask._guided_size(100, 1000.0, [1000.0, 1000.0], 100_000, 0.5) == 500
    # toward the end: half the node's share by rate of the 1200 frames left (1200 × 1/4 / 2)
    assert sdask._guided_size(100, 1000.0, [1000.0, 3000.0], 1200, 0.5) == 150
    # a node not measured yet counts as the mean of the measured ones (1200 × 1/2 / 2)
    assert sdask._guided_size(100, 1000.0, [1000.0, None], 1200, 0.5) == 300
    # rounded down to a multiple of the node's stemdot workers, never below the first size
    assert sdask._guided_size(100, 1000.0, [1000.0, None], 1200, 0.5, multiple=7) == 294
    assert sdask._guided_size(100, 1000.0, [1000.0, 1000.0], 120, 0.5) == 100


def test_default_ranges_sized_by_measured_rate(client, big_file, big_reference, monkeypatch):
    """Without range_frames: a node's first range holds RANGE_BYTES per stemdot worker,
    its later ones about RANGE_SECONDS of its measured work, shrinking toward the end of
    the scan (at most half the frames not handed out yet)."""
    path, masks = big_file
    monkeypatch.setattr(sdask, "RANGE_BYTES", 16 * SIG[0] * SIG[1] * 2)  # 16 frames per stemdot worker
    monkeypatch.setattr(sdask, "RANGE_SECONDS", 60.0, raising=False)  # bounded by the frames left only
    report = {}
    got = sdask.apply_masks(client, path, masks, report=report)
    np.testing.assert_array_equal(got, big_reference)
    nodes = report["nodes"]
    ranges = sorted(report["ranges"])
    covered = np.zeros(BIG_FRAMES, dtype=int)
    firsts = {}
    for first, count, worker, _, _ in ranges:
        covered[first : first + count] += 1
        base = 16 * nodes[worker]["n_workers"]
        firsts.setdefault(worker, count)
        if first + count < BIG_FRAMES:
            assert count % nodes[worker]["n_workers"] == 0
        assert count <= max(base, -(-(BIG_FRAMES - first) // 2)), (first, count)
    assert (covered == 1).all()
    assert all(count == 16 * nodes[w]["n_workers"] for w, count in firsts.items()), firsts
    assert max(r[1] for r in ranges) >= BIG_FRAMES // 8, "later ranges grow with the measured rate"
    assert len(ranges) < BIG_FRAMES // 32, "far fewer ranges than at the first range's size"


def test_sparse_mask_stacks_travel_packed_and_exact():
    stack = np.zeros((3, 16, 16), dtype=np.float32)
    stack[0, 2, 3], stack[1, 5, 5], stack[2, 15, 15], stack[2, 0, 0] = 1.5, -0.0, np.nan, 1e-45
    packed = sdask._pack_masks(stack)
    assert isinstance(packed, sdask._SparseMasks) and packed.indices.size == 4
    dense = pickle.loads(pickle.dumps(packed)).dense()
    assert dense.dtype == stack.dtype and dense.shape == stack.shape
    assert dense.tobytes() == stack.tobytes(), "bit for bit, -0.0 and NaN included"
    full = np.arange(1, 1 + 2 * 8 * 8, dtype=np.float64).reshape(2, 8, 8)
    assert sdask._pack_masks(full) is full, "a dense stack is sent as it is"


def prepared_masks_lifecycle(dask_worker):
    """On a worker: the plugin prepares a job's mask stack at its first range, once, and
    frees it when no range uses it after the job's data is put again or the job ends;
    returns what it saw."""
    plugin = dask_worker.plugins["stemdot"]
    plugin.wait_ready()

    def live(handle):  # the library still holds the stack of handle
        stemdot._LIB.stemdot_apply_masks(0, handle, None, 0, 0, 0, stemdot._lib.PROGRESS_FN(), None, None, 8, 0)
        return "masks handle" not in stemdot._LIB.stemdot_last_error().decode()

    masks = np.zeros((2,) + SIG, dtype=np.float32)
    masks[0, 5, 6], masks[1] = 1, 0.5
    job = "lifecycle-" + str(os.getpid())
    plugin.put_job(job, {"masks": masks, "shifts": None})
    first = plugin.job_masks(job)
    seen = {"once": plugin.job_masks(job) is first and first.shape == masks.shape, "live": live(first.handle)}
    plugin.put_job(job, {"masks": masks, "shifts": None})  # the data sent again
    seen["kept while a range holds it"] = live(first.handle)
    handle, first = first.handle, None
    seen["freed after"] = not live(handle)
    second = plugin.job_masks(job)
    handle, second = second.handle, None
    seen["kept by the job"] = live(handle)
    plugin.end_job(job)
    seen["freed at the job's end"] = not live(handle)
    return seen


def test_job_masks_prepared_once_and_freed(client):
    """Each worker prepares a job's mask stack once (stemdot_masks_new), applies it to
    every range, and frees it once the job's data is dropped and no range uses it."""
    sdask.bootstrap(client)
    want = {"once": True, "live": True, "kept while a range holds it": True, "freed after": True,
            "kept by the job": True, "freed at the job's end": True}
    assert list(client.run(prepared_masks_lifecycle).values()) == [want, want]


def test_job_data_sent_packed_for_a_radial_profile(client, big_file, monkeypatch):
    """The mask stack of a radial profile (thin rings, mostly zeros) reaches each worker
    in far fewer bytes than its dense float32 array, and the result is the same."""
    path, _ = big_file
    masks = np.concatenate([stemdot.ring(SIG, 128, 128, r + 0.5, r + 1.5) for r in range(64)] + [stemdot.com(SIG)])
    with stemdot.open(path, frames=(0, 256)) as ds:
        want = stemdot.apply_masks(ds, masks)
    sent = []
    run = client.run

    def spy(function, *args, **kwargs):
        if function is sdask._put_job:
            sent.append(len(pickle.dumps(args[1], protocol=5)))
        return run(function, *args, **kwargs)

    monkeypatch.setattr(client, "run", spy)
    got = sdask.apply_masks(client, path, masks, frames=(0, 256), range_frames=32)
    np.testing.assert_array_equal(got, want)
    assert sent and max(sent) < masks.nbytes // 4, (sent, masks.nbytes)


def test_cancel_as_the_scheduler_answers_is_not_lost():
    """A cancel of the job's task (apply_masks_async cancelled during its set-up) that
    arrives as the scheduler's answer does cancels it: asyncio.wait_for before Python 3.12
    dropped such a cancel and returned the answer, and the job ran to its end."""
    async def main():
        outer = None

        class Scheduler:
            address = "tcp://127.0.0.1:1"

            async def identity(self, n_workers):
                outer.cancel()  # the caller cancels while the answer lands
                return {"workers": {}}

        class FakeClient:
            status = "running"
            scheduler = Scheduler()

        outer = asyncio.ensure_future(sdask._scheduler_workers(FakeClient()))
        with pytest.raises(asyncio.CancelledError):
            await outer

    asyncio.run(main())


def _refuse_job_data(dask_worker):
    """On a worker: its plugin refuses every job's data (put_job raises)."""
    def refuse(job, data):
        raise RuntimeError("test: this worker refuses the job's data")

    dask_worker.plugins["stemdot"].put_job = refuse


def _restore_put_job(dask_worker):
    dask_worker.plugins["stemdot"].__dict__.pop("put_job", None)


@pytest.mark.parametrize("how", ["put_job fails", "client.run raises"])
def test_failed_send_of_job_data_is_retried_after_a_pause(client, tmp_path, monkeypatch, how):
    """A worker whose send of the job's data keeps failing, by an error of its put_job
    (returned by client.run) or by client.run itself raising (the scheduler's connection),
    is sent the data again after 0.1 s, then 0.2, 0.4, ... (up to SEND_RETRY_MAX_S), not in
    a busy loop nor every 0.1 s (each send relays the stack through the scheduler); the other worker
    computes the whole job, equal to a local run."""
    sdask.bootstrap(client)
    path = tmp_path / "scan.npy"
    data = np.random.default_rng(3).integers(0, 100, size=(1200, 64, 64), dtype=np.uint16)
    np.save(path, data)
    masks = np.random.default_rng(4).uniform(0, 1, (4, 64, 64)).astype(np.float32)  # dense
    want = np.einsum("fyx,myx->fm", data.astype(np.float64), masks.astype(np.float64))
    victim = sorted(sdask._workers_now(client))[1]
    sends = []
    run = client.run

    def spy(function, *args, **kwargs):
        if function is sdask._put_job and kwargs.get("workers") == [victim]:
            sends.append(time.monotonic())
            if how == "client.run raises":
                async def fail():
                    raise OSError("test: the scheduler's connection broke")

                return fail()
        return run(function, *args, **kwargs)

    if how == "put_job fails":
        client.run(_refuse_job_data, workers=[victim])
    monkeypatch.setattr(client, "run", spy)
    try:
        got = sdask.apply_masks(client, path, masks, range_frames=10)
    finally:
        monkeypatch.undo()
        client.run(_restore_put_job, workers=[victim])
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert sends, "the victim was sent the job's data"
    gaps = np.diff(sends)
    pauses = np.minimum(sdask.SEND_RETRY_S * 2.0 ** np.arange(gaps.size), sdask.SEND_RETRY_MAX_S)
    assert (gaps >= 0.9 * pauses).all(), f"{len(sends)} sends to {victim}, {np.round(gaps, 4)} s apart"


def test_bootstrap_twice_and_from_two_clients(cluster, client):
    first = sdask.bootstrap(client)
    before = client.run(plan_ids)
    assert sorted(first) == sorted(before)
    for node in first.values():
        assert node["n_workers"] >= 1 and node["plan"]["workers"]
    assert sorted(c for n in first.values() for c in n["cpus"]) == sorted(os.sched_getaffinity(0)), (
        "the two workers of this node share its cores out"
    )
    results = []
    with Client(cluster, timeout=TIMEOUT) as other:
        threads = [threading.Thread(target=lambda c=c: results.append(sdask.bootstrap(c))) for c in (client, other, client)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(TIMEOUT)
    assert len(results) == 3 and all(r == first for r in results)
    assert client.run(plan_ids) == before, "the same plan object in the same worker process"


def test_pickled_task_inputs_and_results_are_small(cluster, client, big_file, big_reference):
    class Sizes(SchedulerPlugin):
        name = "stemdot-test-sizes"

        def __init__(self):
            self.results, self.specs = [], []

        async def start(self, scheduler):
            self.scheduler = scheduler

        def transition(self, key, start, finish, *args, **kwargs):
            if str(key).startswith("stemdot-range") and finish == "memory":
                ts = self.scheduler.tasks[key]
                self.results.append(ts.nbytes)
                self.specs.append(len(pickle.dumps(ts.run_spec)))

    client.register_plugin(Sizes())
    sizes = cluster.scheduler.plugins["stemdot-test-sizes"]
    path, masks = big_file
    report = {}
    got = sdask.apply_masks(client, path, masks, report=report)
    np.testing.assert_array_equal(got, big_reference)
    n = len(report["ranges"])
    assert len(sizes.results) == n and len(sizes.specs) == n
    n_masks = masks.shape[0]
    assert sum(sizes.results) <= BIG_FRAMES * n_masks * 8 + 1024 * n, sizes.results
    assert max(sizes.specs) < 4096 < masks.nbytes, "no masks and no frames inside a task"


class KillAfterFirstRange(WorkerPlugin):
    """os._exit of the worker at `target` (None: of every worker) when it starts its
    second range (its first is complete)."""

    name = "stemdot-test-killer"

    def __init__(self, target):
        self.target = target

    def setup(self, worker):
        self.worker, self.started = worker, 0

    def transition(self, key, start, finish, **kwargs):
        if self.target in (None, self.worker.address) and str(key).startswith("stemdot-range") and finish == "executing":
            self.started += 1
            if self.started == 2:
                os._exit(1)


def test_killed_worker_gives_identical_result(big_file, big_reference):
    path, masks = big_file
    with make_cluster() as cluster, Client(cluster, timeout=TIMEOUT) as client:
        client.wait_for_workers(2, timeout=TIMEOUT)
        nodes = sdask.bootstrap(client)
        victim = sorted(nodes)[0]
        client.register_plugin(KillAfterFirstRange(victim))
        report = {}
        got = sdask.apply_masks(client, path, masks, range_frames=128, report=report)
        np.testing.assert_array_equal(got, big_reference)
        assert any(lost[2] == victim for lost in report["lost"]), report["lost"]
        assert all(r[2] != victim for r in report["ranges"] if r[3] > 1), "recomputed elsewhere"
        # the Nanny restarts the worker and the plugin sets it up again
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            live = sdask._live_workers(client)
            if len(live) == 2 and victim not in live:
                break
            time.sleep(0.2)
        again = sdask.bootstrap(client)
        assert victim not in again and len(again) == 2
        assert sorted(s["slot"] for s in again.values()) == [0, 1]


def limited(fn, seconds=TIMEOUT):
    """fn() in a thread: its result, or the exception it raised; fails if it hangs."""
    outcome = []

    def run():
        try:
            outcome.append(fn())
        except BaseException as e:
            outcome.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert outcome, f"hangs: no answer after {seconds} s"
    return outcome[0]


def test_all_workers_dying_is_a_cluster_error(big_file):
    """Both workers die during the run (and their restarts too), so that every range is
    lost max_attempts times: a ClusterError naming them, the memory_limit and what
    helps, not distributed's "FutureCancelledError ... already forgotten"."""
    path, masks = big_file
    with make_cluster(memory_limit="3GiB") as cluster, Client(cluster, timeout=TIMEOUT) as client:
        client.wait_for_workers(2, timeout=TIMEOUT)
        nodes = sdask.bootstrap(client)
        client.register_plugin(KillAfterFirstRange(None))
        err = limited(lambda: sdask.apply_masks(client, path, masks, range_frames=128))
    assert isinstance(err, sdask.ClusterError), repr(err)
    msg = str(err)
    assert "left the cluster" in msg and all(a in msg for a in nodes), msg
    assert "were lost 4 times with their workers" in msg and "memory_limit (3.00 GiB)" in msg, msg
    assert "Give each worker the memory it needs" in msg and "--memory-limit" in msg, msg


def test_paused_workers_are_a_cluster_error(big_file):
    """Workers paused by Dask for their memory (here: a pause threshold of 1 % of a
    memory_limit of 2 GiB) run no task: a ClusterError naming the pause and the
    memory_limit within the timeout, not a hang, "Can not use replicate to delete data"
    or "no running worker ... has the resources None"."""
    path, masks = big_file
    import dask

    with dask.config.set({"distributed.worker.memory.pause": 0.01, "distributed.worker.memory.terminate": False}):
        with make_cluster(memory_limit="2GiB") as cluster, Client(cluster, timeout=TIMEOUT) as client:
            deadline = time.monotonic() + TIMEOUT  # (wait_for_workers counts running workers only)
            while time.monotonic() < deadline:
                workers = sdask._workers_now(client)
                if len(workers) == 2 and all(w["status"] == "paused" for w in workers.values()):
                    break
                time.sleep(0.1)
            assert not sdask._live_workers(client) and len(workers) == 2, "the workers did not pause"
            err = limited(lambda: sdask.apply_masks(client, path, masks, timeout=10))
    assert isinstance(err, sdask.ClusterError), repr(err)
    msg = str(err)
    assert "2 of the 2 Dask workers are paused" in msg and "above 1% of their memory_limit (2.00 GiB" in msg, msg
    assert "Give each worker the memory it needs" in msg, msg


def test_fake_gpu_resource_routes_work(cluster, client, big_file, big_reference, tmp_path):
    """A third worker, started like a GPU node (dask worker --resources GPU=1, its own
    Nanny process), takes all ranges that need the GPU resource; the library is loaded in
    its worker process, not in its Nanny."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    worker = subprocess.Popen(
        [sys.executable, "-m", "distributed.cli.dask_worker", cluster.scheduler_address, "--nthreads", "1",
         "--resources", "GPU=1", "--no-dashboard", "--local-directory", str(tmp_path)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        client.wait_for_workers(3, timeout=TIMEOUT)
        nodes = sdask.bootstrap(client)
        workers = sdask._workers_now(client)
        gpu = [a for a in nodes if workers[a]["resources"].get("GPU")]
        assert len(gpu) == 1
        gpu = gpu[0]
        assert any("GPU resource" in w for w in nodes[gpu]["warnings"])
        loaded = lambda: "libstemdot" in open("/proc/self/maps").read()  # noqa: E731
        assert client.run(loaded, workers=[gpu]) == {gpu: True}
        assert list(client.run(loaded, workers=[gpu], nanny=True).values()) == [False]

        path, masks = big_file
        report = {}
        got = sdask.apply_masks(client, path, masks, resources={"GPU": 1}, report=report)
        np.testing.assert_array_equal(got, big_reference)
        assert {r[2] for r in report["ranges"]} == {gpu}
        report = {}
        got = sdask.apply_masks(client, path, masks, range_frames=64, report=report)
        np.testing.assert_array_equal(got, big_reference)
        assert len({r[2] for r in report["ranges"]}) == 3, "mixed nodes all compute"
        assert {r[1] for r in report["ranges"] if r[2] == gpu and r[0] + r[1] < BIG_FRAMES} == {
            64 * nodes[gpu]["n_workers"]}, "a GPU resource without a GPU: CPU-sized ranges"
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(60)
        deadline = time.monotonic() + TIMEOUT
        while len(sdask._live_workers(client)) > 2 and time.monotonic() < deadline:
            time.sleep(0.2)


def test_errors_cancel_and_propagate(client, big_file, data_dir, tmp_path):
    path, masks = big_file
    with pytest.raises(stemdot.StemdotIOError, match="missing.mib: No such file"):
        sdask.apply_masks(client, tmp_path / "missing.mib", masks)
    with pytest.raises(stemdot.ShapeError, match="do not match the sig shape"):
        sdask.apply_masks(client, path, masks[:, :100])

    class Stop(Exception):
        pass

    def stop(done, total):
        raise Stop

    with pytest.raises(Stop):
        sdask.apply_masks(client, path, masks, range_frames=64, progress=stop)

    def cancelled_and_idle(dask_worker):
        plugin = dask_worker.plugins["stemdot"]
        return len(plugin._cancelled), len(plugin._runs)

    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        state = client.run(cancelled_and_idle)
        if all(c >= 1 and r == 0 for c, r in state.values()):
            break
        time.sleep(0.2)
    assert all(c >= 1 and r == 0 for c, r in state.values()), state
    # the cluster still works after a cancelled run; a path relative to the client's
    # working directory is made absolute before it goes to the workers
    mib = data_dir / "mib" / "001_4x2_6bit.mib"
    cwd = os.getcwd()
    os.chdir(mib.parent)
    try:
        got = sdask.apply_masks(client, mib.name, stemdot.disk(SIG, 42, 126, 30))
    finally:
        os.chdir(cwd)
    with stemdot.open(mib) as ds:
        np.testing.assert_array_equal(got, stemdot.apply_masks(ds, stemdot.disk(SIG, 42, 126, 30)))


def test_command_line(cluster, data_dir, tmp_path):
    path = data_dir / "mib" / "Single_9_Frame_CounterDepth_12_Rows_256.mib"
    out = tmp_path / "r.npy"
    proc = subprocess.run(
        [sys.executable, "-m", "stemdot.dask", "--scheduler", cluster.scheduler_address, str(path),
         "--mask", "disk:128,128,40", "--mask", "com", "--out", str(out), "--quiet", "--range-frames", "2"],
        capture_output=True, text=True, timeout=TIMEOUT,
    )
    assert proc.returncode == 0, proc.stderr
    with stemdot.open(path) as ds:
        masks = np.concatenate([stemdot.mask("disk:128,128,40", ds.sig_shape), stemdot.com(ds.sig_shape)])
        np.testing.assert_array_equal(np.load(out), stemdot.apply_masks(ds, masks))
    bad = subprocess.run(
        [sys.executable, "-m", "stemdot.dask", "--scheduler", cluster.scheduler_address, str(path),
         "--mask", "disk:1,2", "--out", str(tmp_path / "bad.npy"), "--quiet"],
        capture_output=True, text=True, timeout=TIMEOUT,
    )
    assert bad.returncode == 1 and "disk" in bad.stderr and not (tmp_path / "bad.npy").exists()


def test_command_line_builds_the_cli_stack(cluster, cli, data_dir, tmp_path):
    """python -m stemdot.dask and stemdot apply build the same stack from --masks files
    and --mask specs, given interleaved: the files' masks first, then the specs, in the
    order given (one definition, stemdot_mask_stack); the columns equal the CLI's and
    a float64 numpy reference. With --float64 the file's float64 weights keep their
    precision on the Dask workers too."""
    path = data_dir / "mib" / "001_4x2_6bit.mib"
    rng = np.random.default_rng(17)
    a = rng.random((2,) + SIG)  # float64 weights, not exact in float32
    b = (rng.random(SIG) < 0.1).astype(np.uint8)  # one mask
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    flags = ["--mask", "disk:128,128,40", "--masks", str(tmp_path / "a.npy"), "--mask", "com",
             "--masks", str(tmp_path / "b.npy"), "--nav-shape", "2,4", "--quiet"]
    raw = np.fromfile(path, dtype=np.uint8).reshape(8, 384 + 256 * 256)[:, 384:].reshape(8, *SIG).astype(np.float64)
    stack = np.concatenate([a, b[np.newaxis], stemdot.mask("disk:128,128,40", SIG), stemdot.com(SIG)]).astype(np.float64)
    want = np.einsum("fyx,myx->fm", raw, stack).reshape(2, 4, -1)
    for extra, rtol in (([], 1e-6), (["--float64"], 1e-12)):
        cli_out, dask_out = tmp_path / "cli.npy", tmp_path / "dask.npy"
        run = subprocess.run([str(cli), "apply", str(path), *flags, *extra, "--out", str(cli_out)],
                             capture_output=True, text=True, timeout=TIMEOUT)
        assert run.returncode == 0, run.stderr
        run = subprocess.run([sys.executable, "-m", "stemdot.dask", "--scheduler", cluster.scheduler_address, str(path),
                              *flags, *extra, "--out", str(dask_out), "--range-frames", "1"],
                             capture_output=True, text=True, timeout=TIMEOUT)
        assert run.returncode == 0, run.stderr
        got, ref = np.load(dask_out), np.load(cli_out)
        assert got.shape == ref.shape == (2, 4, 7) and got.dtype == ref.dtype
        np.testing.assert_array_equal(got, ref)
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * np.abs(want).max())
    masks, names = stemdot.mask_stack(SIG, files=[tmp_path / "a.npy", tmp_path / "b.npy"], specs=["disk:128,128,40", "com"])
    assert names == ["a[0]", "a[1]", "b", "disk", "com_sum", "com_y", "com_x"]
    np.testing.assert_array_equal(masks, stack.astype(np.float32))
    # #18.5: both write the same sidecar, field by field (the plan: each its own workers).
    cli_info, dask_info = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("cli", "dask"))
    assert cli_info.keys() == dask_info.keys()
    for key in cli_info.keys() - {"plan"}:
        assert dask_info[key] == cli_info[key], key
    assert dask_info["plan"]["cpu_workers"] >= 1 and dask_info["plan"]["gpu_workers"] == 0
    assert [m["name"] for m in cli_info["masks"]] == names
    assert cli_info["masks"][1] == {"column": 1, "name": "a[1]", "file": str(tmp_path / "a.npy"), "index": 1}
    assert stemdot.load_result(dask_out).names == tuple(names)


def test_command_line_auto_specs_and_roi(cluster, cli, data_dir, tmp_path):
    """#18.2-#18.5: auto specs are made about the centre at zero shift (of the frames
    moved back by their shifts), found by the Dask command line as by stemdot apply, the masks move by the
    shifts, and a compact ROI result writes the same positions; both sidecars record the
    centre, the shifts and the ROI alike."""
    path = data_dir / "mib" / "001_4x2_6bit.mib"
    shifts = np.random.default_rng(5).random((2, 4, 2)) * 4 - 2
    np.save(tmp_path / "shifts.npy", shifts)
    flags = ["--mask", "disk:auto", "--mask", "ring:auto,30,60", "--nav-shape", "2,4", "--roi", "rect:1,0,2,2",
             "--roi-compact", "--shifts", str(tmp_path / "shifts.npy"), "--quiet"]
    cli_out, dask_out = tmp_path / "cli.npy", tmp_path / "dask.npy"
    run = subprocess.run([str(cli), "apply", str(path), *flags, "--out", str(cli_out)],
                         capture_output=True, text=True, timeout=TIMEOUT)
    assert run.returncode == 0, run.stderr
    run = dask_cli(cluster, path, *flags, "--out", dask_out, "--range-frames", "1")
    assert run.returncode == 0, run.stderr
    assert "centre x" in run.stderr
    assert_shifted_close(np.load(dask_out), np.load(cli_out))
    np.testing.assert_array_equal(np.load(tmp_path / "dask_positions.npy"), [1, 2, 5, 6])
    cli_info, dask_info = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("cli", "dask"))
    assert cli_info.keys() == dask_info.keys()
    for key in cli_info.keys() - {"plan"}:
        if key == "roi":
            assert dask_info[key] == dict(cli_info[key], positions="dask_positions.npy"), key
        else:
            assert dask_info[key] == cli_info[key], key
    assert cli_info["roi"] == {"scan_shape": [2, 4], "selected": 4, "compact": True, "positions": "cli_positions.npy"}
    with stemdot.open(path, nav_shape=(2, 4), roi="rect:1,0,2,2") as ds:  # the ROI's frames, moved back
        c = stemdot.centre(ds, cpus=1, shifts=shifts)
    assert cli_info["centre"] == {"x": c.x, "y": c.y, "r": c.r, "source": "sum frame of the frames moved back by their shifts"}
    mean = shifts.reshape(8, 2)[[1, 2, 5, 6]].mean(axis=0)
    assert cli_info["shifts"]["file"] == str(tmp_path / "shifts.npy")
    assert cli_info["shifts"]["mean"] == pytest.approx(list(mean))


def assert_shifted_close(got, want):
    """Results of shifted masks: a frame's result may differ in the last bits with the
    frames it is computed beside (doc/performance.md, "Precision and reproducibility"): equal to within
    1e-6 of the largest value, NaN where want has NaN."""
    got, want = np.asarray(got), np.asarray(want)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6 * max(np.nanmax(np.abs(want)), 1))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))


def dask_cli(cluster, *args, **kwargs):
    return subprocess.run([sys.executable, "-m", "stemdot.dask", "--scheduler", cluster.scheduler_address, *map(str, args)],
                          capture_output=True, text=True, timeout=TIMEOUT, **kwargs)


def test_dataset_warnings_reach_the_client_and_the_command_line(cluster, client, cli, data_dir, tmp_path):
    """The dataset's warnings (no scan shape in the file; surplus frames after the scan of
    the .hdr) come back from the worker that opened it: as UserWarning from apply_masks,
    in dataset_info and Dataset.warnings, and printed by python -m stemdot.dask as
    stemdot apply prints them (naming the flag)."""
    mib = data_dir / "mib" / "001_4x2_6bit.mib"
    surplus = tmp_path / "surplus.mib"  # its 8 frames, and a .hdr of a 3×2 scan
    shutil.copyfile(mib, surplus)
    surplus.with_suffix(".hdr").write_text("HDR,\t\nScanX:\t2\nScanY:\t3\nEnd\t\n")
    for path, part, flag in ((mib, "no scan shape", "--nav-shape"), (surplus, "the last 2 are surplus", "--sync-offset")):
        with pytest.warns(UserWarning, match=part):
            sdask.apply_masks(client, path, stemdot.disk(SIG, 128, 128, 40))
        assert any(part in w for w in sdask.dataset_info(client, path)["warnings"])
        with pytest.warns(UserWarning, match=part):
            ds = stemdot.open(path)
        with ds:
            assert any(part in w for w in ds.warnings)
        want = subprocess.run([str(cli), "apply", str(path), "--mask", "disk:128,128,40", "--out", str(tmp_path / "cli.npy"),
                               "--quiet"], capture_output=True, text=True, timeout=TIMEOUT)
        run = dask_cli(cluster, path, "--mask", "disk:128,128,40", "--out", tmp_path / "dask.npy", "--quiet")
        assert want.returncode == 0 and run.returncode == 0, run.stderr
        printed = [line for line in want.stderr.splitlines() if line.startswith("stemdot: warning: ")]
        assert len(printed) == 1 and part in printed[0] and flag in printed[0], want.stderr
        assert printed[0].replace("stemdot: ", "stemdot.dask: ", 1) in run.stderr.splitlines(), run.stderr


def test_command_line_refuses_an_out_that_is_not_npy(cluster, data_dir, tmp_path):
    for name in ("r.png", "r", "r.npy.tmp"):
        run = dask_cli(cluster, data_dir / "mib" / "001_4x2_6bit.mib", "--mask", "com", "--out", tmp_path / name)
        assert run.returncode == 1 and "--out" in run.stderr and "give a path ending in .npy" in run.stderr, run.stderr
        assert not list(tmp_path.iterdir())


def test_command_line_ctrl_c_exits_1_and_writes_nothing(cluster, big_file, tmp_path):
    """Ctrl-C during a run: exit status 1 (as stemdot apply), the run cancelled on the
    workers, no result file."""
    path, _ = big_file
    np.save(tmp_path / "many.npy", np.random.default_rng(3).random((256,) + SIG, dtype=np.float32))  # a run of many seconds
    out = tmp_path / "r.npy"
    proc = subprocess.Popen([sys.executable, "-m", "stemdot.dask", "--scheduler", cluster.scheduler_address, str(path),
                             "--masks", str(tmp_path / "many.npy"), "--out", str(out), "--range-frames", "8"],
                            stderr=subprocess.PIPE, text=True)
    lines = []
    for line in proc.stderr:  # the run has started when the progress bar appears
        lines.append(line)
        if "stemdot workers" in line:
            break
    time.sleep(1)
    proc.send_signal(signal.SIGINT)
    rest = proc.communicate(timeout=TIMEOUT)[1]
    assert proc.returncode == 1, "".join(lines) + rest
    assert "stemdot.dask: interrupted: no result written" in rest, rest  # as stemdot apply
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == ["many.npy"]


def test_import_does_not_load_the_library():
    """A Nanny or scheduler that unpickles the plugin imports stemdot.dask: no Go runtime."""
    code = "import stemdot, stemdot.dask; assert 'libstemdot' not in open('/proc/self/maps').read(); stemdot.library_path"
    code += "; assert 'libstemdot' in open('/proc/self/maps').read()"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=TIMEOUT)


def test_ranges_longer_than_the_poll_interval(client, big_file, big_reference, monkeypatch):
    """Tasks that take longer than the ledger's look at the workers (slow nodes, big
    ranges): the wait for them times out and the loop carries on."""
    monkeypatch.setattr(sdask._ranges, "POLL_S", 0.001)  # where the range loop reads it
    path, masks = big_file
    np.testing.assert_array_equal(sdask.apply_masks(client, path, masks), big_reference)


def test_command_line_masks_fifo_is_refused(tmp_path):
    """#17.9: a --masks path that is a FIFO is refused at once, not waited on: the stack
    of python -m stemdot.dask is built by the library (stemdot.mask_stack), which opens
    only regular files."""
    fifo = tmp_path / "m.npy"
    os.mkfifo(fifo)
    code = f"import stemdot; stemdot.mask_stack((4, 4), files=[{str(fifo)!r}], specs=['com'])"
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail(f"loading the masks blocked on the FIFO {fifo}")
    assert proc.returncode == 1
    assert "stemdot.StemdotIOError" in proc.stderr and f"{fifo} is a named pipe, not a regular file" in proc.stderr, proc.stderr


def test_command_line_flyback(cluster, tmp_path):
    """#17.6: --flyback reaches the workers' stemdot.open."""
    from test_stemdot import write_mib

    w, h = 4, 8
    frames = np.random.default_rng(6).integers(0, 9, size=((w + 1) * h, 16, 16)).astype(np.uint16)
    frames[:: w + 1] = 3000  # each row starts with its flyback frame
    path = tmp_path / "scan.mib"
    write_mib(path, frames, scan_x=w, scan_y=h)
    out = tmp_path / "r.npy"
    proc = subprocess.run(
        [sys.executable, "-m", "stemdot.dask", "--scheduler", cluster.scheduler_address, str(path),
         "--mask", "disk:8,8,5", "--out", str(out), "--quiet", "--flyback", "start"],
        capture_output=True, text=True, timeout=TIMEOUT,
    )
    assert proc.returncode == 0, proc.stderr
    want = frames.reshape(h, w + 1, 16, 16)[:, 1:].astype(np.float64)
    disk = stemdot.disk((16, 16), 8, 8, 5)[0].astype(np.float64)
    np.testing.assert_allclose(np.load(out)[..., 0], (want * disk).sum(axis=(2, 3)), rtol=1e-6)


def test_frames_option_and_size_units(cluster, client, data_dir, tmp_path):
    """#17 D6: the frames option (--frames FIRST,COUNT) computes those frames of the scan
    only, as stemdot.open(..., frames=...) reads them, cut into ranges on the workers;
    byte options take the CLI's sizes with units (--offset 1KiB); the nav shape mismatch
    message names --frames, a flag of this command."""
    rng = np.random.default_rng(11)
    frames = rng.integers(0, 4000, size=(6, 8, 8), dtype=np.uint16)
    path = tmp_path / "scan.raw"
    with open(path, "wb") as f:
        f.write(b"H" * 1024)
        for fr in frames:
            f.write(b"h" * 1024 + fr.tobytes() + b"f" * 2048)
    masks = np.concatenate([stemdot.disk((8, 8), 4, 4, 2), stemdot.com((8, 8))])
    want = np.einsum("fyx,myx->fm", frames.astype(np.float64), masks.astype(np.float64))
    raw = dict(format="raw", sig_shape=(8, 8), dtype="uint16", nav_shape=(2, 3), offset="1KiB", frame_header="1KiB",
               frame_footer="2KiB")
    got = sdask.apply_masks(client, path, masks, frames=(1, 4), range_frames=1, **raw)
    assert got.shape == (4, 4)
    np.testing.assert_allclose(got, want[1:5], rtol=1e-6)
    with stemdot.open(path, frames="1,4", **raw) as ds:
        np.testing.assert_array_equal(got, stemdot.apply_masks(ds, masks))
    np.save(tmp_path / "masks.npy", masks)
    run = dask_cli(cluster, path, "--masks", tmp_path / "masks.npy", "--out", tmp_path / "r.npy", "--quiet", "--range-frames", "1",
                   "--format", "raw", "--sig-shape", "8,8", "--dtype", "uint16", "--nav-shape", "2,3", "--offset", "1KiB",
                   "--frame-header", "1KiB", "--frame-footer", "2KiB", "--frames", "2,3")
    assert run.returncode == 0, run.stderr
    np.testing.assert_allclose(np.load(tmp_path / "r.npy"), want[2:5], rtol=1e-6)
    scan = tmp_path / "scan.mib"  # 8 frames and a .hdr of a 2×4 scan
    shutil.copyfile(data_dir / "mib" / "001_4x2_6bit.mib", scan)
    scan.with_suffix(".hdr").write_text("HDR,\t\nScanX:\t4\nScanY:\t2\nEnd\t\n")
    run = dask_cli(cluster, scan, "--mask", "com", "--out", tmp_path / "bad.npy", "--nav-shape", "3,3")
    assert run.returncode == 1 and "give --nav-shape of 8 positions (e.g. 2,4), or leave it out; --frames FIRST,COUNT reads part of the scan" in run.stderr
    assert "option " not in run.stderr, run.stderr
    assert not (tmp_path / "bad.npy").exists()


def test_roi(cluster, client, data_dir, tmp_path):
    """#18.4: roi= computes the selected frames only, in tasks over them, placed in the
    scan's nav shape with NaN elsewhere (or compact with the positions), as
    stemdot.apply_masks does; the command line's --roi and --roi-compact."""
    path = data_dir / "mib" / "001_4x2_6bit.mib"
    masks = np.concatenate([stemdot.disk((256, 256), 128, 128, 20), stemdot.com((256, 256))])
    roi = np.array([[1, 0, 1, 1], [0, 1, 0, 1]], dtype=bool)
    with stemdot.open(path, nav_shape=(2, 4)) as ds:
        full = stemdot.apply_masks(ds, masks)
    want = np.where(roi[..., None], full, np.nan)
    report = {}
    got = sdask.apply_masks(client, path, masks, nav_shape=(2, 4), roi=roi, range_frames=1, report=report)
    np.testing.assert_array_equal(got, want)
    assert sum(r[1] for r in report["ranges"]) == 5, "ranges over the 5 selected frames only"
    images, positions = sdask.apply_masks(client, path, masks, nav_shape=(2, 4), roi="rect:1,0,3,1", roi_compact=True)
    np.testing.assert_array_equal(positions, [1, 2, 3])
    np.testing.assert_array_equal(images, full.reshape(8, 4)[1:4])
    with pytest.raises(stemdot.InvalidArgumentError, match="roi_compact=True needs a region of interest"):
        sdask.apply_masks(client, path, masks, nav_shape=(2, 4), roi_compact=True)

    np.save(tmp_path / "roi.npy", roi)
    run = dask_cli(cluster, path, "--mask", "disk:128,128,20", "--mask", "com", "--nav-shape", "2,4", "--roi", tmp_path / "roi.npy",
                   "--out", tmp_path / "r.npy", "--quiet", "--range-frames", "1")
    assert run.returncode == 0, run.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "r.npy"), want)
    run = dask_cli(cluster, path, "--mask", "disk:128,128,20", "--mask", "com", "--nav-shape", "2,4", "--roi", tmp_path / "roi.npy",
                   "--roi-compact", "--out", tmp_path / "c.npy", "--quiet")
    assert run.returncode == 0, run.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "c_positions.npy"), np.flatnonzero(roi))
    np.testing.assert_array_equal(np.load(tmp_path / "c.npy"), full.reshape(8, 4)[roi.ravel()])
    run = dask_cli(cluster, path, "--mask", "com", "--nav-shape", "2,4", "--roi", "rect:3,1,2,1", "--out", tmp_path / "bad.npy")
    assert run.returncode == 1 and "--roi rect:3,1,2,1" in run.stderr and not (tmp_path / "bad.npy").exists(), run.stderr


def test_shifts_are_sliced_per_range(cluster, client, tmp_path):
    """Shifted masks on the cluster equal the single-process result: per scan position
    (ranges get their frames' shifts), constant, with frames (shifts of the whole scan or
    of the frames read), and from the command line's --shifts."""
    rng = np.random.default_rng(11)
    path = tmp_path / "small.npy"
    np.save(path, rng.integers(0, 500, (6, 7, 24, 24), dtype=np.uint16))
    masks = np.concatenate([stemdot.disk((24, 24), 12, 12, 5), stemdot.com((24, 24))])
    shifts = rng.random((6, 7, 2)) * 6 - 3
    with stemdot.open(path) as ds:
        want = stemdot.apply_masks(ds, masks, shifts=shifts)
        want_const = stemdot.apply_masks(ds, masks, shifts=(0.5, -1.25))
    assert_shifted_close(sdask.apply_masks(client, path, masks, shifts=shifts, range_frames=2), want)
    assert_shifted_close(sdask.apply_masks(client, path, masks, shifts=(0.5, -1.25), range_frames=3), want_const)
    part = sdask.apply_masks(client, path, masks, shifts=shifts, frames=(5, 20), range_frames=2)
    assert_shifted_close(part, want.reshape(42, -1)[5:25])
    part = sdask.apply_masks(client, path, masks, shifts=shifts.reshape(42, 2)[5:25], frames=(5, 20), range_frames=2)
    assert_shifted_close(part, want.reshape(42, -1)[5:25])
    with pytest.raises(stemdot.ShapeError, match=r"shifts of shape \(2, 2, 2\): want .* nav_shape \(6, 7\) \+ \(2,\)"):
        sdask.apply_masks(client, path, masks, shifts=np.zeros((2, 2, 2)))
    # #33.1: as many values in another shape (transposed) are refused, not read in flat order
    with pytest.raises(stemdot.ShapeError, match=r"shifts of shape \(7, 6, 2\): want .* = \(6, 7, 2\); y then x"):
        sdask.apply_masks(client, path, masks, shifts=shifts.transpose(1, 0, 2))
    with pytest.raises(stemdot.ShapeError, match=r"shifts of shape \(42, 2\): want .* = \(6, 7, 2\), or one per frame read, \(20, 2\)"):
        sdask.apply_masks(client, path, masks, shifts=shifts.reshape(42, 2), frames=(5, 20))
    np.save(tmp_path / "shifts.npy", shifts)
    run = dask_cli(cluster, path, "--mask", "disk:12,12,5", "--mask", "com", "--shifts", tmp_path / "shifts.npy",
                   "--out", tmp_path / "r.npy", "--range-frames", "2", "--quiet")
    assert run.returncode == 0, run.stderr
    assert_shifted_close(np.load(tmp_path / "r.npy"), want)


@pytest.fixture()
def small_scan(tmp_path):
    """A 4×5 scan of 16×16 uint16 frames with a bright disk, its ROI (NPY) and per-position
    shifts (NPY) in tmp_path, and a subdirectory "sub" to run from: the workers' working
    directory is the test's, so a path relative to tmp_path or sub means nothing there."""
    rng = np.random.default_rng(23)
    data = rng.integers(0, 50, (4, 5, 16, 16), dtype=np.uint16)
    yy, xx = np.mgrid[:16, :16]
    data[..., (yy - 8) ** 2 + (xx - 7) ** 2 <= 9] += np.uint16(900)
    np.save(tmp_path / "scan.npy", data)
    roi = rng.random((4, 5)) < 0.6
    np.save(tmp_path / "roi.npy", roi)
    shifts = rng.random((4, 5, 2)) * 2 - 1
    np.save(tmp_path / "shifts.npy", shifts)
    (tmp_path / "sub").mkdir()
    assert not (Path.cwd() / "scan.npy").exists()
    return tmp_path, roi, shifts


def test_relative_paths_are_the_clients(cluster, client, small_scan, monkeypatch):
    """A relative file path, and an roi NPY file, that exist on the client are made
    absolute there, in every call of the API (dataset_info, apply_masks, reduce, centre):
    the client's working directory is not the workers'."""
    d, roi, shifts = small_scan
    masks = np.concatenate([stemdot.disk((16, 16), 7, 8, 4), stemdot.com((16, 16))])
    with stemdot.open(d / "scan.npy", roi=roi) as ds:
        want = stemdot.apply_masks(ds, masks, shifts=shifts)
        want_centre = stemdot.centre(ds, cpus=1, shifts=shifts)
    with stemdot.open(d / "scan.npy") as ds:
        want_sum = stemdot.reduce(ds, ["sum"])["sum"]
    monkeypatch.chdir(d / "sub")
    sdask.bootstrap(client, timeout=TIMEOUT)
    info = sdask.dataset_info(client, "../scan.npy", roi="../roi.npy")
    assert (info["n_frames"], tuple(info["scan_shape"])) == (roi.sum(), (4, 5))
    got = sdask.apply_masks(client, "../scan.npy", masks, roi="../roi.npy", shifts=shifts, range_frames=2)
    assert_shifted_close(got, want)
    assert got.info["dataset"]["path"] == str(d / "scan.npy")
    assert got.info["dataset"]["options"] == {"roi": str(d / "roi.npy")}
    np.testing.assert_array_equal(sdask.reduce(client, "../scan.npy", ["sum"], range_frames=3)["sum"], want_sum)
    assert sdask.centre(client, "../scan.npy", roi="../roi.npy", shifts=shifts) == want_centre


def test_command_line_relative_paths(cluster, small_scan):
    """python -m stemdot.dask run from another directory than the workers': FILE, --roi
    NPY, --shifts NPY and the outputs relative to it (as stemdot apply takes them), for
    a mask apply with an auto spec (centre) and for a reduction."""
    d, roi, shifts = small_scan
    with stemdot.open(d / "scan.npy", roi=roi) as ds:
        c = stemdot.centre(ds, cpus=1, shifts=shifts)
        masks, names = stemdot.mask_stack((16, 16), specs=["disk:auto", "com"], centre=c)
        want = stemdot.apply_masks(ds, masks, shifts=shifts, names=names)
    with stemdot.open(d / "scan.npy") as ds:
        want_sum = stemdot.reduce(ds, ["sum"])["sum"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(os.path.abspath(p) for p in sys.path if p))
    run = dask_cli(cluster, "../scan.npy", "--mask", "disk:auto", "--mask", "com", "--roi", "../roi.npy", "--shifts",
                   "../shifts.npy", "--out", "d.npy", "--range-frames", "2", "--quiet", cwd=d / "sub", env=env)
    assert run.returncode == 0, run.stderr
    assert_shifted_close(np.load(d / "sub" / "d.npy"), want)
    sidecar = json.loads((d / "sub" / "d.json").read_text())
    assert sidecar["dataset"]["path"] == str(d / "scan.npy")
    assert sidecar["dataset"]["options"] == {"roi": "../roi.npy"}  # as given, as stemdot apply records them
    assert sidecar["shifts"]["file"] == str(d / "shifts.npy")
    run = dask_cli(cluster, "sum", "../scan.npy", "--out", "s.npy", "--range-frames", "3", "--quiet", cwd=d / "sub", env=env)
    assert run.returncode == 0, run.stderr
    np.testing.assert_array_equal(np.load(d / "sub" / "s.npy"), want_sum)


def test_result_names_and_info(cluster, client, small_scan):
    """apply_masks returns a stemdot.Result with the masks' names and the info of
    stemdot.apply_masks (the same sidecar fields but the plan: the cluster's workers), with
    an ROI (compact too) and shifts; names of another count are refused."""
    d, roi, shifts = small_scan
    masks, names = stemdot.mask_stack((16, 16), specs=["disk:7,8,4", "com"])
    assert names == ["disk", "com_sum", "com_y", "com_x"]
    nodes = sdask.bootstrap(client, timeout=TIMEOUT)
    cpu_workers = sum(n["n_workers"] for n in nodes.values())
    infos = []
    for kw in ({}, {"roi": roi, "shifts": shifts}, {"roi": "rect:1,1,3,2", "shifts": (0.5, -1.0)}, {"frames": (1, 4)}):
        open_kw = {k: v for k, v in kw.items() if k != "shifts"}
        with stemdot.open(d / "scan.npy", **open_kw) as ds:
            want = stemdot.apply_masks(ds, masks, names=names, shifts=kw.get("shifts"))
        got = sdask.apply_masks(client, d / "scan.npy", masks, names=names, range_frames=1, **kw)
        assert isinstance(got, stemdot.Result) and got.names == tuple(names)
        assert_shifted_close(got, want)
        assert_shifted_close(got.column("com_y"), want.column("com_y"))
        assert got.info == dict(want.info, plan={"cpu_workers": cpu_workers, "gpu_workers": 0}), kw
        infos.append(got.info)
    assert infos[0]["dataset"] == {"path": str(d / "scan.npy"), "format": "npy", "options": {}}
    assert "roi" not in infos[0] and "shifts" not in infos[0]
    assert infos[1]["roi"] == {"scan_shape": [4, 5], "selected": int(roi.sum()), "compact": False}
    assert infos[1]["shifts"]["mean"] == pytest.approx(list(shifts[roi].mean(axis=0)))
    assert infos[2]["roi"] == {"scan_shape": [4, 5], "selected": 6, "compact": False}
    assert infos[2]["shifts"] == {"constant": [0.5, -1.0], "mean": [0.5, -1.0]}
    assert infos[3]["dataset"]["options"] == {"frames": "1,4"} and infos[3]["nav_shape"] == [4]
    images, positions = sdask.apply_masks(client, d / "scan.npy", masks, names=names, roi=roi, roi_compact=True)
    np.testing.assert_array_equal(positions, np.flatnonzero(roi))
    assert isinstance(images, stemdot.Result) and images.names == tuple(names) and images.shape == (roi.sum(), 4)
    assert images.info["roi"] == {"scan_shape": [4, 5], "selected": int(roi.sum()), "compact": True}
    assert sdask.apply_masks(client, d / "scan.npy", masks).names == ("mask0", "mask1", "mask2", "mask3")
    with pytest.raises(stemdot.ShapeError, match="names: 2 names for 4 masks"):
        sdask.apply_masks(client, d / "scan.npy", masks, names=["a", "b"])
