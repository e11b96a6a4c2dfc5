"""stemdot.dask under faults (issue #20.2, #20.3): workers killed (kill -9), stopped
(SIGSTOP), retired, added; the file missing or truncated on one node; the scheduler
killed; files closed after a run; ranges in proportion to the workers' rates. Every run
gives the single-process result exactly, or the exact error, within a bounded time."""

import contextlib
import gc
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")

from distributed import Client, LocalCluster  # noqa: E402

import stemdot  # noqa: E402
import stemdot.dask as sdask  # noqa: E402

SIG = (64, 64)
N_FRAMES = 1024  # 32×32 positions
RANGE = 16  # frames per range (one stemdot worker per Dask worker: two share the 2 cores)
TIMEOUT = 120  # bounded waits; generous for a loaded 2-core machine


class SlowPlugin(sdask.StemdotPlugin):
    """StemdotPlugin whose ranges take `delay` more seconds (× `factor` on the worker of
    slot `slow_slot`), so that faults land mid-run on small scans."""

    def __init__(self, delay, slow_slot=None, factor=1.0):
        super().__init__()
        self.delay, self.slow_slot, self.factor = delay, slow_slot, factor

    @contextlib.contextmanager
    def dataset(self, path, options, job=None):
        """The dataset, after a sleep: within the seconds of the range's apply, as a
        slow node's (a slow disk's) are."""
        slow = self.node is not None and self.node["slot"] == self.slow_slot
        time.sleep(self.delay * (self.factor if slow else 1.0))
        with super().dataset(path, options, job) as ds:
            yield ds


def make_cluster(n=2, **kwargs):
    return LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=50,
                        **kwargs)


@pytest.fixture(scope="module")
def scan(tmp_path_factory):
    """A 1024-frame NPY scan (32×32 of 64×64 uint16), its masks, and the single-process
    result."""
    path = tmp_path_factory.mktemp("faults") / "scan.npy"
    rng = np.random.default_rng(20)
    np.save(path, rng.integers(0, 4000, size=(32, 32) + SIG, dtype=np.uint16))
    masks = np.concatenate([stemdot.disk(SIG, 32, 32, 10), stemdot.ring(SIG, 32, 32, 12, 30), stemdot.com(SIG)])
    with stemdot.open(path) as ds:
        want = stemdot.apply_masks(ds, masks)
    return path, masks, want


def pids(client):
    return client.run(os.getpid)


def at(threshold, action):
    """A progress callback that runs action() once, in a thread of its own (the callback
    runs on the client's event loop, which a blocking action would stall), when
    threshold frames are done; .thread is that thread."""
    fired = threading.Event()

    def progress(done, total):
        if done >= threshold and not fired.is_set():
            fired.set()
            progress.thread = threading.Thread(target=action, daemon=True)
            progress.thread.start()

    progress.thread = None
    return progress


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


def wait_until(condition, seconds=TIMEOUT):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.1)


