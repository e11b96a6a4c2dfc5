package seq

import (
	"encoding/binary"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"sync"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/dataset/mrc"
	"github.com/stemdot/stemdot/errs"
)

// The correction files beside a SEQ file (LiberTEM's names).
const (
	darkExt   = ".seq.dark.mrc"
	gainExt   = ".seq.gain.mrc"
	defectExt = ".seq.Config.Metadata.xml"
)

// openCorrected opens the frames fl describes with the dark and gain references of refs
// (base's, see references) applied, as float32 frames.
func openCorrected(fl dataset.Flat, opt dataset.Options, ff dataset.FileFrames, base string, refs []string) (dataset.Dataset, error) {
	c := &corrected{}
	var applied []string
	for _, r := range refs {
		var dst *[]float32
		switch {
		case strings.HasSuffix(r, darkExt):
			dst = &c.dark
		case strings.HasSuffix(r, gainExt):
			dst = &c.gain
		default:
			ff.Notes = append(ff.Notes, fmt.Sprintf("the defect pixels that %s lists are not patched (LiberTEM patches them)", filepath.Base(r)))
			continue
		}
		m, err := readMRC(r, fl.Sig)
		if err != nil {
			fl.File.Close()
			return nil, errs.Wrap(errs.Format, fmt.Errorf("dataset: %s: option %s: %w", fl.Path, OptCorrections, err))
		}
		*dst = m
		applied = append(applied, filepath.Base(r))
	}
	if len(applied) == 0 {
		fl.File.Close()
		return nil, errs.New(errs.Argument, "dataset: %s: option %s: no dark or gain reference (%s, %s) beside the file", fl.Path, OptCorrections,
			filepath.Base(base+darkExt), filepath.Base(base+gainExt))
	}
	ff.Notes = append(ff.Notes, fmt.Sprintf("(frame − dark) · gain applied with %s (float32; option %s)", strings.Join(applied, " and "), OptCorrections))
	// Every frame of the file, to be reconciled with the scan after correction.
	file, err := dataset.OpenFlat(fl, dataset.Options{}, nil, "", dataset.FileFrames{Whole: ff.Whole, RecordBytes: ff.RecordBytes})
	if err != nil {
		return nil, err
	}
	c.Dataset = file
	ds, err := dataset.Reconcile(c, opt, nil, "", ff)
	if err != nil {
		file.Close()
		return nil, err
	}
	return ds, nil
}

// corrected is the frames of a SEQ file with the dark reference subtracted and the gain
// reference multiplied (each when present), as float32.
type corrected struct {
	dataset.Dataset
	dark, gain []float32
}

func (c *corrected) DType() dataset.DType { return dataset.Float32 }
func (c *corrected) FrameBytes() int {
	s := c.SigShape()
	return s[0] * s[1] * 4
}

var rawPool sync.Pool

func (c *corrected) ReadFrames(start, end int, dst []byte) error {
	if err := dataset.CheckRange(c.Path(), start, end, c.NumFrames(), c.FrameBytes(), len(dst)); err != nil {
		return err
	}
	in := c.Dataset
	need := (end - start) * in.FrameBytes()
	bp, _ := rawPool.Get().(*[]byte)
	if bp == nil || cap(*bp) < need {
		b := make([]byte, need)
		bp = &b
	}
	defer rawPool.Put(bp)
	raw := (*bp)[:need]
	if err := in.ReadFrames(start, end, raw); err != nil {
		return err
	}
	px := in.SigShape()[0] * in.SigShape()[1]
	ne := binary.NativeEndian
	for i := range (end - start) * px {
		var v float32
		switch in.DType() {
		case dataset.Uint8:
			v = float32(raw[i])
		case dataset.Uint16:
			v = float32(ne.Uint16(raw[2*i:]))
		default:
			v = float32(ne.Uint32(raw[4*i:]))
		}
		p := i % px
		if c.dark != nil {
			v -= c.dark[p]
		}
		if c.gain != nil {
			v *= c.gain[p]
		}
		ne.PutUint32(dst[4*i:], math.Float32bits(v))
	}
	return nil
}

// readMRC reads a 2-D MRC image of the frames' shape sig (one section of ny = sig_y rows
// of nx = sig_x pixels, read by dataset/mrc) as float32.
func readMRC(path string, sig [2]int) ([]float32, error) {
	ds, err := mrc.Open(path, dataset.Options{})
	if err != nil {
		return nil, err
	}
	defer ds.Close()
	if s := ds.SigShape(); s != sig || ds.NumFrames() != 1 {
		return nil, errs.New(errs.Shape, "%s: an MRC image of nx %d × ny %d × nz %d, want one image of the frames' %d × %d", path, s[1], s[0], ds.NumFrames(), sig[1], sig[0])
	}
	b := make([]byte, ds.FrameBytes())
	if err := ds.ReadFrames(0, 1, b); err != nil {
		return nil, err
	}
	ne := binary.NativeEndian
	out := make([]float32, sig[0]*sig[1])
	for i := range out {
		switch ds.DType() {
		case dataset.Uint8:
			out[i] = float32(b[i])
		case dataset.Int8:
			out[i] = float32(int8(b[i]))
		case dataset.Int16:
			out[i] = float32(int16(ne.Uint16(b[2*i:])))
		case dataset.Uint16:
			out[i] = float32(ne.Uint16(b[2*i:]))
		case dataset.Float32:
			out[i] = math.Float32frombits(ne.Uint32(b[4*i:]))
		default:
			return nil, errs.New(errs.DType, "%s: an MRC image of %v is not read", path, ds.DType())
		}
	}
	return out, nil
}
