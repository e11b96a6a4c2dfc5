"""make bench-dask: stemdot.dask on 1, 2 and 3 one-core nodes of the cluster rig
(cluster/rig.py: each node in its own network namespace, pinned to its own CPU, started
with the real `dask scheduler` / `dask worker --nthreads 1`) against stemdot in one
process with the same number of cores (stemdot.apply_masks(..., cpus=N)), on a job of
the size a facility runs, so that the fixed cost of one call (bootstrap, the dataset's
opening, the mask stack sent to every worker, the job's end) is not the figure: an 8 GiB
scan in the page cache (65536 frames of 256×256 uint16: a 256×256 scan) and 128 masks
(bright field, annular dark field, the 3 centre-of-mass masks and a radial profile of 123
one-pixel rings), about 3 s per core in one process (2026-12-02: the 4 GiB scan of before
took 0.85 s on 2 cores, where the call's fixed costs weighed 10%).

For each N: the throughput of both (GB/s of frames, best of --repeat runs; the single
process confined to the nodes' CPUs by taskset, as the nodes are), their ratio (the Dask
run's throughput per core against the single process's: the median over --repeat pairs,
each a single-process run and the Dask run right after it, so that both runs of a pair
see the same machine: on a shared VM the memory bandwidth moves by 2× between minutes,
and best-of figures taken minutes apart gave ratios from 0.75 to 0.91), and the per-task
overhead of the Dask run: (wall time × nodes − time inside the workers' applies) / tasks,
in ms, i.e. everything a range task costs beyond its mask-dot product (scheduling, the
task's open of its frame range, result transfer, the client's ledger, idle nodes at the
end, and the call's fixed costs spread over its tasks). The scheduler and this client
(the bench's process) are not confined to the nodes' CPUs, and share them: the CPU
seconds each spent per Dask run are recorded (scheduler_cpu_s, client_cpu_s). Every
repeat's time is recorded; GB/s and the per-task figures are of the best, the ratio of
the pairs. A node count above the
machine's CPUs is not measured (nodes would share CPUs: no figure of scaling), and
recorded as such.

Recovery: on the largest measured node count (at least 2), a `kill -9` of one node's
worker process when a quarter of the frames are done (in the progress callback); the time
from the kill to the end of the run (when the last lost range has been recomputed), the
same span of a run without the kill, and their difference. Writes bench/results/dask.json.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from distributed import Client

import stemdot
import stemdot.dask as sdask

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "cluster"))
import rig  # noqa: E402

SIG = (256, 256)


def scan(path, frames):
    """A uint16 NPY scan of `frames` 256×256 frames (reused when already there)."""
    shape = (frames // 64, 64) + SIG
    if path.exists():
        with stemdot.open(path) as ds:
            if ds.nav_shape == shape[:2] and ds.dtype == np.uint16:
                return
    path.parent.mkdir(parents=True, exist_ok=True)
    data = np.lib.format.open_memmap(path, mode="w+", dtype=np.uint16, shape=shape)
    rng = np.random.default_rng(1)
    for row in range(shape[0]):
        data[row] = rng.integers(0, 1000, size=(64,) + SIG, dtype=np.uint16)
    data.flush()


def timed(fn, repeat):
    """The seconds of each of repeat calls of fn, and the last call's result."""
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    return times, result


def one_process(args, cpus):
    """The time of one run of stemdot.apply_masks on the logical CPUs cpus, after an
    untimed one, in a child process confined to them (taskset), as the nodes are: its own
    threads (the Go runtime's, Python's) share those CPUs too."""
    cmd = ["taskset", "-c", ",".join(map(str, cpus)), sys.executable, __file__, "--file", str(args.file),
           "--repeat", "1", "--one-process"]
    r = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(r.stdout.splitlines()[-1])[0]


def masks_of():
    """128 masks: bright field, annular dark field, centre of mass (3), and a radial
    profile in one-pixel rings from radius 0.5 to 123.5."""
    profile = [stemdot.ring(SIG, 128, 128, r + 0.5, r + 1.5) for r in range(123)]
    return np.concatenate([stemdot.disk(SIG, 128, 128, 20), stemdot.ring(SIG, 128, 128, 30, 100), stemdot.com(SIG),
                           *profile])


