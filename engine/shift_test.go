package engine

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/cuda"
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/masks"
	"github.com/stemdot/stemdot/planner"
	"github.com/stemdot/stemdot/synth"
)

// shiftedReference computes the shifted mask-dot product in float64 the direct way: the
// mask of frame f moved by (dy, dx) as its bilinear interpolation at (y − dy, x − dx)
// (zero outside the mask), a dense copy per frame, times the frame.
func shiftedReference(ds *memDataset, stack *masks.Stack, shifts []float64) (want, mag []float64) {
	h, w := stack.SigY, stack.SigX
	p := h * w
	n := ds.NumFrames()
	want, mag = make([]float64, n*stack.N), make([]float64, n*stack.N)
	at := func(m, y, x int) float64 {
		if y < 0 || y >= h || x < 0 || x >= w {
			return 0
		}
		return float64(stack.Data[m*p+y*w+x])
	}
	for f := range n {
		dy, dx := shifts[2*f], shifts[2*f+1]
		for m := range stack.N {
			var s, a float64
			for y := range h {
				for x := range w {
					ty, tx := float64(y)-dy, float64(x)-dx
					y0, x0 := math.Floor(ty), math.Floor(tx)
					b, c := ty-y0, tx-x0
					yi, xi := int(y0), int(x0)
					wt := (1-b)*(1-c)*at(m, yi, xi) + (1-b)*c*at(m, yi, xi+1) + b*(1-c)*at(m, yi+1, xi) + b*c*at(m, yi+1, xi+1)
					if wt == 0 {
						continue
					}
					v := wt * pixel(ds.data, ds.dt, f*p+y*w+x)
					s += v
					a += math.Abs(v)
				}
			}
			want[f*stack.N+m], mag[f*stack.N+m] = s, a
		}
	}
	return want, mag
}

// randomShifts returns per-frame shifts of n frames: integer ones (also far outside
// the frame), sub-pixel ones, and shifts with a zero fraction in one axis only.
func randomShifts(rng *rand.Rand, n int, integer bool) []float64 {
	s := make([]float64, 2*n)
	for i := range s {
		switch {
		case integer:
			s[i] = float64(rng.IntN(21) - 10)
		case i%7 == 3:
			s[i] = float64(rng.IntN(9) - 4)
		default:
			s[i] = rng.Float64()*16 - 8
		}
	}
	if integer && n > 9 {
		s[2], s[3] = 500, -3 // every mask pixel moved outside the frame
		for i := 8; i < 18; i += 2 {
			s[i], s[i+1] = -2, 3 // frames 4 to 8 share a shift (pairs of frames)
		}
	}
	return s
}

// TestApplyMasksShifted checks shifted masks (Options.Shifts) against the direct float64
// reference of per-frame shifted masks: integer and sub-pixel shifts, dense and sparse
// stacks, float32 and float64 results, the dtypes of the assembly kernels and others.
func TestApplyMasksShifted(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	sig := [2]int{40, 36}
	for _, dt := range []dataset.DType{dataset.Uint8, dataset.Uint16, dataset.Int16, dataset.Uint32, dataset.Float32, dataset.Float64} {
		ds := randomDataset(rng, dt, []int{23}, sig)
		for _, integer := range []bool{true, false} {
			shifts := randomShifts(rng, 23, integer)
			for _, nMasks := range []int{1, 2, 3, 5, 16} {
				for _, sparse := range []bool{false, true} {
					stack := randomStack(rng, nMasks, sig)
					if sparse {
						stack = sparseStack(rng, nMasks, sig)
					}
					want, mag := shiftedReference(ds, stack, shifts)
					for _, f64 := range []bool{false, true} {
						name := fmt.Sprintf("%v/integer=%v/masks%d/sparse=%v/float64=%v", dt, integer, nMasks, sparse, f64)
						t.Run(name, func(t *testing.T) {
							res, err := ApplyMasks(context.Background(), ds, stack, splitPlan(anyCPUs, 3, 5, 9, 1, 8),
								Options{Float64: f64, TileFrames: 4, Shifts: shifts, NoPin: true})
							require.NoError(t, err)
							require.Equal(t, sparse, res.Stats.Sparse)
							if f64 {
								requireClose(t, res.F64, want, mag, 1e-13)
							} else {
								requireClose(t, res.F32, want, mag, 5e-7) // doc/performance.md: "within a few 1e-7"
							}
						})
					}
				}
			}
		}
	}
}

