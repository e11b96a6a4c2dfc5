"""stemdot.dask from an asynchronous client (issue #20.4): bootstrap_async,
apply_masks_async, reduce_async and dataset_info_async on a LocalCluster(asynchronous=True),
with results equal to the single-process ones."""

import asyncio
import warnings

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")

from distributed import Client, LocalCluster  # noqa: E402

import stemdot  # noqa: E402
import stemdot.dask as sdask  # noqa: E402

SIG = (32, 32)


def test_async_api_equals_single_process(tmp_path):
    path = tmp_path / "scan.npy"
    np.save(path, np.random.default_rng(4).integers(0, 3000, size=(16, 24) + SIG, dtype=np.uint16))
    masks = np.concatenate([stemdot.disk(SIG, 16, 15, 6), stemdot.com(SIG)])
    shifts = np.random.default_rng(5).uniform(-2, 2, size=(16, 24, 2))
    with stemdot.open(path) as ds:
        want = stemdot.apply_masks(ds, masks, names=["bf", "c0", "c1", "c2"])
        want_shifted = stemdot.apply_masks(ds, masks, shifts=shifts)
        want_red = stemdot.reduce(ds, ["sum", "max", "std"])
    with stemdot.open(path, nav_shape=(4, 96)) as ds:
        want_guess = stemdot.apply_masks(ds, masks)

    async def main():
        async with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                silence_logs=50, asynchronous=True) as cluster:
            async with Client(cluster, asynchronous=True) as client:
                nodes = await sdask.bootstrap_async(client)
                assert len(nodes) == 2 and all(n["n_workers"] >= 1 for n in nodes.values())
                report = {}
                got = await sdask.apply_masks_async(client, path, masks, names=["bf", "c0", "c1", "c2"], range_frames=8,
                                                    report=report)
                shifted, red, info = await asyncio.gather(
                    sdask.apply_masks_async(client, path, masks, shifts=shifts, range_frames=16),
                    sdask.reduce_async(client, path, ["sum", "max", "std"], range_frames=8),
                    sdask.dataset_info_async(client, path),
                )
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    guessed = await sdask.apply_masks_async(client, path, masks, nav_shape=(4, 96), range_frames=8)
                return got, report, shifted, red, info, guessed, caught

    got, report, shifted, red, info, guessed, caught = asyncio.run(main())
    np.testing.assert_array_equal(got, want)
    assert list(got.names) == ["bf", "c0", "c1", "c2"]
    assert sum(report["frames"].values()) == 16 * 24 and len(report["frames"]) == 2
    # shifted masks: equal to within the last bits (doc/performance.md, "Precision and reproducibility")
    np.testing.assert_allclose(shifted, want_shifted, rtol=0, atol=1e-6 * np.abs(want_shifted).max())
    for name in ("sum", "max"):
        np.testing.assert_array_equal(red[name], want_red[name])
    np.testing.assert_allclose(red["std"], want_red["std"], rtol=1e-12)
    assert info["nav_shape"] == (16, 24) and info["n_frames"] == 384
    np.testing.assert_array_equal(guessed, want_guess)
    assert not [w for w in caught if "stemdot" in str(w.message)], "nav_shape given: no warning"


def test_synchronous_api_refuses_an_asynchronous_client(tmp_path):
    """bootstrap, dataset_info, apply_masks, reduce and centre called with
    Client(asynchronous=True) from its event loop: a clear error naming the async twin,
    not a coroutine handed back (a result never computed) or a TypeError from inside."""
    path = tmp_path / "scan.npy"
    np.save(path, np.zeros((2, 3) + SIG, dtype=np.uint16))
    masks = stemdot.disk(SIG, 16, 16, 4)

    async def main():
        async with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None,
                                silence_logs=50, asynchronous=True) as cluster:
            async with Client(cluster, asynchronous=True) as client:
                calls = {
                    "bootstrap": lambda: sdask.bootstrap(client),
                    "dataset_info": lambda: sdask.dataset_info(client, path),
                    "apply_masks": lambda: sdask.apply_masks(client, path, masks),
                    "reduce": lambda: sdask.reduce(client, path, ["sum"]),
                    "centre": lambda: sdask.centre(client, path),
                }
                for name, call in calls.items():
                    with pytest.raises(stemdot.InvalidArgumentError) as e:
                        call()
                    twin = f"await stemdot.dask.{name}_async(client, ...)"
                    if name == "centre":
                        twin = "stemdot.find_centre((await stemdot.dask.reduce_async(client, path, ['sum']))['sum'])"
                    assert str(e.value) == (f"stemdot.dask.{name}: the client is asynchronous "
                                            f"(Client(asynchronous=True)): {twin} instead"), str(e.value)

    asyncio.run(main())
