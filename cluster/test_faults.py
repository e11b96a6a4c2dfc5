"""stemdot.dask on the cluster rig (rig.py): the faults of issue #20.2 and #20.3, each
checking that the result is identical to the single-process one (stemdot.apply_masks in
this process, np.array_equal), or that a clear error comes within a bounded time and no
output file is left.

The scan: an NPY of 2048 frames (32×64 positions) of 128×128 uint16, in ranges of
RANGE_FRAMES frames per stemdot worker (128 ranges on 2 one-core nodes), so that a fault
injected after a quarter of the frames (in the client's progress callback, so "mid-run"
is exact, not a guess at timing) finds ranges in flight and ranges to come. A run that
has not finished after DEADLINE s is failed; the rig then undoes the fault (SIGCONT,
link up) and, if need be, closes the test's client, so that the run ends and the next
test starts on a healthy cluster (nodes whose dask worker exited are started again).
With stemdot.dask's hang_timeout keyword, the tests set it to HANG_S.
"""

import inspect
import os
import subprocess
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field

import numpy as np
import pytest

import rig

distributed = pytest.importorskip("distributed")

import stemdot  # noqa: E402
import stemdot.dask as sdask  # noqa: E402
from distributed import Client  # noqa: E402

SIG = (128, 128)
NAV = (32, 64)
RANGE_FRAMES = 16
AT = 512  # frames done when a mid-run fault is injected
DEADLINE = 90  # s: a run, faults included, ends within this or the test fails
HANG_S = 5  # s: stemdot.dask's hang timeout in these tests, where it has one
#: The hang timeout keyword of stemdot.dask.apply_masks, where it has one.
HANG = {"hang_timeout": HANG_S} if "hang_timeout" in inspect.signature(sdask.apply_masks).parameters else {}
MASKS = np.concatenate([stemdot.disk(SIG, 64, 64, 12), stemdot.ring(SIG, 64, 64, 20, 50), stemdot.com(SIG)])


# ------------------------------------------------------------------ fixtures


@pytest.fixture(scope="session")
def cluster(request, describe_rig):
    """Two one-core nodes (node1 on the first allowed CPU, node2 on the second)."""
    c = rig.Cluster()
    try:
        c.add_node()
        c.add_node()
        describe_rig(f"shared rig: {c.describe()}")
        if not HANG:
            describe_rig("stemdot.dask.apply_masks has no hang_timeout keyword: hangs last until the scheduler's worker-ttl")
        yield c
    finally:
        c.close(failed=request.session.testsfailed > 0)


@pytest.fixture
def client(cluster):
    """A client of the test's own: a run that hangs leaves only its own client behind."""
    c = Client(cluster.address, timeout=60)
    try:
        yield c
    finally:
        c.close(timeout=10)


@pytest.fixture(scope="session")
def scan(cluster):
    """data/scan.npy on every node, and its single-process result."""
    rng = np.random.default_rng(20)
    frames = rng.integers(0, 60, size=NAV + SIG, dtype=np.uint16)
    yy, xx = np.mgrid[: SIG[0], : SIG[1]]
    frames[..., (yy - 64) ** 2 + (xx - 64) ** 2 <= 144] += np.uint16(900)
    path = cluster.data / "scan.npy"
    np.save(path, frames)
    cluster.share(path.name)
    with stemdot.open(path) as ds:
        want = stemdot.apply_masks(ds, MASKS)
    return path, np.asarray(want)


@pytest.fixture(autouse=True)
def healthy(request):
    """Before each test on the shared rig: every fault undone, every node's worker running."""
    if "cluster" in request.fixturenames:
        c = request.getfixturevalue("cluster")
        c.heal()
        for node in c.nodes:
            c.ensure(node, timeout=DEADLINE)
    yield


@dataclass
class Outcome:
    result: object = None
    error: BaseException = None
    seconds: float = 0.0
    warnings: list = field(default_factory=list)
    report: dict = field(default_factory=dict)
    timed_out: bool = False