// TestApplyMasksShiftedNaN: a NaN pixel spoils only the masks whose shifted weights
// cover it, on the dense and the sparse path.
func TestApplyMasksShiftedNaN(t *testing.T) {
	sig := [2]int{8, 8}
	ds := &memDataset{nav: []int{1}, sig: sig, dt: dataset.Float32}
	frame := make([]float32, 64)
	for i := range frame {
		frame[i] = 1
	}
	frame[0] = float32(math.NaN()) // pixel (0, 0)
	ds.data = make([]byte, 4*64)
	for i, v := range frame {
		binary.NativeEndian.PutUint32(ds.data[4*i:], math.Float32bits(v))
	}
	stack := &masks.Stack{N: 2, SigY: 8, SigX: 8, Data: make([]float32, 128)}
	stack.Data[0] = 1        // mask 0: pixel (0, 0): moved by (0.5, 0.5) it covers (0..1, 0..1)
	stack.Data[64+3*8+3] = 1 // mask 1: pixel (3, 3): moved, (3..4, 3..4)
	for _, sparse := range []bool{false, true} {
		s := *stack
		if sparse {
			s.Sparse, s.Data = stack.ToCSR(), nil
		}
		res, err := ApplyMasks(context.Background(), ds, &s, splitPlan(anyCPUs, 1, 1), Options{Shifts: []float64{0.5, 0.5}, NoPin: true})
		require.NoError(t, err)
		require.True(t, math.IsNaN(float64(res.F32[0])), "sparse=%v: mask 0 over the NaN pixel: %v", sparse, res.F32[0])
		require.Equal(t, float32(1), res.F32[1], "sparse=%v: mask 1 away from the NaN pixel", sparse)
	}
}

// requireSameNonFinite checks results against a reference that may hold NaN and ±Inf:
// the same NaNs and infinities, finite values within rel·mag.
func requireSameNonFinite[F float32 | float64](t *testing.T, got []F, want, mag []float64, rel float64, what string) {
	t.Helper()
	require.Len(t, got, len(want))
	for i, w := range want {
		g := float64(got[i])
		switch {
		case math.IsNaN(w):
			require.True(t, math.IsNaN(g), "%s: result %d is %v, want NaN", what, i, g)
		case math.IsInf(w, 0):
			require.Equal(t, w, g, "%s: result %d", what, i)
		default:
			require.InDelta(t, w, g, rel*mag[i]+1e-30, "%s: result %d", what, i)
		}
	}
}

