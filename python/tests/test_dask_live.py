"""stemdot.dask.live on a LocalCluster of two worker processes against `stemdot replay
--as dectris-v2|v1 --api` (the repository's bin/stemdot serving a file as a DECTRIS
detector: a SIMPLON API and a round-robin ZeroMQ PUSH stream): the merged result is
apply_masks' on the file bit for bit, each frame computed by one worker exactly once;
a worker killed mid-scan leaves its frames missing (NaN, listed), the rest apply_masks'."""

import os
import signal
import warnings

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")

from distributed import Client, LocalCluster  # noqa: E402

import stemdot  # noqa: E402
import stemdot.dask as sdask  # noqa: E402

SIG = (64, 64)
NAV = (32, 32)
TIMEOUT = 120
@pytest.fixture(scope="module")
def scan(tmp_path_factory):
    """A 1024-frame NPY scan (32×32 of 64×64 uint16), its masks, and apply_masks' result."""
    path = tmp_path_factory.mktemp("live") / "scan.npy"
    rng = np.random.default_rng(34)
    np.save(path, rng.integers(0, 4000, size=NAV + SIG, dtype=np.uint16))
    masks = np.concatenate([stemdot.disk(SIG, 32, 32, 10), stemdot.ring(SIG, 32, 32, 12, 30), stemdot.com(SIG)])
    with stemdot.open(path) as ds:
        want = stemdot.apply_masks(ds, masks)
    return path, masks, want


@pytest.fixture(scope="module")
def client():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=50) as cluster, \
            Client(cluster) as c:
        sdask.bootstrap(c, timeout=TIMEOUT)
        yield c


def same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("as_, stream", [("dectris-v2", "v2"), ("dectris-v1", "v1")])
def test_live_equals_apply(client, replay, scan, as_, stream):
    """Two workers share the stream: the merged result is apply_masks' bit for bit, every
    frame computed once; the updates only grow."""
    path, masks, want = scan
    r = replay(path, as_, "--rate", "4000", api=True)
    report = {}
    names = ["disk", "ring", "comx", "comy", "sum"][: len(masks)]
    seen = np.full(want.shape, np.nan, np.float32)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", ".*partial")  # a complete scan has no frame missing
        with sdask.live(client, f"dectris://{r.stream}", masks, nav_shape=NAV, dectris_api=r.api, stream=stream,
                        every=0.05, names=names, report=report) as run:
            updates = []
            for u in run:
                res = np.asarray(u.result)
                kept = ~np.isnan(seen)
                assert np.array_equal(res[kept], seen[kept]), "a value changed after it was computed"
                computed = ~np.isnan(res)
                assert np.array_equal(res[computed], np.asarray(want)[computed])
                seen = res
                updates.append(u)
    final = updates[-1]
    assert final.final and not final.partial and run.result is final.result and run.closed
    assert any(0 < u.done < 1024 for u in updates[:-1]), "no update showed the scan part-way"
    assert same_bits(final.result, want), "stemdot.dask.live differs from apply_masks"
    assert final.result.names == tuple(names) and final.positions_without_frame == ()
    assert final.done == final.received == 1024 and final.missing == 0
    frames = report["frames"]
    assert sorted(frames) == sorted(report["workers"]) and len(frames) == 2, "a worker computed no frame"
    assert sum(frames.values()) == 1024 and report["repeated"] == 0 and report["lost"] == []
    assert report["header_from"] in report["workers"] and report["end"].startswith(("the end message", "every frame"))
    live = final.result.info["live"]
    assert live["source"] == f"dectris://{r.stream}" and live["partial"] is False and live["received"] == 1024
    assert live["detector"].startswith(f"dectris stream {stream}")


def test_killed_worker_frames_missing(client, replay, scan):
    """A worker killed mid-scan: its frames are missing (NaN, listed), never a wrong
    value; the other positions are apply_masks'."""
    path, masks, want = scan
    r = replay(path, "dectris-v2", "--rate", "500", api=True)
    pids = client.run(os.getpid)
    report = {}
    victim = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with sdask.live(client, f"dectris://{r.stream}", masks, nav_shape=NAV, dectris_api=r.api, every=0.05,
                        idle_timeout=5, report=report) as run:
            for u in run:
                if victim is None and u.done >= 256:
                    victim = sorted(pids)[0]
                    os.kill(pids[victim], signal.SIGKILL)
    final = u
    assert victim is not None and final.final, (report, final)
    got, want = np.asarray(final.result), np.asarray(want)
    missing = np.isnan(got).all(axis=-1).ravel()
    assert not missing.all()
    # The victim loses the frames it had received and not handed over: none when the kill
    # lands just after a poll. Either way, every value computed is exact.
    partial = [str(w.message) for w in caught if "partial result" in str(w.message)]
    assert final.partial == bool(missing.any()) == bool(partial), (partial, final.partial)
    if partial:
        assert f"{missing.sum()} of 1024 scan positions have no frame" in partial[0]
    listed = np.zeros(1024, bool)
    for first, count in final.positions_without_frame:
        listed[first : first + count] = True
    assert np.array_equal(listed, missing), "the positions listed are not those without values"
    assert final.missing == missing.sum() and final.done == 1024 - missing.sum()
    flat, flat_want = got.reshape(1024, -1), want.reshape(1024, -1)
    assert same_bits(flat[~missing], flat_want[~missing]), "a value differs from apply_masks'"
    assert report["lost"] == [victim] and final.result.info["live"]["lost_workers"] == [victim]
    assert report["frames"].get(victim, 0) < 1024 - missing.sum()
    client.wait_for_workers(2, timeout=TIMEOUT)  # the Nanny restarts it for the next test


def test_errors(client, replay, scan):
    """Bad requests are refused at the call; the workers' errors are raised."""
    path, masks, _ = scan
    with pytest.raises(stemdot.InvalidArgumentError, match="DECTRIS stream"):
        sdask.live(client, "merlin://127.0.0.1:1", masks, nav_shape=NAV, dectris_api="127.0.0.1:1")
    with pytest.raises(stemdot.InvalidArgumentError, match="give dectris_api"):
        sdask.live(client, "dectris://127.0.0.1:1", masks, nav_shape=NAV, dectris_api=None)
    with pytest.raises(stemdot.InvalidArgumentError, match="option passive is not"):
        sdask.live(client, "dectris://127.0.0.1:1", masks, nav_shape=NAV, dectris_api="h:1", passive=True)
    r = replay(path, "dectris-v2", api=True)
    with pytest.raises(stemdot.InvalidArgumentError, match="set to send 1024 images"):
        list(sdask.live(client, f"dectris://{r.stream}", masks, nav_shape=(4, 4), dectris_api=r.api, ntrigger=1024))
    with pytest.raises(stemdot.ShapeError, match="sig_shape"):  # masks of another frame shape: the workers' error
        list(sdask.live(client, f"dectris://{r.stream}", masks[:, :32, :32], nav_shape=NAV, dectris_api=r.api))
