"""stemdot.live against `stemdot replay` (the repository's bin/stemdot serving a file as a
Merlin or a DECTRIS detector on loopback) and LiberTEM-live's DECTRIS simulator: the final
result is apply_masks' on the file bit for bit, the updates only grow, leaving early
cancels, a cut-off acquisition is a labelled partial result, and errors raise the
StemdotError subclass of their kind."""

import os
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import stemdot

from conftest import REPO

def masks256():
    sig = (256, 256)
    return np.concatenate([stemdot.disk(sig, 128, 128, 40), stemdot.ring(sig, 128, 128, 50, 120), stemdot.com(sig)])


def same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("as_, name, source_options", [
    ("merlin", "Single_9_Frame_CounterDepth_12_Rows_256.mib", {}),
    ("merlin", "Quad_9_Frame_CounterDepth_12_Rows_256.mib", {}),
    ("dectris-v1", "Single_9_Frame_CounterDepth_12_Rows_256.mib", {"stream": "v1"}),
    ("dectris-v2", "Single_9_Frame_CounterDepth_6_Rows_256.mib", {}),
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_live_equals_apply(replay, data_dir, tmp_path, as_, name, source_options, dtype):
    path = data_dir / "mib" / name
    masks = masks256() if "Quad" not in name else np.concatenate([stemdot.disk((512, 512), 256, 256, 80), stemdot.com((512, 512))])
    want = stemdot.apply_masks(stemdot.open(path, nav_shape=(3, 3)), masks, dtype=dtype)
    r = replay(path, as_, *(() if as_ == "merlin" else ("--nav-shape", "3,3")))
    scheme = as_.split("-")[0]
    record = tmp_path / ("rec.mib" if scheme == "merlin" else "rec.npy")
    names = [f"m{i}" for i in range(len(masks))]
    with stemdot.live(f"{scheme}://{r.address}", masks, nav_shape=(3, 3), passive=True, record=record, dtype=dtype,
                      names=names, **source_options) as run:
        updates = list(run)
    final = updates[-1]
    assert final.final and not final.partial and all(not u.final for u in updates[:-1])
    assert isinstance(final.result, stemdot.Result) and run.result is final.result and run.closed
    assert same_bits(final.result, want), "live differs from apply_masks"
    assert final.result.names == tuple(names)
    assert final.done == final.received == 9 and final.missing == final.late == 0
    assert final.positions_without_frame == () and final.damage.all()
    info = final.result.info
    assert info["shape"] == [3, 3, len(masks)] and info["dtype"] == np.dtype(dtype).name
    assert [m["name"] for m in info["masks"]] == names
    assert info["live"]["source"] == f"{scheme}://{r.address}" and info["live"]["partial"] is False
    assert info["live"]["received"] == 9 and info["live"]["record"] == str(record)
    again = stemdot.apply_masks(stemdot.open(record, nav_shape=(3, 3)), masks, dtype=dtype)
    assert same_bits(again, want), "apply_masks on the record differs"


@pytest.fixture(scope="module")
def scan256(cli, tmp_path_factory):
    """A synthetic scan of 16 × 16 frames of 256 × 256 uint16 pixels (a worker computes
    tiles of 32 of them: 8 tiles)."""
    path = tmp_path_factory.mktemp("scan") / "scan.npy"
    subprocess.run([str(cli), "synth", "--out", str(path), "--nav-shape", "16,16", "--sig-shape", "256,256"], check=True,
                   capture_output=True)
    return path


def test_updates_grow(replay, scan256):
    """A position once computed keeps its value; frames done never decrease; the final
    result is apply_masks' on the file."""
    masks = masks256()
    want = stemdot.apply_masks(stemdot.open(scan256), masks)
    r = replay(scan256, "merlin", "--rate", "1000")
    seen = np.full(want.shape, np.nan, np.float32)
    done, partial_updates = 0, 0
    for u in stemdot.live(f"merlin://{r.address}", masks, passive=True, every=0.02):
        res = np.asarray(u.result)
        computed = ~np.isnan(res)
        assert np.array_equal(res[computed], np.asarray(want)[computed]), "a computed value differs from apply_masks'"
        kept = ~np.isnan(seen)
        assert np.array_equal(res[kept], seen[kept]), "a value changed after it was computed"
        assert np.array_equal(u.damage, computed.all(axis=-1))
        assert u.done >= done and u.n_frames == 256
        done, seen = u.done, res
        partial_updates += 0 < computed.sum() < computed.size
    assert u.final and same_bits(u.result, want)
    assert partial_updates > 0, "no update of part of the scan"


def _no_thread_left(before):
    deadline = time.monotonic() + 2
    while threading.active_count() > before and time.monotonic() < deadline:
        time.sleep(0.01)
    return threading.active_count() == before


def _freed(handle):
    with pytest.raises(stemdot.BadHandleError, match="already freed"):
        stemdot._call(stemdot._LIB.stemdot_live_poll, handle, 0.0, stemdot._lib.LiveSnapshot(), None, 7, 0)


@pytest.fixture
def made(monkeypatch):
    """The handles of the live runs the test starts."""
    handles = []
    init = stemdot.Live.__init__

    def record(self, *args):
        init(self, *args)
        handles.append(self._handle)

    monkeypatch.setattr(stemdot.Live, "__init__", record)
    return handles


@pytest.mark.parametrize("how", ["break", "exception", "with", "close"])
def test_leaving_early_cancels(replay, scan256, made, how):
    """Leaving the loop while frames arrive (break, an exception, the with block's end,
    close()): the run is cancelled and freed promptly, no thread left."""
    r = replay(scan256, "merlin", "--rate", "50")  # 5 s of frames
    before = threading.active_count()
    source, ones = f"merlin://{r.address}", np.ones((1, 256, 256), np.float32)
    t0 = None
    if how == "break":
        for u in stemdot.live(source, ones, passive=True, every=0.02):
            if u.received > 0:
                t0 = time.monotonic()
                break
    elif how == "exception":
        with pytest.raises(ZeroDivisionError):
            for u in stemdot.live(source, ones, passive=True, every=0.02):
                if u.received > 0:
                    t0 = time.monotonic()
                    1 / 0
    elif how == "with":
        with stemdot.live(source, ones, passive=True, every=0.02) as run:
            for u in run:
                if u.received > 0:
                    t0 = time.monotonic()
                    break
        assert run.closed
    else:
        run = stemdot.live(source, ones, passive=True, every=0.02)
        for u in run:
            if u.received > 0:
                t0 = time.monotonic()
                run.close()
        assert run.closed
    assert not u.final and u.received < 256
    # the rest of the acquisition would take 4 s or more; a loaded 2-core machine may
    # stall a while
    assert time.monotonic() - t0 < 3.0, "cancelling took long"
    _freed(made[0])
    assert _no_thread_left(before)


def test_ctrl_c_cancels(sigint_raises):
    """Ctrl-C while waiting for an acquisition that never comes (a data port that
    accepts and sends nothing) raises KeyboardInterrupt promptly and frees the run."""
    with socket.create_server(("127.0.0.1", 0)) as srv:
        port = srv.getsockname()[1]
        held = []
        threading.Thread(target=lambda: held.append(srv.accept()), daemon=True).start()
        run = stemdot.live(f"merlin://127.0.0.1:{port}", np.ones((1, 4, 4), np.float32), passive=True)
        handle = run._handle
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            for _ in run:
                pass
        assert time.monotonic() - t0 < 3.0
        assert run.closed
        _freed(handle)
        for conn, _ in held:
            conn.close()


def test_partial(replay, cli, tmp_path):
    """The replay killed mid-scan: the final result is labelled partial, NaN at the
    positions without a frame, apply_masks' values at the others, with a warning."""
    path = tmp_path / "scan.npy"
    subprocess.run([str(cli), "synth", "--out", str(path), "--nav-shape", "16,16", "--sig-shape", "64,64"], check=True,
                   capture_output=True)
    masks = stemdot.disk((64, 64), 32, 32, 10)
    want = np.asarray(stemdot.apply_masks(stemdot.open(path), masks))
    r = replay(path, "merlin", "--rate", "400")
    threading.Timer(0.3, r.kill).start()  # about 120 of 256 frames
    with pytest.warns(UserWarning, match=r"partial result, \d+ of 256 scan positions have no frame \(NaN\)"):
        for u in stemdot.live(f"merlin://{r.address}", masks, passive=True):
            pass
    assert u.final and u.partial
    res = np.asarray(u.result).reshape(256)
    ((first, count),) = u.positions_without_frame
    assert 0 < count < 256 and first + count == 256
    assert np.isnan(res[first:]).all()
    assert np.array_equal(res[:first], want.reshape(256)[:first])
    assert u.received == first and u.missing == count
    live_info = u.result.info["live"]
    assert live_info["partial"] is True and live_info["positions_without_frame"] == [[first, count]]
    assert live_info["ended_by"]


def test_errors(replay, scan256):
    ones = np.ones((1, 4, 4), np.float32)
    with pytest.raises(stemdot.StemdotIOError, match="cannot connect to the data port 127.0.0.1:1"):
        list(stemdot.live("merlin://127.0.0.1:1", ones, passive=True))
    with pytest.raises(stemdot.InvalidArgumentError, match='unknown scheme "tpx": want dectris or merlin'):
        stemdot.live("tpx://127.0.0.1", ones)
    with pytest.raises(stemdot.InvalidArgumentError, match='unknown live option "colour"'):
        stemdot.live("merlin://127.0.0.1", ones, colour="blue")
    with pytest.raises(stemdot.InvalidArgumentError, match='merlin source option "stream" is not known'):
        stemdot.live("merlin://127.0.0.1", ones, stream="v1")
    with pytest.raises(stemdot.InvalidArgumentError, match="give source option dectris_api"):
        stemdot.live("dectris://127.0.0.1", ones, nav_shape=(4, 4))
    with pytest.raises(stemdot.InvalidArgumentError, match="option every"):
        stemdot.live("merlin://127.0.0.1", ones, every=0)
    with pytest.raises(stemdot.ShapeError, match="option nav_shape"):
        stemdot.live("merlin://127.0.0.1", ones, nav_shape="4x4")
    with pytest.raises(stemdot.DTypeError):
        stemdot.live("merlin://127.0.0.1", ones, dtype=np.int32)
    with pytest.raises(TypeError):
        stemdot.live(b"merlin://127.0.0.1", ones)
    # masks of another sig shape than the stream's: raised by the iteration
    r = replay(scan256, "merlin")
    run = stemdot.live(f"merlin://{r.address}", ones, passive=True)
    with pytest.raises(stemdot.ShapeError, match=r"masks of sig_shape \(4, 4\) do not match the frames' sig_shape \(256, 256\)"):
        next(run)
    assert run.closed


def test_libertem_dectris_simulator(tmp_path):
    """LiberTEM-live 0.3.0's DECTRIS simulator (SIMPLON REST and stream v1; every pixel of
    frame i equals i), in active mode: a mask of ones gives i·512·512 exactly."""
    pytest.importorskip("libertem_live.detectors.dectris.sim", reason="LiberTEM-live's simulators are not installed (make py-live)")
    n = 12
    sim = subprocess.Popen([sys.executable, "-c", """
import sys
from libertem_live.detectors.dectris.sim import DectrisSim
sim = DectrisSim(port=0, zmqport=0, num_mock_frames=int(sys.argv[1]), verbose=False)
sim.start()
sim.wait_for_listen()
print(sim.port, sim.zmqport, flush=True)
sys.stdin.read()
sim.stop()
""", str(n)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        api, zmq = map(int, sim.stdout.readline().split())
        for u in stemdot.live(f"dectris://127.0.0.1:{zmq}", np.ones((1, 512, 512), np.float32), nav_shape=(n,),
                              dtype=np.float64, stream="v1", dectris_api=f"127.0.0.1:{api}", trigger_mode="exte",
                              start_timeout=60):
            pass
        assert u.final and not u.partial
        assert np.array_equal(np.asarray(u.result)[:, 0], np.arange(n) * 512.0 * 512.0)
    finally:
        sim.stdin.close()
        sim.wait(30)