// TestApplyMasksShiftedNonFinite: with shifts, NaN and ±Inf pixels of float frames give
// what the formula does (shiftedReference: Σ over the pixels whose shifted weight is not
// 0), on every shifted path (the flat float32 kernels, the float tiles of 8 masks or more
// and of float64 runs, whole-pixel copies, the sparse gather): an infinite pixel under a
// shifted weight gives ±Inf, not the NaN of ∞ − ∞ or 0·∞, and one under a shifted weight
// of exactly 0 counts for nothing.
func TestApplyMasksShiftedNonFinite(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	sig := [2]int{9, 11}
	p := sig[0] * sig[1]
	const n = 12
	inf := math.Inf(1)
	for _, dt := range []dataset.DType{dataset.Float32, dataset.Float64} {
		ds := randomDataset(rng, dt, []int{n}, sig)
		set := func(f, y, x int, v float64) { ds.setFloat(f*p+y*sig[1]+x, v) }
		for f := range n {
			switch f % 4 {
			case 0: // an infinity in the middle
				set(f, 4, 5, inf)
			case 1: // opposite infinities side by side, and a NaN
				set(f, 4, 5, inf)
				set(f, 5, 5, -inf)
				set(f, 1, 2, math.NaN())
			case 2: // a NaN on the edge
				set(f, 0, 10, math.NaN())
			}
		}
		// The shifts: none, whole, a fraction in one axis (the other's bilinear weight is
		// 0), in both, and 0.5 in y, under which masks 0 and 1 put weights 0.25 and exactly
		// 0 on pixel (4, 5).
		shifts := make([]float64, 2*n)
		for f := range n {
			sh := [6][2]float64{{0, 0}, {1, -2}, {0.5, 0}, {0, 0.25}, {-0.3, 0.7}, {0.5, 0}}[f%6]
			shifts[2*f], shifts[2*f+1] = sh[0], sh[1]
		}
		for _, nMasks := range []int{3, 9, 40} {
			stack := randomStack(rng, nMasks, sig)
			for i := range stack.Data {
				if rng.IntN(3) == 0 {
					stack.Data[i] = 0
				}
			}
			mask := func(m int, ws map[[2]int]float32) {
				clear(stack.Data[m*p : (m+1)*p])
				for yx, v := range ws {
					stack.Data[m*p+yx[0]*sig[1]+yx[1]] = v
				}
			}
			mask(0, map[[2]int]float32{{3, 5}: 1, {4, 5}: -0.5})
			mask(1, map[[2]int]float32{{3, 5}: 1, {4, 5}: -1})
			mask(2, map[[2]int]float32{{4, 5}: 1})
			want, mag := shiftedReference(ds, stack, shifts)
			// The cases the comment promises, from the reference's own sums.
			require.Equal(t, inf, want[8*nMasks+0], "frame 8 (shift 0.5, 0), mask 0: weight 0.25 on the +Inf pixel")
			require.False(t, nonFinite(want[8*nMasks+1]), "frame 8, mask 1: weight 0 on the +Inf pixel")
			require.Equal(t, inf, want[8*nMasks+2], "frame 8, mask 2: weight 0.5")
			require.Equal(t, inf, want[5*nMasks+1], "frame 5 (shift 0.5, 0), mask 1: weight -0.5 on the -Inf pixel")
			for _, sparse := range []bool{false, true} {
				s := *stack
				if sparse {
					s.Sparse, s.Data = stack.ToCSR(), nil
				}
				for _, f64 := range []bool{false, true} {
					what := fmt.Sprintf("%v, %d masks, sparse=%v, float64=%v", dt, nMasks, sparse, f64)
					res, err := ApplyMasks(context.Background(), ds, &s, splitPlan(anyCPUs, 2, 5, 7), Options{Shifts: shifts, Float64: f64, NoPin: true, TileFrames: 4})
					require.NoError(t, err, what)
					if f64 {
						requireSameNonFinite(t, res.F64, want, mag, 1e-12, what)
					} else {
						requireSameNonFinite(t, res.F32, want, mag, 1e-6, what)
					}
				}
			}
		}
	}
}

func TestApplyMasksShiftsValidation(t *testing.T) {
	sig := [2]int{4, 4}
	ds := randomDataset(rand.New(rand.NewPCG(1, 1)), dataset.Uint16, []int{3}, sig)
	stack := randomStack(rand.New(rand.NewPCG(1, 2)), 1, sig)
	for _, c := range []struct {
		shifts []float64
		want   string
	}{
		{[]float64{1, 2}, "shifts hold 2 values, want 2 (dy, dx) for each of the 3 frames = 6"},
		{[]float64{0, 0, 0, math.NaN(), 0, 0}, "shift dx of frame 1 is NaN: shifts must be finite"},
		{[]float64{0, 0, 0, 0, math.Inf(-1), 0}, "shift dy of frame 2 is -Inf"},
	} {
		_, err := ApplyMasks(context.Background(), ds, stack, splitPlan(anyCPUs, 1, 3), Options{Shifts: c.shifts, NoPin: true})
		require.ErrorContains(t, err, c.want)
	}
}

