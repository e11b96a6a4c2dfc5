package main

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"

	"github.com/stemdot/stemdot/internal/h5filter"
	"github.com/stemdot/stemdot/internal/npy"
)

// The synthetic scan behind every input: distinct frames of a 32×32 grid of scan
// positions, as an electron-counting detector sees a thin sample. Each frame is
// Poisson counts: a background of bgCounts a pixel, and the bright-field disk (radius
// side/8) of diskCounts a pixel whose centre moves by up to ±2 px over the scan (descan)
// and whose intensity varies by ±40% (the sample's contrast).
const (
	gridSide   = 32
	distinct   = gridSide * gridSide
	bgCounts   = 0.05
	diskCounts = 20
)

// countingFrame returns the counts of scan position k of a side×side detector
// (deterministic in k).
func countingFrame(k, side int) []uint16 {
	rng := rand.New(rand.NewPCG(uint64(k), uint64(side)))
	y, x := float64(k/gridSide), float64(k%gridSide)
	a, b := 2*math.Pi*y/gridSide, 2*math.Pi*x/gridSide
	cy, cx := float64(side)/2+2*math.Sin(b), float64(side)/2+2*math.Cos(a)
	r := float64(side) / 8
	lam := diskCounts * (1 + 0.4*math.Sin(a)*math.Cos(2*b))
	out := make([]uint16, side*side)
	for i := range out {
		dy, dx := float64(i/side)+0.5-cy, float64(i%side)+0.5-cx
		l := bgCounts
		if dy*dy+dx*dx <= r*r {
			l += lam
		}
		out[i] = poisson(rng, l)
	}
	return out
}

// poisson draws a Poisson count of mean lam (Knuth's product of uniforms: lam ≤ 30).
func poisson(rng *rand.Rand, lam float64) uint16 {
	limit, p := math.Exp(-lam), rng.Float64()
	k := uint16(0)
	for p > limit {
		p *= rng.Float64()
		k++
	}
	return k
}

// bin2 sums 2×2 pixels of a side×side frame (ARINA's merge2x2).
func bin2(f []uint16, side int) []uint16 {
	h := side / 2
	out := make([]uint16, h*h)
	for y := range side {
		for x := range side {
			out[(y/2)*h+x/2] += f[y*side+x]
		}
	}
	return out
}

// input is one generated file and its masks.
type input struct {
	Name  string `json:"name"`
	File  string `json:"file"`
	Masks string `json:"masks"`
	// Frames is the number of distinct frames in the file; a series repeats them.
	Frames int    `json:"distinct_frames"`
	Sig    [2]int `json:"sig_shape"`
	DType  string `json:"dtype"`
	// FrameBytes is a frame's size on the wire: the bitshuffle-LZ4 blob (mean, the replay's
	// compression) for DECTRIS, the MPX message (prefix, frame header, raw pixels) for
	// Merlin; Ratio is the uncompressed frame's size over it.
	FrameBytes float64 `json:"wire_bytes_per_frame"`
	Ratio      float64 `json:"compression_ratio,omitempty"`
}

// version names the generator: inputs of another version are written again.
const version = "1"

// makeInputs writes (or reuses) the three inputs into dir: ARINA-like 192×192 and
// 96×96 (binned) uint16 frames as NPY, and a Merlin 256×256 12-bit raw (R64) MIB file
// with its .hdr, each with 4 masks as a (4, sig_y, sig_x) float32 NPY.
func makeInputs(dir string) (map[string]*input, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	in := map[string]*input{
		"dectris192": {Name: "dectris192", File: filepath.Join(dir, "arina192.npy"), Masks: filepath.Join(dir, "masks192.npy"), Sig: [2]int{192, 192}},
		"dectris96":  {Name: "dectris96", File: filepath.Join(dir, "arina96.npy"), Masks: filepath.Join(dir, "masks96.npy"), Sig: [2]int{96, 96}},
		"merlin":     {Name: "merlin", File: filepath.Join(dir, "merlin256.mib"), Masks: filepath.Join(dir, "masks256.npy"), Sig: [2]int{256, 256}},
	}
	stamp := filepath.Join(dir, "VERSION")
	fresh := false
	if b, err := os.ReadFile(stamp); err == nil && strings.TrimSpace(string(b)) == version {
		fresh = true
	}
	var f192, f96 [][]uint16
	for k := range distinct {
		f := countingFrame(k, 192)
		f192 = append(f192, f)
		f96 = append(f96, bin2(f, 192))
	}
	for _, c := range []struct {
		in     *input
		frames [][]uint16
	}{{in["dectris192"], f192}, {in["dectris96"], f96}} {
		c.in.Frames, c.in.DType = distinct, "uint16"
		var blob []byte
		var total int
		raw := make([]byte, 2*c.in.Sig[0]*c.in.Sig[1])
		for _, f := range c.frames {
			for i, v := range f {
				binary.LittleEndian.PutUint16(raw[2*i:], v)
			}
			blob = h5filter.EncodeBSLZ4(blob[:0], raw, 2)
			total += len(blob)
		}
		c.in.FrameBytes = float64(total) / float64(len(c.frames))
		c.in.Ratio = float64(len(raw)) / c.in.FrameBytes
		if !fresh {
			if err := writeFramesNPY(c.in.File, c.frames, c.in.Sig); err != nil {
				return nil, err
			}
		}
	}
	m := in["merlin"]
	m.Frames, m.DType = distinct/4, "uint16 (12-bit)"
	m.FrameBytes = float64(15 + 384 + 256*256*2)
	m.Ratio = float64(256*256*2) / m.FrameBytes
	if !fresh {
		if err := writeR64(m.File, m.Frames); err != nil {
			return nil, err
		}
	}
	for _, c := range in {
		if !fresh {
			if err := writeMasks(c.Masks, c.Sig); err != nil {
				return nil, err
			}
		}
	}
	if !fresh {
		if err := os.WriteFile(stamp, []byte(version+"\n"), 0o644); err != nil {
			return nil, err
		}
	}
	return in, nil
}

