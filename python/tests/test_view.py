"""stemdot.view: the viewer's server started from Python (stemdot_view_start), its page and
virtual images against apply_masks, its URL forms (direct, jupyter-server-proxy's), and
its end: close(), garbage collection, the interpreter's exit. The notebook test in
JupyterLab and Chromium is test_view_notebook.py."""

import gc
import json
import shlex
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import numpy as np
import pytest

import stemdot


def get(url, host=None, timeout=30):
    """GET url: (status, headers, body)."""
    req = urllib.request.Request(url, headers={"Host": host} if host else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def refused(url):
    """Whether a connection to url's port is refused (the server has stopped)."""
    try:
        urllib.request.urlopen(url, timeout=10)
    except urllib.error.URLError as e:
        return isinstance(e.reason, ConnectionRefusedError)
    return False


def image(url, spec, timeout=60):
    """The virtual image of spec from the server at url (waiting for its first pass)."""
    end = time.monotonic() + timeout
    while True:
        status, headers, body = get(url + "api/image?" + urllib.parse.urlencode({"spec": spec}))
        if status != 503 or time.monotonic() > end:  # 503: the first pass is running
            break
        time.sleep(0.05)
    assert status == 200, body
    assert headers["X-DType"] == "f4"
    shape = tuple(int(n) for n in headers["X-Shape"].split(","))
    return np.frombuffer(body, dtype="<f4").reshape(shape)


def default_disk(sig_shape):
    """The page's first detector, as app.js's defaultDetector makes it: a disk at the
    frame's centre of radius min(sig)/8."""
    sy, sx = sig_shape
    return f"disk:{sx // 2},{sy // 2},{max(1, round(min(sy, sx) / 8))}"


@pytest.fixture
def frames():
    rng = np.random.default_rng(35)
    return rng.integers(0, 1000, size=(5, 7, 24, 32), dtype=np.uint16)


def test_view_array(frames, capsys):
    """An array: the page, its info, and the default detector's virtual image equal to
    apply_masks' (the same float32 values); close() stops the server."""
    v = stemdot.view(frames, cpus=1)
    assert capsys.readouterr().out == f"stemdot view of {v.name}: {v.url}\n"  # not in a notebook: the URL printed
    assert v.url == v.direct_url
    assert v.url.startswith(f"http://127.0.0.1:{v.port}/") and v.url.endswith("/") and len(v.url.split("/")[3]) == 32
    status, headers, page = get(v.url)
    assert status == 200 and b"<title>stemdot view</title>" in page
    assert headers["Content-Security-Policy"].endswith("; frame-ancestors *")
    status, _, body = get(v.url + "api/info")
    info = json.loads(body)
    assert (info["nav_shape"], info["sig_shape"], info["dtype"]) == ([5, 7], [24, 32], "uint16")
    assert info["file"] == f"<array {frames.shape} uint16>" and info["command"] == ""
    spec = default_disk(frames.shape[2:])
    want = stemdot.apply_masks(frames, stemdot.mask(spec, frames.shape[2:]))[..., 0]
    np.testing.assert_array_equal(image(v.url, spec), want)
    # an independent float64 reference of a rect: columns 3..10 of rows 2..6
    np.testing.assert_array_equal(image(v.url, "rect:3,2,8,5"), frames[:, :, 2:7, 3:11].sum(axis=(2, 3), dtype=np.float64))
    assert get(v.url + "api/info", host="attacker.example")[0] == 403  # direct: only IP addresses and localhost

    html = v._repr_html_()
    assert f'<iframe src="{v.url}" width="100%" height="760"' in html
    v.close()
    assert v.closed and refused(v.url)
    assert "closed" in repr(v) and "closed" in v._repr_html_()
    v.close()  # idempotent


def test_view_file(tmp_path, cli):
    """A path with format options: the page's command opens the file as it was opened, and
    with the page's --mask and --out it writes the page's image."""
    frames = np.arange(6 * 16 * 16, dtype=np.float32).reshape(6, 16, 16) % 251
    path = tmp_path / "scan with space.npy"
    np.save(path, frames)
    with stemdot.view(path, nav_shape=(2, 3)) as v:
        info = json.loads(get(v.url + "api/info")[2])
        assert info["nav_shape"] == [2, 3]
        assert info["command"] == f"stemdot apply {shlex.quote(str(path))} --nav-shape=2,3"
        spec = "ring:8,8,2,5"
        shown = image(v.url, spec)
        out = tmp_path / "r.npy"
        cmd = shlex.split(info["command"])
        subprocess.run([str(cli)] + cmd[1:] + ["--mask", spec, "--out", str(out)], check=True, capture_output=True)
        np.testing.assert_array_equal(np.load(out)[..., 0], shown)
    assert refused(v.url)


def test_view_dataset_kept_open(frames):
    """A Dataset given is read, not closed: it cannot be closed while the view runs, and is
    open after it."""
    with stemdot.from_array(frames) as ds:
        v = stemdot.view(ds, cpus=1)
        with pytest.raises(stemdot.InvalidArgumentError, match="in use by a running apply or a viewer"):
            ds.close()
        np.testing.assert_array_equal(image(v.url, "point:3,4"), frames[..., 4, 3])
        v.close()
        assert not ds.closed
        assert stemdot.apply_masks(ds, stemdot.point(ds.sig_shape, 3, 4)).shape == (5, 7, 1)


def test_view_of_a_files_dataset_outlives_it(tmp_path):
    """A file's Dataset is opened again by the view, as it was opened: its with block
    closes it while the page goes on serving the file's frames (a fresh user's notebook
    pattern raised 'in use' at the block's end)."""
    frames = np.arange(6 * 16 * 16, dtype=np.uint16).reshape(6, 16, 16) % 251
    path = tmp_path / "scan.npy"
    np.save(path, frames)
    with stemdot.open(path, nav_shape=(2, 3)) as ds:
        v = stemdot.view(ds, cpus=1)
    assert ds.closed and not v.closed
    info = json.loads(get(v.url + "api/info")[2])
    assert info["nav_shape"] == [2, 3]
    np.testing.assert_array_equal(image(v.url, "point:3,4"), frames[:, 4, 3].reshape(2, 3))
    v.close()
    assert refused(v.url)


def test_view_garbage_collected(frames):
    """A view dropped (no reference left) stops its server."""
    v = stemdot.view(frames, cpus=1)
    url = v.url
    assert get(url)[0] == 200
    del v
    gc.collect()
    assert refused(url)


def test_view_stops_at_exit(frames, tmp_path):
    """A view left running when the interpreter exits (a kernel shut down) is stopped
    there: the process exits at once, with status 0."""
    np.save(tmp_path / "f.npy", frames)
    code = (f"import stemdot, urllib.request; v = stemdot.view({str(tmp_path / 'f.npy')!r}); "
            "assert urllib.request.urlopen(v.url).status == 200")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    url = p.stdout.split(": ", 1)[1].strip()
    assert refused(url)


def test_view_proxy(frames, monkeypatch):
    """jupyter-server-proxy's URL form: the page's URL under the prefix, the server taking
    the browser's Host that the proxy passes on; under JupyterHub by default."""
    monkeypatch.delenv("JUPYTERHUB_SERVICE_PREFIX", raising=False)
    with stemdot.view(frames, proxy="/user/me/proxy/{port}/") as v:
        token = v.direct_url.split("/")[3]
        assert v.url == f"/user/me/proxy/{v.port}/{token}/"
        assert get(v.direct_url + "api/info", host="hub.example.org")[0] == 200
    with stemdot.view(frames, proxy=True) as v:
        assert v.url == f"/proxy/{v.port}/{v.direct_url.split('/')[3]}/"
    monkeypatch.setenv("JUPYTERHUB_SERVICE_PREFIX", "/user/someone/")
    with stemdot.view(frames) as v:
        assert v.url == f"/user/someone/proxy/{v.port}/{v.direct_url.split('/')[3]}/"
        assert f'<iframe src="{v.url}"' in v._repr_html_()
    with stemdot.view(frames, proxy=False) as v:
        assert v.url == v.direct_url
    with pytest.raises(stemdot.InvalidArgumentError, match="want None, True, False or a URL with {port}"):
        stemdot.view(frames, proxy="/proxy/")


def test_view_errors(frames, tmp_path):
    with pytest.raises(stemdot.ShapeError, match="nav"):
        stemdot.view(frames.reshape(5, 7, 1, 24, 32))
    with pytest.raises(TypeError, match="format options"):
        stemdot.view(frames, nav_shape=(35,))
    with pytest.raises(stemdot.StemdotIOError):
        stemdot.view(tmp_path / "missing.npy")
    with stemdot.view(frames) as v:
        with pytest.raises(stemdot.StemdotIOError, match="option listen"):
            stemdot.view(frames, listen=f"127.0.0.1:{v.port}")  # in use
    with pytest.raises(stemdot.InvalidArgumentError, match="cpus"):
        stemdot.view(frames, cpus="many")


def test_view_dask_array(frames, tmp_path, monkeypatch):
    """A dask array: written block by block (blocks of 2 frames here) to a scratch file in
    scratch=, which the view reads; its virtual images equal apply_masks' of the numpy
    frames; the file is removed when the view stops."""
    da = pytest.importorskip("dask.array")
    monkeypatch.setattr(stemdot, "LAZY_BLOCK_BYTES", 2 * frames[0, 0].nbytes)
    x = da.from_array(frames, chunks=(2, 3, 24, 32))
    with stemdot.view(x, cpus=1, scratch=tmp_path) as v:
        scratch, = tmp_path.iterdir()
        assert scratch.name.startswith("stemdot-view-") and scratch.suffix == ".npy"
        np.testing.assert_array_equal(np.load(scratch), frames)
        info = json.loads(get(v.url + "api/info")[2])
        assert info["file"] == "<dask array (5, 7, 24, 32) uint16>" and info["command"] == ""
        assert v.name == info["file"]
        spec = default_disk(frames.shape[2:])
        want = stemdot.apply_masks(frames, stemdot.mask(spec, frames.shape[2:]))[..., 0]
        np.testing.assert_array_equal(image(v.url, spec), want)
        np.testing.assert_array_equal(image(v.url, "rect:3,2,8,5"), frames[:, :, 2:7, 3:11].sum(axis=(2, 3), dtype=np.float64))
    assert list(tmp_path.iterdir()) == []


def test_view_dask_array_refused(frames, tmp_path, monkeypatch):
    """A dask array that cannot be viewed leaves no scratch file: no room (the error names
    scratch=), a dtype the engine does not read, a failing block."""
    da = pytest.importorskip("dask.array")
    x = da.from_array(frames, chunks=(2, 3, 24, 32))
    Usage = type(shutil_usage := __import__("shutil").disk_usage(tmp_path))
    monkeypatch.setattr("shutil.disk_usage", lambda d: Usage(shutil_usage.total, shutil_usage.used, x.nbytes // 2))
    with pytest.raises(stemdot.StemdotIOError, match=r"\(0\.05 MB\) .* has 0\.03 MB free: give scratch= a directory with room"):
        stemdot.view(x, scratch=tmp_path)
    monkeypatch.undo()
    with pytest.raises(stemdot.DTypeError):
        stemdot.view(x.astype(np.complex64), scratch=tmp_path)

    def fail(block):
        raise RuntimeError("block lost")
    with pytest.raises(RuntimeError, match="block lost"):
        stemdot.view(x.map_blocks(fail, dtype=x.dtype), scratch=tmp_path)
    with pytest.raises(stemdot.StemdotIOError, match="scratch="):
        stemdot.view(x, scratch=tmp_path / "missing")
    assert list(tmp_path.iterdir()) == []


def test_view_lazy_signal(frames, tmp_path):
    """A lazy HyperSpy signal is viewed through its dask array."""
    hs = pytest.importorskip("hyperspy.api", reason="HyperSpy not installed (make py-hyperspy)")
    s = hs.signals.Signal2D(frames).as_lazy()
    with stemdot.view(s, cpus=1, scratch=tmp_path) as v:
        np.testing.assert_array_equal(image(v.url, "rect:0,0,32,24"), frames.sum(axis=(2, 3), dtype=np.float64))
    assert list(tmp_path.iterdir()) == []
