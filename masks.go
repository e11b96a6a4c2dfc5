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
func MasksFrom(sig [2]int, files, specs []string) (*masks.Stack, error) {
	return MasksFromCentred(sig, nil, files, specs)
}

// MasksFromCentred is MasksFrom whose specs may also be auto specs (disk:auto, ...),
// about the direct beam's centre (see MasksCentred); centre may be nil.
func MasksFromCentred(sig [2]int, centre *masks.Centre, files, specs []string) (*masks.Stack, error) {
	stack, _, err := MasksInfo(sig, centre, files, specs)
	return stack, err
}

// MasksInfo is MasksFromCentred, with the source of every mask of the stack, in order:
// its column, name, the spec or the file's absolute path, and its index there (for a
// result's sidecar: ResultInfo.SetMasks).
func MasksInfo(sig [2]int, centre *masks.Centre, files, specs []string) (stack *masks.Stack, info []MaskInfo, err error) {
	defer goErrs(&err)
	var parts []*masks.Stack
	add := func(s *masks.Stack, spec, file string) {
		parts = append(parts, s)
		for i, name := range s.MaskNames() {
			info = append(info, MaskInfo{Column: len(info), Name: name, Spec: spec, File: file, Index: i})
		}
	}
	for _, file := range files {
		s, err := masks.LoadNPYFor(file, sig)
		if err != nil {
			return nil, nil, err
		}
		add(s, "", absPath(file))
	}
	for _, spec := range specs {
		s, err := masks.ParseCentred(spec, sig, centre)
		if err != nil {
			return nil, nil, errs.Wrap(errs.Argument, err) // masks.Parse names the spec
		}
		add(s, spec, "")
	}
	switch len(parts) {
	case 0:
		return nil, nil, errs.New(errs.Argument, "no masks: give a mask spec (option mask) or an NPY mask stack (option masks)")
	case 1:
		return parts[0], info, nil
	}
	s, err := masks.Concat(parts...)
	if err != nil {
		return nil, nil, errs.Wrap(errs.Argument, err)
	}
	return s, info, nil
}
