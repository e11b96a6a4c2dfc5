"""numpy peer: np.memmap of the raw file, chunked matrix product with the mask stack.

Frames are read in chunks of about 64 MiB of float32 (memory stays bounded), converted
to float32 and multiplied with the flattened stack (pixels x n_masks) by numpy's BLAS,
limited to as many threads as CPUs given (threadpoolctl) and pinned to them. A sparse
case uses only the pixels where some mask is nonzero (a gather, then a small dense
product), the natural numpy way to apply a sparse mask. The BLAS library and the kernel
it runs (threadpoolctl's "architecture") go into the JSON report.
"""

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

import common


def product(args, case):
    """Returns a function that computes case's result from the file, read afresh."""
    masks = common.load_masks(case.masks, args.sig)
    n_masks = masks.shape[0]
    pixels = args.sig[0] * args.sig[1]
    n_frames = int(np.prod(args.nav))
    flat = masks.reshape(n_masks, pixels)
    cols = np.flatnonzero(np.any(flat != 0, axis=0)) if case.sparse else None
    weights = np.ascontiguousarray((flat if cols is None else flat[:, cols]).T)  # (pixels, n_masks)
    chunk = max(1, (64 << 20) // (pixels * 4))

    def run():
        frames = np.memmap(args.data, dtype=args.dtype, mode="r", shape=(n_frames, pixels))
        out = np.empty((n_frames, n_masks), dtype=np.float32)
        for s in range(0, n_frames, chunk):
            block = frames[s:s + chunk]
            if cols is not None:
                block = block[:, cols]
            np.matmul(block.astype(np.float32), weights, out=out[s:s + chunk])
        del frames
        return out

    return run


def main():
    args = common.parse_args(__doc__)
    common.pin(args.cpus)
    with threadpool_limits(limits=len(args.cpus)):
        info = threadpool_info()
        cases = [common.save(args, c, *common.timed(product(args, c), args.repeats)) for c in args.case]
    blas = [{k: d.get(k) for k in ("internal_api", "version", "architecture", "num_threads", "threading_layer")}
            for d in info if d.get("user_api") == "blas"]
    common.finish(args, "numpy", cases, blas=blas, chunk_bytes=64 << 20)


if __name__ == "__main__":
    main()
