// Package dataset opens 4D-STEM files and reads their frames.
//
// A dataset is a stack of detector frames (the signal, sig_shape = (sig_y, sig_x))
// recorded at every scan position of the navigation grid (nav_shape, usually
// (nav_y, nav_x)). Frames are numbered 0..NumFrames()-1 in scan order (row-major over
// nav_shape). Signal axes are kept in stored order: row 0 is the first stored row, with
// no flip, except for TIA SER, which stores rows bottom-up and is read as LiberTEM and
// RosettaSciIO read it (dataset/ser).
//
// Each file format lives in a sub-package that registers it (Register): dataset/raw,
// dataset/npy, dataset/mib, dataset/blo, dataset/hdf5, dataset/empad, ...; import
// dataset/formats for all of them. This package is the core they share: the Dataset
// interface, Open with its detection of a file's format, the reader toolkit of
// format.go, frame-count reconciliation (a file's frame count is reconciled with the
// scan as frames.go describes), flyback frames, ROI and frame ranges, memory mappings
// and their faults. Every format delivers frames in its native dtype converted to host
// (little-endian) byte order, so that a consumer (a CPU worker converting to float32, or
// a GPU worker copying native bytes to the device) never deals with byte order.
// A dataset whose file stores sparse frames (events: pixels and values) also reads them
// as such (SparseReader, sparse.go), densified by ReadFrames for every other consumer.
//
// Data flows one way: file → dataset → partitions → tiles → workers → result. This
// package is the first step and knows nothing of masks, plans or workers.
package dataset

import (
	"fmt"
	"strings"

	"github.com/stemdot/stemdot/errs"
)

// DType is the element type of stored pixels.
type DType uint8

// The pixel dtypes that stemdot reads.
const (
	Invalid DType = iota
	Uint8
	Uint16
	Uint32
	Int8
	Int16
	Int32
	Float32
	Float64
)

var dtypeNames = [...]string{"invalid", "uint8", "uint16", "uint32", "int8", "int16", "int32", "float32", "float64"}
var dtypeSizes = [...]int{0, 1, 2, 4, 1, 2, 4, 4, 8}

// String returns the numpy name of the dtype ("uint16", "float32", ...).
func (d DType) String() string {
	if int(d) < len(dtypeNames) {
		return dtypeNames[d]
	}
	return fmt.Sprintf("DType(%d)", d)
}

// Size returns the size of one element in bytes (0 for Invalid).
func (d DType) Size() int {
	if int(d) < len(dtypeSizes) {
		return dtypeSizes[d]
	}
	return 0
}

// DTypes returns the pixel dtypes that stemdot reads, Uint8 to Float64: a format refuses
// others (errs.DType) naming them.
func DTypes() []DType {
	list := make([]DType, 0, len(dtypeNames)-1)
	for d := Invalid + 1; int(d) < len(dtypeNames); d++ {
		list = append(list, d)
	}
	return list
}

// ParseDType parses a numpy dtype name ("uint16", "u2", "float32", "f4", ...).
func ParseDType(s string) (DType, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "uint8", "u1", "u8":
		return Uint8, nil
	case "uint16", "u2", "u16":
		return Uint16, nil
	case "uint32", "u4", "u32":
		return Uint32, nil
	case "int8", "i1":
		return Int8, nil
	case "int16", "i2":
		return Int16, nil
	case "int32", "i4":
		return Int32, nil
	case "float32", "f4":
		return Float32, nil
	case "float64", "f8":
		return Float64, nil
	}
	return Invalid, errs.New(errs.DType, "unsupported dtype %q (want uint8, uint16, uint32, int8, int16, int32, float32 or float64)", s)
}

// Dataset is an opened 4D-STEM dataset. Implementations are safe for concurrent use by
// several goroutines (ReadFrames uses positioned reads, no shared file offset).
type Dataset interface {
	// Format names the file format: a registered format's name ("mib", "hdf5", ...; see
	// Formats), or "memory".
	Format() string
	// Path is the file the dataset was opened from ("" for in-memory data).
	Path() string
	// NavShape is the navigation (scan) shape; its product is NumFrames().
	NavShape() []int
	// SigShape is (sig_y, sig_x), the detector frame shape in pixels.
	SigShape() [2]int
	// DType is the native pixel dtype delivered by ReadFrames.
	DType() DType
	// NumFrames is the number of frames (scan positions).
	NumFrames() int
	// FrameBytes is sig_y*sig_x*DType().Size(): the native bytes of one frame.
	FrameBytes() int
	// ReadFrames reads frames [start, end) into dst: native dtype, host byte order,
	// frame-major, rows in stored order. dst must hold at least
	// (end-start)*FrameBytes() bytes. Errors name the file and the frame range.
	ReadFrames(start, end int, dst []byte) error
	// Close releases the file. Reads after Close fail.
	Close() error
}

// Viewer is implemented by datasets whose frames are already in memory (host byte
// order). ViewFrames returns frames [start, end) without copying; workers use it to
// skip the read into their tile buffer. The memory of a mapped file faults (SIGBUS)
// when the file shrinks while it is read: read it under debug.SetPanicOnFault and turn
// a recovered panic into the dataset's I/O error with MappingFault (fault.go).
// ViewFrames of an ROI (Select) returns nil, and no error, for frames that are not
// consecutive in memory: the caller then reads them with ReadFrames (ViewsInPlace).
type Viewer interface {
	ViewFrames(start, end int) ([]byte, error)
}

// Waiter is implemented by datasets whose ReadFrames may wait for frames that have not
// arrived yet (a live detector stream, package live). A run that stops early (a worker
// failed, the run was cancelled) calls Interrupt, after which every ReadFrames waiting
// or to come returns an errs.Cancelled error instead of waiting.
type Waiter interface {
	Interrupt()
}
