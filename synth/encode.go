package synth

import (
	"encoding/binary"
	"math"

	"github.com/stemdot/stemdot/dataset"
)

// encode stores counts in dst as dt in host byte order, clipping each count to the
// dtype's largest value (a saturated counter; counts is clipped in place); it returns
// the number of counts clipped.
func encode(dst []byte, counts []uint32, dt dataset.DType) (clipped int) {
	most := maxCount(dt)
	for j, c := range counts {
		if c > most {
			counts[j] = most
			clipped++
		}
	}
	ne := binary.NativeEndian
	switch dt {
	case dataset.Uint8, dataset.Int8:
		for j, c := range counts {
			dst[j] = uint8(c)
		}
	case dataset.Uint16, dataset.Int16:
		for j, c := range counts {
			ne.PutUint16(dst[2*j:], uint16(c))
		}
	case dataset.Uint32, dataset.Int32:
		for j, c := range counts {
			ne.PutUint32(dst[4*j:], c)
		}
	case dataset.Float32:
		for j, c := range counts {
			ne.PutUint32(dst[4*j:], math.Float32bits(float32(c)))
		}
	case dataset.Float64:
		for j, c := range counts {
			ne.PutUint64(dst[8*j:], math.Float64bits(float64(c)))
		}
	}
	return clipped
}

// maxCount is the largest count dt stores (all of uint32 for uint32 and floats).
func maxCount(dt dataset.DType) uint32 {
	switch dt {
	case dataset.Uint8:
		return math.MaxUint8
	case dataset.Int8:
		return math.MaxInt8
	case dataset.Uint16:
		return math.MaxUint16
	case dataset.Int16:
		return math.MaxInt16
	case dataset.Int32:
		return math.MaxInt32
	}
	return math.MaxUint32
}
