package engine

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime/metrics"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/internal/testfiles"
	"github.com/stemdot/stemdot/masks"
	"github.com/stemdot/stemdot/planner"
)

// goroutinesCreated reads the runtime's count of goroutines created since start.
func goroutinesCreated(t *testing.T) uint64 {
	t.Helper()
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		t.Skip("runtime/metrics has no /sched/goroutines-created:goroutines")
	}
	return s[0].Value.Uint64()
}

// TestCPUWorkerStaysOnItsThread: a CPU worker creates no goroutine (gonum's Gemm would
// run its blocks on new goroutines, off the pinned thread, above 3 blocks of 64×64),
// for tiles above gemmRows, more than gemmMasks masks and frames above pixelChunk. The
// control shows that the same product in one Gemm call does create goroutines.
func TestCPUWorkerStaysOnItsThread(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	sig := [2]int{64, 80}
	const nFrames, nMasks, tile = 250, 70, 240
	ds := randomDataset(rng, dataset.Uint16, []int{nFrames}, sig)
	stack := randomStack(rng, nMasks, sig)
	want, mag := reference(ds, stack)
	defer func(old bool) { useSIMD = old }(useSIMD)
	for _, c := range []struct{ simd, f64 bool }{{true, false}, {false, false}, {true, true}, {false, true}} {
		f64 := c.f64
		useSIMD = c.simd // on the SIMD kernels or on Gemm
		job := &Job{Dataset: ds, Masks: stack, NMasks: nMasks, TileFrames: tile, Float64: f64}
		w, err := NewCPUWorker(job)
		require.NoError(t, err)
		out := Output{F32: make([]float32, nFrames*nMasks)}
		if f64 {
			out = Output{F64: make([]float64, nFrames*nMasks)}
		}
		before := goroutinesCreated(t)
		require.NoError(t, w.Process(context.Background(), planner.Partition{Start: 0, End: nFrames}, out, nil))
		require.Equal(t, before, goroutinesCreated(t), "the CPU worker (%+v) created goroutines", c)
		if f64 {
			requireClose(t, out.F64, want, mag, 1e-13)
		} else {
			requireClose(t, out.F32, want, mag, 1e-5)
		}
	}

	// Control: tile × masks in one call of gonum's Sgemm (behind blas32 unless built with
	// -tags openblas) goes parallel.
	pixels := sig[0] * sig[1]
	a := make([]float32, tile*pixels)
	c := make([]float32, tile*nMasks)
	before := goroutinesCreated(t)
	gonum.Implementation{}.Sgemm(blas.NoTrans, blas.Trans, tile, nMasks, pixels, 1, a, pixels, stack.Data, pixels, 0, c, nMasks)
	require.Greater(t, goroutinesCreated(t), before, "control: an unchunked Gemm should create goroutines")
}

// mibFile is a Merlin MIB file of U08 or U16 frames read frame by frame, pixels
// converted from big-endian to host order: a test-only dataset over real detector data.
type mibFile struct {
	path             string
	f                *os.File
	header, frames   int
	sigY, sigX       int
	dt               dataset.DType
	frameBytesOnDisk int
}

func openMIB(t *testing.T, path string) *mibFile {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	head := make([]byte, 384)
	_, err = f.ReadAt(head, 0)
	require.NoError(t, err)
	fields := strings.Split(string(head), ",")
	atoi := func(s string) int {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		require.NoError(t, err)
		return n
	}
	m := &mibFile{path: path, f: f, header: atoi(fields[2]), sigX: atoi(fields[4]), sigY: atoi(fields[5])}
	switch fields[6] {
	case "U08":
		m.dt = dataset.Uint8
	case "U16":
		m.dt = dataset.Uint16
	default:
		t.Fatalf("%s: pixel type %s not handled by this test", path, fields[6])
	}
	m.frameBytesOnDisk = m.header + m.sigY*m.sigX*m.dt.Size()
	st, err := f.Stat()
	require.NoError(t, err)
	m.frames = int(st.Size()) / m.frameBytesOnDisk
	return m
}

func (m *mibFile) Format() string       { return "mib" }
func (m *mibFile) Path() string         { return m.path }
func (m *mibFile) NavShape() []int      { return []int{m.frames} }
func (m *mibFile) SigShape() [2]int     { return [2]int{m.sigY, m.sigX} }
func (m *mibFile) DType() dataset.DType { return m.dt }
func (m *mibFile) NumFrames() int       { return m.frames }
func (m *mibFile) FrameBytes() int      { return m.sigY * m.sigX * m.dt.Size() }
func (m *mibFile) Close() error         { return nil }

