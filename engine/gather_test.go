package engine

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/masks"
	"github.com/stemdot/stemdot/planner"
)

// sparseData is random sparse frames and, independently of package dataset, the same
// frames densified in float64.
type sparseData struct {
	sf    dataset.SparseFrames
	dense []float64 // frames × pixels
	abs   []float64 // Σ|value| of each pixel's events: duplicates of opposite signs cancel in dense
}

// randomSparse returns n frames of sig pixels of dt, each with about density·pixels
// events at random pixels drawn with replacement (so some pixels have duplicate events,
// which add up), every 5th frame empty. Values are small enough that the sums of
// duplicates stay within the dtype.
func randomSparse(rng *rand.Rand, dt dataset.DType, n int, sig [2]int, density float64) sparseData {
	pixels := sig[0] * sig[1]
	d := sparseData{dense: make([]float64, n*pixels), abs: make([]float64, n*pixels)}
	d.sf.Reset()
	size := dt.Size()
	e := binary.NativeEndian
	for f := range n {
		events := 0
		if f%5 != 4 {
			events = int(density*float64(pixels)*(0.5+rng.Float64())) + rng.IntN(2)
		}
		for range events {
			p := rng.IntN(pixels)
			var b [8]byte
			var v float64
			switch dt {
			case dataset.Uint8, dataset.Uint16, dataset.Uint32:
				v = float64(1 + rng.IntN(20))
			case dataset.Int8, dataset.Int16, dataset.Int32:
				v = float64(rng.IntN(41) - 20)
			case dataset.Float32:
				v = float64(float32(rng.NormFloat64() * 100))
			case dataset.Float64:
				v = rng.NormFloat64() * 100
			}
			switch dt {
			case dataset.Uint8, dataset.Int8:
				b[0] = byte(int8(v))
			case dataset.Uint16, dataset.Int16:
				e.PutUint16(b[:], uint16(int16(v)))
			case dataset.Uint32, dataset.Int32:
				e.PutUint32(b[:], uint32(int32(v)))
			case dataset.Float32:
				e.PutUint32(b[:], math.Float32bits(float32(v)))
			case dataset.Float64:
				e.PutUint64(b[:], math.Float64bits(v))
			}
			d.sf.Indices = append(d.sf.Indices, int32(p))
			d.sf.Data = append(d.sf.Data, b[:size]...)
			d.dense[f*pixels+p] += v
			d.abs[f*pixels+p] += math.Abs(v)
		}
		d.sf.Indptr = append(d.sf.Indptr, len(d.sf.Indices))
	}
	return d
}

// denseReference is the mask-dot product of the float64 frames of d at the given frame
// indices, with Σ|mask·event| to bound its rounding error; weights with their Lo parts.
func denseReference(d sparseData, frames []int, stack *masks.Stack) (want, mag []float64) {
	p := stack.Pixels()
	w := stack.Dense64()
	for _, f := range frames {
		for m := range stack.N {
			var s, a float64
			for i, x := range d.dense[f*p : (f+1)*p] {
				s += x * w[m*p+i]
				a += d.abs[f*p+i] * math.Abs(w[m*p+i])
			}
			want, mag = append(want, s), append(mag, a)
		}
	}
	return want, mag
}

func seq(a, b int) []int {
	s := make([]int, 0, b-a)
	for i := a; i < b; i++ {
		s = append(s, i)
	}
	return s
}