def run(client, path, *, at=None, fault=None, heal=None, slow_after=0.0, masks=MASKS, **kwargs):
    """sdask.apply_masks(client, path, masks, ...) in a thread, with fault() called once,
    in the progress callback, when at least `at` frames are done (then, with slow_after,
    the callback sleeps that long at each later range: a slow client). A run that has not
    ended after DEADLINE s is timed out: heal() is called (the fault undone), and if the
    run still has not ended 30 s later, its client is closed; one that outlives that is
    an error (its thread is left behind: the client is the test's own)."""
    out, fired = Outcome(), []

    def progress(n, total):
        if fired:
            time.sleep(slow_after)
        elif fault is not None and n >= at:
            fired.append(n)
            fault()

    def target():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                options = {"range_frames": RANGE_FRAMES, **HANG, **kwargs}
                out.result = sdask.apply_masks(client, path, masks, progress=progress, report=out.report, **options)
            except Exception as e:
                out.error = e
            finally:
                out.warnings = list(dict.fromkeys(str(w.message).splitlines()[0][:120] for w in caught))

    started = time.monotonic()
    thread = threading.Thread(target=target, name="apply_masks", daemon=True)
    thread.start()
    thread.join(DEADLINE)
    if thread.is_alive():
        out.timed_out = True
        for undo in (heal, lambda: client.close(timeout=10)):
            if undo is not None:
                undo()
            thread.join(30)
            if not thread.is_alive():
                break
        else:
            out.error = TimeoutError(f"apply_masks has not returned {DEADLINE + 60} s after it started, even after the "
                                     "fault was undone and its client closed")
    out.seconds = time.monotonic() - started
    if fault is not None and out.error is None:
        assert fired, f"the fault was not injected: the run ended before {at} frames were done"
    return out


def expect_identical(record, out, want):
    """Records the run's row and asserts it ended in time with the single-process result."""
    late = f"no end within {DEADLINE} s, then " if out.timed_out else ""
    if out.error is not None:
        record(f"{late}error after {out.seconds:.1f} s: {type(out.error).__name__}: {str(out.error)[:90]}", out.seconds,
               out.warnings)
        raise out.error
    same = np.array_equal(np.asarray(out.result), want)
    record(same if not out.timed_out else f"{'yes' if same else 'NO'}, only after the rig undid the fault",
           out.seconds, out.warnings)
    assert not out.timed_out, f"the run had not ended {DEADLINE} s after it started: it ended only after the fault was undone"
    assert same, "the result differs from the single-process one"


def addresses(out):
    return {r[2] for r in out.report.get("ranges", [])}


# ------------------------------------------------------------------ faults


@pytest.mark.fault("none (2 one-core nodes)")
def test_no_fault(cluster, client, scan, record):
    path, want = scan
    out = run(client, path)
    expect_identical(record, out, want)
    assert len(addresses(out)) == 2, "both nodes computed ranges"


@pytest.mark.fault("kill -9 of a worker mid-run")
def test_kill_worker(cluster, client, scan, record):
    path, want = scan
    out = run(client, path, at=AT, fault=lambda: cluster.kill(cluster.nodes[0]), heal=cluster.heal)
    expect_identical(record, out, want)


@pytest.mark.fault("kill -9 of two workers at once")
def test_kill_two_workers(cluster, client, scan, record):
    path, want = scan

    def fault():
        for node in cluster.nodes:
            cluster.kill(node)

    out = run(client, path, at=AT, fault=fault, heal=cluster.heal)
    expect_identical(record, out, want)


@pytest.mark.fault("kill -9 of the same worker twice")
def test_kill_same_worker_twice(cluster, client, scan, record):
    path, want = scan
    node = cluster.nodes[0]

    def fault():
        before = cluster.worker(node)["address"]
        cluster.kill(node)
        cluster.wait_worker(node, not_address=before, timeout=DEADLINE / 2)  # restarted by its Nanny
        cluster.kill(node)

    out = run(client, path, at=AT, fault=fault, heal=cluster.heal)
    expect_identical(record, out, want)


@pytest.mark.fault("a worker hangs (SIGSTOP) mid-range; woken (SIGCONT) during a later run")
def test_hung_worker(cluster, client, scan, record):
    path, want = scan
    node = cluster.nodes[0]
    # the run ends while the worker is still stopped: its ranges were computed elsewhere
    out = run(client, path, at=AT, fault=lambda: cluster.stop(node), heal=cluster.heal)
    try:
        expect_identical(record, out, want)
    finally:
        cluster.cont(node)
    # stopped again, and woken after its ranges were taken back but before the run ends (a
    # slow client stretches the run to about 96 ranges × 0.08 s): its late results are ignored
    timer = threading.Timer(HANG_S + 1, cluster.cont, args=(node,))
    out = run(client, path, at=AT, fault=lambda: (cluster.stop(node), timer.start()), heal=cluster.heal,
              slow_after=0.08)
    timer.join()
    expect_identical(record, out, want)