// TestGPUWorkerShifted: GPU workers (on a device or the emulator; skipped without)
// apply shifted masks, alone and beside a CPU worker, dense and sparse; a float64 job
// with shifts leaves them out.
func TestGPUWorkerShifted(t *testing.T) {
	if n, err := cuda.DeviceCount(); err != nil || n == 0 {
		t.Skip("no CUDA device")
	}
	rng := rand.New(rand.NewPCG(17, 18))
	sig := [2]int{24, 20}
	for _, dt := range []dataset.DType{dataset.Uint16, dataset.Float32, dataset.Int16, dataset.Float64} {
		ds := randomDataset(rng, dt, []int{30}, sig)
		for _, integer := range []bool{true, false} {
			shifts := randomShifts(rng, 30, integer)
			for _, sparse := range []bool{false, true} {
				stack := randomStack(rng, 5, sig)
				if sparse {
					stack = sparseStack(rng, 5, sig)
				}
				want, mag := shiftedReference(ds, stack, shifts)
				for _, cpus := range []int{0, 1} {
					t.Run(fmt.Sprintf("%v/integer=%v/sparse=%v/cpus=%d", dt, integer, sparse, cpus), func(t *testing.T) {
						plan := evenPlan(anyCPUs, 1+cpus, 30, 2+2*cpus)
						plan.Workers[0].Kind, plan.Workers[0].GPU = planner.GPU, 0
						res, err := ApplyMasks(context.Background(), ds, stack, plan, Options{NoPin: true, TileFrames: 4, Shifts: shifts})
						require.NoError(t, err)
						// Beside a CPU worker on a loaded machine, the GPU worker may be
						// left out when the CPU worker took every frame first.
						if cpus == 0 {
							require.Empty(t, res.Stats.NotStarted)
							require.Equal(t, 30, res.Stats.PerWorker[0].Frames)
						}
						requireClose(t, res.F32, want, mag, 1e-5)
					})
				}
			}
		}
	}
	ds := randomDataset(rng, dataset.Uint16, []int{6}, sig)
	plan := evenPlan(anyCPUs, 1, 6, 1)
	plan.Workers[0].Kind, plan.Workers[0].GPU = planner.GPU, 0
	_, err := ApplyMasks(context.Background(), ds, randomStack(rng, 2, sig), plan, Options{NoPin: true, Float64: true, Shifts: make([]float64, 12)})
	require.ErrorContains(t, err, "shifted masks with float64 results run on CPU workers only")
}

// TestGPUWorkerShiftedFiles: a GPU worker with shifts keeps the copy-free feed of mapped
// files (raw frames as they are, MIB records unpacked on the device) and builds g_f on
// the device, alone and beside a CPU worker; results against the float64 reference of
// the shifted masks.
func TestGPUWorkerShiftedFiles(t *testing.T) {
	if n, err := cuda.DeviceCount(); err != nil || n == 0 {
		t.Skip("no CUDA device")
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(19, 20))
	nav, sig := []int{12, 10}, [2]int{32, 24}
	for _, c := range []struct {
		ext string
		dt  dataset.DType
	}{{"raw", dataset.Uint16}, {"mib", dataset.Uint16}, {"mib", dataset.Uint8}, {"mib", dataset.Uint32}} {
		path := filepath.Join(dir, fmt.Sprintf("scan-%s.%s", c.dt, c.ext))
		_, err := synth.Write(context.Background(), path, synth.Options{NavShape: nav, SigShape: sig, DType: c.dt})
		require.NoError(t, err)
		opt := dataset.Options{}
		if c.ext == "raw" {
			opt = dataset.Options{SigShape: sig[:], DType: c.dt, NavShape: nav}
		}
		ds, err := dataset.Open(path, opt)
		require.NoError(t, err)
		defer ds.Close()
		n := ds.NumFrames()
		mem := &memDataset{nav: []int{n}, sig: sig, dt: c.dt, data: make([]byte, n*ds.FrameBytes())}
		require.NoError(t, ds.ReadFrames(0, n, mem.data))
		shifts := randomShifts(rng, n, false)
		stack := randomStack(rng, 3, sig)
		want, mag := shiftedReference(mem, stack, shifts)
		for _, cpus := range []int{0, 1} {
			t.Run(fmt.Sprintf("%s/%s/cpus=%d", c.ext, c.dt, cpus), func(t *testing.T) {
				plan := evenPlan(anyCPUs, 1+cpus, n, 4+4*cpus)
				plan.Workers[0].Kind, plan.Workers[0].GPU = planner.GPU, 0
				res, err := ApplyMasks(context.Background(), ds, stack, plan, Options{NoPin: true, TileFrames: 8, Shifts: shifts})
				require.NoError(t, err)
				requireClose(t, res.F32, want, mag, 1e-5)
				// Beside a CPU worker on a loaded machine, the GPU worker may start after
				// the CPU worker took every frame.
				if g := res.Stats.PerWorker[0]; cpus == 0 || g.Frames > 0 {
					require.Equal(t, "mapped", g.Feed)
				}
			})
		}
	}
}

