"""LiberTEM peer: ApplyMasksUDF on the raw file with one dask worker process per CPU.

Context.make_with("dask", cpus=[ids]) starts one worker process per CPU id given (set-up
outside the clock); ctx.load("raw", ...) reads only metadata. Each timed run is one
ctx.run_udf(ApplyMasksUDF), which reads every frame, converts and multiplies; a sparse
case tells the UDF use_sparse=True (scipy.sparse), a dense one use_sparse=False. The mask
factory loads the stack from its NPY file in the worker (a small pickle to ship).
"""

import functools

import numpy as np

import common


def main():
    args = common.parse_args(__doc__)
    common.pin(args.cpus)
    import libertem
    from libertem.api import Context
    from libertem.udf.masks import ApplyMasksUDF

    ctx = Context.make_with("dask", cpus=args.cpus)
    try:
        ds = ctx.load("raw", path=args.data, nav_shape=args.nav, sig_shape=args.sig, dtype=args.dtype)
        cases = []
        for case in args.case:
            masks = common.load_masks(case.masks, args.sig)
            udf = ApplyMasksUDF(mask_factories=functools.partial(np.load, case.masks),
                                mask_count=masks.shape[0], mask_dtype=np.float32,
                                use_sparse=case.sparse, use_torch=False)

            def run():
                return ctx.run_udf(dataset=ds, udf=udf)["intensity"].data

            cases.append(common.save(args, case, *common.timed(run, args.repeats)))
        partitions = ds.get_num_partitions()
    finally:
        ctx.close()
    common.finish(args, "libertem", cases, libertem=libertem.__version__, executor="dask",
                  partitions=partitions)


if __name__ == "__main__":
    main()