// TestApplyMasksGather: the CPU workers' gather over sparse frames equals the float64
// product of the densified frames, for every dtype, densities from empty to fully hit
// with duplicates, 1 to 64 dense and sparse masks (table and pixel-major CSR layouts),
// float32 and float64 results, weights with Lo parts, every tile through the gather and
// dense tiles densified (gatherBreakEven).
func TestApplyMasksGather(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 19))
	sig := [2]int{24, 20}
	const n = 23
	dtypes := []dataset.DType{dataset.Uint8, dataset.Uint16, dataset.Uint32, dataset.Int8, dataset.Int16, dataset.Int32, dataset.Float32, dataset.Float64}
	for _, dt := range dtypes {
		for _, density := range []float64{0, 0.01, 0.2, 1.5} {
			data := randomSparse(rng, dt, n, sig, density)
			ds, err := dataset.FromSparse(data.sf, []int{n}, sig, dt)
			require.NoError(t, err)
			for _, nMasks := range []int{1, 2, 4, 13, 16, 64} {
				for _, kind := range []string{"dense", "sparse", "sparse-csr", "lo"} {
					var stack *masks.Stack
					switch kind {
					case "dense":
						stack = randomStack(rng, nMasks, sig)
					case "sparse", "sparse-csr":
						stack = sparseStack(rng, nMasks, sig)
					case "lo":
						w := make([]float64, nMasks*sig[0]*sig[1])
						for i := range w {
							w[i] = rng.Float64()*2 - 1
						}
						stack, err = masks.New64(nMasks, sig[0], sig[1], w, nil)
						require.NoError(t, err)
					}
					if kind == "sparse-csr" {
						old := gatherTableBytes
						gatherTableBytes = 0
						t.Cleanup(func() { gatherTableBytes = old })
						require.True(t, useGatherCSR(stack, stack.Count()))
					}
					want, mag := denseReference(data, seq(0, n), stack)
					for _, c := range []struct {
						f64   bool
						scale float64
					}{{false, math.Inf(1)}, {true, math.Inf(1)}, {false, 1}, {true, 1}} {
						f64 := c.f64
						t.Run(fmt.Sprintf("%v/density%v/masks%d/%s/float64=%v/scale%v", dt, density, nMasks, kind, f64, c.scale), func(t *testing.T) {
							defer func(old float64) { gatherScale = old }(gatherScale)
							gatherScale = c.scale // +Inf: every tile through the gather; 1: dense tiles densified
							res, err := ApplyMasks(context.Background(), ds, stack, splitPlan(anyCPUs, 3, 5, 7, 1, 10),
								Options{Float64: f64, TileFrames: 3, NoPin: true})
							require.NoError(t, err)
							assert.True(t, res.Stats.Gather)
							if f64 {
								rel := 1e-14
								if c.scale == 1 && dt == dataset.Float32 {
									rel = 1.2e-7 // a densified tile sums duplicate events in float32, as ReadFrames does
								}
								requireClose(t, res.F64, want, mag, rel)
							} else {
								requireClose(t, res.F32, want, mag, 2e-7)
							}
						})
					}
					gatherTableBytes = 64 << 20
				}
			}
		}
	}
}

// TestApplyMasksGatherViews: an ROI and a frame range of a sparse dataset are read
// sparse (Stats.Gather) and give the rows of their frames.
func TestApplyMasksGatherViews(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	sig := [2]int{16, 16}
	data := randomSparse(rng, dataset.Uint16, 48, sig, 0.05)
	full, err := dataset.FromSparse(data.sf, []int{6, 8}, sig, dataset.Uint16)
	require.NoError(t, err)
	stack := randomStack(rng, 4, sig)

	roi := make([]bool, 48)
	var picked []int
	for i := range roi {
		if roi[i] = rng.IntN(3) > 0; roi[i] {
			picked = append(picked, i)
		}
	}
	sel, err := dataset.Select(full, dataset.ROI{Mask: roi, Shape: []int{6, 8}})
	require.NoError(t, err)
	rng2, err := dataset.Range(sel, 5, 17)
	require.NoError(t, err)
	rangeOfFull, err := dataset.Range(full, 9, 30)
	require.NoError(t, err)
	for _, c := range []struct {
		name   string
		ds     dataset.Dataset
		frames []int
	}{
		{"roi", sel, picked},
		{"roi+range", rng2, picked[5:22]},
		{"range", rangeOfFull, seq(9, 39)},
		{"no dense reads", eventsOnly{full}, seq(0, 48)},
	} {
		t.Run(c.name, func(t *testing.T) {
			require.NotNil(t, dataset.SparseOf(c.ds))
			want, mag := denseReference(data, c.frames, stack)
			n := c.ds.NumFrames()
			res, err := ApplyMasks(context.Background(), c.ds, stack, splitPlan(anyCPUs, 2, n/2, n-n/2), Options{Float64: true, TileFrames: 4, NoPin: true})
			require.NoError(t, err)
			assert.True(t, res.Stats.Gather)
			requireClose(t, res.F64, want, mag, 1e-14)
		})
	}
}

