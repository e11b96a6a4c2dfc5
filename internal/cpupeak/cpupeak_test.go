package cpupeak

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMeasure(t *testing.T) {
	p, err := Measure()
	if errors.Is(err, ErrUnsupported) {
		t.Skip(err)
	}
	require.NoError(t, err)
	t.Log(p)
	assert.Greater(t, p.ClockHz, 0.5e9, "clock")
	assert.Less(t, p.ClockHz, 7e9, "clock")
	// 1 or 2 FMA units of 8 or 16 float32 lanes.
	assert.Contains(t, []int{8, 16, 32}, p.LanesPerCycle)
	assert.InEpsilon(t, float64(p.LanesPerCycle), p.MeasuredLanes, 0.5)
	assert.Equal(t, float64(p.LanesPerCycle)*2*p.ClockHz, p.FLOPS())
}
