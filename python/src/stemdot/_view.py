"""stemdot.view: stemdot view's interactive virtual detector for a dataset, inline in a
notebook (an IFrame in the cell's output) or in a browser (libstemdot's stemdot_view_*
functions, include/stemdot.h)."""

import ctypes
import html
import os
import shlex
import shutil
import sys
import tempfile
import urllib.parse
import weakref
import webbrowser

import numpy as np

from . import _LIB, InvalidArgumentError, StemdotIOError, _call, _dataset_of, _option_value, _printable, _request, _text
from . import open as _open_file
from . import _lib
from ._lazy import _frames_of, _is_dask, _lazy_blocks, _nav_blocks


def _in_kernel():
    """Whether this process is a Jupyter kernel (IPython's, with a front end that shows
    HTML), not a terminal."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return getattr(shell, "kernel", None) is not None


def _proxy_template(proxy):
    """The URL path, with {port}, under which the browser reaches the server through
    jupyter-server-proxy, or None to reach it directly (see :func:`view`)."""
    hub = os.environ.get("JUPYTERHUB_SERVICE_PREFIX")
    if proxy is None:
        proxy = bool(hub)
    if proxy is False:
        return None
    if proxy is True:
        return (hub or "/").rstrip("/") + "/proxy/{port}/"
    if not isinstance(proxy, str) or "{port}" not in proxy:
        raise InvalidArgumentError(f"proxy={proxy!r}: want None, True, False or a URL with {{port}}, e.g. "
                                   "'/user/me/proxy/{port}/' (jupyter-server-proxy's)", _lib.ERR_INVALID_ARGUMENT)
    return proxy if proxy.endswith("/") else proxy + "/"


def _command(ds):
    """The CLI command that opens the dataset of a file as ds was opened ("stemdot apply
    PATH --key=value ..."), to which the page adds --mask and --out; None for an array."""
    if ds._reopen is None:
        return None
    path, options = ds._reopen
    parts = ["stemdot", "apply", shlex.quote(path)]
    parts += [f"--{key.replace('_', '-')}={shlex.quote(_option_value(key, value))}"
              for key, value in options.items() if value is not None]
    return " ".join(parts)


class View:
    """A running viewer (:func:`view`): stemdot view's server of a dataset, on this
    process's loopback (its library threads), until :meth:`close`.

    ``url``: the page's address for the browser (through jupyter-server-proxy when the
    view goes through it); ``direct_url``: the server's own, http://127.0.0.1:PORT/TOKEN/;
    ``port``; ``closed``. As a notebook cell's value (or ``display(v)``) it shows the
    viewer in an IFrame of ``width`` × ``height``. A context manager; the server also
    stops when the object is garbage-collected and when the interpreter (the kernel)
    exits."""

    def __init__(self, handle, dataset, own, proxy, width, height, name, scratch):
        # The finaliser holds the dataset: it is read until the server has stopped.
        self._finalizer = weakref.finalize(self, _stop, handle, dataset, own, scratch)
        self.name = name
        self.direct_url = _text(_LIB.stemdot_view_url, handle)
        parts = urllib.parse.urlsplit(self.direct_url)
        self.port = parts.port
        self.url = self.direct_url if proxy is None else proxy.format(port=self.port) + parts.path.lstrip("/")
        self.width, self.height = width, height

    @property
    def closed(self):
        return not self._finalizer.alive

    def close(self):
        """Stops the server (idempotent): the page's requests in progress are cancelled,
        the port closed; a dataset that :func:`view` opened or wrapped is closed, and the
        scratch file of a dask array removed."""
        self._finalizer()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"<stemdot.View of {_printable(self.name)}: {'closed' if self.closed else self.url}>"

    def _repr_html_(self):
        name = html.escape(self.name)
        if self.closed:
            return f"<p>stemdot view of {name}: closed</p>"
        size = " ".join(f'{k}="{html.escape(str(v))}"' for k, v in (("width", self.width), ("height", self.height)))
        url = html.escape(self.url)
        return (f'<iframe src="{url}" {size} style="border: 0" allow="clipboard-write" title="stemdot view of {name}">'
                f'</iframe><div><a href="{url}" target="_blank" rel="noopener">open stemdot view of {name} in a tab</a></div>')


def _stop(handle, dataset, own, scratch):
    """Stops a view's server, then closes its dataset if the view opened it and removes
    its scratch file (a path, or None)."""
    try:
        _call(_LIB.stemdot_view_free, handle)
    finally:
        try:
            if own:
                dataset.close()
        finally:
            if scratch is not None:
                os.unlink(scratch)


def _size(n):
    """n bytes in MB or GB, for a message."""
    return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.2f} MB"


