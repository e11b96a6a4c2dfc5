package engine

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/masks"
	"github.com/stemdot/stemdot/planner"
)

// memDataset is an in-memory dataset.Dataset (host byte order) for tests.
type memDataset struct {
	nav  []int
	sig  [2]int
	dt   dataset.DType
	data []byte
	// readErr, when set, is returned by ReadFrames for ranges including frame errFrame.
	readErr  error
	errFrame int
}

func (d *memDataset) Format() string          { return "memory" }
func (d *memDataset) Path() string            { return "" }
func (d *memDataset) NavShape() []int         { return d.nav }
func (d *memDataset) SigShape() [2]int        { return d.sig }
func (d *memDataset) DType() dataset.DType    { return d.dt }
func (d *memDataset) FrameBytes() int         { return d.sig[0] * d.sig[1] * d.dt.Size() }
func (d *memDataset) Close() error            { return nil }
func (d *memDataset) NumFrames() int          { return len(d.data) / d.FrameBytes() }
func (d *memDataset) frameRange(s, e int) int { return d.FrameBytes() * (e - s) }

func (d *memDataset) ReadFrames(start, end int, dst []byte) error {
	if start < 0 || end > d.NumFrames() || start > end {
		return fmt.Errorf("memory dataset: frames [%d, %d) outside [0, %d)", start, end, d.NumFrames())
	}
	if d.readErr != nil && start <= d.errFrame && d.errFrame < end {
		return fmt.Errorf("memory dataset: frames [%d, %d): %w", start, end, d.readErr)
	}
	if len(dst) < d.frameRange(start, end) {
		return fmt.Errorf("memory dataset: dst has %d bytes, want %d", len(dst), d.frameRange(start, end))
	}
	copy(dst, d.data[start*d.FrameBytes():end*d.FrameBytes()])
	return nil
}

// viewDataset adds dataset.Viewer to memDataset; its frames start at data (which a
// test may misalign).
type viewDataset struct{ *memDataset }

func (d viewDataset) ViewFrames(start, end int) ([]byte, error) {
	if start < 0 || end > d.NumFrames() || start > end {
		return nil, fmt.Errorf("frames [%d, %d) outside [0, %d)", start, end, d.NumFrames())
	}
	return d.data[start*d.FrameBytes() : end*d.FrameBytes()], nil
}

// randomDataset returns nFrames random frames of sig shape sig in dtype dt, covering
// the dtype's range (signed types include negative values).
func randomDataset(rng *rand.Rand, dt dataset.DType, nav []int, sig [2]int) *memDataset {
	n := 1
	for _, v := range nav {
		n *= v
	}
	pixels := n * sig[0] * sig[1]
	size := dt.Size()
	data := make([]byte, pixels*size)
	e := binary.NativeEndian
	for i := range pixels {
		b := data[i*size:]
		switch dt {
		case dataset.Uint8, dataset.Int8:
			b[0] = byte(rng.Uint32())
		case dataset.Uint16, dataset.Int16:
			e.PutUint16(b, uint16(rng.Uint32()))
		case dataset.Uint32, dataset.Int32:
			e.PutUint32(b, rng.Uint32())
		case dataset.Float32:
			e.PutUint32(b, math.Float32bits(float32(rng.NormFloat64()*1000)))
		case dataset.Float64:
			e.PutUint64(b, math.Float64bits(rng.NormFloat64()*1000))
		}
	}
	return &memDataset{nav: nav, sig: sig, dt: dt, data: data}
}

// pixel decodes pixel i of data (host order) as float64, independently of the engine.
func pixel(data []byte, dt dataset.DType, i int) float64 {
	e := binary.NativeEndian
	b := data[i*dt.Size():]
	switch dt {
	case dataset.Uint8:
		return float64(b[0])
	case dataset.Int8:
		return float64(int8(b[0]))
	case dataset.Uint16:
		return float64(e.Uint16(b))
	case dataset.Int16:
		return float64(int16(e.Uint16(b)))
	case dataset.Uint32:
		return float64(e.Uint32(b))
	case dataset.Int32:
		return float64(int32(e.Uint32(b)))
	case dataset.Float32:
		return float64(math.Float32frombits(e.Uint32(b)))
	case dataset.Float64:
		return math.Float64frombits(e.Uint64(b))
	}
	panic("bad dtype")
}

