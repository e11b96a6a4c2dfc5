"""A Dask cluster of several "nodes" on one Linux machine, for fault tests and benchmarks of
stemdot.dask (``make test-cluster``, ``make bench-dask``).

A node is what a compute node of a facility is to ``dask worker``:

* its own **network namespace** with its own address (10.231.N.11, .12, ...) on a private
  bridge that the rig makes (10.231.N.1, where the scheduler listens; no route, no NAT:
  nothing leaves the machine), joined by a veth pair whose host end the rig can set down
  and up again (a node whose network drops);
* its own **mount namespace**, in which the rig's shared data directory
  (:attr:`Cluster.data`, the path every node and the client use) is bind-mounted from a
  per-node directory (:meth:`Cluster.node_data`) holding hard links of the shared files:
  a file can be removed or truncated on one node only, without copying the others;
* its own **CPU set** (``taskset -c``; nodes share CPUs when there are more nodes than
  CPUs, which the rig reports in :meth:`Cluster.describe`), optionally a CPU quota (a
  cgroup's ``cpu.cfs_quota_us``, or ``cpu.max`` on cgroup v2) to make a slower node, and
  optionally a fake GPU (``dask worker --resources GPU=1``).

The scheduler and the workers are the real ``dask scheduler`` and ``dask worker
--nthreads 1`` commands (beside ``sys.executable``, as doc/dask.md tells users to start
them), each in its own session (process group), with its output in a log file. Without
root (no CAP_NET_ADMIN/CAP_SYS_ADMIN: ``ip netns add`` fails) the rig falls back to one
address, 127.0.0.1, and different ports; :attr:`Cluster.namespaces` is then False,
:attr:`Cluster.why_not` says why, and what needs namespaces (:meth:`link_down`,
:meth:`node_data`) raises :class:`NotAvailable`.

Every process started is stopped by its process group at :meth:`Cluster.close` (SIGCONT,
SIGTERM, then SIGKILL), also on an exception, Ctrl-C, SIGTERM (turned into
KeyboardInterrupt where it would end the process at once) or at interpreter exit
(atexit); the namespaces, veths, bridge and cgroups are deleted. The logs are printed
and the directory kept when :meth:`close` is told that something failed.
"""

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

__all__ = ["Cluster", "Node", "NotAvailable"]

SUBNET_PREFIX = "10.231"


def _interrupt(*_):
    raise KeyboardInterrupt("SIGTERM")


class NotAvailable(RuntimeError):
    """The fault needs what this rig could not make here: namespaces (network and mount),
    or a cgroup with a CPU quota."""


def _run(*cmd, check=True):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()}")
    return r


