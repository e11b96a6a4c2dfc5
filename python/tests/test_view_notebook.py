"""stemdot.view in a notebook, as a person sees it: JupyterLab (from the test's venv: make
py-jupyter) runs a notebook whose cells call stemdot.view on an array, directly (an IFrame
to the kernel's 127.0.0.1) and on a file through jupyter-server-proxy (an IFrame to
/proxy/PORT/TOKEN/, as on JupyterHub), in headless Chromium driven through the DevTools
protocol (websocket-client). In each IFrame of the cells' outputs, the viewer's page must
paint the virtual image of its first detector: the values it holds equal apply_masks'
for that detector's spec, and the image canvas's pixels are not blank and rise with
them. Chromium: $STEMDOT_CHROMIUM, else chromium (Debian's package), chromium-browser,
google-chrome; the test skips without it, or without JupyterLab. Every step has a
deadline; JupyterLab (its kernels) and Chromium are killed at the end, whatever happened.
A screenshot of the notebook goes to $STEMDOT_VIEW_SHOTS, else the test's tmp_path."""

import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import numpy as np
import pytest

import stemdot

pytest.importorskip("jupyterlab", reason="JupyterLab not installed (make py-jupyter): skipping the notebook test of stemdot.view")
pytest.importorskip("jupyter_server_proxy", reason="jupyter-server-proxy not installed (make py-jupyter): skipping")
websocket = pytest.importorskip("websocket", reason="websocket-client not installed (make py-jupyter): skipping")


def chromium():
    p = os.environ.get("STEMDOT_CHROMIUM")
    if p:
        return p
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if shutil.which(name):
            return shutil.which(name)
    pytest.skip("no Chromium found (apt-get install chromium, or set STEMDOT_CHROMIUM): skipping the notebook test")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, check, timeout, interval=0.2):
    """check()'s first truthy value within timeout seconds, else AssertionError naming what."""
    end = time.monotonic() + timeout
    last = None
    while time.monotonic() < end:
        try:
            last = check()
        except Exception as e:  # noqa: BLE001 (not up yet)
            last = e
        if last and not isinstance(last, Exception):
            return last
        time.sleep(interval)
    raise AssertionError(f"{what}: not within {timeout} s (last: {last!r})")


def stop(proc):
    """Ends proc's process group (a session of its own): SIGTERM, SIGKILL after 15 s."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(15)
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # its children that outlived it (kernels, renderers)
    except ProcessLookupError:
        pass


class Page:
    """A Chromium page driven through the DevTools protocol: calls, and the events that
    came meanwhile (the frames' JavaScript contexts)."""

    def __init__(self, ws_url):
        self.ws = websocket.create_connection(ws_url, timeout=60, suppress_origin=True)
        self.id = 0
        self.contexts = {}  # frame id -> its page's JavaScript context (the main world)

    def call(self, method, **params):
        self.id += 1
        self.ws.send(json.dumps({"id": self.id, "method": method, "params": params}))
        while True:
            m = json.loads(self.ws.recv())
            if m.get("id") == self.id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m["result"]
            if m.get("method") == "Runtime.executionContextCreated":
                c = m["params"]["context"]
                if c.get("auxData", {}).get("isDefault"):
                    self.contexts[c["auxData"]["frameId"]] = c["id"]

    def eval(self, expression, frame=None):
        """The value of a JavaScript expression (awaited), in the page or in frame's page."""
        params = {"expression": expression, "awaitPromise": True, "returnByValue": True}
        if frame is not None:
            params["contextId"] = self.contexts[frame]
        r = self.call("Runtime.evaluate", **params)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression[:80]}...: {r['exceptionDetails']}")
        return r["result"].get("value")

    def frame_of(self, url):
        """The id of the frame showing url, once its page's context exists."""
        def find(tree):
            if tree["frame"]["url"] == url:
                return tree["frame"]["id"]
            for child in tree.get("childFrames", []):
                f = find(child)
                if f:
                    return f
            return None
        f = find(self.call("Page.getFrameTree")["frameTree"])
        if f and f not in self.contexts:
            self.call("Runtime.disable")
            self.call("Runtime.enable")  # announces every context again
        return f if f in self.contexts else None


# The page's state once its first image is painted: the spec and values painted, and the
# image canvas's brightness at the centre of each scan position's cell.
PAINTED = """(() => {
  const S = window.stemdotView;
  if (!S || !S.ready || !S.painted || S.painted.spec !== S.spec) return null;
  const c = document.getElementById('image'), [ny, nx] = S.painted.shape;
  const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data, lum = [];
  for (let y = 0; y < ny; y++) for (let x = 0; x < nx; x++) {
    const i = 4 * (Math.floor((y + 0.5) * c.height / ny) * c.width + Math.floor((x + 0.5) * c.width / nx));
    lum.push(0.299 * px[i] + 0.587 * px[i + 1] + 0.114 * px[i + 2]);
  }
  return {spec: S.painted.spec, shape: S.painted.shape, values: Array.from(S.painted.data), lum, errors: S.errors};
})()"""


def ranks(a):
    return np.argsort(np.argsort(a, kind="stable"), kind="stable")