def _spill(x, directory):
    """Dask array x (nav_shape + (sig_y, sig_x)) written to a new NPY file in directory
    (None: tempfile's, $TMPDIR or /tmp), one block of LAZY_BLOCK_BYTES at a time, for the
    view to read as a file (it reads the frames again for every detector drawn, which a
    dask graph would compute again each time); the file's path. The caller removes it.
    StemdotIOError where the directory lacks the room (naming ``scratch``); ShapeError and
    DTypeError as for apply_masks, before any block is computed."""
    _nav_blocks(x, 1)  # the checks of shape and dtype, before the file is made
    directory = tempfile.gettempdir() if directory is None else os.fspath(directory)
    need = x.nbytes + (1 << 20)
    try:
        free = shutil.disk_usage(directory).free
    except OSError as e:
        raise StemdotIOError(f"stemdot.view: scratch={directory!r}: {e.strerror}: give scratch= a directory "
                             "to write the dask array's frames to", _lib.ERR_IO) from e
    if free < need:
        raise StemdotIOError(f"stemdot.view: the dask array's frames ({_size(x.nbytes)}) are written to a scratch "
                             f"file for the view, but {_printable(directory)} has {_size(free)} free: "
                             "give scratch= a directory with room, or view a part of the array", _lib.ERR_IO)
    fd, path = tempfile.mkstemp(prefix="stemdot-view-", suffix=".npy", dir=directory)
    os.close(fd)
    try:
        out = np.lib.format.open_memmap(path, mode="w+", dtype=x.dtype, shape=x.shape)
        for index, frames in _lazy_blocks(x):
            out[index] = frames
        out.flush()
        del out
    except BaseException:
        os.unlink(path)
        raise
    return path