// TestGatherDenseKernelLazy: a gather worker builds the dense kernel (with 8 masks or
// more and AVX2, a packed copy of the masks) only when it densifies a tile: not when
// every tile goes through the gather, and it does when tiles are densified, with the
// same results in both runs.
func TestGatherDenseKernelLazy(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	sig := [2]int{16, 16}
	data := randomSparse(rng, dataset.Uint16, 24, sig, 0.5)
	ds, err := dataset.FromSparse(data.sf, nil, sig, dataset.Uint16)
	require.NoError(t, err)
	stack := randomStack(rng, packedMinMasks, sig)
	want, mag := denseReference(data, seq(0, 24), stack)
	for _, c := range []struct {
		scale float64
		built bool
	}{{math.Inf(1), false}, {1, true}} {
		defer func(old float64) { gatherScale = old }(gatherScale)
		gatherScale = c.scale
		var w *cpuWorker
		opt := Options{TileFrames: 4, NoPin: true, NewWorker: func(spec planner.Worker, j *Job) (Worker, error) {
			cw, err := DefaultWorkers(spec, j)
			w, _ = cw.(*cpuWorker)
			return cw, err
		}}
		res, err := ApplyMasks(context.Background(), ds, stack, splitPlan(anyCPUs, 1, 24), opt)
		require.NoError(t, err)
		requireClose(t, res.F32, want, mag, 1e-6)
		require.NotNil(t, w)
		assert.Equal(t, c.built, w.kernel != nil, "gather scale %g: dense kernel built", c.scale)
	}
}

// TestApplyMasksGatherNonFinite: a NaN event spoils only the masks that weigh its
// pixel, as on dense frames.
func TestApplyMasksGatherNonFinite(t *testing.T) {
	sig := [2]int{4, 4}
	var sf dataset.SparseFrames
	sf.Reset()
	for _, ev := range []struct {
		p int32
		v float32
	}{{0, 2}, {5, float32(math.NaN())}, {7, 3}} {
		sf.Indices = append(sf.Indices, ev.p)
		sf.Data = binary.NativeEndian.AppendUint32(sf.Data, math.Float32bits(ev.v))
	}
	sf.Indptr = append(sf.Indptr, 3)
	ds, err := dataset.FromSparse(sf, nil, sig, dataset.Float32)
	require.NoError(t, err)
	stack := &masks.Stack{N: 3, SigY: 4, SigX: 4, Data: make([]float32, 48)}
	stack.Data[0], stack.Data[7] = 1, 1        // mask 0: pixels 0 and 7
	stack.Data[16+5] = 1                       // mask 1: the NaN pixel
	stack.Data[32+0], stack.Data[32+7] = 2, -1 // mask 2: pixels 0 and 7
	for _, f64 := range []bool{false, true} {
		res, err := ApplyMasks(context.Background(), ds, stack, splitPlan(anyCPUs, 1, 1), Options{Float64: f64, NoPin: true})
		require.NoError(t, err)
		got := res.F64
		if !f64 {
			got = []float64{float64(res.F32[0]), float64(res.F32[1]), float64(res.F32[2])}
		}
		assert.Equal(t, 5.0, got[0])
		assert.True(t, math.IsNaN(got[1]))
		assert.Equal(t, 1.0, got[2])
		assert.Equal(t, 1, res.Stats.NonFinite.Count)
	}
}

// eventsOnly is a sparse dataset whose ReadFrames fails: a run over it that succeeds
// read every frame as events.
type eventsOnly struct{ dataset.Dataset }

func (d eventsOnly) ReadFrames(int, int, []byte) error {
	return fmt.Errorf("ReadFrames called on a sparse dataset")
}

func (d eventsOnly) ReadSparse(start, end int, dst *dataset.SparseFrames) error {
	return dataset.SparseOf(d.Dataset).ReadSparse(start, end, dst)
}

