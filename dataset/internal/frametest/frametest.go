// Package frametest holds the helpers that the tests of package dataset and of its
// format packages share: random pixel values of every dtype, their encoding in either
// byte order and the decoding of host-order frames, independent of the readers.
package frametest

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
)

// AllDTypes are the pixel dtypes that stemdot reads.
var AllDTypes = []dataset.DType{
	dataset.Uint8, dataset.Uint16, dataset.Uint32,
	dataset.Int8, dataset.Int16, dataset.Int32,
	dataset.Float32, dataset.Float64,
}

// RandomValues returns n random values representable in dt, as float64.
func RandomValues(rng *rand.Rand, dt dataset.DType, n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		switch dt {
		case dataset.Uint8:
			v[i] = float64(rng.UintN(1 << 8))
		case dataset.Uint16:
			v[i] = float64(rng.UintN(1 << 16))
		case dataset.Uint32:
			v[i] = float64(rng.Uint32())
		case dataset.Int8:
			v[i] = float64(int8(rng.Uint32()))
		case dataset.Int16:
			v[i] = float64(int16(rng.Uint32()))
		case dataset.Int32:
			v[i] = float64(int32(rng.Uint32()))
		case dataset.Float32:
			v[i] = float64(float32(rng.NormFloat64() * 1e3))
		case dataset.Float64:
			v[i] = rng.NormFloat64() * 1e6
		}
	}
	return v
}

// Encode encodes values as dt in the byte order bo.
func Encode(v []float64, dt dataset.DType, bo binary.ByteOrder) []byte {
	b := make([]byte, len(v)*dt.Size())
	for i, x := range v {
		p := b[i*dt.Size():]
		switch dt {
		case dataset.Uint8, dataset.Int8:
			p[0] = byte(int64(x))
		case dataset.Uint16, dataset.Int16:
			bo.PutUint16(p, uint16(int64(x)))
		case dataset.Uint32, dataset.Int32:
			bo.PutUint32(p, uint32(int64(x)))
		case dataset.Float32:
			bo.PutUint32(p, math.Float32bits(float32(x)))
		case dataset.Float64:
			bo.PutUint64(p, math.Float64bits(x))
		}
	}
	return b
}

// Decode decodes host-order bytes of dt into float64 values.
func Decode(b []byte, dt dataset.DType) []float64 {
	bo := binary.NativeEndian
	v := make([]float64, len(b)/dt.Size())
	for i := range v {
		p := b[i*dt.Size():]
		switch dt {
		case dataset.Uint8:
			v[i] = float64(p[0])
		case dataset.Int8:
			v[i] = float64(int8(p[0]))
		case dataset.Uint16:
			v[i] = float64(bo.Uint16(p))
		case dataset.Int16:
			v[i] = float64(int16(bo.Uint16(p)))
		case dataset.Uint32:
			v[i] = float64(bo.Uint32(p))
		case dataset.Int32:
			v[i] = float64(int32(bo.Uint32(p)))
		case dataset.Float32:
			v[i] = float64(math.Float32frombits(bo.Uint32(p)))
		case dataset.Float64:
			v[i] = math.Float64frombits(bo.Uint64(p))
		}
	}
	return v
}

// ReadAll reads every frame of d, in two ReadFrames calls to cover a split range.
func ReadAll(t *testing.T, d dataset.Dataset) []byte {
	t.Helper()
	n := d.NumFrames()
	buf := make([]byte, n*d.FrameBytes())
	mid := n / 2
	require.NoError(t, d.ReadFrames(0, mid, buf))
	require.NoError(t, d.ReadFrames(mid, n, buf[mid*d.FrameBytes():]))
	return buf
}

// RawOnly are options of raw files that other formats ignore with a note.
var RawOnly = dataset.Options{SigShape: []int{3, 5}, DType: dataset.Int8, BigEndian: true}

// CheckIgnored opens path with opt and wants exactly the notes want first, with and
// without a sync offset and a frame range (the views that carry notes).
func CheckIgnored(t *testing.T, path string, opt dataset.Options, want ...string) {
	t.Helper()
	for _, o := range []dataset.Options{opt, withSync(opt, 1), withFrames(opt, 1, 2)} {
		d, err := dataset.Open(path, o)
		require.NoError(t, err)
		notes := dataset.Notes(d)
		require.GreaterOrEqual(t, len(notes), len(want), "notes %q", notes)
		assert.Equal(t, want, notes[:len(want)])
		require.NoError(t, d.Close())
	}
}

func withSync(o dataset.Options, n int) dataset.Options { o.SyncOffset = n; return o }
func withFrames(o dataset.Options, first, count int) dataset.Options {
	o.Frames = dataset.FrameSpan{First: first, Count: count}
	return o
}
