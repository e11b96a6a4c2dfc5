package stemdot

import (
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/masks"
)

// Masks builds the mask stack of specs for frames of sig_shape sig (sig_y, sig_x), in
// order (masks.Parse: disk:CX,CY,R, ring:CX,CY,RI,RO, point:X,Y, rect:X,Y,W,H,
// com[:CX,CY[,R]]; pixel coordinates, x = column, y = row, pixel centres at integers).
// Errors (errs.Argument) name the spec.
func Masks(sig [2]int, specs ...string) (*masks.Stack, error) {
	return MasksFrom(sig, nil, specs)
}

// MasksFrom builds a stack from NPY mask files (masks.LoadNPY: (sig_y, sig_x) or (n,
// sig_y, sig_x)) and then mask specs (see Masks), in order, for frames of sig_shape
// sig. Errors name the file (errs.IO, errs.Format), the spec (errs.Argument) or the
// shape that does not match sig (errs.Shape).
func MasksFrom(sig [2]int, files, specs []string) (stack *masks.Stack, err error) {
	return MasksFromCentred(sig, nil, files, specs)
}

// MasksFromCentred is MasksFrom whose specs may also be auto specs (disk:auto, ...),
// about the direct beam's centre (see MasksCentred); centre may be nil.
func MasksFromCentred(sig [2]int, centre *masks.Centre, files, specs []string) (stack *masks.Stack, err error) {
	defer goErrs(&err)
	var parts []*masks.Stack
	for _, file := range files {
		s, err := masks.LoadNPYFor(file, sig)
		if err != nil {
			return nil, err
		}
		parts = append(parts, s)
	}
	for _, spec := range specs {
		s, err := masks.ParseCentred(spec, sig, centre)
		if err != nil {
			return nil, errs.Wrap(errs.Argument, err) // masks.Parse names the spec
		}
		parts = append(parts, s)
	}
	switch len(parts) {
	case 0:
		return nil, errs.New(errs.Argument, "no masks: give a mask spec (option mask) or an NPY mask stack (option masks)")
	case 1:
		return parts[0], nil
	}
	s, err := masks.Concat(parts...)
	return s, errs.Wrap(errs.Argument, err)
}
