package stemdot_test

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot"
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/masks"
	"github.com/stemdot/stemdot/planner"
)

// TestPlanSparseDataset: the plan of a sparse dataset says which path runs: under gpus
// auto, CPU workers only (their gather reads the events, GPU workers would read the
// frames densified), with a warning saying so; explicit GPU workers with a warning; a
// dense dataset of the same shape gets neither. Apply runs the gather (Stats.Gather)
// and gives the product of the densified frames.
func TestPlanSparseDataset(t *testing.T) {
	sig := [2]int{8, 8}
	var sf dataset.SparseFrames
	sf.Reset()
	want := make([]float64, 0, 16)
	for f := range 16 {
		var sum float64
		for k := range f % 4 {
			p := (f*7 + k*13) % 64
			sf.Indices = append(sf.Indices, int32(p))
			sf.Data = binary.NativeEndian.AppendUint32(sf.Data, uint32(f+k))
			sum += float64(f+k) * float64(p) // the mask's weight is the pixel index
		}
		sf.Indptr = append(sf.Indptr, len(sf.Indices))
		want = append(want, sum)
	}
	ds, err := dataset.FromSparse(sf, []int{4, 4}, sig, dataset.Uint32)
	require.NoError(t, err)
	dense, err := dataset.FromMemory(make([]byte, 16*64*4), []int{4, 4}, sig, dataset.Uint32)
	require.NoError(t, err)
	w := make([]float32, 64)
	for i := range w {
		w[i] = float32(i)
	}
	stack, err := masks.New(1, 8, 8, w, nil)
	require.NoError(t, err)

	hasGPU := func(p *planner.Plan) bool {
		for _, w := range p.Workers {
			if w.Kind == planner.GPU {
				return true
			}
		}
		return false
	}
	for _, c := range []struct {
		gpus    string
		ds      dataset.Dataset
		gpu     bool
		warning string
	}{
		{"auto", ds, false, "gpus auto: the dataset's frames are sparse: CPU workers apply the masks as a gather over their events"},
		{"1", ds, true, "its GPU workers read every frame densified (8×8 pixels)"},
		{"1", dense, true, ""},
	} {
		pl, err := stemdot.Plan{Cores: 4, GPUInventory: "1x141GB", GPUs: c.gpus}.Planner()
		require.NoError(t, err)
		p, err := pl.Plan(c.ds, stack)
		require.NoError(t, err)
		assert.Equal(t, c.gpu, hasGPU(p), "gpus %s", c.gpus)
		all := strings.Join(p.Warnings, "\n")
		if c.warning == "" {
			assert.NotContains(t, all, "sparse", "gpus %s", c.gpus)
		} else {
			assert.Contains(t, all, c.warning, "gpus %s", c.gpus)
		}
	}

	res, err := stemdot.Apply(t.Context(), ds, stack, stemdot.Plan{CPUs: "2"}, stemdot.ApplyOptions{})
	require.NoError(t, err)
	assert.True(t, res.Stats.Gather)
	require.Len(t, res.F32, 16)
	for i, v := range want {
		assert.Equal(t, float32(v), res.F32[i], "frame %d", i)
	}
}