def _free_port(host):
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _descendants(pid):
    """PIDs of pid's descendants (from /proc/PID/task/*/children)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for task in Path(f"/proc/{p}/task").glob("*"):
            with contextlib.suppress(OSError):
                kids = [int(k) for k in (task / "children").read_text().split()]
                out += kids
                todo += kids
    return out


def _cmdline(pid):
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    return ""


class Node:
    """One node: ``name`` (the Dask worker's name), ``ip`` (its address), ``cpus`` (the
    logical CPUs it may run on), ``gpu`` (declares ``GPU=1``), ``quota`` (fraction of one
    CPU's time it may use, None: no limit), ``proc`` (the Popen of ``dask worker``, the
    Nanny; its process group holds the worker process), ``log`` (its output)."""

    def __init__(self, name, ip, cpus, gpu, quota, directory):
        self.name, self.ip, self.cpus, self.gpu, self.quota = name, ip, cpus, gpu, quota
        self.dir = directory
        self.log = directory / "worker.log"
        self.netns = self.veth = self.cgroup = None
        self.proc = None

    def __repr__(self):
        return f"Node({self.name}, {self.ip}, cpus={self.cpus}{', GPU=1' if self.gpu else ''})"


class Cluster:
    """A scheduler and nodes (see the module doc). Use as a context manager, or call
    :meth:`close`.

    root: directory for logs, per-node directories and the shared data (default: a new
    temporary directory). namespaces: None = use them when they can be made (unless the
    environment variable STEMDOT_RIG_NAMESPACES is 0), False = one address (127.0.0.1).
    scheduler_env: extra environment of ``dask scheduler`` (e.g.
    ``{"DASK_DISTRIBUTED__SCHEDULER__WORKER_TTL": "30s"}``). worker_env: extra environment
    of every ``dask worker``. timeout: seconds to wait for a process to come up.
    """

    _made = 0

    def __init__(self, root=None, namespaces=None, scheduler_env=None, worker_env=None, timeout=120):
        self._tmp = root is None
        self.root = Path(root or tempfile.mkdtemp(prefix="stemdot-rig-"))
        self.root.mkdir(parents=True, exist_ok=True)
        self.data = self.root / "data"
        self.data.mkdir(exist_ok=True)
        self.timeout = timeout
        self.worker_env = dict(worker_env or {})
        self.nodes = []
        self._count = 0  # nodes ever added: names and addresses are not reused
        self.scheduler = None
        self.scheduler_log = self.root / "scheduler.log"
        self._client = None
        self._closed = False
        self._bridge = None
        # Names of the bridge, namespaces and veths: unique per process and rig, within
        # Linux's 15 bytes of an interface name ("sdr" + 4 + 1 + "v" + 2 + "p").
        Cluster._made += 1
        self._tag = f"sdr{os.getpid() % 10000}{chr(ord('a') + Cluster._made % 26)}"
        self.dask = str(Path(sys.executable).with_name("dask"))
        if not os.path.exists(self.dask):
            raise FileNotFoundError(f"{self.dask} not found: install dask[distributed] in {Path(sys.executable).parent.parent}")
        atexit.register(self.close)
        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _interrupt)
        self.why_not = None
        if namespaces is None and os.environ.get("STEMDOT_RIG_NAMESPACES", "").lower() in ("0", "false", "no"):
            namespaces, self.why_not = False, "namespaces turned off by STEMDOT_RIG_NAMESPACES"
        if namespaces is False:
            self.why_not = self.why_not or "namespaces not asked for"
        else:
            try:
                self._make_bridge()
            except (RuntimeError, OSError) as e:
                self._delete_bridge()
                self.why_not = f"network namespaces cannot be made here ({e}); run as root (CAP_NET_ADMIN, CAP_SYS_ADMIN)"
        self.namespaces = self.why_not is None
        self.host = self._bridge_ip if self.namespaces else "127.0.0.1"
        try:
            self._start_scheduler(scheduler_env or {})
        except BaseException:
            self.close(failed=True)
            raise

    # -- set-up

    def _make_bridge(self):
        """The private bridge 10.231.N.1/24, N the first third octet not in use here."""
        if shutil.which("ip") is None:
            raise RuntimeError("the ip command (iproute2) is not installed")
        used = _run("ip", "-o", "-4", "addr", "show").stdout
        n = next((n for n in range(256) if f" {SUBNET_PREFIX}.{n}." not in used), None)
        if n is None:
            raise RuntimeError(f"every {SUBNET_PREFIX}.N.0/24 is in use")
        self._subnet = f"{SUBNET_PREFIX}.{n}"
        self._bridge = f"{self._tag}br"
        _run("ip", "link", "add", self._bridge, "type", "bridge")
        _run("ip", "addr", "add", f"{self._subnet}.1/24", "dev", self._bridge)
        _run("ip", "link", "set", self._bridge, "up")
        self._bridge_ip = f"{self._subnet}.1"

    def _start_scheduler(self, env):
        port = _free_port(self.host)
        self.address = f"tcp://{self.host}:{port}"
        cmd = [self.dask, "scheduler", "--host", self.host, "--port", str(port), "--no-dashboard"]
        self.scheduler = self._spawn(cmd, self.scheduler_log, dict(os.environ, **env))
        self._wait_port(self.host, port, self.scheduler, self.scheduler_log)

    def _spawn(self, cmd, log, env, pre=()):
        with open(log, "ab") as f:
            return subprocess.Popen(list(pre) + cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=env, start_new_session=True)

    def _wait_port(self, host, port, proc, log):
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode}:\n{self._tail(log)}")
            with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1):
                return
            time.sleep(0.1)
        raise TimeoutError(f"nothing listens at {host}:{port} after {self.timeout} s:\n{self._tail(log)}")

    @property
    def client(self):
        """The rig's own Client (for looking workers up), made at first use."""
        if self._client is None:
            from distributed import Client

            self._client = Client(self.address, timeout=self.timeout, set_as_default=False)
        return self._client

    def add_node(self, cpus=None, gpu=False, quota=None, name=None, wait=True):
        """Starts a node: ``dask worker SCHEDULER --nthreads 1`` with its Nanny, in its own
        namespaces (see the module doc), on the logical CPUs ``cpus`` (a list; default:
        CPU k mod the machine's allowed CPUs for the k-th node), limited to ``quota`` of
        one CPU's time (e.g. 0.5; needs a cgroup cpu controller, else NotAvailable), with
        ``GPU=1`` declared when ``gpu``. With ``wait``, returns once the worker is
        registered with the scheduler. Returns the Node."""
        allowed = sorted(os.sched_getaffinity(0))
        k = self._count
        self._count += 1
        name = name or f"node{k + 1}"
        cpus = list(cpus) if cpus is not None else [allowed[k % len(allowed)]]
        directory = self.root / "nodes" / name
        (directory / "data").mkdir(parents=True, exist_ok=True)
        (directory / "work").mkdir(exist_ok=True)
        ip = f"{self._subnet}.{11 + k}" if self.namespaces else "127.0.0.1"
        node = Node(name, ip, cpus, gpu, quota, directory)
        self.nodes.append(node)
        if quota is not None:
            self._make_cgroup(node, quota)
        if self.namespaces:
            node.netns, node.veth = f"{self._tag}n{k + 1}", f"{self._tag}v{k + 1}"
            peer = node.veth + "p"
            _run("ip", "netns", "add", node.netns)
            _run("ip", "link", "add", node.veth, "type", "veth", "peer", "name", peer)
            _run("ip", "link", "set", peer, "netns", node.netns)
            _run("ip", "link", "set", node.veth, "master", self._bridge)
            _run("ip", "link", "set", node.veth, "up")
            _run("ip", "-n", node.netns, "addr", "add", f"{ip}/24", "dev", peer)
            _run("ip", "-n", node.netns, "link", "set", peer, "up")
            _run("ip", "-n", node.netns, "link", "set", "lo", "up")
            for f in self.data.iterdir():
                self.share(f.name, nodes=[node])
        self._launch(node)
        if wait:
            self.wait_worker(node)
        return node

    def _launch(self, node):
        """Starts node's dask worker (and its Nanny) in the node's namespaces, cgroup and CPUs."""
        directory = node.dir
        cmd = [self.dask, "worker", self.address, "--nthreads", "1", "--host", node.ip, "--no-dashboard", "--name",
               node.name, "--local-directory", str(directory / "work")]
        if node.gpu:
            cmd += ["--resources", "GPU=1"]
        env = dict(os.environ, **self.worker_env)
        env.update(RIG_CGROUP_PROCS=str(node.cgroup / "cgroup.procs") if node.cgroup else "",
                   RIG_NODE_DATA=str(directory / "data"), RIG_SHARED_DATA=str(self.data))
        # The cgroup is joined before ip netns exec, which mounts the namespace's own /sys.
        pre = ["sh", "-c", '[ -z "$RIG_CGROUP_PROCS" ] || echo $$ > "$RIG_CGROUP_PROCS" || exit 1; exec "$@"', "sh"]
        if node.netns:
            pre += ["ip", "netns", "exec", node.netns, "unshare", "--mount", "--propagation", "private", "--",
                    "sh", "-c", 'mount --bind "$RIG_NODE_DATA" "$RIG_SHARED_DATA" || exit 1; exec "$@"', "sh"]
        pre += ["taskset", "-c", ",".join(map(str, node.cpus))]
        node.proc = self._spawn(cmd, node.log, env, pre)

    def restart_node(self, node, wait=True):
        """Starts node again (after its dask worker exited, or stopping it first): a new
        Nanny and worker at the node's address, as a job system restarts a node's worker."""
        self._stop_group(node.proc)
        self._launch(node)
        if wait:
            self.wait_worker(node)

    def remove_node(self, node):
        """Stops node (its process group) and deletes its namespaces and cgroup."""
        self._stop_group(node.proc)
        self._delete_node(node)
        self.nodes.remove(node)

    def _delete_node(self, node):
        if node.netns:
            for pid in _run("ip", "netns", "pids", node.netns, check=False).stdout.split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
            _run("ip", "link", "del", node.veth, check=False)
            _run("ip", "netns", "del", node.netns, check=False)
        if node.cgroup and node.cgroup.exists():
            for _ in range(50):
                try:
                    node.cgroup.rmdir()
                    break
                except OSError:
                    time.sleep(0.1)

    def _make_cgroup(self, node, quota):
        """Node's cgroup, limited to quota of one CPU's time: cgroup v1's cpu controller
        (cpu.cfs_quota_us per cpu.cfs_period_us), else cgroup v2's cpu.max."""
        v1, v2 = Path("/sys/fs/cgroup/cpu"), Path("/sys/fs/cgroup")
        try:
            if (v1 / "cpu.cfs_quota_us").exists():
                node.cgroup = v1 / f"{self._tag}-{node.name}"
                node.cgroup.mkdir()
                period = int((node.cgroup / "cpu.cfs_period_us").read_text())
                (node.cgroup / "cpu.cfs_quota_us").write_text(str(int(period * quota)))
            elif "cpu" in (v2 / "cgroup.subtree_control").read_text().split():
                node.cgroup = v2 / f"{self._tag}-{node.name}"
                node.cgroup.mkdir()
                (node.cgroup / "cpu.max").write_text(f"{int(100000 * quota)} 100000")
            else:
                raise NotAvailable("no cgroup cpu controller here (cgroup v1 /sys/fs/cgroup/cpu, or v2's cpu)")
        except OSError as e:
            raise NotAvailable(f"no cgroup with a CPU quota can be made here ({e})") from None

    # -- looking up

    def worker(self, node):
        """The scheduler's info of node's current worker (a dict with ``address``,
        ``host``, ``status``, ``resources``, ...), or None."""
        # The scheduler asked now: client.scheduler_info() returns the client's cache,
        # which its periodic update (distributed 2026.x) refills without the workers.
        workers = self.client.sync(self.client.scheduler.identity, n_workers=-1)["workers"]
        for address, w in workers.items():
            if w.get("name") == node.name:
                return dict(w, address=address)
        return None

    def wait_worker(self, node, not_address=None, timeout=None):
        """Waits until node's worker is registered and running (at an address other than
        not_address: a restarted one); returns its info."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while time.monotonic() < deadline:
            if node.proc.poll() is not None:
                raise RuntimeError(f"{node.name}: dask worker exited with {node.proc.returncode}:\n{self._tail(node.log)}")
            w = self.worker(node)
            if w is not None and w.get("status", "running") == "running" and w["address"] != not_address:
                return w
            time.sleep(0.1)
        raise TimeoutError(f"{node.name}: no worker registered after {timeout or self.timeout} s:\n{self._tail(node.log)}")

    def ensure(self, node, timeout=None):
        """Waits until node's worker is running, starting the node again whenever its
        dask worker has exited (also while this waits: a Nanny cut off from the scheduler
        closes a while after the link is back); returns the worker's info."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            if node.proc.poll() is not None:
                self.restart_node(node, wait=False)
            w = self.worker(node)
            if w is not None and w.get("status", "running") == "running":
                return w
            if time.monotonic() > deadline:
                raise TimeoutError(f"{node.name}: no worker running after {timeout or self.timeout} s:\n{self._tail(node.log)}")
            time.sleep(0.1)

    def worker_pid(self, node):
        """The PID of node's worker process (the Nanny's child running the tasks), from
        /proc: the descendant of the node's process started by multiprocessing."""
        for pid in _descendants(node.proc.pid):
            if "spawn_main" in _cmdline(pid) or "forkserver" in _cmdline(pid):
                return pid
        raise ProcessLookupError(f"{node.name}: no worker process under PID {node.proc.pid}")

    def describe(self):
        """A line saying how the nodes were made: namespaces or one address, CPU sharing."""
        cpus = len(os.sched_getaffinity(0))
        used = sum(len(n.cpus) for n in self.nodes)
        how = (f"nodes in network namespaces on bridge {self._bridge} ({self._subnet}.0/24)" if self.namespaces
               else f"nodes on one address, 127.0.0.1 ({self.why_not})")
        share = f"; {used} node CPUs on {cpus} CPUs: nodes share CPUs" if used > cpus else ""
        return f"{how}, scheduler {self.address}, {len(self.nodes)} nodes{share}"

    def node_data(self, node):
        """The directory node sees at :attr:`data` (its own mount namespace)."""
        self._need_namespaces("a data directory per node")
        return node.dir / "data"

    def share(self, name, nodes=None):
        """Hard-links data/name into the data directory of every node (or of nodes)."""
        if not self.namespaces:
            return
        for node in nodes if nodes is not None else self.nodes:
            target = node.dir / "data" / name
            with contextlib.suppress(FileNotFoundError):
                target.unlink()
            os.link(self.data / name, target)

    # -- faults

    def kill(self, node, sig=signal.SIGKILL, target="worker"):
        """Sends sig to node's worker process (target "worker": its Nanny restarts it
        after SIGKILL) or to the whole node (target "node": Nanny and worker). Returns
        the PID signalled."""
        if target == "node":
            os.killpg(node.proc.pid, sig)
            return node.proc.pid
        pid = self.worker_pid(node)
        os.kill(pid, sig)
        return pid

    def stop(self, node):
        """SIGSTOP to node's worker process: it hangs (no heartbeats, no results)."""
        return self.kill(node, signal.SIGSTOP)

    def cont(self, node):
        """SIGCONT to every process of node."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(node.proc.pid, signal.SIGCONT)

    def _need_namespaces(self, what):
        if not self.namespaces:
            raise NotAvailable(f"{what} needs namespaces (network and mount): {self.why_not}")

    def link_down(self, node):
        """Sets the host end of node's veth down: the node drops off the network."""
        self._need_namespaces("a node's network going down")
        _run("ip", "link", "set", node.veth, "down")

    def link_up(self, node):
        self._need_namespaces("a node's network coming back")
        _run("ip", "link", "set", node.veth, "up")

    def heal(self):
        """Undoes the faults that leave a node unable to work: SIGCONT to every node, every
        link up, the shared files linked again into every node's data directory (see
        :meth:`ensure` for nodes whose dask worker exited)."""
        for node in self.nodes:
            self.cont(node)
            if node.veth:
                _run("ip", "link", "set", node.veth, "up", check=False)
        for f in self.data.iterdir():
            self.share(f.name)

    def kill_scheduler(self, sig=signal.SIGKILL):
        os.killpg(self.scheduler.pid, sig)

    # -- tear-down

    def _tail(self, log, lines=40):
        with contextlib.suppress(OSError):
            return "".join(Path(log).read_text(errors="replace").splitlines(True)[-lines:])
        return ""

    def logs(self, lines=40):
        """The last lines of every log, headed by its name."""
        parts = [f"--- scheduler ({self.scheduler_log})\n{self._tail(self.scheduler_log, lines)}"]
        parts += [f"--- {n.name} {n.ip} cpus {n.cpus} ({n.log})\n{self._tail(n.log, lines)}" for n in self.nodes]
        return "\n".join(parts)

    def _stop_group(self, proc, grace=5):
        self._stop_groups([proc], grace)

    def _stop_groups(self, procs, grace=5):
        """Stops the process groups of procs (the Popen of each group's leader): SIGCONT
        and SIGTERM to all, SIGKILL to those left after grace seconds; reaps the leaders."""
        procs = [p for p in procs if p is not None]
        for proc in procs:
            for sig in (signal.SIGCONT, signal.SIGTERM):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, sig)
        deadline = time.monotonic() + grace
        left = list(procs)
        while left:
            for proc in list(left):
                proc.poll()
                try:
                    os.killpg(proc.pid, 0)
                except ProcessLookupError:
                    left.remove(proc)
            if time.monotonic() > deadline:
                for proc in left:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                break
            time.sleep(0.05)
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)

    def close(self, failed=False):
        """Stops every process (by process group), deletes namespaces, veths, bridge and
        cgroups; with ``failed``, prints the logs and keeps the directory, else removes
        it (when the rig made it). Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if failed:
            print(f"\n=== cluster rig logs ({self.root}, kept) ===\n{self.logs()}", file=sys.stderr)
        for node in self.nodes:  # links up, so that a TERM reaches them and they exit cleanly
            if node.veth:
                _run("ip", "link", "set", node.veth, "up", check=False)
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                client.close(timeout=5)
        self._stop_groups([n.proc for n in self.nodes] + [self.scheduler])
        for node in self.nodes:
            self._delete_node(node)
        self._delete_bridge()
        atexit.unregister(self.close)
        if self._tmp and not failed:
            shutil.rmtree(self.root, ignore_errors=True)

    def _delete_bridge(self):
        if self._bridge:
            _run("ip", "link", "del", self._bridge, check=False)
            self._bridge = None

    def __enter__(self):
        return self

    def __exit__(self, kind, *_):
        self.close(failed=kind is not None and not issubclass(kind, (KeyboardInterrupt, SystemExit)))