@pytest.mark.fault("a node's network down mid-run (veth down), back after the run")
def test_network_down(cluster, client, scan, record):
    path, want = scan
    node = cluster.nodes[0]
    try:
        cluster.link_down(node)
        cluster.link_up(node)
    except rig.NotAvailable as e:
        pytest.skip(str(e))
    out = run(client, path, at=AT, fault=lambda: cluster.link_down(node), heal=cluster.heal)
    try:
        expect_identical(record, out, want)
    finally:
        cluster.link_up(node)
    cluster.ensure(node, timeout=DEADLINE)
    again = run(client, path)
    assert np.array_equal(np.asarray(again.result), want)


def _one_node_file(cluster, change):
    try:
        target = cluster.node_data(cluster.nodes[0]) / "scan.npy"
    except rig.NotAvailable as e:
        pytest.skip(str(e))
    target.unlink()
    change(target)


@pytest.mark.fault("the file missing on one node")
def test_file_missing_on_one_node(cluster, client, scan, record):
    path, want = scan
    _one_node_file(cluster, lambda target: None)
    out = run(client, path)
    expect_identical(record, out, want)
    node = cluster.nodes[0]
    assert any(node.ip in w for w in out.warnings), f"no warning names {node.name} ({node.ip}): {out.warnings}"


