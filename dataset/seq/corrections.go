package seq

import (
	"encoding/binary"
	"math"

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

// decoder turns the stored pixels of a frame (little-endian unsigned integers of size
// bytes) into a float32 frame in host byte order as LiberTEM's corrections do
// (libertem.io.corrections.detector.correct): the pixels read as float32, (frame −
// dark) · gain with the references given, computed in float64 and rounded to float32
// (as LiberTEM's numba kernel computes it), then the defect pixels patched (defects:
// nil, none).
type decoder struct {
	size       int
	dark, gain []float32
	defects    *defects
}

func (c *decoder) decode(dst, src []byte) {
	le, ne := binary.LittleEndian, binary.NativeEndian
	for i := range len(dst) / 4 {
		var v float32
		switch c.size {
		case 1:
			v = float32(src[i])
		case 2:
			v = float32(le.Uint16(src[2*i:]))
		default:
			v = float32(le.Uint32(src[4*i:]))
		}
		if c.dark != nil || c.gain != nil {
			x := float64(v)
			if c.dark != nil {
				x -= float64(c.dark[i])
			}
			if c.gain != nil {
				x *= float64(c.gain[i])
			}
			v = float32(x)
		}
		ne.PutUint32(dst[4*i:], math.Float32bits(v))
	}
	if c.defects != nil {
		c.defects.patch(dst)
	}
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
