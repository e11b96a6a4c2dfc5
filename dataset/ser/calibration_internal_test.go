package ser

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/internal/testfiles"
)

// The scan's nav axes from the dimension array, in the order navShape gives the scan,
// on the one real SER file of a 2-D scan (of EDS spectra, which Open refuses). Scales as
// RosettaSciIO reads them: y −1.8739 nm, x 1.8739 nm. Offsets from CalibrationOffset and
// CalibrationElement (dimension 2, y, has element 5): index 0 lies at offset − element ·
// delta, which puts the positions of the first element's tag (PositionX, PositionY, read
// here from the raw bytes) half a step inside: the calibration gives the pixels' edges.
// RosettaSciIO ignores a nav dimension's CalibrationElement (y offset −6.2808e-9, the
// far end of the scan) and leaves the offset in metres.
func TestNavAxesOfAScan(t *testing.T) {
	path := testfiles.File(t, "ser/16x16-diffraction_imagel_5x5x256x256_EDS_1.ser")
	f, size, err := dataset.OpenFile(path)
	require.NoError(t, err)
	defer f.Close()
	h, err := readHeader(f, size)
	require.NoError(t, err)
	raw := make([]byte, 2*int64(h.total)*h.offsetBytes)
	_, err = f.ReadAt(raw, h.offsetArray)
	require.NoError(t, err)
	offset := func(i int) int64 {
		if h.offsetBytes == 4 {
			return int64(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		return int64(binary.LittleEndian.Uint64(raw[8*i:]))
	}
	nav, navDims, _ := navShape(f, h, raw, offset)
	assert.Equal(t, []int{5, 5}, nav)
	axes := navAxes(h, navDims)
	require.Len(t, axes, 2)
	// Element 0's tag: TagTypeID u16, 2 bytes, Time u32, PositionX f64, PositionY f64.
	tag := make([]byte, 24)
	_, err = f.ReadAt(tag, offset(h.total))
	require.NoError(t, err)
	posX := math.Float64frombits(binary.LittleEndian.Uint64(tag[8:])) * 1e9
	posY := math.Float64frombits(binary.LittleEndian.Uint64(tag[16:])) * 1e9
	for i, want := range []struct {
		name         string
		scale, first float64
	}{{"y", -1.873900423719105, posY}, {"x", 1.873900423719105, posX}} {
		assert.Equal(t, want.name, axes[i].Name)
		assert.InDelta(t, want.scale, axes[i].Scale, 1e-12)
		assert.InDelta(t, want.first, axes[i].Offset+axes[i].Scale/2, 1e-9)
		assert.Equal(t, "nm", axes[i].Units)
	}
}
