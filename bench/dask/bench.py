"""make bench-dask: stemdot in one process on all cores against stemdot on a Dask
LocalCluster of one worker process per core (1 thread each), on a scan of >= 1 GiB.

Reports the throughput of both (GB/s of frames, best of --repeat runs, file in the page
cache), their ratio (Dask / one process), and the per-task overhead of the Dask run:
(wall time × Dask workers − time spent inside the workers' applies) / tasks, in ms, i.e.
everything a range task costs beyond its mask-dot product (scheduling, the task's open of
its frame range, result transfer, the client's ledger, idle workers at the end).
Writes bench/results/dask.json.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
from distributed import Client, LocalCluster

import stemdot
import stemdot.dask as sdask

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


def best(fn, repeat):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    return min(times), result


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--file", type=Path, default=Path("bench/scratch/dask-scan.npy"))
    p.add_argument("--frames", type=int, default=16384, help="frames of 256×256 uint16 (16384: 2 GiB)")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--range-frames", type=int, help="frames per stemdot worker in one task (default: stemdot.dask's)")
    p.add_argument("--out", type=Path, default=Path("bench/results/dask.json"))
    args = p.parse_args()

    cores = len(os.sched_getaffinity(0))
    scan(args.file, args.frames)
    size = args.file.stat().st_size
    masks = np.concatenate([stemdot.disk(SIG, 128, 128, 20), stemdot.ring(SIG, 128, 128, 30, 100), stemdot.com(SIG)])
    with stemdot.open(args.file) as ds:
        stemdot.apply_masks(ds, masks)  # page cache
        one_s, want = best(lambda: stemdot.apply_masks(ds, masks, cpus=cores), args.repeat)

    with LocalCluster(n_workers=cores, threads_per_worker=1, processes=True, dashboard_address=None,
                      silence_logs=40) as cluster, Client(cluster) as client:
        client.wait_for_workers(cores)
        nodes = sdask.bootstrap(client)
        reports = []

        def run():
            report = {}
            out = sdask.apply_masks(client, args.file, masks, range_frames=args.range_frames, report=report)
            reports.append(report)
            return out

        run()  # warm-up: each worker opens the file once, imports settle
        dask_s, got = best(run, args.repeat)
    if not np.array_equal(got, want):
        sys.exit("bench-dask: the Dask result differs from the single-process result")
    report = min(reports[1:], key=lambda r: r["seconds"])
    tasks = len(report["ranges"])
    busy = sum(r[4] for r in report["ranges"])
    overhead_ms = (report["seconds"] * len(nodes) - busy) / tasks * 1e3
    result = {
        "file_bytes": size,
        "frames": args.frames,
        "masks": int(masks.shape[0]),
        "cores": cores,
        "one_process_s": one_s,
        "one_process_gb_s": size / one_s / 1e9,
        "dask_workers": len(nodes),
        "dask_s": dask_s,
        "dask_gb_s": size / dask_s / 1e9,
        "ratio": one_s / dask_s,
        "tasks": tasks,
        "frames_per_task": args.frames / tasks,
        "per_task_overhead_ms": overhead_ms,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"bench-dask: {size / 2**30:.2f} GiB, {args.frames} frames of 256×256 uint16, {masks.shape[0]} masks")
    print(f"  one process, {cores} cores:          {one_s:7.3f} s  {result['one_process_gb_s']:6.2f} GB/s")
    print(f"  Dask, {len(nodes)} workers × 1 core:       {dask_s:7.3f} s  {result['dask_gb_s']:6.2f} GB/s")
    print(f"  throughput ratio Dask / one process: {result['ratio']:.2f}")
    print(f"  {tasks} tasks of {args.frames / tasks:.0f} frames; per-task overhead {overhead_ms:.1f} ms")
    print(f"  wrote {args.out}")


if __name__ == "__main__":
    main()