def cpu_seconds(pid):
    """User + system CPU seconds of process pid so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def dask_runs(cluster, path, masks, want, args, one):
    """The times of --repeat runs on the cluster's nodes, each right after a run of one()
    (the single process: its time), the times of those, and a row of figures of the
    best Dask run (nodes, tasks, frames per task, per-task overhead) and of all (the CPU
    seconds of the scheduler and of this client per Dask run)."""
    with Client(cluster.address, timeout=120) as client:
        nodes = sdask.bootstrap(client)
        reports = []

        def run():
            report = {}
            out = sdask.apply_masks(client, path, masks, range_frames=args.range_frames, report=report)
            reports.append(report)
            return out

        run()  # warm-up: each worker opens the file once, imports settle
        times, ones, scheduler, client_cpu = [], [], 0.0, 0.0
        for _ in range(args.repeat):
            ones.append(one())
            s0, c0 = cpu_seconds(cluster.scheduler.pid), time.process_time()
            t, got = timed(run, 1)
            times += t
            scheduler += cpu_seconds(cluster.scheduler.pid) - s0
            client_cpu += time.process_time() - c0
    if not np.array_equal(got, want):
        sys.exit("bench-dask: the Dask result differs from the single-process result")
    report = min(reports[1:], key=lambda r: r["seconds"])
    tasks = len(report["ranges"])
    busy = sum(r[4] for r in report["ranges"])
    return times, ones, {"nodes": len(nodes), "tasks": tasks, "frames_per_task": args.frames / tasks,
                   "per_task_overhead_ms": (report["seconds"] * len(nodes) - busy) / tasks * 1e3,
                   "scheduler_cpu_s": scheduler / args.repeat, "client_cpu_s": client_cpu / args.repeat}


def recovery(cluster, path, masks, want, args):
    """Seconds from a kill -9 of node1's worker (a quarter of the frames done) to the run's
    end, and the same span of a run without it."""
    spans = {}
    with Client(cluster.address, timeout=120) as client:
        sdask.bootstrap(client)
        for kill in (False, True):
            mark = []

            def progress(done, total):
                if not mark and done >= total // 4:
                    mark.append(time.perf_counter())
                    if kill:
                        cluster.kill(cluster.nodes[0])

            report = {}
            got = sdask.apply_masks(client, path, masks, range_frames=args.range_frames, progress=progress,
                                    report=report)
            spans[kill] = (time.perf_counter() - mark[0], len(report.get("lost", [])))
            if not np.array_equal(got, want):
                sys.exit("bench-dask: the result after a kill -9 differs from the single-process result")
            if kill:
                cluster.wait_worker(cluster.nodes[0], timeout=120)
    return {"nodes": len(cluster.nodes), "kill_to_end_s": spans[True][0], "ranges_lost": spans[True][1],
            "same_span_without_kill_s": spans[False][0], "recovery_cost_s": spans[True][0] - spans[False][0]}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--file", type=Path, default=Path("bench/scratch/dask-scan.npy"))
    p.add_argument("--frames", type=int, default=65536, help="frames of 256×256 uint16 (65536: 8 GiB)")
    p.add_argument("--repeat", type=int, default=5, help="pairs of runs (single process, then Dask) per node count")
    p.add_argument("--nodes", type=int, default=3, help="up to this many one-core nodes (default 3)")
    p.add_argument("--range-frames", type=int, help="frames per stemdot worker in one task (default: stemdot.dask's)")
    p.add_argument("--out", type=Path, default=Path("bench/results/dask.json"))
    p.add_argument("--one-process", action="store_true", help=argparse.SUPPRESS)  # one_process's child
    args = p.parse_args()
    if args.one_process:
        with stemdot.open(args.file) as ds:
            cpus = sorted(os.sched_getaffinity(0))
            masks = masks_of()
            stemdot.apply_masks(ds, masks, cpus=cpus)  # warm-up: the run's first call in this process
            print(json.dumps(timed(lambda: stemdot.apply_masks(ds, masks, cpus=cpus), args.repeat)[0]))
        return

    cpus = sorted(os.sched_getaffinity(0))
    scan(args.file, args.frames)
    size = args.file.stat().st_size
    masks = masks_of()
    with stemdot.open(args.file) as ds:
        want = stemdot.apply_masks(ds, masks)  # also: the file into the page cache
    result = {"file_bytes": size, "frames": args.frames, "masks": int(masks.shape[0]), "cpus": len(cpus),
              "machine": os.uname().nodename, "load_average_at_start": os.getloadavg()[0], "scaling": []}
    print(f"bench-dask: {size / 2**30:.2f} GiB, {args.frames} frames of 256×256 uint16, {masks.shape[0]} masks, "
          f"{len(cpus)} CPUs (load average {os.getloadavg()[0]:.1f})")
    with rig.Cluster() as cluster:
        print(f"  rig: {cluster.describe()}")
        for n in range(1, args.nodes + 1):
            if n > len(cpus):
                why = f"not measured: {n} one-core nodes need {n} CPUs, this machine has {len(cpus)}"
                result["scaling"].append({"nodes": n, "not_measured": why})
                print(f"  {n} nodes: {why}")
                continue
            cluster.add_node(cpus=[cpus[n - 1]])
            dask_times, one_times, row = dask_runs(cluster, args.file, masks, want, args,
                                                   lambda: one_process(args, cpus[:n]))
            one_s, dask_s = min(one_times), min(dask_times)
            row.update(one_process_s=one_s, one_process_gb_s=size / one_s / 1e9, dask_s=dask_s,
                       dask_gb_s=size / dask_s / 1e9,
                       per_core_ratio=float(np.median([o / d for o, d in zip(one_times, dask_times)])),
                       one_process_runs_s=one_times, dask_runs_s=dask_times)
            result["scaling"].append(row)
            print(f"  {n} node(s) × 1 core: Dask {dask_s:6.3f} s {row['dask_gb_s']:5.2f} GB/s; one process, {n} "
                  f"core(s) {one_s:6.3f} s {row['one_process_gb_s']:5.2f} GB/s; ratio {row['per_core_ratio']:.2f} (median of {len(one_times)} pairs); "
                  f"{row['tasks']} tasks of {row['frames_per_task']:.0f} frames, overhead "
                  f"{row['per_task_overhead_ms']:.1f} ms/task; per run: scheduler {row['scheduler_cpu_s']:.2f} CPU s, "
                  f"client {row['client_cpu_s']:.2f} CPU s")
        if len(cluster.nodes) >= 2:
            result["recovery"] = recovery(cluster, args.file, masks, want, args)
            r = result["recovery"]
            print(f"  kill -9 of a worker on {r['nodes']} nodes: {r['kill_to_end_s']:.2f} s from the kill to the "
                  f"last range ({r['ranges_lost']} ranges lost), {r['same_span_without_kill_s']:.2f} s without "
                  f"the kill: recovery cost {r['recovery_cost_s']:.2f} s")
        else:
            result["recovery"] = {"not_measured": "needs 2 nodes of one CPU each"}
        result["rig"] = (cluster.describe() + "; the scheduler and this client are not confined: they share the "
                         "nodes' CPUs (their CPU seconds per run: scheduler_cpu_s, client_cpu_s)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"  wrote {args.out}")


if __name__ == "__main__":
    main()
