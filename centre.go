package stemdot

import (
	"context"
	"fmt"
	"math"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/engine"
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

// Centre finds the direct beam's centre and radius (FindCentre) in the sum frame of ds:
// one Reduce pass over its frames (those of its ROI, with option roi) on the planner's
// CPU workers, the GPU workers it was asked for left out (a reduction is bound by memory
// bandwidth). With shifts (as ApplyOptions.Shifts: the masks' descan shifts), each frame
// is first moved back by its shift (engine.ShiftedFrames, the frame as the shifted masks
// see it): the centre is then the beam's at zero shift, about which masks that move by
// the shifts follow it, not the centre of a sum smeared by the descan. The auto mask
// specs are made about it (MasksFromCentred). Errors: those of Reduce and of
// ApplyOptions.Shifts, and FindCentre's (errs.Argument) naming the sum frame of ds.
func (pl *Planner) Centre(ctx context.Context, ds dataset.Dataset, shifts []float64) (c masks.Centre, err error) {
	defer goErrs(&err)
	if pl.machine.Described {
		return c, errs.New(errs.Argument, "a plan for a described machine (option topology or option gpu_inventory) is for reading, not for running here: leave those options out to find the centre")
	}
	if ds == nil {
		return c, errs.New(errs.Argument, "no dataset")
	}
	frames, what := ds, "the sum frame of "+describe(ds)
	if shifts != nil {
		perFrame, err := frameShifts(ds, shifts)
		if err != nil {
			return c, err
		}
		if frames, err = engine.ShiftedFrames(ds, perFrame); err != nil {
			return c, err
		}
		what = "the sum frame of the frames of " + describe(ds) + " moved back by their shifts"
	}
	red, err := pl.reduce(ctx, frames, ReduceOptions{Sum: true})
	if err != nil {
		return c, err
	}
	if c, err = FindCentre(red.Sum, ds.SigShape()); err != nil {
		return c, fmt.Errorf("%s: %w", what, err) // keeps FindCentre's kind
	}
	return c, nil
}

// Centre is plan.Planner() followed by Planner.Centre.
func Centre(ctx context.Context, ds dataset.Dataset, plan Plan, shifts []float64) (c masks.Centre, err error) {
	defer goErrs(&err)
	pl, err := plan.Planner()
	if err != nil {
		return c, err
	}
	return pl.Centre(ctx, ds, shifts)
}