func (m *mibFile) ReadFrames(start, end int, dst []byte) error {
	fb := m.FrameBytes()
	for f := start; f < end; f++ {
		b := dst[(f-start)*fb : (f-start+1)*fb]
		if _, err := m.f.ReadAt(b, int64(f*m.frameBytesOnDisk+m.header)); err != nil {
			return fmt.Errorf("%s: frame %d: %w", m.path, f, err)
		}
		if m.dt == dataset.Uint16 {
			for i := 0; i < len(b); i += 2 {
				binary.NativeEndian.PutUint16(b[i:], binary.BigEndian.Uint16(b[i:]))
			}
		}
	}
	return nil
}

// detectorMasks returns a bright-field disk, an annular ring and a centre-of-mass y
// weight over sig, the classic virtual detectors.
func detectorMasks(sig [2]int) *masks.Stack {
	s := &masks.Stack{N: 3, SigY: sig[0], SigX: sig[1], Data: make([]float32, 3*sig[0]*sig[1]), Names: []string{"disk", "ring", "com_y"}}
	cy, cx := float64(sig[0])/2, float64(sig[1])/2
	for y := range sig[0] {
		for x := range sig[1] {
			i := y*sig[1] + x
			r := math.Hypot(float64(y)-cy, float64(x)-cx)
			if r < 30 {
				s.Data[i] = 1
			}
			if r >= 60 && r < 70 {
				s.Data[s.Pixels()+i] = 1
			}
			s.Data[2*s.Pixels()+i] = float32(float64(y) - cy)
		}
	}
	return s
}

// manyMasks returns n smooth dense masks over sig (products of cosines of growing
// frequency, none sparse): a stack for the many-mask kernels.
func manyMasks(sig [2]int, n int) *masks.Stack {
	s := &masks.Stack{N: n, SigY: sig[0], SigX: sig[1], Data: make([]float32, n*sig[0]*sig[1])}
	for m := range n {
		fy, fx := float64(m%5+1), float64(m/5+1)
		for y := range sig[0] {
			for x := range sig[1] {
				s.Data[m*s.Pixels()+y*sig[1]+x] = float32(math.Cos(fy*float64(y)/float64(sig[0])) * math.Cos(fx*float64(x)/float64(sig[1])))
			}
		}
	}
	return s
}

// TestApplyMasksRealMIB runs virtual detectors, and stacks of 16 and 70 dense masks (the
// many-mask kernels), over real Merlin recordings, and 40 and 70 masks over the same
// frames as float32, and checks every value against a float64 reference computed from
// the file's bytes.
func TestApplyMasksRealMIB(t *testing.T) {
	for _, name := range []string{"mib/001_4x2_6bit.mib", "mib/Single_9_Frame_CounterDepth_12_Rows_256.mib"} {
		t.Run(name, func(t *testing.T) {
			m := openMIB(t, testfiles.File(t, name))
			raw := make([]byte, m.frames*m.FrameBytes())
			require.NoError(t, m.ReadFrames(0, m.frames, raw))
			mem := &memDataset{nav: []int{m.frames}, sig: m.SigShape(), dt: m.dt, data: raw}
			dense := detectorMasks(m.SigShape())
			ring := &masks.Stack{N: 1, SigY: m.sigY, SigX: m.sigX, Data: dense.Mask(1), Names: []string{"ring"}}
			require.True(t, ring.PreferSparse())
			for _, stack := range []*masks.Stack{dense, ring, manyMasks(m.SigShape(), 16), manyMasks(m.SigShape(), 70)} {
				want, mag := reference(mem, stack)
				for _, f64 := range []bool{false, true} {
					res, err := ApplyMasks(context.Background(), m, stack, evenPlan(anyCPUs, 2, m.frames, 4), Options{Float64: f64, NoPin: true})
					require.NoError(t, err)
					if f64 {
						requireClose(t, res.F64, want, mag, 1e-13)
					} else {
						requireClose(t, res.F32, want, mag, 1e-5)
					}
				}
			}
			// The same frames as float32 (as a detector or a preprocessing step writes them):
			// 40 and 70 masks take the broadcast kernels where the CPU has AVX-512.
			f32 := &memDataset{nav: mem.nav, sig: mem.sig, dt: dataset.Float32, data: make([]byte, 0, m.frames*m.sigY*m.sigX*4)}
			for i := range m.frames * m.sigY * m.sigX {
				f32.data = binary.NativeEndian.AppendUint32(f32.data, math.Float32bits(float32(pixel(mem.data, mem.dt, i))))
			}
			for _, n := range []int{40, 70} {
				stack := manyMasks(m.SigShape(), n)
				want, mag := reference(f32, stack)
				res, err := ApplyMasks(context.Background(), f32, stack, evenPlan(anyCPUs, 2, m.frames, 4), Options{NoPin: true})
				require.NoError(t, err)
				requireClose(t, res.F32, want, mag, 1e-6)
			}
			// The recordings are not blank: every frame has counts in the bright-field disk.
			want, _ := reference(mem, dense)
			for f := range m.frames {
				assert.Positive(t, want[f*3], "frame %d disk", f)
			}
		})
	}
}
