package dataset_test

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/dataset/internal/frametest"
	"github.com/stemdot/stemdot/internal/testfiles"
)

// meanFrame returns the mean of d's frames, per pixel.
func meanFrame(t *testing.T, d dataset.Dataset) []float64 {
	v := frametest.Decode(frametest.ReadAll(t, d), d.DType())
	px := d.SigShape()[0] * d.SigShape()[1]
	mean := make([]float64, px)
	for i, x := range v {
		mean[i%px] += x / float64(d.NumFrames())
	}
	return mean
}

// The raw-packed 1-bit file and the U08 1-bit file taken 1.6 s earlier with the same
// settings show the same test pattern: the raw file's mean frame must match the other's
// in orientation (better than any flip or transposition) and in total counts (within 5
// standard deviations of Poisson counting statistics).
func TestR64OneBitMatchesU08(t *testing.T) {
	var means [2][]float64
	for k, name := range []string{"Single_9_Frame_CounterDepth_1_Rows_256RAW.mib", "Single_9_Frame_CounterDepth_1_Rows_256.mib"} {
		d, err := dataset.Open(testfiles.File(t, "mib/"+name), dataset.Options{})
		require.NoError(t, err)
		assert.Equal(t, [2]int{256, 256}, d.SigShape())
		assert.Equal(t, 9, d.NumFrames())
		assert.Equal(t, dataset.Uint8, d.DType())
		means[k] = meanFrame(t, d)
		require.NoError(t, d.Close())
	}
	raw, u08 := means[0], means[1]
	overlap := func(at func(y, x int) int) float64 {
		var s float64
		for y := range 256 {
			for x := range 256 {
				s += raw[y*256+x] * u08[at(y, x)]
			}
		}
		return s
	}
	same := overlap(func(y, x int) int { return y*256 + x })
	for name, at := range map[string]func(y, x int) int{
		"flip y":                   func(y, x int) int { return (255-y)*256 + x },
		"flip x":                   func(y, x int) int { return y*256 + 255 - x },
		"rot 180":                  func(y, x int) int { return (255-y)*256 + 255 - x },
		"transpose":                func(y, x int) int { return x*256 + y },
		"8-px word order reversed": func(y, x int) int { return y*256 + (x/8)*8 + 7 - x%8 },
	} {
		assert.Greater(t, same, 1.5*overlap(at), "stored orientation beats %s", name)
	}
	var sRaw, sU08 float64
	for i := range raw {
		sRaw += raw[i] * 9
		sU08 += u08[i] * 9
	}
	require.Greater(t, sRaw, 1e4, "counts, not an empty frame")
	assert.Less(t, math.Abs(sRaw-sU08), 5*math.Sqrt(sRaw+sU08), "total counts %g vs %g", sRaw, sU08)
}

// encodeRaw packs pixel values (row-major, n per segment) the way Merlin stores raw
// counters, written from LiberTEM's encode_r1/encode_r6/encode_r12: 1 bit: in each
// 8-byte word, byte 7-b holds pixels 8b..8b+7 (bit k = pixel 8b+k); 6 bits: bytes in
// reversed runs of 8; 12 bits: big-endian pairs in reversed runs of 4.
func encodeRaw(px []uint32, bits int) []byte {
	var out []byte
	switch bits {
	case 1:
		out = make([]byte, len(px)/8)
		for s := 0; s < len(px)/64; s++ {
			for b := range 8 {
				var by byte
				for k := range 8 {
					by |= byte(px[64*s+8*b+k]&1) << k
				}
				out[8*s+7-b] = by
			}
		}
	case 6:
		out = make([]byte, len(px))
		for i := range px {
			out[i] = byte(px[(i/8+1)*8-i%8-1])
		}
	case 12:
		out = make([]byte, 2*len(px))
		for i := range px {
			v := px[(i/4+1)*4-i%4-1]
			out[2*i], out[2*i+1] = byte(v>>8), byte(v)
		}
	}
	return out
}

// rawFrame stores one frame (side·k × side·k values) as raw data: a single chip row by
// row, or a 2×2 quad as raw rows of chips 4, 3, 2, 1 (chips 3 and 4 the bottom half,
// turned by 180°). 24 bits are two 12-bit frames, the high bits first.
func rawFrame(frame []uint32, h, w int, quad bool, bits int) []byte {
	if bits == 24 {
		hi, lo := make([]uint32, len(frame)), make([]uint32, len(frame))
		for i, v := range frame {
			hi[i], lo[i] = v>>12, v&0xFFF
		}
		return append(rawFrame(hi, h, w, quad, 12), rawFrame(lo, h, w, quad, 12)...)
	}
	var out []byte
	if !quad {
		for y := range h {
			out = append(out, encodeRaw(frame[y*w:(y+1)*w], bits)...)
		}
		return out
	}
	half := h / 2
	for r := range half {
		chip := func(c int) []uint32 {
			seg := make([]uint32, half)
			for i := range seg {
				switch c {
				case 1, 2:
					seg[i] = frame[r*w+(c-1)*half+i]
				default:
					seg[i] = frame[(h-1-r)*w+(c-3)*half+half-1-i]
				}
			}
			return seg
		}
		for c := 4; c >= 1; c-- {
			out = append(out, encodeRaw(chip(c), bits)...)
		}
	}
	return out
}

