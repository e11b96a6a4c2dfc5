"""Shared helpers of the LiberTEM conformance suite (see conftest.py): the LiberTEM side of
a comparison, the agreement check, inputs in LiberTEM's test style; ``difference`` (from
lttable) ties a test to its row of the table of differences (doc/libertem.md).

Importing this module skips the importing test module where libertem 0.16.0 is not
installed (``make py-libertem`` installs it into python/.venv)."""
import warnings

import numpy as np
import pytest

from lttable import difference  # noqa: F401  (for the test modules)

LIBERTEM_VERSION = "0.16.0"

libertem = pytest.importorskip(
    "libertem",
    reason=f"libertem is not installed: the LiberTEM conformance suite needs libertem=={LIBERTEM_VERSION} "
    "(make py-libertem installs it into python/.venv; it could not where PyPI was unreachable)",
)
if libertem.__version__ != LIBERTEM_VERSION:
    pytest.skip(f"libertem {libertem.__version__} is installed: the conformance suite is written against "
                f"libertem=={LIBERTEM_VERSION} (make py-libertem)", allow_module_level=True)

# The test modules import LiberTEM and its dependencies from here, after the skip above.
import libertem.api  # noqa: E402,F401  (the ctx fixture)
import scipy.ndimage  # noqa: E402,F401
import scipy.sparse  # noqa: E402,F401
import sparse  # noqa: E402,F401
from libertem import masks as ltmasks  # noqa: E402,F401
from libertem.io.dataset.base import DataSetException  # noqa: E402,F401
from libertem.udf.com import CoMUDF, com_masks_factory  # noqa: E402,F401
from libertem.udf.masks import ApplyMasksUDF  # noqa: E402
from libertem.udf.raw import PickUDF  # noqa: E402,F401
from libertem.udf.stddev import StdDevUDF  # noqa: E402,F401
from libertem.udf.sum import SumUDF  # noqa: E402,F401
from libertem.udf.sumsigudf import SumSigUDF  # noqa: E402,F401

import stemdot  # noqa: E402

# ---------------------------------------------------------------- inputs


def mk_random(shape, dtype="float32", seed=0):
    """LiberTEM's tests/utils._mk_random: 0 or 1 everywhere, and two outliers of
    sum(shape) and 10·sum(shape) (at random positions), so that a wrong pixel shows."""
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 2, size=shape).astype(dtype)
    for scale in (1, 10):
        data[tuple(rng.integers(0, n) for n in shape)] = scale * sum(shape)
    return data


def random_frames(shape, dtype="uint16", seed=0):
    """Counts 0..999 (integer dtypes) or uniform [0, 1000) (float dtypes)."""
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return (rng.random(shape) * 1000).astype(dtype)
    return rng.integers(0, 1000, size=shape).astype(dtype)


def quiet(fn, *args, **kwargs):
    """fn(...) with its warnings silenced (LiberTEM's deprecations, stemdot's notes)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


# ---------------------------------------------------------------- the LiberTEM side


def lt_memory(ctx, data, **kwargs):
    """LiberTEM's memory dataset of ``data`` (2-D signals), in 2 partitions."""
    kwargs.setdefault("num_partitions", 2)
    kwargs.setdefault("sig_dims", 2)
    return ctx.load("memory", data=data, **kwargs)


def lt_run(ctx, ds, udf, roi=None):
    """ctx.run_udf with warnings silenced; ds a LiberTEM dataset or an array (memory)."""
    if isinstance(ds, np.ndarray):
        ds = lt_memory(ctx, ds)
    return quiet(ctx.run_udf, dataset=ds, udf=udf, roi=roi)


def lt_masks(ctx, ds, factories, roi=None, **udf_kwargs):
    """ApplyMasksUDF's 'intensity': nav_shape + (n_masks,) (NaN outside an ROI)."""
    return lt_run(ctx, ds, ApplyMasksUDF(mask_factories=factories, **udf_kwargs), roi=roi)["intensity"].data


# ---------------------------------------------------------------- agreement


def assert_agree(got, want, rtol=1e-5, what="result", atol=0.0):
    """``got`` (stemdot's, mostly) equals ``want`` (LiberTEM's, or a reference): the same
    shape and NaN positions, and max |got − want| ≤ rtol · max |want| + atol over the
    finite values (rtol 1e-5: float32 rounding of both sides; 1e-12 for float64)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, want {want.shape}"
    gnan, wnan = np.isnan(got), np.isnan(want)
    assert (gnan == wnan).all(), (f"{what}: NaN at {np.count_nonzero(gnan)} positions, want {np.count_nonzero(wnan)}; "
                                  f"{np.count_nonzero(gnan != wnan)} differ")
    ok = ~wnan
    if not ok.any():
        return
    g, w = got[ok].astype(np.float64), want[ok].astype(np.float64)
    scale = max(np.abs(w).max(), np.finfo(np.float32).tiny)
    err = np.abs(g - w).max()
    assert err <= rtol * scale + atol, (f"{what}: max |got − want| = {err:.3g}, {err / scale:.3g} of max |want|: "
                                        f"more than rtol {rtol:g}" + (f" + atol {atol:g}" if atol else ""))