def covered_once(report):
    covered = np.zeros(N_FRAMES, dtype=int)
    for first, count, *_ in report["ranges"]:
        covered[first : first + count] += 1
    return (covered == 1).all()


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_kill9_of_one_worker_and_of_its_restart(scan, sig):
    """kill -9 (or SIGTERM) of a worker at 1/4 of the run, and of the worker its Nanny
    restarts in its place at 1/2 (the same worker twice): the result is the
    single-process one."""
    path, masks, want = scan
    with make_cluster() as cluster, Client(cluster, timeout=TIMEOUT) as client:
        sdask.bootstrap(client, plugin=SlowPlugin(0.05))
        survivor, victim = sorted(pids(client).items())
        killed = []

        def kill_victim():
            os.kill(victim[1], sig)
            killed.append(victim[0])

        def kill_restart():
            wait_until(lambda: len(sdask._live_workers(client)) == 2 and victim[0] not in sdask._live_workers(client))
            address, pid = next((a, p) for a, p in pids(client).items() if a != survivor[0])
            os.kill(pid, sig)
            killed.append(address)

        first, second = at(N_FRAMES // 4, kill_victim), at(N_FRAMES // 2, kill_restart)
        report = {}
        got = limited(lambda: sdask.apply_masks(client, path, masks, range_frames=RANGE, report=report,
                                                progress=lambda d, t: (first(d, t), second(d, t))))
        np.testing.assert_array_equal(got, want)
        assert covered_once(report)
        for t in (first.thread, second.thread):
            if t is not None:
                t.join(TIMEOUT)
        assert killed and killed[0] == victim[0]


def test_kill9_of_two_workers_with_a_third_alive_then_a_run_just_after(scan):
    path, masks, want = scan
    with make_cluster(3) as cluster, Client(cluster, timeout=TIMEOUT) as client:
        sdask.bootstrap(client, plugin=SlowPlugin(0.05))
        victims = sorted(pids(client).items())[:2]

        def kill_two():
            for _, pid in victims:
                os.kill(pid, signal.SIGKILL)

        progress = at(N_FRAMES // 4, kill_two)
        got = limited(lambda: sdask.apply_masks(client, path, masks, range_frames=RANGE, progress=progress))
        np.testing.assert_array_equal(got, want)
        # a run started right after a death (the scheduler may not know yet): no CommClosedError
        address, pid = sorted(pids(client).items())[0]
        os.kill(pid, signal.SIGKILL)
        got = limited(lambda: sdask.apply_masks(client, path, masks, range_frames=RANGE))
        np.testing.assert_array_equal(got, want)


def test_kill9_of_both_workers_waits_for_their_restarts(scan):
    path, masks, want = scan
    with make_cluster() as cluster, Client(cluster, timeout=TIMEOUT) as client:
        sdask.bootstrap(client, plugin=SlowPlugin(0.05))
        victims = pids(client)

        def kill_both():
            for pid in victims.values():
                os.kill(pid, signal.SIGKILL)

        report = {}
        got = limited(lambda: sdask.apply_masks(client, path, masks, range_frames=RANGE, report=report,
                                                progress=at(N_FRAMES // 4, kill_both)))
        np.testing.assert_array_equal(got, want)
        assert covered_once(report)
        assert not set(victims) & {r[2] for r in report["ranges"] if r[0] >= N_FRAMES // 2}, "the rest on the restarts"


def test_stopped_worker_ranges_are_recomputed_and_its_late_results_ignored(scan):
    """SIGSTOP of a worker mid-run, SIGCONT a few seconds after its ranges were taken
    back (hang_timeout=2): its ranges are computed elsewhere, each range is stored once,
    the worker gets ranges again once it answers, and the result is exact."""
    path, masks, want = scan
    with make_cluster() as cluster, Client(cluster, timeout=TIMEOUT) as client:
        sdask.bootstrap(client, plugin=SlowPlugin(0.1))
        victim, pid = sorted(pids(client).items())[0]

        def stop_then_wake():
            os.kill(pid, signal.SIGSTOP)
            time.sleep(4)
            os.kill(pid, signal.SIGCONT)

        progress = at(N_FRAMES // 8, stop_then_wake)
        report = {}
        try:
            got = limited(lambda: sdask.apply_masks(client, path, masks, range_frames=RANGE, hang_timeout=2,
                                                    report=report, progress=progress))
        finally:
            if progress.thread is not None:
                progress.thread.join(TIMEOUT)
            os.kill(pid, signal.SIGCONT)
        np.testing.assert_array_equal(got, want)
        assert any(h[2] == victim for h in report["hung"]), report["hung"]
        assert covered_once(report), "a late result was stored twice"
        assert sum(report["frames"].values()) == N_FRAMES
        # the woken worker answers and computes again
        got = sdask.apply_masks(client, path, masks, range_frames=RANGE)
        np.testing.assert_array_equal(got, want)


def test_every_worker_stopped_is_a_cluster_error_after_timeout(scan):
    """Both workers stopped mid-run: their ranges are taken back after hang_timeout, and
    with no worker to take them the run fails after timeout, naming them."""
    path, masks, _ = scan
    with make_cluster() as cluster, Client(cluster, timeout=TIMEOUT) as client:
        sdask.bootstrap(client, plugin=SlowPlugin(0.05))
        stopped = pids(client)

        def stop_both():
            for pid in stopped.values():
                os.kill(pid, signal.SIGSTOP)

        try:
            err = limited(lambda: sdask.apply_masks(client, path, masks, range_frames=RANGE, hang_timeout=1, timeout=3,
                                                    progress=at(N_FRAMES // 8, stop_both)), 60)
        finally:
            for pid in stopped.values():
                os.kill(pid, signal.SIGCONT)
    assert isinstance(err, sdask.ClusterError), repr(err)
    msg = str(err)
    assert msg.startswith("no Dask worker took a range for 3 s (the running ones, "), msg
    assert all(a in msg for a in stopped) and "hang or are not set up: 2 did not answer" in msg, msg


def test_run_started_while_a_worker_is_stopped(scan):
    """A worker stopped before the run (SIGSTOP): the run goes on without it, bounded."""
    path, masks, want = scan
    with make_cluster() as cluster, Client(cluster, timeout=TIMEOUT) as client:
        sdask.bootstrap(client)
        stopped, pid = sorted(pids(client).items())[0]
        os.kill(pid, signal.SIGSTOP)
        try:
            report = {}
            got = limited(lambda: sdask.apply_masks(client, path, masks, range_frames=RANGE, report=report), 60)
        finally:
            os.kill(pid, signal.SIGCONT)
        np.testing.assert_array_equal(got, want)
        assert stopped not in report["frames"] and sum(report["frames"].values()) == N_FRAMES


def test_client_closed_while_a_worker_is_stopped_logs_no_traceback(scan, caplog):
    """A worker stopped (SIGSTOP) through a run and still stopped when the client closes:
    the end of the job queued for it fails with the client's connection, and that failure
    is expected, not an asyncio "Task exception was never retrieved" traceback on stderr
    after a run that succeeded."""
    path, masks, want = scan
    with make_cluster() as cluster:
        client = Client(cluster, timeout=TIMEOUT)
        sdask.bootstrap(client)
        _, pid = sorted(pids(client).items())[0]
        os.kill(pid, signal.SIGSTOP)
        try:
            got = limited(lambda: sdask.apply_masks(client, path, masks, range_frames=RANGE), 60)
            client.close()
        finally:
            os.kill(pid, signal.SIGCONT)
        gc.collect()
    np.testing.assert_array_equal(got, want)
    assert "never retrieved" not in caplog.text, caplog.text


def test_hang_limit_default():
    assert sdask._hang_limit(100, None, None) == sdask.HANG_FIRST_S == 120
    assert sdask._hang_limit(100, 1000.0, None) == sdask.HANG_FLOOR_S == 30
    assert sdask._hang_limit(100, 2.0, None) == 10 * 100 / 2.0
    assert sdask._hang_limit(100, 2.0, 3) == 3.0


@pytest.fixture(scope="module")
def cluster():
    with make_cluster() as c:
        yield c


@pytest.fixture(scope="module")
def client(cluster):
    with Client(cluster, timeout=TIMEOUT) as c:
        c.wait_for_workers(2, timeout=TIMEOUT)
        sdask.bootstrap(c)
        yield c


def remap(src, dst, dask_worker=None):
    """Makes this worker read dst where it is asked for src (another node's view of the
    shared storage: a missing or truncated copy); dst None: undo."""
    plugin = dask_worker.plugins["stemdot"]
    if dst is None:
        plugin.__dict__.pop("dataset", None)
        sdask._plugin.__dict__["_file_size"] = getattr(sdask._plugin, "_file_size_unmapped", sdask._file_size)
        return
    dataset, size = type(plugin).dataset.__get__(plugin), getattr(sdask._plugin, "_file_size_unmapped", sdask._file_size)
    sdask._plugin._file_size_unmapped = size
    plugin.dataset = lambda path, options, job=None: dataset(dst if path == src else path, options, job)
    sdask._plugin._file_size = lambda path, dask_worker=None: size(dst if path == src else path)  # read by _info_task


@pytest.mark.parametrize("copy", ["missing", "truncated"])
def test_file_missing_or_truncated_on_one_node(client, scan, tmp_path, copy):
    path, masks, want = scan
    other = tmp_path / "copy.npy"
    if copy == "truncated":
        data = Path(path).read_bytes()
        other.write_bytes(data[: len(data) // 2])
    victim = sorted(sdask._workers_now(client))[0]
    client.run(remap, str(path), str(other), workers=[victim])
    try:
        report = {}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = sdask.apply_masks(client, path, masks, range_frames=RANGE, report=report)
        np.testing.assert_array_equal(got, want)
        assert set(report["frames"]) == {a for a in report["frames"] if a != victim}
        assert list(report["excluded"]) == [victim]
        notes = [str(w.message) for w in caught if victim in str(w.message)]
        assert len(notes) == 1 and "cannot read" in notes[0] and "127.0.0.1" in notes[0], [str(w.message) for w in caught]
        assert ("No such file or directory" if copy == "missing" else "truncated NPY file") in notes[0]
        total = sdask.reduce(client, path, ["sum"], range_frames=RANGE)["sum"]
        with stemdot.open(path) as ds:
            np.testing.assert_array_equal(total, stemdot.reduce(ds, ["sum"])["sum"])
    finally:
        client.run(remap, str(path), None, workers=[victim])


def test_file_unreadable_on_every_node_names_each_nodes_error(client, scan, tmp_path):
    path, masks, _ = scan
    client.run(remap, str(path), str(tmp_path / "nowhere.npy"))
    try:
        with pytest.raises(stemdot.StemdotIOError) as err:
            sdask.apply_masks(client, path, masks, range_frames=RANGE)
    finally:
        client.run(remap, str(path), None)
    msg = str(err.value)
    assert msg.startswith(f"no live Dask worker can read {path}: "), msg
    workers = sorted(sdask._workers_now(client))
    assert msg.endswith(" (on workers " + ", ".join(f"{a} (node 127.0.0.1)" for a in workers) + ")"), msg
    # a file truncated everywhere: the data's own format error, raised as it is
    short = tmp_path / "short.npy"
    short.write_bytes(Path(path).read_bytes()[:100000])
    with pytest.raises(stemdot.FormatError, match="short.npy: truncated NPY file"):
        sdask.apply_masks(client, short, masks)


def open_files(dask_worker=None):
    return [os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd") if os.path.exists(f"/proc/self/fd/{fd}")]


def jobs_held(dask_worker=None):
    return len(dask_worker.plugins["stemdot"]._jobs)


def test_files_are_closed_after_a_run(client, tmp_path):
    h5py = pytest.importorskip("h5py")
    path = tmp_path / "scan.h5"
    data = np.random.default_rng(3).integers(0, 1000, size=(8, 16) + SIG, dtype=np.uint16)
    with h5py.File(path, "w") as f:
        f["data"] = data
    masks = np.concatenate([stemdot.disk(SIG, 30, 33, 12), stemdot.com(SIG)])
    try:
        with stemdot.open(path) as ds:
            want = stemdot.apply_masks(ds, masks)
    except stemdot.FormatError as e:
        pytest.skip(f"stemdot built without HDF5: {e}")
    got = sdask.apply_masks(client, path, masks, range_frames=8)
    np.testing.assert_array_equal(got, want)
    held = {a: [f for f in files if f == str(path)] for a, files in client.run(open_files).items()}
    assert held == {a: [] for a in held}, held
    assert set(client.run(jobs_held).values()) == {0}, "the mask stack dropped everywhere"
    with pytest.raises(stemdot.ShapeError):  # a failed run closes its files too
        sdask.apply_masks(client, path, masks[:, :10], range_frames=8)
    assert not [f for files in client.run(open_files).values() for f in files if f == str(path)]
    assert set(client.run(jobs_held).values()) == {0}
    assert os.environ.get("HDF5_USE_FILE_LOCKING", "TRUE").upper() != "FALSE"
    with h5py.File(path, "a") as f:  # acquisition software appends
        f["more"] = np.zeros(3)


def test_ranges_follow_the_workers_rates(scan):
    """A worker 6× slower than the other (the same cores, a slowed range) gets far fewer
    frames; report names the frames and the rate of each."""
    path, masks, want = scan
    with make_cluster() as cluster, Client(cluster, timeout=TIMEOUT) as client:
        nodes = sdask.bootstrap(client, plugin=SlowPlugin(0.02, slow_slot=0, factor=6))
        slow = next(a for a, n in nodes.items() if n["slot"] == 0)
        fast = next(a for a in nodes if a != slow)
        report = {}
        got = sdask.apply_masks(client, path, masks, range_frames=RANGE, report=report)
        np.testing.assert_array_equal(got, want)
        assert sum(report["frames"].values()) == N_FRAMES
        assert report["frames"][fast] > 2 * report["frames"][slow], report["frames"]
        assert report["rates"][fast] > report["rates"][slow], report["rates"]


def node(workers):
    return {"plan": {"workers": workers}}


def test_range_size_from_the_node_plan():
    cpu, gpu = {"cpu": 0}, {"cpu": 1, "gpu": 0}
    assert sdask._range_size(node([cpu]), 16) == 16
    assert sdask._range_size(node([cpu, cpu]), 16) == 32
    assert sdask._range_size(node([cpu, cpu, gpu]), 16) == 2 * 16 + sdask.GPU_RANGE_FACTOR * 16 == 160
    assert sdask._range_size(node([gpu, gpu]), 4) == 2 * 8 * 4
    assert sdask._range_size(node([cpu, gpu]), 16, gpus=False) == 32
    assert sdask._range_size(node([]), 16) == 16


def test_joined_worker_gets_ranges_and_retired_worker_hands_back(scan):
    path, masks, want = scan
    with make_cluster() as cluster, Client(cluster, timeout=TIMEOUT) as client:
        sdask.bootstrap(client, plugin=SlowPlugin(0.1))
        before = set(pids(client))
        retiring = sorted(before)[0]

        def scale_up():
            cluster.scale(3)

        def retire():
            client.retire_workers([retiring], close_workers=True)

        up, down = at(1, scale_up), at(N_FRAMES // 2, retire)
        report = {}
        got = limited(lambda: sdask.apply_masks(client, path, masks, range_frames=RANGE, report=report,
                                                progress=lambda d, t: (up(d, t), down(d, t))))
        for t in (up.thread, down.thread):
            t.join(TIMEOUT)
        np.testing.assert_array_equal(got, want)
        assert covered_once(report)
        joined = set(report["frames"]) - before
        assert joined and all(report["frames"][a] > 0 for a in joined), report["frames"]
        assert retiring not in sdask._live_workers(client)


def test_scheduler_killed_is_a_cluster_error_at_once(scan, tmp_path):
    path, masks, _ = scan
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]))
    dask = [sys.executable, "-m", "distributed.cli.dask_scheduler"]
    file = tmp_path / "scheduler.json"
    procs = [subprocess.Popen(dask + ["--scheduler-file", str(file), "--port", "0", "--dashboard-address", ":0",
                                      "--host", "127.0.0.1"], env=env, stderr=subprocess.DEVNULL)]
    try:
        wait_until(file.exists)
        for _ in range(2):
            procs.append(subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", "--scheduler-file",
                                           str(file), "--nthreads", "1", "--no-dashboard", "--no-nanny"], env=env,
                                          stderr=subprocess.DEVNULL))
        with Client(scheduler_file=str(file), timeout=TIMEOUT) as client:
            client.wait_for_workers(2, timeout=TIMEOUT)
            address = client.scheduler.address
            sdask.bootstrap(client, plugin=SlowPlugin(0.1))
            err = limited(lambda: sdask.apply_masks(client, path, masks, range_frames=RANGE,
                                                    progress=at(N_FRAMES // 8, procs[0].kill)), 60)
        assert isinstance(err, sdask.ClusterError), repr(err)
        assert f"the Dask scheduler at {address} is gone" in str(err), str(err)
    finally:
        for p in procs:
            p.kill()
            p.wait(TIMEOUT)


@pytest.mark.parametrize("fault", ["busy", "stopped"])
def test_busy_scheduler_is_waited_for_and_a_silent_one_is_gone(tmp_path, monkeypatch, fault):
    """A scheduler whose event loop is busy for longer than SCHEDULER_TIMEOUT_S (as when it
    relays a large mask stack to the workers) is not called gone while its connection
    stands: the client asks again, up to SCHEDULER_ANSWER_S; one that never answers
    (SIGSTOP: a hung scheduler or a network cut with its connection left open) is a
    ClusterError after SCHEDULER_ANSWER_S."""
    for module in (sdask._plugin, sdask._ranges):  # where they are read
        monkeypatch.setattr(module, "SCHEDULER_TIMEOUT_S", 0.5)
    monkeypatch.setattr(sdask._plugin, "SCHEDULER_ANSWER_S", 4)
    file = tmp_path / "scheduler.json"
    proc = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--scheduler-file", str(file),
                             "--port", "0", "--dashboard-address", ":0", "--host", "127.0.0.1"], stderr=subprocess.DEVNULL)
    try:
        wait_until(file.exists)
        with Client(scheduler_file=str(file), timeout=TIMEOUT) as client:
            address = client.scheduler.address
            if fault == "busy":  # the scheduler's loop blocked for 2 s, less than SCHEDULER_ANSWER_S
                busy = threading.Thread(target=client.run_on_scheduler, args=(time.sleep, 2), daemon=True)
                busy.start()
                time.sleep(0.2)
                assert limited(lambda: client.sync(sdask._scheduler_workers, client), 30) == {}
                busy.join(TIMEOUT)
            else:
                os.kill(proc.pid, signal.SIGSTOP)
                try:
                    err = limited(lambda: client.sync(sdask._scheduler_workers, client), 30)
                finally:
                    os.kill(proc.pid, signal.SIGCONT)
                assert isinstance(err, sdask.ClusterError), repr(err)
                assert str(err).startswith(f"the Dask scheduler at {address} is gone: no answer within 4 s"), str(err)
    finally:
        proc.kill()
        proc.wait(TIMEOUT)
