"""CuPy peer (GPU machines): the same product on the device with the data on the device.

The frames are copied to the GPU once, outside the clock (the dataset must fit in device
memory); each timed run converts them to float32 and multiplies by the flattened stack
with cuBLAS (cupy.matmul) in chunks of 256 MiB of float32, then synchronises (sparse
cases run the same dense product). The host-to-
device copy of the whole file is timed separately and reported as h2d_s. --cpus only
pins the host process.
"""

import time

import cupy as cp
import numpy as np

import common


def main():
    args = common.parse_args(__doc__)
    common.pin(args.cpus)
    pixels = args.sig[0] * args.sig[1]
    n_frames = int(np.prod(args.nav))
    host = np.memmap(args.data, dtype=args.dtype, mode="r", shape=(n_frames, pixels))
    t0 = time.perf_counter()
    frames = cp.asarray(np.ascontiguousarray(host))
    cp.cuda.Stream.null.synchronize()
    h2d = time.perf_counter() - t0
    chunk = max(1, (256 << 20) // (pixels * 4))
    cases = []
    for case in args.case:
        masks = common.load_masks(case.masks, args.sig)
        n_masks = masks.shape[0]
        weights = cp.asarray(np.ascontiguousarray(masks.reshape(n_masks, pixels).T))

        def run():
            out = cp.empty((n_frames, n_masks), dtype=cp.float32)
            for s in range(0, n_frames, chunk):
                cp.matmul(frames[s:s + chunk].astype(cp.float32), weights, out=out[s:s + chunk])
            cp.cuda.Stream.null.synchronize()
            return out

        result, warmup, times = common.timed(run, args.repeats)
        cases.append(common.save(args, case, cp.asnumpy(result), warmup, times))
    common.finish(args, "cupy", cases, cupy=cp.__version__, h2d_s=h2d, h2d_bytes=int(host.nbytes),
                  note="case timings exclude the host-to-device copy of the frames (h2d_s, done once)",
                  device=cp.cuda.runtime.getDeviceProperties(0)["name"].decode())


if __name__ == "__main__":
    main()