def view(data, proxy=None, listen=None, cpus=None, gpus=None, width="100%", height=760, scratch=None,
         **format_options):
    """Shows stemdot view, the interactive virtual detector (``stemdot view FILE``), of
    ``data``: drag a detector (disk, ring, rect, point, CoM) over the sum, mean or max
    frame and see its virtual image, computed as :func:`apply_masks` computes it (the
    same float32 values), with NPY and PNG export.

    In a notebook (a Jupyter kernel), the returned :class:`View` shows the viewer inline
    when it is a cell's value (``stemdot.view(data)`` last in the cell, or
    ``display(v)``): an IFrame of ``width`` × ``height`` (CSS sizes; a number is pixels)
    on the page of a server that runs in the kernel's process, on 127.0.0.1 with a random
    token in its URL. Elsewhere it prints the URL (and opens it where $BROWSER is set, as
    ``stemdot view`` does). ``v.close()`` stops the server; so do the object's garbage
    collection (deleting every reference, ``Out[n]`` too) and the kernel's exit or
    restart.

    data: a path (opened with ``format_options``, those of :func:`open`), a
      :class:`Dataset` (one of a file is opened again by the view, as it was opened, so
      that it may be closed, e.g. by its ``with`` block, while the view runs; one of
      :func:`from_array` is read by the view and cannot be closed before it), or a numpy
      array of frames ``nav_shape + (sig_y, sig_x)`` (read in place as :func:`from_array`
      does: keep it unchanged meanwhile), a dask array or a HyperSpy/pyxem signal (lazy
      or not) as :func:`apply_masks` takes them, or any object with ``__array__``. Its
      nav shape must have 1 or 2 axes (a 3-D one raises :class:`ShapeError`: give a
      path's ``nav_shape``, or reshape the array).
    proxy: how the browser reaches the server. The browser must reach the kernel's
      127.0.0.1, which it does when both run on one machine (JupyterLab on a laptop).
      With JupyterHub or a remote kernel it does not: there the viewer goes through
      jupyter-server-proxy (``pip install jupyter-server-proxy`` where the Jupyter server
      runs; many JupyterHub images have it), at ``{base_url}proxy/{port}/``. None (the
      default): through it under JupyterHub (``JUPYTERHUB_SERVICE_PREFIX`` set), else
      directly; True: through it, at that prefix or ``/proxy/{port}/``; False: directly;
      a string: the URL with ``{port}``, e.g. ``"/user/me/proxy/{port}/"`` or
      ``"https://hub.example.org/user/me/proxy/{port}/"``. Without jupyter-server-proxy,
      forward the port (``ssh -L PORT:127.0.0.1:PORT host``, ``v.port``) and open
      ``v.direct_url``.
    listen: "HOST:PORT" to listen on (default "127.0.0.1:0": loopback, any free port).
    cpus, gpus: the workers of the virtual images, as for :func:`apply_masks`.
    scratch: the directory in which the frames of a dask array (a lazy signal) are
      written, computed one block of ``stemdot.LAZY_BLOCK_BYTES`` at a time, before the
      view starts: the viewer reads every frame again for each detector drawn, which a
      dask graph would compute again each time. The file (the array's size) is removed
      when the view stops. Default: the temporary directory ($TMPDIR, else /tmp); a
      directory without room for it raises :class:`StemdotIOError`.

    The page may be shown in a frame of any page (CSP frame-ancestors ``*``): a notebook
    served from another port, JupyterHub, VS Code; the token in its URL guards it, and
    the server accepts only requests with the token (through a proxy, whatever the Host
    they carry, as the proxy passes on the browser's). Raises :class:`StemdotError`
    subclasses (:class:`StemdotIOError` for a ``listen`` address in use, ...).
    """
    template = _proxy_template(proxy)
    spilled = None
    x = data if format_options else _frames_of(data, "view")  # format options: _dataset_of checks data
    if _is_dask(x):
        spilled = _spill(x, scratch)
        try:
            ds, own = _open_file(spilled), True
        except BaseException:
            os.unlink(spilled)
            raise
        shown = {"name": f"<dask array {tuple(x.shape)} {x.dtype}>", "command": None}
    else:
        ds, own = _dataset_of(x, format_options, "view")
        if not own and not ds.closed and ds._reopen is not None:
            path, options = ds._reopen  # the view's own: the caller's may close first
            ds, own = _open_file(path, **options), True
        shown = {"name": ds.source, "command": _command(ds)}
    try:
        # The name and command shown on the page: left out where they hold a ';'.
        text = [f"{k}={v}" for k, v in shown.items() if v is not None and ";" not in v and "\0" not in v]
        text.append("frame_ancestors=*")
        if template is not None:
            text.append("hosts=*")
        if listen is not None:
            text.append(f"listen={_option_value('listen', listen)}")
        text += [f"{k}={_request(v, k)}" for k, v in (("cpus", cpus), ("gpus", gpus)) if v is not None]
        handle = ctypes.c_uint64()
        _call(_LIB.stemdot_view_start, ds.handle, ";".join(text).encode(errors="surrogateescape"), ctypes.byref(handle))
    except BaseException:
        if own:
            ds.close()
        if spilled is not None:
            os.unlink(spilled)
        raise
    v = View(handle.value, ds, own, template, width, height, shown["name"], spilled)
    if not _in_kernel():
        print(f"stemdot view of {_printable(v.name)}: {v.url}")
        if os.environ.get("BROWSER"):
            webbrowser.open(v.url)
    return v
