package affinity

import (
	"math/bits"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDiscoverGPUs(t *testing.T) {
	gpus, err := DiscoverGPUs()
	require.NoError(t, err)
	if _, statErr := os.Stat("/dev/nvidiactl"); statErr != nil {
		// No NVIDIA driver on this machine: discovery is empty, not an error.
		assert.Empty(t, gpus)
		return
	}
	for i, g := range gpus {
		assert.Equal(t, i, g.Index)
		assert.NotEmpty(t, g.Name)
		assert.Regexp(t, `^GPU-`, g.UUID)
		assert.Positive(t, g.TotalBytes)
		assert.LessOrEqual(t, g.FreeBytes, g.TotalBytes)
		assert.IsIncreasing(t, g.CPUAffinity)
	}
}

func TestCPUSetIDs(t *testing.T) {
	w := bits.UintSize
	tests := []struct {
		name string
		set  []uint
		want []int
	}{
		{"empty", []uint{0, 0}, nil},
		{"first word", []uint{0b1011}, []int{0, 1, 3}},
		{"second word", []uint{0, 1 | 1<<5}, []int{w, w + 5}},
		{"top bit", []uint{1 << (bits.UintSize - 1)}, []int{w - 1}},
		{"both words", []uint{1 << 2, 1 << 1, 0}, []int{2, w + 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, cpuSetIDs(tc.set))
		})
	}
}
