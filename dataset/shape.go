package dataset

import (
	"fmt"
	"math"
	"slices"

	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/npy"
)

// MaxFrameBytes is the largest frame stemdot reads or writes: sig_y·sig_x·dtype size at
// most 2 GiB. Tiles hold whole frames, so a worker needs at least one frame in memory;
// real detectors stay far below (a 4096×4096 uint32 frame is 64 MiB).
const MaxFrameBytes = 1 << 31

// CheckShape checks a dataset of nav_shape nav holding frames of sig_shape sig and dtype
// dt: every size positive, a frame of at most MaxFrameBytes bytes, and a product of nav
// (the number of frames) and a total size in bytes that fit in an int. It returns the
// number of frames and the bytes of one frame. Errors name the shape and the limit.
func CheckShape(nav []int, sig [2]int, dt DType) (frames, frameBytes int, err error) {
	defer func() { err = errs.Wrap(errs.Shape, err) }()
	if frameBytes, err = checkSig(sig, dt); err != nil {
		return 0, 0, err
	}
	if frames, err = checkNav(nav, ""); err != nil {
		return 0, 0, err
	}
	if frames > math.MaxInt/frameBytes {
		return 0, 0, fmt.Errorf("nav shape %s is too large: %d frames of %d bytes (sig shape %s, %v) exceed %d bytes",
			npy.ShapeString(nav), frames, frameBytes, npy.ShapeString(sig[:]), dt, math.MaxInt)
	}
	return frames, frameBytes, nil
}

// checkSig checks that sig has positive sizes and that a frame of dt fits in
// MaxFrameBytes, and returns the frame's bytes.
func checkSig(sig [2]int, dt DType) (int, error) {
	if dt.Size() == 0 {
		return 0, fmt.Errorf("invalid dtype %v", dt)
	}
	if sig[0] <= 0 || sig[1] <= 0 {
		return 0, fmt.Errorf("sig shape %s has a non-positive size", npy.ShapeString(sig[:]))
	}
	// a·b ≤ c ⇔ a ≤ ⌊c/b⌋ for positive integers: no product is formed before it is known
	// to fit.
	if sig[1] > MaxFrameBytes/dt.Size() || sig[0] > MaxFrameBytes/(sig[1]*dt.Size()) {
		return 0, fmt.Errorf("sig shape %s is too large: a frame of %d×%d pixels of %v (%d bytes each) exceeds the %d-byte limit of one frame",
			npy.ShapeString(sig[:]), sig[0], sig[1], dt, dt.Size(), MaxFrameBytes)
	}
	return sig[0] * sig[1] * dt.Size(), nil
}

// checkNav checks that nav has positive sizes and a product that fits in an int, and
// returns the product (1 for an empty nav). source follows the shape in errors, as in
// " from x.hdr".
func checkNav(nav []int, source string) (int, error) {
	p := 1
	for _, n := range nav {
		if n <= 0 {
			return 0, fmt.Errorf("nav shape %s%s has a non-positive size", npy.ShapeString(nav), source)
		}
		if p > math.MaxInt/n {
			return 0, fmt.Errorf("nav shape %s%s is too large: its number of scan positions exceeds %d", npy.ShapeString(nav), source, math.MaxInt)
		}
		p *= n
	}
	return p, nil
}

// MaxNavDims is the most nav axes a scan has: a series (n,), a scan (nav_y, nav_x) or a
// scan of planes (nav_z, nav_y, nav_x) (a time, tilt or focal series of scans), as
// LiberTEM reads them. Reconcile refuses a file's scan of more axes, and a nav shape
// option of more, naming option nav_shape.
const MaxNavDims = 3

// NavFromAxes is the nav shape of an array's stored nav axes (those before its two sig
// axes), for a format's Reconcile: the axes as stored, size-1 axes included, as
// LiberTEM gives them: (n) → (n), (2, 2, 1) → (2, 2, 1), (t, y, x) → (t, y, x).
// Reconcile refuses more than MaxNavDims of them unless option nav_shape reshapes the
// scan.
func NavFromAxes(stored []int) []int { return slices.Clone(stored) }