def test_view_in_jupyterlab(tmp_path):
    browser = chromium()
    rng = np.random.default_rng(4)
    frames = rng.integers(0, 200, size=(6, 9, 32, 32)).astype(np.uint16)
    yy, xx = np.mgrid[:32, :32]
    for y in range(6):  # a bright disk of varying intensity at the centre: the default detector's image varies
        for x in range(9):
            frames[y, x][(yy - 16) ** 2 + (xx - 16) ** 2 <= 16] += 50 * (y * 9 + x)
    root = tmp_path / "notebooks"
    root.mkdir()
    np.save(root / "frames.npy", frames)
    cells = ["import numpy as np, stemdot\nframes = np.load('frames.npy')",
             "stemdot.view(frames, cpus=1, proxy=False)",
             "stemdot.view('frames.npy', cpus=1, proxy=True)"]
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
          "cells": [{"cell_type": "code", "id": f"c{i}", "metadata": {}, "execution_count": None, "outputs": [], "source": s}
                    for i, s in enumerate(cells)]}
    (root / "view.ipynb").write_text(json.dumps(nb))

    port, token = free_port(), "stemdot-test-" + os.urandom(8).hex()
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(tmp_path / "config"), JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
               JUPYTER_DATA_DIR=str(tmp_path / "data"), IPYTHONDIR=str(tmp_path / "ipython"), JUPYTER_PLATFORM_DIRS="1")
    env.pop("JUPYTERHUB_SERVICE_PREFIX", None)
    log = open(tmp_path / "jupyter.log", "w")
    lab = subprocess.Popen([sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
                            "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
                            "--LabApp.expose_app_in_browser=True", f"--LabApp.workspaces_dir={tmp_path / 'workspaces'}",
                            f"--LabApp.user_settings_dir={tmp_path / 'settings'}",
                            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
                           + (["--allow-root"] if os.geteuid() == 0 else []),
                           cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    chrome = None
    try:
        base = f"http://127.0.0.1:{port}"

        def up():
            if lab.poll() is not None:
                pytest.fail(f"JupyterLab exited with status {lab.returncode}: {(tmp_path / 'jupyter.log').read_text()[-3000:]}")
            return urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=5).status == 200
        wait_for("JupyterLab's server", up, 120, 0.5)
        profile = tmp_path / "chromium"
        chrome = subprocess.Popen([browser, "--headless", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
                                   "--remote-debugging-port=0", f"--user-data-dir={profile}", "--window-size=1400,2400"]
                                  + (["--no-sandbox"] if os.geteuid() == 0 else []) + ["about:blank"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        devtools = wait_for("Chromium's DevTools port", lambda: (profile / "DevToolsActivePort").read_text().split("\n")[0], 60)
        targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{devtools}/json/list", timeout=10))
        page = Page(next(t for t in targets if t["type"] == "page")["webSocketDebuggerUrl"])
        page.call("Page.enable")
        page.call("Runtime.enable")
        page.call("Page.navigate", url=f"{base}/lab/tree/view.ipynb?token={token}")
        # The notebook's panel (window.jupyterapp: expose_app_in_browser), its kernel idle;
        # a headless window has no focus, so the panel is activated to be the current one.
        panel = "(window.jupyterapp && Array.from(jupyterapp.shell.widgets('main')).find(w => w.sessionContext))"
        wait_for("the notebook and its kernel", lambda: page.eval(
            f"(p => !!p && p.context.isReady && p.sessionContext.session?.kernel?.status === 'idle')({panel})"), 180, 0.5)
        page.eval(f"jupyterapp.shell.activateById({panel}.id), jupyterapp.commands.execute('notebook:run-all-cells').then(() => true)")
        srcs = wait_for("the two IFrames of stemdot.view in the cells' outputs", lambda: (lambda s: s if len(s) == 2 else None)(page.eval(
            "Array.from(document.querySelectorAll('.jp-OutputArea-output iframe')).map(f => f.src)")), 120, 0.5)
        assert srcs[0].startswith("http://127.0.0.1:") and srcs[1].startswith(f"{base}/proxy/"), srcs
        for i, src in enumerate(srcs):
            page.eval(f"document.querySelectorAll('.jp-OutputArea-output iframe')[{i}].scrollIntoView(), true")
            frame = wait_for(f"the frame of {src}", lambda: page.frame_of(src), 60)
            got = wait_for(f"the first image painted in {src}", lambda: page.eval(PAINTED, frame), 120, 0.5)
            assert got["errors"] == [], got["errors"]
            assert got["shape"] == [6, 9]
            centre = stemdot.centre(frames) if "auto" in got["spec"] else None  # the page starts at disk:auto
            want = stemdot.apply_masks(frames, stemdot.mask(got["spec"], frames.shape[2:], centre=centre))[..., 0]
            np.testing.assert_array_equal(np.array(got["values"], dtype=np.float32).reshape(6, 9), want, err_msg=src)
            lum = np.array(got["lum"])
            assert len(np.unique(lum)) >= 20, f"{src}: the image canvas is blank or nearly ({np.unique(lum)})"
            rho = np.corrcoef(ranks(lum), ranks(want.ravel()))[0, 1]
            assert rho > 0.95, f"{src}: the canvas's brightness does not follow the values (Spearman {rho:.3f})"
        shots = os.environ.get("STEMDOT_VIEW_SHOTS") or str(tmp_path)
        os.makedirs(shots, exist_ok=True)
        png = page.call("Page.captureScreenshot", format="png")["data"]
        with open(os.path.join(shots, "notebook.png"), "wb") as f:
            f.write(base64.b64decode(png))
    finally:
        if chrome is not None:
            stop(chrome)
        stop(lab)
        log.close()