// TestGatherBadEvent: an event outside the frame (as a view of a file's events may
// hold) is an errs.Format error naming it, through every row kernel (2 to 33 masks, the
// bad event at any position) and the pure-Go kernels alike, never a read outside the
// table.
func TestGatherBadEvent(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	sig := [2]int{8, 8}
	for _, nMasks := range []int{1, 2, 3, 4, 7, 8, 16, 33} {
		stack := randomStack(rng, nMasks, sig)
		job := &Job{Masks: stack, NMasks: nMasks}
		k := &eventGather[uint16, float32]{m: newGatherMasks[float32](job, false)}
		for _, g := range []*eventGather[uint16, float32]{k, newEventGather[uint16](k.m, false)} {
			for bad := range 5 {
				for _, p := range []int32{64, -1, 1 << 30} {
					idx := []int32{1, 5, 9, 20, 63}
					idx[bad] = p
					sf := dataset.SparseFrames{Indptr: []int{0, 0, 5}, Indices: idx, Data: make([]byte, 10)}
					err := g.apply(&sf, make([]float64, 2*nMasks))
					require.Error(t, err, "%d masks, event %d at pixel %d", nMasks, bad, p)
					assert.Equal(t, errs.Format, errs.KindOf(err))
					at := fmt.Sprint(uint32(p))
					if p < 0 {
						at += " (-1 as int32)"
					}
					assert.Contains(t, err.Error(), fmt.Sprintf("event %d of frame 1 is at pixel %s, outside the frame of 64 pixels", bad, at))
				}
			}
		}
	}
}

// TestGatherKernelsDTypes: the gather kernels (assembly where the CPU has them, else
// pure Go) equal a float64 reference for every dtype at its extreme values (uint32
// above 2^31, int32 and int8 minima, large floats), for 0 to 40 events per frame with
// duplicates (the assembly kernels' steps, the prefetching ones and their tails) and
// 1 to 19 masks; an event outside the frame at any position of 9 to 20 events is the
// errs.Format error naming it.
func TestGatherKernelsDTypes(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	testGatherKernel(t, rng, []uint8{0, 1, 200, 255})
	testGatherKernel(t, rng, []int8{-128, -1, 0, 127})
	testGatherKernel(t, rng, []uint16{0, 3, 40000, 65535})
	testGatherKernel(t, rng, []int16{-32768, -7, 0, 32767})
	testGatherKernel(t, rng, []uint32{0, 9, 1<<31 + 5, math.MaxUint32})
	testGatherKernel(t, rng, []int32{math.MinInt32, -3, 0, math.MaxInt32})
	testGatherKernel(t, rng, []float32{-3e38, -0.5, 0, 1e-30, 2.5e38})
	testGatherKernel(t, rng, []float64{-1e300, -0.25, 0, 1e-300, 3e299})
}

func testGatherKernel[N native](t *testing.T, rng *rand.Rand, values []N) {
	const pixels = 64
	for _, nMasks := range []int{1, 2, 3, 5, 8, 16, 19} {
		name := fmt.Sprintf("%T/masks%d", values[0], nMasks)
		stack := randomStack(rng, nMasks, [2]int{8, 8})
		job := &Job{Masks: stack, NMasks: nMasks}
		g := newEventGather[N](newGatherMasks[float32](job, false), false)
		require.Equal(t, haveAVX2FMA, g.one != nil, name)
		sf := dataset.SparseFrames{Indptr: []int{0}}
		var v []N
		for f := range 41 {
			for range f {
				sf.Indices = append(sf.Indices, int32(rng.IntN(pixels)))
				v = append(v, values[rng.IntN(len(values))])
			}
			sf.Indptr = append(sf.Indptr, len(sf.Indices))
		}
		sf.Data = unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), len(v)*int(unsafe.Sizeof(v[0])))
		var want, mag []float64
		for f := range sf.Frames() {
			for m := range nMasks {
				var s, a float64
				for k := sf.Indptr[f]; k < sf.Indptr[f+1]; k++ {
					x := float64(v[k]) * float64(stack.Data[m*pixels+int(sf.Indices[k])])
					s, a = s+x, a+math.Abs(x)
				}
				want, mag = append(want, s), append(mag, a)
			}
		}
		got := make([]float64, len(want))
		require.NoError(t, g.apply(&sf, got), name)
		requireClose(t, got, want, mag, 1e-14)

		for _, n := range []int{9, 16, 20, 40} {
			for bad := range n {
				bf := dataset.SparseFrames{Indptr: []int{0, n}, Indices: append([]int32(nil), sf.Indices[:n]...), Data: sf.Data}
				bf.Indices[bad] = pixels + int32(bad)
				err := g.apply(&bf, make([]float64, nMasks))
				require.Error(t, err, "%s, event %d of %d", name, bad, n)
				assert.Equal(t, errs.Format, errs.KindOf(err))
				assert.Contains(t, err.Error(), fmt.Sprintf("event %d of frame 0 is at pixel %d,", bad, pixels+bad))
			}
		}
	}
}