// writeFramesNPY writes frames of sig as a (n, sig_y, sig_x) uint16 NPY file.
func writeFramesNPY(path string, frames [][]uint16, sig [2]int) error {
	h, err := npy.Header("<u2", []int{len(frames), sig[0], sig[1]})
	if err != nil {
		return err
	}
	b := h
	for _, f := range frames {
		for _, v := range f {
			b = binary.LittleEndian.AppendUint16(b, v)
		}
	}
	return os.WriteFile(path, b, 0o644)
}

// writeMasks writes 4 virtual detectors for frames of sig, around the frame's centre,
// as a (4, sig_y, sig_x) float32 NPY: the bright-field disk (r ≤ side/8 + 3 px), an
// annular dark field (side/8 + 3 < r ≤ side/4), the high-angle ring beyond, and the
// disk's upper half (a differential phase contrast half).
func writeMasks(path string, sig [2]int) error {
	h, err := npy.Header("<f4", []int{4, sig[0], sig[1]})
	if err != nil {
		return err
	}
	side := float64(sig[1])
	rBF, rADF := side/8+3, side/4
	b := h
	for m := range 4 {
		for y := range sig[0] {
			for x := range sig[1] {
				dy, dx := float64(y)+0.5-float64(sig[0])/2, float64(x)+0.5-side/2
				r := math.Hypot(dy, dx)
				in := [4]bool{r <= rBF, r > rBF && r <= rADF, r > rADF, r <= rBF && dy < 0}[m]
				v := float32(0)
				if in {
					v = 1
				}
				b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
			}
		}
	}
	return os.WriteFile(path, b, 0o644)
}

// writeR64 writes n frames of 256×256 counts (countingFrame, 12 bits) as Merlin stores a
// single chip's raw frames (R64, counter depth 12): a 384-byte frame header as the
// Merlin software writes it, then the pixels in 64-bit words written most significant
// byte first, 4 pixels a word (dataset/mib/mibraw.go); and the acquisition header
// (.hdr) beside it.
func writeR64(path string, n int) error {
	const side, hdrBytes = 256, 384
	var b []byte
	for k := range n {
		h := fmt.Appendf(nil, "MQ1,%06d,%05d,01,%04d,%04d,R64,   1x1,01,2026-12-07 12:00:00.000000,0.000100,0,0,0,"+
			"2.000000E+0,5.110000E+2,0.000000E+0,0.000000E+0,0.000000E+0,0.000000E+0,0.000000E+0,0.000000E+0,3RX,"+
			"011,511,000,000,000,000,000,000,175,010,200,125,100,100,093,100,099,030,128,004,255,140,128,191,179,511,511,"+
			"MQ1A,2026-12-07T12:00:00.000000000Z,100000ns,12,", k+1, hdrBytes, side, side)
		b = append(b, h...)
		b = append(b, make([]byte, hdrBytes-len(h))...)
		f := countingFrame(k, side)
		for i := 0; i < len(f); i += 4 {
			for j := 3; j >= 0; j-- {
				b = binary.BigEndian.AppendUint16(b, min(f[i+j], 4095))
			}
		}
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return err
	}
	hdr := "HDR,\t\r\n" +
		"Time and Date Stamp (day, mnth, yr, hr, min, s):\t07/12/2026 12:00:00\r\n" +
		"Chip ID:\tW000_A0, - , - , - \r\n" +
		"Chip Type (Medipix 3.0, Medipix 3.1, Medipix 3RX):\tMedipix 3RX\r\n" +
		"Assembly Size (NX1, 2X2):\t   1x1\r\n" +
		"Chip Mode  (SPM, CSM, CM, CSCM):\tSPM\r\n" +
		"Counter Depth (number):\t12\r\n" +
		"Gain:\tSLGM\r\n" +
		"Active Counters:\tAlternating\r\n" +
		"Acquisition Type (Normal, Th_scan, Config):\tNormal\r\n" +
		fmt.Sprintf("Frames in Acquisition (Number):\t%d\r\n", n) +
		"Frames per Trigger (Number):\t1\r\n" +
		"Trigger Start (Positive, Negative, Internal):\tInternal\r\n" +
		"Trigger Stop (Positive, Negative, Internal):\tInternal\r\n" +
		"Readout System:\tMerlin Quad\r\n" +
		"Software Version:\t0.77\r\n" +
		"End\t"
	hdr += strings.Repeat(" ", 2048-len(hdr))
	return os.WriteFile(strings.TrimSuffix(path, ".mib")+".hdr", []byte(hdr), 0o644)
}
