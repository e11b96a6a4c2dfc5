package stemdot

import (
	"math"

	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/masks"
)

// FindCentre finds the direct beam's disk in frame, sig_y × sig_x values in C order
// (the scan's sum frame, in practice): its centre (X column, Y row, the masks' pixel
// coordinates: pixel centres at integers) and radius R in pixels, by the method
// masks.FindCentre documents (a maximally stable bright region, measured at half
// maximum above its surroundings: its intensity-weighted centroid and √(area/π), or a
// circle fitted to its edge where the frame's edge cuts it). The centre makes the auto
// mask specs (disk:auto, ring:auto,RI,RO, com:auto: MasksCentred). Errors: errs.Shape
// for a frame of another size than sig; errs.Argument for a frame with no disk to
// find (flat, noise only, NaN or infinite values, a disk cut by the frame's edge that
// shows half its circle or less).
func FindCentre(frame []float64, sig [2]int) (masks.Centre, error) {
	if sig[0] < 1 || sig[1] < 1 || sig[1] > math.MaxInt/sig[0] || len(frame) != sig[0]*sig[1] {
		return masks.Centre{}, errs.New(errs.Shape, "centre: the frame holds %d values, but sig_shape (%d, %d) has %d pixels", len(frame), sig[0], sig[1], sig[0]*sig[1])
	}
	c, err := masks.FindCentre(frame, sig)
	return c, errs.Wrap(errs.Argument, err)
}

// MasksCentred is Masks that also takes the auto specs, about the direct beam's centre
// (FindCentre): disk:auto (radius centre.R), disk:auto,R, ring:auto,RI,RO, com:auto and
// com:auto,R (masks.ParseCentred). With centre nil an auto spec is an error saying it
// needs the centre.
func MasksCentred(sig [2]int, centre *masks.Centre, specs ...string) (*masks.Stack, error) {
	return MasksFromCentred(sig, centre, nil, specs)
}