// TestR64Layouts re-encodes real U08/U16/U32 frames (single chip and quad) as raw-packed
// R64 files of every counter depth and checks that they decode to the same frames.
func TestR64Layouts(t *testing.T) {
	for _, c := range []struct {
		src  string
		bits int
		mask uint32
	}{
		{"Single_9_Frame_CounterDepth_1_Rows_256.mib", 1, 1},
		{"Single_9_Frame_CounterDepth_6_Rows_256.mib", 6, 0x3F},
		{"Single_9_Frame_CounterDepth_12_Rows_256.mib", 12, 0xFFF},
		{"Single_9_Frame_CounterDepth_24_Rows_256.mib", 24, 0xFFFFFF},
		{"Quad_9_Frame_CounterDepth_6_Rows_256.mib", 1, 1},
		{"Quad_9_Frame_CounterDepth_6_Rows_256.mib", 6, 0x3F},
		{"Quad_9_Frame_CounterDepth_12_Rows_256.mib", 12, 0xFFF},
		{"Quad_9_Frame_CounterDepth_12_Rows_256.mib", 24, 0xFFFFFF},
	} {
		t.Run(fmt.Sprintf("%s as R64 %d-bit", c.src, c.bits), func(t *testing.T) {
			src := testfiles.DecodeMIB(t, testfiles.File(t, "mib/"+c.src))
			quad := src.SigY == 512
			real, err := os.ReadFile(testfiles.File(t, "mib/"+c.src))
			require.NoError(t, err)
			hdrBytes := 384
			if quad {
				hdrBytes = 768
			}
			text, _, _ := bytes.Cut(real[:hdrBytes], []byte{0})
			fields := strings.Split(strings.TrimRight(string(text), ","), ",")
			fields[6] = "R64"
			if quad {
				fields[4], fields[5] = "1024", "0256"
			}
			fields[len(fields)-1] = fmt.Sprint(c.bits)
			var file []byte
			want := make([]float64, 0, len(src.Frames)*len(src.Frames[0]))
			for i, fr := range src.Frames {
				fields[1] = fmt.Sprintf("%06d", i+1)
				h := []byte(strings.Join(fields, ",") + ",")
				file = append(file, append(h, make([]byte, hdrBytes-len(h))...)...)
				vals := make([]uint32, len(fr))
				for p, v := range fr {
					vals[p] = v & c.mask
					want = append(want, float64(vals[p]))
				}
				file = append(file, rawFrame(vals, src.SigY, src.SigX, quad, c.bits)...)
			}
			path := filepath.Join(t.TempDir(), "r64.mib")
			require.NoError(t, os.WriteFile(path, file, 0o644))
			d, err := dataset.Open(path, dataset.Options{})
			require.NoError(t, err)
			defer d.Close()
			assert.Equal(t, [2]int{src.SigY, src.SigX}, d.SigShape())
			assert.Equal(t, map[int]dataset.DType{1: dataset.Uint8, 6: dataset.Uint8, 12: dataset.Uint16, 24: dataset.Uint32}[c.bits], d.DType())
			got := frametest.Decode(frametest.ReadAll(t, d), d.DType())
			require.Equal(t, want, got)
			var nonzero int
			for _, v := range want {
				if v != 0 {
					nonzero++
				}
			}
			require.Greater(t, nonzero, 1000, "a pattern, not zeros")
			_, ok, err := d.(dataset.Mapper).MapFrames(0, 1)
			require.NoError(t, err)
			assert.False(t, ok, "raw-packed frames need decoding: not mapped")
		})
	}
	path := filepath.Join(t.TempDir(), "bad.mib")
	require.NoError(t, os.WriteFile(path, append([]byte("MQ1,000001,00384,02,0256,0256,R64,   2x1,01,x,6,"), make([]byte, 384+65536)...), 0o644))
	_, err := dataset.Open(path, dataset.Options{})
	assert.ErrorContains(t, err, `raw-packed (R64) MIB with 2 chips in layout "   2x1" is not supported`)
}

// A 24-bit raw frame whose header gives twice the frame's width (LiberTEM's reading):
// the next frame's magic tells the frame size.
func TestR64TwentyFourBitDoubleWidth(t *testing.T) {
	src := testfiles.DecodeMIB(t, testfiles.File(t, "mib/Single_9_Frame_CounterDepth_24_Rows_256.mib"))
	var file []byte
	var want []float64
	for i, fr := range src.Frames[:3] {
		h := []byte(fmt.Sprintf("MQ1,%06d,00384,01,0512,0256,R64,   1x1,01,x,24,", i+1))
		file = append(file, append(h, make([]byte, 384-len(h))...)...)
		file = append(file, rawFrame(fr, 256, 256, false, 24)...)
		for _, v := range fr {
			want = append(want, float64(v))
		}
	}
	path := filepath.Join(t.TempDir(), "r24.mib")
	require.NoError(t, os.WriteFile(path, file, 0o644))
	d, err := dataset.Open(path, dataset.Options{})
	require.NoError(t, err)
	defer d.Close()
	assert.Equal(t, [2]int{256, 256}, d.SigShape())
	assert.Equal(t, want, frametest.Decode(frametest.ReadAll(t, d), d.DType()))
}
