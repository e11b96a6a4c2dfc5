"""Shared command line and timing for the stemdot benchmark peers.

Every peer computes the mask-dot product of a headerless raw 4D-STEM file (frames of
sig_y x sig_x pixels in native dtype, little-endian, frame-major) with mask stacks
stored as NPY (float32, shape (n_masks, sig_y, sig_x)), one --case MASKS:OUT:KIND each
(KIND dense or sparse), and writes each result as NPY (float32, shape (n_frames,
n_masks), frame-major). One process serves all cases of a file, so that set-up (and
LiberTEM's worker start-up and numba compilation) is paid once.

Timing: the interpreter, imports and the peer's own set-up (for LiberTEM: the Context
and its worker processes, the dataset's metadata) are outside the clock. One untimed
warm-up run comes first (it triggers LiberTEM's numba compilation and fills CPU caches),
then --repeats timed runs. Each timed run includes reading every frame from the file
(page cache), the dtype conversion, the product and writing the result array in memory.
The peer prints one JSON object on its last line of stdout.
"""

import argparse
import json
import os
import sys
import time

import numpy as np


class Case:
    """One mask stack to apply: masks path, result path, sparse or not."""

    def __init__(self, masks, out, sparse):
        self.masks, self.out, self.sparse = masks, out, sparse

    @staticmethod
    def parse(spec):
        parts = spec.rsplit(":", 2)
        if len(parts) != 3 or parts[2] not in ("dense", "sparse"):
            raise argparse.ArgumentTypeError(f"--case {spec!r}: want MASKS:OUT:dense or MASKS:OUT:sparse")
        return Case(parts[0], parts[1], parts[2] == "sparse")


def parse_args(description):
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--data", required=True, help="raw file of frames (native dtype, little-endian)")
    p.add_argument("--dtype", required=True, help="numpy dtype name of the pixels, e.g. uint16")
    p.add_argument("--nav", required=True, help="nav_shape, e.g. 64,128")
    p.add_argument("--sig", required=True, help="sig_shape, e.g. 256,256")
    p.add_argument("--case", action="append", required=True, type=Case.parse,
                   help="MASKS:OUT:KIND: NPY mask stack float32 (n_masks, sig_y, sig_x), NPY result "
                        "float32 (n_frames, n_masks), KIND dense or sparse (apply in sparse form)")
    p.add_argument("--cpus", required=True, help="CPU ids to run on, e.g. 0,1 (one worker/thread each)")
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    a.nav = tuple(int(v) for v in a.nav.split(","))
    a.sig = tuple(int(v) for v in a.sig.split(","))
    a.cpus = [int(v) for v in a.cpus.split(",")]
    a.dtype = np.dtype(a.dtype).newbyteorder("<")
    return a


def pin(cpus):
    """Pins this process (and the threads it starts later) to the given CPUs."""
    os.sched_setaffinity(0, cpus)


def load_masks(path, sig):
    masks = np.load(path)
    if masks.dtype != np.float32 or masks.ndim != 3 or masks.shape[1:] != tuple(sig):
        sys.exit(f"{path}: want float32 masks of shape (n, {sig[0]}, {sig[1]}), got {masks.dtype} {masks.shape}")
    return masks


def timed(run, repeats):
    """Runs run() once untimed, then repeats times; returns (last result, warm-up s, times s)."""
    t0 = time.perf_counter()
    result = run()
    warmup = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - t0)
    return result, warmup, times


def save(args, case, result, warmup, times):
    """Writes one case's result and returns its report entry."""
    n_frames = int(np.prod(args.nav))
    result = np.ascontiguousarray(np.asarray(result, dtype=np.float32).reshape(n_frames, -1))
    np.save(case.out, result)
    return {"masks": case.masks, "out": case.out, "sparse": case.sparse, "warmup_s": warmup, "times_s": times}


def finish(args, peer, cases, **extra):
    """Prints the JSON report: one entry per case, versions and settings."""
    report = {"peer": peer, "cases": cases, "numpy": np.__version__, "python": sys.version.split()[0],
              "workers": len(args.cpus), "cpus": args.cpus}
    report.update(extra)
    print(json.dumps(report))
