package seq

import (
	"encoding/binary"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"sync"

	"github.com/stemdot/stemdot/dataset"
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

// readMRC reads a 2-D MRC image (the MRC2014 header: nx, ny, nz int32 at bytes 0, 4, 8,
// mode at 12 (0 int8, 1 int16, 2 float32, 6 uint16), the extended header's size nsymbt at
// 92, the machine stamp at 212 (0x44 little-endian, 0x11 big-endian); the data after the
// 1024-byte header and the extended header, x fastest) of frames of shape sig (nz 1,
// ny = sig_y, nx = sig_x), as float32.
func readMRC(path string, sig [2]int) ([]float32, error) {
	f, size, err := dataset.OpenFile(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	head := make([]byte, 1024)
	if size < 1024 {
		return nil, fmt.Errorf("%s: %d bytes is too short for an MRC file (1024-byte header)", path, size)
	}
	if _, err := f.ReadAt(head, 0); err != nil {
		return nil, errs.Wrap(errs.IO, fmt.Errorf("%s: %w", path, err))
	}
	var o binary.ByteOrder = binary.LittleEndian
	if head[212] == 0x11 {
		o = binary.BigEndian
	}
	nx, ny, nz := int32(o.Uint32(head)), int32(o.Uint32(head[4:])), int32(o.Uint32(head[8:]))
	mode, ext := int32(o.Uint32(head[12:])), int64(int32(o.Uint32(head[92:])))
	if int(nx) != sig[1] || int(ny) != sig[0] || nz != 1 {
		return nil, errs.New(errs.Shape, "%s: an MRC image of nx %d × ny %d × nz %d, want one image of the frames' %d × %d", path, nx, ny, nz, sig[1], sig[0])
	}
	sizes := map[int32]int{0: 1, 1: 2, 2: 4, 6: 2}
	es, ok := sizes[mode]
	if !ok {
		return nil, errs.New(errs.DType, "%s: MRC mode %d is not read (want 0 int8, 1 int16, 2 float32 or 6 uint16)", path, mode)
	}
	n := sig[0] * sig[1]
	if ext < 0 || 1024+ext+int64(n*es) > size {
		return nil, fmt.Errorf("%s: the MRC file of %d bytes does not hold its %d×%d image after the extended header of %d bytes", path, size, nx, ny, ext)
	}
	b := make([]byte, n*es)
	if _, err := f.ReadAt(b, 1024+ext); err != nil {
		return nil, errs.Wrap(errs.IO, fmt.Errorf("%s: %w", path, err))
	}
	out := make([]float32, n)
	for i := range out {
		switch mode {
		case 0:
			out[i] = float32(int8(b[i]))
		case 1:
			out[i] = float32(int16(o.Uint16(b[2*i:])))
		case 2:
			out[i] = math.Float32frombits(o.Uint32(b[4*i:]))
		case 6:
			out[i] = float32(o.Uint16(b[2*i:]))
		}
	}
	return out, nil
}
