package mrc

import (
	"encoding/binary"
	"os"
	"sync/atomic"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
)

// halfFile is the frames of an MRC file of MODE 12 (IEEE 754 half-precision pixels),
// delivered as float32: every float16 value (subnormals, infinities, NaN payloads) is
// exactly a float32.
type halfFile struct {
	path         string
	f            *os.File
	size, offset int64
	n            int
	sig          [2]int
	big          bool
	closed       atomic.Bool
}

func (d *halfFile) Format() string       { return "mrc" }
func (d *halfFile) Path() string         { return d.path }
func (d *halfFile) NavShape() []int      { return []int{1, d.n} }
func (d *halfFile) SigShape() [2]int     { return d.sig }
func (d *halfFile) DType() dataset.DType { return dataset.Float32 }
func (d *halfFile) NumFrames() int       { return d.n }
func (d *halfFile) FrameBytes() int      { return d.sig[0] * d.sig[1] * 4 }

// halfChunk bounds the stored bytes one read takes (4 MiB, at least one frame).
const halfChunk = 4 << 20

// ReadFrames reads frames [start, end) with positioned reads of up to halfChunk bytes
// and converts their pixels to float32 in host byte order.
func (d *halfFile) ReadFrames(start, end int, dst []byte) error {
	fb := d.FrameBytes()
	if err := dataset.CheckRange(d.path, start, end, d.n, fb, len(dst)); err != nil {
		return err
	}
	if d.closed.Load() {
		return errs.New(errs.Argument, "dataset: %s: read after Close", d.path)
	}
	var order binary.ByteOrder = binary.LittleEndian
	if d.big {
		order = binary.BigEndian
	}
	stored := fb / 2
	per := max(1, halfChunk/stored)
	buf := make([]byte, min(end-start, per)*stored)
	for i := start; i < end; i += per {
		k := min(per, end-i)
		b := buf[:k*stored]
		if _, err := d.f.ReadAt(b, d.offset+int64(i)*int64(stored)); err != nil {
			return dataset.ReadError(d.path, d.f, d.size, i, i+k, err)
		}
		out := dst[(i-start)*fb:]
		for j := 0; j < len(b); j += 2 {
			binary.NativeEndian.PutUint32(out[2*j:], halfToFloat32(order.Uint16(b[j:])))
		}
	}
	return nil
}

// Close closes the file.
func (d *halfFile) Close() error {
	if d.closed.Swap(true) {
		return errs.New(errs.Argument, "dataset: %s: already closed", d.path)
	}
	return d.f.Close()
}

// halfToFloat32 returns the float32 bits of the IEEE 754 binary16 value h.
func halfToFloat32(h uint16) uint32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // infinity, NaN (payload kept)
		return sign | 0x7f800000 | mant<<13
	case exp == 0 && mant == 0:
		return sign
	case exp == 0: // subnormal: mant·2^-24, normalised
		e := uint32(127 - 14)
		for mant&0x400 == 0 {
			mant <<= 1
			e--
		}
		return sign | e<<23 | (mant&0x3ff)<<13
	}
	return sign | (exp+127-15)<<23 | mant<<13
}
