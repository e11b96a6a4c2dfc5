package planner

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hybridPlan is 1 GPU worker and 2 CPU workers on 3 cores, 5 frames of 2x2 pixels.
func hybridPlan(t *testing.T) *Plan {
	t.Helper()
	gpus, err := ParseGPUInventory("1x16GiB")
	require.NoError(t, err)
	p, err := Make(DescribedTopology(3), gpus, Request{GPUs: 1, CUDA: true}, &Shape{NumFrames: 5, SigY: 2, SigX: 2})
	require.NoError(t, err)
	return p
}

func TestPlanJSON(t *testing.T) {
	got, err := json.Marshal(hybridPlan(t))
	require.NoError(t, err)
	assert.Equal(t, `{"cores_usable":3,"reserved_cores":[0],"workers":[`+
		`{"kind":"gpu","core":0,"cpu":0,"gpu":0},{"kind":"cpu","core":1,"cpu":1},{"kind":"cpu","core":2,"cpu":2}],`+
		`"partitions":[[0,2],[2,4],[4,5]]}`, string(got))

	p, err := Make(smtTopology(2, 2), nil, Request{CPUs: 3, Oversubscribe: true}, nil)
	require.NoError(t, err)
	got, err = json.Marshal(p)
	require.NoError(t, err)
	assert.Equal(t, `{"cores_usable":2,"workers":[`+
		`{"kind":"cpu","core":0,"cpu":0},{"kind":"cpu","core":1,"cpu":1},{"kind":"cpu","core":0,"cpu":2}],`+
		`"warnings":["oversubscribed: 3 CPU workers requested but only 2 usable cores are free (2 usable, 0 reserved for GPU workers)"]}`, string(got))
}

func TestPlanString(t *testing.T) {
	assert.Equal(t, `plan: 3 workers (1 GPU, 2 CPU) on 3 usable cores
  worker  kind  core  cpu  gpu
  0       gpu   0     0    0
  1       cpu   1     1    -
  2       cpu   2     2    -
reserved for GPU workers: cores 0
partitions: 3 of 1-2 frames (0.0-0.0 MiB each), frames [0, 5)
`, hybridPlan(t).String())

	p, err := Make(smtTopology(2, 2), nil, Request{CPUs: 3, Oversubscribe: true}, &Shape{NumFrames: 4096, SigY: 256, SigX: 256})
	require.NoError(t, err)
	assert.Equal(t, `plan: 3 workers (0 GPU, 3 CPU) on 2 usable cores
  worker  kind  core  cpu  gpu
  0       cpu   0     0    -
  1       cpu   1     1    -
  2       cpu   0     2    -
partitions: 3 of 1365-1366 frames (341.2-341.5 MiB each), frames [0, 4096)
warning: oversubscribed: 3 CPU workers requested but only 2 usable cores are free (2 usable, 0 reserved for GPU workers)
`, p.String())

	p, err = Make(DescribedTopology(1), nil, Request{}, nil)
	require.NoError(t, err)
	assert.Contains(t, p.String(), "partitions: none (no dataset)\n")

	gpus, err := ParseGPUInventory("2x141GB")
	require.NoError(t, err)
	p, err = Make(DescribedTopology(2), gpus, Request{GPUAuto: true, CUDA: true}, nil)
	require.NoError(t, err)
	assert.Equal(t, `plan: 2 workers (2 GPU, 0 CPU) on 2 usable cores
  worker  kind  core  cpu  gpu
  0       gpu   0     0    0
  1       gpu   1     1    1
reserved for GPU workers: cores 0, 1
partitions: none (no dataset)
warning: no CPU workers: the 2 GPU workers reserve all 2 usable cores
`, p.String())
	got, err := json.Marshal(p)
	require.NoError(t, err)
	assert.Equal(t, `{"cores_usable":2,"reserved_cores":[0,1],"workers":[`+
		`{"kind":"gpu","core":0,"cpu":0,"gpu":0},{"kind":"gpu","core":1,"cpu":1,"gpu":1}],`+
		`"warnings":["no CPU workers: the 2 GPU workers reserve all 2 usable cores"]}`, string(got))
}
