package h5filter

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/errs"
)

// TestBSLZ4RoundTrip encodes frames of 1-, 2- and 4-byte elements (sparse counts, a
// saturated pixel, random bytes that LZ4 cannot shrink, sizes with a tail of n mod 8
// elements and a last short block) and decodes them with DecodeBSLZ4 and with the HDF5
// pipeline; the check against DECTRIS's own decoder is in live/dectris's tests.
func TestBSLZ4RoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, elem := range []int{1, 2, 4} {
		for _, n := range []int{7, 8, 129, 4096, 4099, 192 * 192, 96*96 + 5} {
			for _, random := range []bool{false, true} {
				src := make([]byte, n*elem)
				for i := range src {
					if random || (i%elem == 0 && rng.IntN(10) == 0) {
						src[i] = byte(rng.Uint32())
					}
				}
				if n > 3 {
					for j := range elem {
						src[3*elem+j] = 0xff
					}
				}
				blob := EncodeBSLZ4(nil, src, elem)
				got := make([]byte, len(src))
				require.NoError(t, DecodeBSLZ4(got, blob, elem), "elem %d n %d", elem, n)
				require.Equal(t, src, got, "elem %d n %d random %v", elem, n, random)
				p := Pipeline{{ID: Bitshuffle, Values: []uint32{0, 0, uint32(elem), 0, 2}}}
				dec, err := p.Decode(blob, 0, len(src))
				require.NoError(t, err)
				require.Equal(t, src, dec)
			}
		}
	}
}

// TestBSLZ4ZeroHeader: a blob whose 12-byte header is zeroed (LiberTEM-live's simulator)
// decodes with the default block size to the frame's size; one of the wrong size, or
// cut short, is a format error.
func TestBSLZ4ZeroHeader(t *testing.T) {
	src := make([]byte, 2*5000)
	for i := range src {
		src[i] = byte(i % 7)
	}
	blob := EncodeBSLZ4(nil, src, 2)
	clear(blob[:12])
	got := make([]byte, len(src))
	require.NoError(t, DecodeBSLZ4(got, blob, 2))
	require.Equal(t, src, got)

	err := DecodeBSLZ4(make([]byte, len(src)+16), blob, 2)
	require.ErrorIs(t, err, errs.Format)
	err = DecodeBSLZ4(got, blob[:len(blob)-9], 2)
	require.ErrorIs(t, err, errs.Format)

	blob = EncodeBSLZ4(nil, src, 2) // a true header of another size than the frame's
	err = DecodeBSLZ4(make([]byte, len(src)-16), blob, 2)
	require.ErrorIs(t, err, errs.Format)
	require.ErrorContains(t, err, "header size 10000 is more than the chunk's 9984 bytes")
	err = DecodeBSLZ4(make([]byte, len(src)+16), blob, 2)
	require.ErrorContains(t, err, "the blob decodes to 10000 bytes, want 10016")
	require.Equal(t, uint64(len(src)), binary.BigEndian.Uint64(blob))
}
