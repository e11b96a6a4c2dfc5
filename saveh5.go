package stemdot

import (
	"io"
	"time"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/dataset/hdf5"
	"github.com/stemdot/stemdot/errs"
)

// The result as HDF5 (Outputs.HDF5), in HyperSpy's HSPY layout so that hs.load reads it
// as a stack of images, and h5py as one array:
//
//	/ (attributes file_format "HyperSpy", file_format_version "3.3")
//	/Experiments/stemdot/data    float32 or float64, shape (n_masks,) + nav_shape: the
//	                             image of mask m is data[m] (the NPY's [..., m])
//	    attributes mask_names, mask_specs (one string per mask; "" for a mask of a file)
//	/Experiments/stemdot/axis-0  the masks (name "mask", navigate true)
//	/Experiments/stemdot/axis-1… the nav axes (names y, x; z for a scan of planes, t for
//	                             a series), scale, offset and units from the file's
//	                             calibration where known (else scale 1, offset 0, no
//	                             units); the last two (the one of a 1-D scan) are the
//	                             signal (navigate false): HyperSpy shows the masks'
//	                             images and steps through the masks
//	/Experiments/stemdot/metadata/General  title "stemdot"
//	/Experiments/stemdot/original_metadata  provenance: stemdot_version, source_file,
//	                             source_format, command, date (UTC, RFC 3339), and
//	                             result_json: the result's JSON sidecar (ResultInfo, with
//	                             the masks, options and the "calibration" section, the
//	                             detector's signal axes included)

// resultTitle names the experiment group of an HDF5 result.
const resultTitle = "stemdot"

// hdf5 prepares res, described by info, as an HDF5 file at path (see above).
func (b *outputBatch) hdf5(path string, res *Result, info *ResultInfo, command string) error {
	nav := res.NavShape
	frames := product(nav)
	r := hdf5.ResultFile{Title: resultTitle, Shape: append([]int{res.NMasks}, nav...)}
	// (frames, n_masks) → (n_masks, frames)
	if res.F64 != nil {
		r.F64 = transposeResult(res.F64, frames, res.NMasks)
	} else {
		r.F32 = transposeResult(res.F32, frames, res.NMasks)
	}
	r.Axes = append(r.Axes, hdf5.ResultAxis{Name: "mask", Navigate: true})
	var cal []hdf5.ResultAxis
	if info.Calibration != nil && len(info.Calibration.Nav) == len(nav) {
		for _, a := range info.Calibration.Nav {
			cal = append(cal, hdf5.ResultAxis{Name: a.Name, Scale: a.Scale, Offset: a.Offset, Units: a.Units})
		}
	} else {
		for _, name := range dataset.NavNames(len(nav)) {
			cal = append(cal, hdf5.ResultAxis{Name: name})
		}
	}
	for i := range cal {
		cal[i].Navigate = i < len(cal)-2
	}
	r.Axes = append(r.Axes, cal...)
	names, specs := make([]string, len(info.Masks)), make([]string, len(info.Masks))
	for i, m := range info.Masks {
		names[i], specs[i] = m.Name, m.Spec
	}
	r.DataAttrs = []hdf5.StringsAttr{{Name: "mask_names", Values: names, Array: true}, {Name: "mask_specs", Values: specs, Array: true}}
	sidecar, err := info.JSON()
	if err != nil {
		return errs.Wrap(errs.Internal, err)
	}
	r.Provenance = []hdf5.StringsAttr{
		{Name: "stemdot_version", Values: []string{Version}},
		{Name: "source_file", Values: []string{info.Dataset.Path}},
		{Name: "source_format", Values: []string{info.Dataset.Format}},
		{Name: "command", Values: []string{command}},
		{Name: "date", Values: []string{time.Now().UTC().Format(time.RFC3339)}},
		{Name: "result_json", Values: []string{string(sidecar)}},
	}
	img, err := hdf5.ResultImage(r)
	if err != nil {
		return err
	}
	return b.file(path, func(w io.Writer) error { _, err := w.Write(img); return err })
}

// transposeResult turns values of shape (frames, n) into (n, frames).
func transposeResult[T float32 | float64](v []T, frames, n int) []T {
	out := make([]T, len(v))
	for f := range frames {
		for m := range n {
			out[m*frames+f] = v[f*n+m]
		}
	}
	return out
}