@pytest.mark.fault("the file truncated on one node")
def test_file_truncated_on_one_node(cluster, client, scan, record):
    path, want = scan

    def truncate(target):
        with open(path, "rb") as src, open(target, "wb") as dst:
            dst.write(src.read(path.stat().st_size // 2))

    _one_node_file(cluster, truncate)
    out = run(client, path)
    expect_identical(record, out, want)
    node = cluster.nodes[0]
    assert any(node.ip in w for w in out.warnings), f"no warning names {node.name} ({node.ip}): {out.warnings}"


@pytest.mark.fault("a worker joins mid-run")
def test_worker_joins(cluster, client, scan, record):
    path, want = scan
    joined = []

    def fault():
        joined.append(cluster.add_node())

    try:
        out = run(client, path, at=RANGE_FRAMES * 4, fault=fault, heal=cluster.heal, slow_after=0.05)
        expect_identical(record, out, want)
        address = cluster.worker(joined[0])["address"]
        assert address in addresses(out), f"the joined worker {address} got no range: {sorted(addresses(out))}"
    finally:
        for node in joined:
            cluster.remove_node(node)


@pytest.mark.fault("a worker retired mid-run (client.retire_workers)")
def test_worker_retired(cluster, client, scan, record):
    path, want = scan
    node = cluster.add_node()
    try:
        sdask.bootstrap(client)
        address = cluster.worker(node)["address"]
        retiring = threading.Thread(target=client.retire_workers, args=([address],), daemon=True)
        out = run(client, path, at=AT, fault=retiring.start, heal=cluster.heal)
        retiring.join(DEADLINE)
        expect_identical(record, out, want)
        assert not retiring.is_alive(), f"client.retire_workers([{address!r}]) had not returned after {DEADLINE} s"
        assert cluster.worker(node) is None, "the retired worker is still in the cluster"
    finally:
        cluster.remove_node(node)


def _open_by(pid, path):
    """The descriptors and mappings of process pid that refer to path's inode."""
    st = os.stat(path)
    held = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            s = os.stat(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if (s.st_dev, s.st_ino) == (st.st_dev, st.st_ino):
            held.append(f"fd {fd}")
    with open(f"/proc/{pid}/maps") as maps:
        for line in maps:
            parts = line.split()
            if len(parts) >= 6 and parts[4] == str(st.st_ino) and os.path.basename(parts[5]) == path.name:
                held.append(f"mapping {parts[0]}")
    return held


@pytest.mark.fault("after a run: no worker holds the file open")
def test_file_closed_after_run(cluster, client, scan, record):
    path, want = scan
    out = run(client, path)
    expect_identical(record, out, want)
    held = {n.name: _open_by(cluster.worker_pid(n), path) for n in cluster.nodes}
    assert not any(held.values()), f"workers hold {path.name} open after the run: {held}"


H5PY = [sys.executable, "-c"]


def _h5(code, *args, **kwargs):
    """Runs code with h5py in a child process (another program: the acquisition's)."""
    return subprocess.run(H5PY + ["import sys, h5py, numpy as np\n" + code, *map(str, args)], capture_output=True,
                          text=True, timeout=DEADLINE, **kwargs)


@pytest.fixture(scope="session")
def h5scan(cluster, scan):
    """data/scan.h5 (the NPY scan's first 512 frames as /data, (8, 64, 128, 128)) and its
    single-process result."""
    pytest.importorskip("h5py")
    path = cluster.data / "scan.h5"
    r = _h5("f = h5py.File(sys.argv[1], 'w'); f['data'] = np.load(sys.argv[2])[:8]; f.close()", path, scan[0])
    assert r.returncode == 0, r.stderr
    cluster.share(path.name)
    try:
        with stemdot.open(path, dataset_path="/data") as ds:
            want = stemdot.apply_masks(ds, MASKS)
    except stemdot.FormatError as e:
        pytest.skip(f"stemdot without HDF5: {e}")
    return path, np.asarray(want)


@pytest.mark.fault("after a run on HDF5: h5py opens it for append (locking on)")
def test_hdf5_append_after_run(cluster, client, h5scan, record):
    path, want = h5scan
    out = run(client, path, dataset_path="/data")
    expect_identical(record, out, want)
    env = {k: v for k, v in os.environ.items() if k != "HDF5_USE_FILE_LOCKING"}
    r = _h5("f = h5py.File(sys.argv[1], 'a'); f['appended'] = np.arange(3); f.close()", path, env=env)
    assert r.returncode == 0, f"h5py could not open {path.name} for append after the run:\n{r.stderr[-2000:]}"
    _h5("f = h5py.File(sys.argv[1], 'a'); del f['appended']; f.close()", path, env=env)


@pytest.mark.fault("HDF5 file held open for writing by another process")
def test_hdf5_locked_by_writer(cluster, client, h5scan, record):
    path, want = h5scan
    env = {k: v for k, v in os.environ.items() if k != "HDF5_USE_FILE_LOCKING"}
    with subprocess.Popen(H5PY + ["import sys, h5py\nf = h5py.File(sys.argv[1], 'a')\nprint('open', flush=True)\n"
                                  "sys.stdin.read()", str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, env=env) as writer:
        if writer.stdout.readline().strip() != "open":
            pytest.fail(f"h5py could not open {path.name} for writing (still open on a worker?):\n{writer.stderr.read()[-1500:]}")
        with pytest.raises(stemdot.StemdotIOError, match="HDF5_USE_FILE_LOCKING"):
            stemdot.open(path, dataset_path="/data")
        out = run(client, path, dataset_path="/data")
        writer.stdin.close()
        writer.wait(timeout=DEADLINE)
    message = f"{type(out.error).__name__}: {out.error}" if out.error else "no error"
    record(f"error after {out.seconds:.1f} s: {message[:100]}" if out.error else "NO error", out.seconds, out.warnings)
    assert not out.timed_out
    assert out.error is not None and "HDF5_USE_FILE_LOCKING" in str(out.error), message
    after = run(client, path, dataset_path="/data")  # the writer gone: it reads
    assert after.error is None and np.array_equal(np.asarray(after.result), want)


@pytest.mark.fault("a node declaring a fake GPU (--resources GPU=1)")
def test_fake_gpu_node(cluster, client, scan, record):
    path, want = scan
    node = cluster.add_node(gpu=True)
    try:
        nodes = sdask.bootstrap(client)
        address = cluster.worker(node)["address"]
        said = nodes[address]["warnings"]
        out = run(client, path, resources={"GPU": 1})
        expect_identical(record, out, want)
        assert any("GPU resource" in w for w in said), f"no GPU warning from {address}: {said}"
        assert addresses(out) == {address}, "resources={'GPU': 1} ranges ran elsewhere"
    finally:
        cluster.remove_node(node)


@pytest.mark.fault("python -m stemdot.dask against the rig's scheduler")
def test_command_line(cluster, client, scan, record, tmp_path):
    path, _ = scan
    specs = ["disk:64,64,12", "ring:64,64,20,50"]
    masks, _ = stemdot.mask_stack(SIG, specs=specs)
    with stemdot.open(path) as ds:
        want = np.asarray(stemdot.apply_masks(ds, masks))
    out = tmp_path / "r.npy"

    def command(file, out, specs):
        return [sys.executable, "-m", "stemdot.dask", "--scheduler", cluster.address, str(file), "--range-frames", "16",
                "--quiet", "--out", str(out)] + [a for s in specs for a in ("--mask", s)]

    started = time.monotonic()
    r = subprocess.run(command(path, out, specs), capture_output=True, text=True, timeout=DEADLINE)
    seconds = time.monotonic() - started
    same = r.returncode == 0 and out.exists() and np.array_equal(np.load(out), want)
    record(same if r.returncode == 0 else f"exit {r.returncode}: {r.stderr.strip()[-100:]}", seconds,
           [line for line in r.stderr.splitlines() if "warn" in line.lower()])
    assert r.returncode == 0, r.stderr
    assert same
    # an error: no output file, a message naming the file, no traceback
    bad = tmp_path / "bad.npy"
    r = subprocess.run(command(cluster.data / "missing.npy", bad, specs[:1]), capture_output=True, text=True,
                       timeout=DEADLINE)
    assert r.returncode != 0, r.stderr
    assert "missing.npy" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not list(tmp_path.glob("bad*")), "an output file was left after the error"


# ------------------------------------------------------------------ rigs of their own


@pytest.mark.fault("heterogeneous nodes: 30% vs 100% of a CPU (cgroup quota)")
def test_heterogeneous_nodes(own_cluster, record, describe_rig):
    c = own_cluster()
    allowed = sorted(os.sched_getaffinity(0))
    try:
        slow = c.add_node(cpus=allowed[:1], quota=0.3, name="slow")
    except rig.NotAvailable as e:
        pytest.skip(str(e))
    fast = c.add_node(cpus=allowed[1:2] or allowed[:1], name="fast")
    describe_rig(f"heterogeneous rig: {c.describe()}")
    # 4096 frames and 128 masks in ranges of 128 frames: each node busy for seconds, so
    # that the quota (per 100 ms period) bites, and the apply, not the per-task overhead,
    # sets the rate
    masks = np.concatenate([MASKS] * 32)
    rng = np.random.default_rng(3)
    path = c.data / "scan.npy"
    np.save(path, rng.integers(0, 1000, size=(64, 64) + SIG, dtype=np.uint16))
    c.share(path.name)
    with stemdot.open(path) as ds:
        want = np.asarray(stemdot.apply_masks(ds, masks))
    with Client(c.address, timeout=60) as client:
        sdask.bootstrap(client)
        out = run(client, path, masks=masks, range_frames=128)
        expect_identical(record, out, want)
        frames, busy = {}, {}
        for first, count, address, _, seconds in out.report["ranges"]:
            frames[address] = frames.get(address, 0) + count
            busy[address] = busy.get(address, 0.0) + seconds
    a_slow, a_fast = (c.worker(n)["address"] for n in (slow, fast))
    rate = {a: frames[a] / busy[a] for a in frames}
    share = frames.get(a_slow, 0) / sum(frames.values())
    expected = rate.get(a_slow, 0) / sum(rate.values())
    throttled = dict(line.split() for line in (slow.cgroup / "cpu.stat").read_text().splitlines()).get("nr_throttled")
    record(True, out.seconds, [f"slow node {share:.0%} of the frames at {expected:.0%} of the rate "
                               f"({rate.get(a_slow, 0):.0f} vs {rate.get(a_fast, 0):.0f} frames/s; throttled "
                               f"{throttled} times)"])
    assert abs(share - expected) < 0.15, f"the slow node got {share:.0%} of the frames, its rate is {expected:.0%} of the total"


@pytest.mark.fault("the scheduler killed mid-run")
def test_scheduler_killed(own_cluster, record):
    c = own_cluster()
    c.add_node()
    rng = np.random.default_rng(4)
    path = c.data / "scan.npy"
    np.save(path, rng.integers(0, 1000, size=NAV + SIG, dtype=np.uint16))
    c.share(path.name)
    client = Client(c.address)
    try:
        sdask.bootstrap(client)
        out = run(client, path, at=AT, fault=c.kill_scheduler, heal=lambda: client.close(timeout=5))
    finally:
        client.close(timeout=5)
    message = f"{type(out.error).__name__}: {out.error}" if out.error else "no error"
    record(f"error after {out.seconds:.1f} s: {message[:100]}", out.seconds, out.warnings)
    assert not out.timed_out, f"the client did not fail within {DEADLINE} s of the scheduler's death"
    assert out.error is not None and c.address in str(out.error), f"no error naming the scheduler {c.address}: {message}"