// EstimateMemory counts the per-frame shifts and a shifted kernel's buffers.
func TestEstimateMemoryShifted(t *testing.T) {
	sig := [2]int{40, 36}
	ds := randomDataset(rand.New(rand.NewPCG(3, 3)), dataset.Uint16, []int{10}, sig)
	stack := randomStack(rand.New(rand.NewPCG(3, 4)), 1, sig)
	plan := splitPlan(anyCPUs, 2, 10)
	plain := EstimateMemory(ds, stack, plan, Options{TileFrames: 4})
	shifted := EstimateMemory(ds, stack, plan, Options{TileFrames: 4, Shifts: make([]float64, 20)})
	require.Equal(t, plain.Result+16*10, shifted.Result)
	// A float32 tile of 4 frames, 3 rows of sig_x floats, a native tile of 4 frames.
	require.Equal(t, plain.PerWorker+4*1440*4+3*36*4+4*2880, shifted.PerWorker)
}

// TestRowShift checks the fused row shift (rowShift: hnext = wx0·src[i] + wx1·src[i+1],
// g = wy0·hprev + wy1·hnext) of each pixel type against float64, for rows of 1 to 41
// values (whole groups of 8, the last group again, short rows in Go), with general
// weights and with the scaled ones of shiftFrames.begin (one weight of each axis 1, in
// either place).
func TestRowShift(t *testing.T) {
	testRowShift[uint8](t)
	testRowShift[int8](t)
	testRowShift[uint16](t)
	testRowShift[int16](t)
	testRowShift[int32](t)
	testRowShift[float32](t)
}

func testRowShift[N native](t *testing.T) {
	shift := rowShift[N, float32]()
	if shift == nil {
		t.Skip("no fused row shift on this CPU or architecture")
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, wt := range [][4]float32{{0.7, 0.3, 0.25, 0.75}, {1, 0.4, 1, 0.9}, {0.2, 1, 1, 0.5}, {1, 0.6, 0.3, 1}, {0.8, 1, 0.1, 1}} {
		for n := 1; n <= 41; n++ {
			src := make([]N, n+1)
			for i := range src {
				src[i] = N(rng.IntN(120))
			}
			hprev := make([]float32, n)
			for i := range hprev {
				hprev[i] = rng.Float32() * 100
			}
			g, hnext := make([]float32, n), make([]float32, n)
			shift(g, hprev, hnext, src, wt[0], wt[1], wt[2], wt[3])
			for i := range n {
				h := float64(wt[0])*float64(src[i]) + float64(wt[1])*float64(src[i+1])
				want := float64(wt[2])*float64(hprev[i]) + float64(wt[3])*h
				require.InDelta(t, h, float64(hnext[i]), 1e-6*(1+math.Abs(h)), "%T weights %v n %d: hnext[%d]", src[0], wt, n, i)
				require.InDelta(t, want, float64(g[i]), 1e-6*(1+math.Abs(want)), "%T weights %v n %d: g[%d]", src[0], wt, n, i)
			}
		}
	}
}

// TestApplyMasksShiftedManyMasks: whole-pixel shifts of 16 and 40 dense masks (the
// native kernel on shifted copies shares the packed stack of the float32 kernel below
// bcastMinMasks masks, not above), against the float64 reference.
func TestApplyMasksShiftedManyMasks(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	sig := [2]int{24, 40}
	for _, dt := range []dataset.DType{dataset.Uint16, dataset.Float32} {
		ds := randomDataset(rng, dt, []int{11}, sig)
		shifts := randomShifts(rng, 11, true)
		for _, nMasks := range []int{16, 40} {
			stack := randomStack(rng, nMasks, sig)
			want, mag := shiftedReference(ds, stack, shifts)
			res, err := ApplyMasks(context.Background(), ds, stack, splitPlan(anyCPUs, 2, 4, 7),
				Options{TileFrames: 4, Shifts: shifts, NoPin: true})
			require.NoError(t, err)
			requireClose(t, res.F32, want, mag, 5e-7)
		}
	}
}