// setFloat sets pixel i of the whole scan (frame-major) of a float32 or float64 dataset to v.
func (d *memDataset) setFloat(i int, v float64) {
	b := d.data[i*d.dt.Size():]
	if d.dt == dataset.Float32 {
		binary.NativeEndian.PutUint32(b, math.Float32bits(float32(v)))
	} else {
		binary.NativeEndian.PutUint64(b, math.Float64bits(v))
	}
}

// reference computes the mask-dot product in float64 with plain loops: the value
// out[f*N+m] and the magnitude Σ|mask·frame| that bounds its rounding error.
func reference(ds *memDataset, stack *masks.Stack) (want, mag []float64) {
	p := stack.Pixels()
	n := ds.NumFrames()
	want = make([]float64, n*stack.N)
	mag = make([]float64, n*stack.N)
	for f := range n {
		for m := range stack.N {
			var s, a float64
			for i := range p {
				v := pixel(ds.data, ds.dt, f*p+i) * float64(stack.Data[m*p+i])
				s += v
				a += math.Abs(v)
			}
			want[f*stack.N+m] = s
			mag[f*stack.N+m] = a
		}
	}
	return want, mag
}

// requireClose checks every got[i] against want[i] to within rel·mag[i] (mag is
// Σ|mask·frame|: a relative bound on the dot product's rounding error).
func requireClose[F float32 | float64](t *testing.T, got []F, want, mag []float64, rel float64) {
	t.Helper()
	require.Len(t, got, len(want))
	for i := range want {
		if d := math.Abs(float64(got[i]) - want[i]); d > rel*mag[i]+1e-30 {
			t.Fatalf("result %d: got %v, want %v (diff %g > %g·%g)", i, got[i], want[i], d, rel, mag[i])
		}
	}
}

// randomStack returns n dense masks with uniform weights in [-1, 1).
func randomStack(rng *rand.Rand, n int, sig [2]int) *masks.Stack {
	s := &masks.Stack{N: n, SigY: sig[0], SigX: sig[1], Data: make([]float32, n*sig[0]*sig[1])}
	for i := range s.Data {
		s.Data[i] = float32(rng.Float64()*2 - 1)
	}
	for i := range n {
		s.Names = append(s.Names, fmt.Sprintf("random%d", i))
	}
	return s
}

// sparseStack returns n masks with about 3% nonzero weights in [-1, 1), so that
// PreferSparse holds: mask 0 a ring around the centre, the others random pixels.
func sparseStack(rng *rand.Rand, n int, sig [2]int) *masks.Stack {
	s := &masks.Stack{N: n, SigY: sig[0], SigX: sig[1], Data: make([]float32, n*sig[0]*sig[1])}
	cy, cx := float64(sig[0])/2, float64(sig[1])/2
	r := math.Min(cy, cx) * 0.7
	for y := range sig[0] {
		for x := range sig[1] {
			if d := math.Hypot(float64(y)-cy, float64(x)-cx); d >= r && d < r+0.5 {
				s.Data[y*sig[1]+x] = 1
			}
		}
	}
	for m := 1; m < n; m++ {
		mask := s.Mask(m)
		for i := range mask {
			if rng.Float64() < 0.03 {
				mask[i] = float32(rng.Float64()*2 - 1)
			}
		}
	}
	for i := range n {
		s.Names = append(s.Names, fmt.Sprintf("sparse%d", i))
	}
	return s
}

// splitPlan returns a plan of nWorkers CPU workers on cpus (cycled) and partitions of
// the given sizes.
func splitPlan(cpus []int, nWorkers int, sizes ...int) *planner.Plan {
	plan := &planner.Plan{CoresUsable: len(cpus)}
	for i := range nWorkers {
		plan.Workers = append(plan.Workers, planner.Worker{ID: i, Kind: planner.CPU, Core: cpus[i%len(cpus)], CPU: cpus[i%len(cpus)], GPU: -1})
	}
	start := 0
	for _, n := range sizes {
		plan.Partitions = append(plan.Partitions, planner.Partition{Start: start, End: start + n})
		start += n
	}
	return plan
}

// evenPlan splits nFrames into nParts near-equal partitions.
func evenPlan(cpus []int, nWorkers, nFrames, nParts int) *planner.Plan {
	var sizes []int
	for i := range nParts {
		sizes = append(sizes, (i+1)*nFrames/nParts-i*nFrames/nParts)
	}
	return splitPlan(cpus, nWorkers, sizes...)
}
