"""libertem.masks generators against stemdot's mask specs (disk, ring, rect, com); after
LiberTEM's tests/test_masks.py."""
import numpy as np
import pytest

from ltcommon import com_masks_factory, difference, ltmasks, stemdot

SIG = (37, 53)  # (sig_y, sig_x): not square, so that x and y cannot be swapped unnoticed


def ids(v):
    return f"{v:.4g}"


def random_disks(n, seed):
    """n (cx, cy, r): centres inside the frame, whole and fractional, radii 0.5 to 30."""
    rng = np.random.default_rng(seed)
    cx = rng.uniform(0, SIG[1] - 1, n)
    cy = rng.uniform(0, SIG[0] - 1, n)
    r = rng.uniform(0.5, 30, n)
    whole = rng.random(n) < 0.3
    return list(zip(np.where(whole, np.round(cx), cx), np.where(whole, np.round(cy), cy), np.where(whole, np.round(r), r)))


@pytest.mark.parametrize("cx,cy,r", random_disks(60, 1) + [(26, 18, 10), (0, 0, 3), (52, 36, 1), (26.5, 18.5, 0.75)],
                         ids=ids)
def test_disk(cx, cy, r):
    want = ltmasks.circular(centerX=cx, centerY=cy, imageSizeX=SIG[1], imageSizeY=SIG[0], radius=r)
    got = stemdot.disk(SIG, cx, cy, r)[0]
    np.testing.assert_array_equal(got != 0, want != 0)
    assert set(np.unique(got)) <= {0, 1}


def random_rings(n, seed):
    rng = np.random.default_rng(seed)
    out = []
    for cx, cy, ro in random_disks(n, seed):
        out.append((cx, cy, rng.uniform(0.1, ro - 0.1), ro))
    return out


@pytest.mark.parametrize("cx,cy,ri,ro", random_rings(60, 2) + [(26, 18, 0, 10), (26.5, 18.25, 0, 7), (0, 0, 0, 4),
                                                                 (10, 10, 3, 5)], ids=ids)
def test_ring(cx, cy, ri, ro):
    """Rings, those of inner radius 0 included (LiberTEM then leaves out the pixel at the
    centre, when there is one)."""
    want = ltmasks.ring(centerX=cx, centerY=cy, imageSizeX=SIG[1], imageSizeY=SIG[0], radius=ro, radius_inner=ri)
    got = stemdot.ring(SIG, cx, cy, ri, ro)[0]
    np.testing.assert_array_equal(got != 0, want != 0)


@pytest.mark.parametrize("cx,cy,r", [(26, 18, np.inf), (20.5, 10.25, 7.0), (3, 4, 12.0)])
def test_com_masks(cx, cy, r):
    """LiberTEM's com_masks_factory: the disk and the moments of the absolute coordinates
    y·disk and x·disk; stemdot's moments are about the centre, (y − cy)·disk and
    (x − cx)·disk, which give the same shifts (LiberTEM subtracts cy, cx after dividing)."""
    disk, my, mx = (np.asarray(f(), np.float64) for f in com_masks_factory(SIG[0], SIG[1], cy, cx, r))
    got = stemdot.com(SIG, cx, cy, None if np.isinf(r) else r).astype(np.float64)
    np.testing.assert_array_equal(got[0], disk)
    np.testing.assert_allclose(got[1], my - cy * disk, atol=1e-5)
    np.testing.assert_allclose(got[2], mx - cx * disk, atol=1e-5)


def test_default_com_centre():
    """Without a centre both take (sig_y // 2, sig_x // 2)."""
    disk, my, mx = (np.asarray(f(), np.float64) for f in com_masks_factory(SIG[0], SIG[1], SIG[0] // 2, SIG[1] // 2,
                                                                           np.inf))
    got = stemdot.com(SIG).astype(np.float64)
    np.testing.assert_allclose(got[1:], [my - SIG[0] // 2 * disk, mx - SIG[1] // 2 * disk], atol=1e-5)


@difference("Rectangle's far edge")
@pytest.mark.parametrize("x,y,w,h", [(0, 0, 10, 10), (2, 3, 5, 4), (10, 5, 1, 1), (40, 30, 13, 7)])
def test_rect(x, y, w, h):
    """LiberTEM covers columns x..x+w and rows y..y+h; stemdot x..x+w−1 and y..y+h−1 (both
    clipped to the frame)."""
    want = ltmasks.rectangular(X=x, Y=y, Width=w, Height=h, imageSizeX=SIG[1], imageSizeY=SIG[0])
    got = stemdot.rect(SIG, x, y, w, h)[0]
    expect = np.zeros(SIG, bool)
    expect[y:y + h, x:x + w] = True
    np.testing.assert_array_equal(got != 0, expect)
    expect[y:y + h + 1, x:x + w + 1] = True
    np.testing.assert_array_equal(want != 0, expect)
    if (x, y, w, h) == (0, 0, 10, 10):
        assert (np.count_nonzero(want), np.count_nonzero(got)) == (121, 100)


@difference("Mask that selects no pixel")
@pytest.mark.parametrize("spec", ["disk:26.5,18.5,0.4", "ring:26,18,1,1.2", "disk:80,18,3"])
def test_empty_mask(ctx, spec):
    """A disk or ring between pixels, or outside the frame: LiberTEM's mask is all 0 (its
    images 0), stemdot refuses the spec."""
    kind, args = spec.split(":")
    a = [float(v) for v in args.split(",")]
    if kind == "disk":
        want = ltmasks.circular(centerX=a[0], centerY=a[1], imageSizeX=SIG[1], imageSizeY=SIG[0], radius=a[2])
    else:
        want = ltmasks.ring(centerX=a[0], centerY=a[1], imageSizeX=SIG[1], imageSizeY=SIG[0], radius=a[3],
                            radius_inner=a[2])
    assert not want.any()
    with pytest.raises(stemdot.InvalidArgumentError, match="selects no pixel"):
        stemdot.mask(spec, SIG)
