// Package blo reads NanoMEGAS block files for package dataset: importing it registers
// the format "blo" (extension .blo, or a file starting "IMGBLO").
//
// NanoMEGAS block files (.blo, ASTAR) are read as LiberTEM (libertem.io.dataset.blo)
// and RosettaSciIO (rsciio.blockfile) read them: a little-endian header at byte 0,
//
//	0 "IMGBLO"  6 MAGIC u16 (258; 259 in newer files)  8 Data_offset_1 u32 (virtual
//	bright field)  12 Data_offset_2 u32 (first frame)  16 u32 flags  20 DP_SZ u16 (frame
//	side, pixels)  22 DP_rotation u16  24 NX u16 (scan columns)  26 NY u16 (scan rows)
//	28 Scan_rotation u16  30 SX f64 (scan step along x, nm)  38 SY f64 (along y, nm)
//	46 Beam_energy u32 (V)  50 SDP u16 (100 × the frame's pixels per cm)  52
//	Camera_length u32 (10⁴ × m) ...
//
// then, in MAGIC 259 files, text lines from byte 240 up to Data_offset_1 (the 16-bit
// variant says "Blo Bit Depth: 16 bits"), an NY×NX uint8 virtual bright field at
// Data_offset_1, and from Data_offset_2 on NY·NX records of a 6-byte prefix (AA 55, then
// the frame number as a little-endian u32) and DP_SZ×DP_SZ pixels, uint8 (uint16
// little-endian in the 16-bit variant). The nav shape is (NY, NX).
// SX and SY calibrate the nav axes (nm), SDP the signal axes (100/SDP cm a pixel, the
// scale of the pattern as ASTAR shows it), Camera_length the camera length, as
// RosettaSciIO reads them (0: not stated).
// Frames beyond NY·NX, or missing at the end, are reconciled as for every format; every
// record's AA 55 is checked when it is read.
package blo

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/stemdot/stemdot/dataset"
)

func init() {
	dataset.Register(dataset.Format{Name: "blo", Extensions: []string{".blo"}, Magic: []string{"IMGBLO"}, Open: open,
		Describe: "blo (NanoMEGAS block file: .blo)"})
}

// bloMagic starts every frame record.
var bloMagic = []byte{0xAA, 0x55}

// bloHeaderBytes is the part of the file parseBLOHeader needs: the fixed header and the
// text block of MAGIC 259 files.
const bloHeaderBytes = 4096

// bloHeader is the parsed header of a block file.
type bloHeader struct {
	dataOffset1, dataOffset2 int64
	side                     int // DP_SZ
	nx, ny                   int
	dt                       dataset.DType
	cal                      dataset.Calibration
}

// parseBLOHeader parses the start of a block file (b holds its first bytes, up to
// bloHeaderBytes).
func parseBLOHeader(b []byte) (bloHeader, error) {
	if len(b) < 28 || !bytes.Equal(b[:6], []byte("IMGBLO")) {
		return bloHeader{}, fmt.Errorf("not a NanoMEGAS block file: it does not start with \"IMGBLO\" and a 28-byte header")
	}
	le := binary.LittleEndian
	h := bloHeader{
		dataOffset1: int64(le.Uint32(b[8:])),
		dataOffset2: int64(le.Uint32(b[12:])),
		side:        int(le.Uint16(b[20:])),
		nx:          int(le.Uint16(b[24:])),
		ny:          int(le.Uint16(b[26:])),
		dt:          dataset.Uint8,
	}
	if len(b) >= 56 {
		f64 := func(at int) float64 { return math.Float64frombits(le.Uint64(b[at:])) }
		h.cal.Nav = []dataset.Axis{dataset.NewAxis("y", f64(38), 0, "nm"), dataset.NewAxis("x", f64(30), 0, "nm")}
		if sdp := le.Uint16(b[50:]); sdp > 0 {
			h.cal.Sig = []dataset.Axis{dataset.NewAxis("ky", 100/float64(sdp), 0, "cm"), dataset.NewAxis("kx", 100/float64(sdp), 0, "cm")}
		}
		h.cal.CameraLength = float64(le.Uint32(b[52:])) * 1e-4
	}
	magic := le.Uint16(b[6:])
	if magic != 258 && magic != 259 {
		return bloHeader{}, fmt.Errorf("block file header: unknown MAGIC %d (want 258 or 259)", magic)
	}
	if h.side == 0 {
		return bloHeader{}, errors.New("block file header: frame size DP_SZ is 0")
	}
	if magic == 259 && h.dataOffset1 > 240 && len(b) > 240 {
		text := b[240:min(int64(len(b)), h.dataOffset1)]
		if i := bytes.IndexByte(text, 0); i >= 0 {
			text = text[:i]
		}
		for line := range strings.Lines(string(text)) {
			k, v, ok := strings.Cut(line, ":")
			if !ok || !strings.EqualFold(strings.TrimSpace(k), "Blo Bit Depth") {
				continue
			}
			bits, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " bits"))
			switch {
			case err == nil && bits == 8:
			case err == nil && bits == 16:
				h.dt = dataset.Uint16
			default:
				return bloHeader{}, fmt.Errorf("block file header: bit depth %q is not 8 or 16 bits", strings.TrimSpace(v))
			}
		}
	}
	return h, nil
}

// open opens a NanoMEGAS block file. Its nav shape is (NY, NX) from the header unless
// opt.NavShape is given.
func open(path string, opt dataset.Options) (dataset.Dataset, error) {
	f, size, err := dataset.OpenFile(path)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (dataset.Dataset, error) {
		f.Close()
		return nil, fmt.Errorf("dataset: %s: %w", path, err)
	}
	head, err := dataset.ReadHeader(f, size, bloHeaderBytes)
	if err != nil {
		return fail(err)
	}
	h, err := parseBLOHeader(head)
	if err != nil {
		return fail(err)
	}
	sig := [2]int{h.side, h.side}
	fb, err := dataset.CheckSig(sig, h.dt)
	if err != nil {
		return fail(err)
	}
	stride := int64(len(bloMagic)+4) + int64(fb)
	if h.dataOffset2 < 28 || h.dataOffset2 > size {
		return fail(fmt.Errorf("block file header: first frame offset %d is outside the file of %d bytes", h.dataOffset2, size))
	}
	data := size - h.dataOffset2
	var fileNav []int
	source := ""
	if h.nx > 0 && h.ny > 0 {
		fileNav = []int{h.ny, h.nx}
		source = fmt.Sprintf(" from the header (NY=%d, NX=%d)", h.ny, h.nx)
	}
	fl := dataset.Flat{Format: "blo", Path: path, File: f, Size: size, Offset: h.dataOffset2, Header: stride - int64(fb),
		Sig: sig, DType: h.dt, Magic: bloMagic}
	return dataset.OpenFlat(fl, opt, fileNav, source, dataset.FileFrames{Whole: int(data / stride), CutBytes: data % stride, RecordBytes: stride,
		Calibration: h.cal})
}
