"""The public names of stemdot and stemdot.dask: the package is cut into modules by
concern (stemdot/_errors.py, _datasets.py, ..., stemdot/dask/_plugin.py, _ranges.py,
_api.py); what a user imports from the package stays the same."""

import inspect

import pytest

import stemdot

sdask = pytest.importorskip("stemdot.dask", reason="stemdot.dask needs dask[distributed]")

STEMDOT_ALL = [
    "BadHandleError", "CUDAUnavailableError", "CancelledError", "Centre", "DTypeError", "Dataset", "DescanFit",
    "ForkedProcessError", "FormatError", "InternalError", "InvalidArgumentError", "LAZY_BLOCK_BYTES", "Live",
    "LiveUpdate", "PlanError", "REDUCTIONS", "Resident", "Result", "RunNoteWarning", "ShapeError", "StemdotError",
    "StemdotIOError", "View", "apply_masks", "com", "com_products", "com_shifts", "descan_fit", "describe_plan",
    "disk", "find_centre", "from_array", "library_path", "live", "load_result", "mask", "mask_stack", "open", "pick",
    "point", "rect", "reduce", "resident", "ring", "to_hyperspy", "view",
]

#: Public names of stemdot outside __all__ (library_path is in __all__ but made on access).
STEMDOT_PUBLIC = sorted(set(STEMDOT_ALL) - {"library_path"} | {"RESULT_FORMAT", "RESULT_FORMAT_VERSION", "centre"})

DASK_ALL = [
    "ClusterError", "RANGE_BYTES", "RANGE_SECONDS", "StemdotPlugin", "apply_masks", "apply_masks_async", "bootstrap",
    "bootstrap_async", "centre", "dataset_info", "dataset_info_async", "live", "live_async", "reduce", "reduce_async",
]

DASK_PUBLIC = sorted(set(DASK_ALL) | {
    "DATASET_CACHE", "GPU_RANGE_FACTOR", "HANG_FACTOR", "HANG_FIRST_S", "HANG_FLOOR_S", "JobDataMissing",
    "PLUGIN_NAME", "POLL_S", "SCHEDULER_ANSWER_S", "SCHEDULER_TIMEOUT_S", "SEND_RETRY_MAX_S", "SEND_RETRY_S",
})


def public(module):
    """The public names module defines (not the modules it imports, nor names imported
    from other packages)."""
    names = []
    for name, value in vars(module).items():
        if name.startswith("_") or inspect.ismodule(value):
            continue
        owner = getattr(value, "__module__", None) if (inspect.isclass(value) or callable(value)) else None
        if owner is None or owner.startswith("stemdot"):
            names.append(name)
    return sorted(names)


@pytest.mark.parametrize("module, want_all, want_public", [(stemdot, STEMDOT_ALL, STEMDOT_PUBLIC),
                                                           (sdask, DASK_ALL, DASK_PUBLIC)])
def test_public_names_unchanged(module, want_all, want_public):
    assert sorted(module.__all__) == sorted(want_all)
    assert public(module) == want_public
    for name in module.__all__:
        assert getattr(module, name) is not None, name


def test_settings_are_read_through_the_package(monkeypatch):
    """The documented knobs are set on the package (stemdot.LAZY_BLOCK_BYTES = n), and the
    modules that use them see the new value."""
    import numpy as np

    seen = []
    monkeypatch.setattr(stemdot, "LAZY_BLOCK_BYTES", 12345)
    monkeypatch.setattr(stemdot._lazy, "_nav_blocks", lambda x, limit: seen.append(limit) or (x, []))
    list(stemdot._lazy._lazy_blocks(np.zeros((2, 2, 2))))
    assert seen == [12345]


@pytest.mark.parametrize("module", [stemdot, sdask])
def test_classes_named_by_the_package(module):
    """Tracebacks and reprs name stemdot.StemdotIOError, stemdot.dask.ClusterError (not the
    module that defines them), and pickles refer to the package's name."""
    import pickle

    for name in public(module):
        value = getattr(module, name)
        if isinstance(value, type) and name not in ("Live", "LiveUpdate", "View"):  # stemdot._live, _view
            assert value.__module__ == module.__name__, name
    assert pickle.loads(pickle.dumps(stemdot.Centre(1.0, 2.0, 3.0))) == (1.0, 2.0, 3.0)
