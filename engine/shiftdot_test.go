package engine

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/masks"
)

// dotShifts are shifts that take every branch of shiftDot.frame: whole pixels, a zero
// fraction in one axis, fractions below and above 0.5 (the weight of 1 on either
// pixel), exactly 0.5, close to 0 and 1, negative, beyond the frame's edge rows and
// columns, and larger than the frame.
var dotShifts = []float64{
	0, 0, 2, -3, -1, 4, 0, 1.25, 0.75, 0, 0.5, 0.5, 0.25, 0.75, -0.25, -0.75, 1.3, -2.6,
	-2.7, 1.4, 3.999, -0.001, 0.0001, -3.9999, 7.5, 0.3, -7.5, -0.3, 12.2, 0.6, -12.7, 0.4,
	0.6, 30.5, -0.2, -30.2, 500.5, 0.5, -2.5, -1e6, 5.5, 5.5, -5.5, -5.5,
}

// TestShiftDot checks the fused shifted-mask kernels (shiftDot.tile, a tile of every shift) against the direct
// float64 reference of the bilinearly shifted masks, for every pixel type they take, 1
// to 7 dense masks (4, 2 and 1 at a time), frame widths that are and are not a multiple
// of 8 and 16, and masks zero at the edge column (colZero), outside a box of rows and
// columns, or everywhere; frames where fewer than 8
// columns of g have both source pixels in the frame are left to the caller.
func TestShiftDot(t *testing.T) {
	if shiftDotKernels[uint16]() == nil {
		t.Skip("no AVX2+FMA on this CPU")
	}
	rng := rand.New(rand.NewPCG(11, 12))
	nf := len(dotShifts) / 2
	for _, dt := range []dataset.DType{dataset.Uint8, dataset.Int8, dataset.Uint16, dataset.Int16, dataset.Int32, dataset.Float32} {
		for _, sig := range [][2]int{{13, 21}, {9, 16}, {20, 37}, {5, 64}, {11, 9}} {
			ds := randomDataset(rng, dt, []int{nf}, sig)
			for _, nMasks := range []int{1, 2, 3, 4, 5, 7} {
				for _, zero := range []string{"none", "edges", "box", "all"} {
					stack := randomStack(rng, nMasks, sig)
					for i := range stack.Data {
						y, x := i%(sig[0]*sig[1])/sig[1], i%sig[1]
						switch {
						case zero == "edges" && (x < 2 || x >= sig[1]-2), // columns 0-1 and the last two
							zero == "box" && (x < 3 || x >= sig[1]-4 || y < 2 || y >= sig[0]-3), // a box inside
							zero == "all":
							stack.Data[i] = 0
						}
					}
					t.Run(fmt.Sprintf("%v/%dx%d/masks%d/zero=%v", dt, sig[0], sig[1], nMasks, zero), func(t *testing.T) {
						testShiftDot(t, ds, stack)
					})
				}
			}
		}
	}
}

func testShiftDot(t *testing.T, ds *memDataset, stack *masks.Stack) {
	var k interface {
		tile(b []byte, frames int, shifts []float64, acc []float64) []bool
	}
	switch ds.dt {
	case dataset.Uint8:
		k = dotOf[uint8](stack)
	case dataset.Int8:
		k = dotOf[int8](stack)
	case dataset.Uint16:
		k = dotOf[uint16](stack)
	case dataset.Int16:
		k = dotOf[int16](stack)
	case dataset.Int32:
		k = dotOf[int32](stack)
	case dataset.Float32:
		k = dotOf[float32](stack)
	}
	want, mag := shiftedReference(ds, stack, dotShifts)
	w := stack.SigX
	acc := make([]float64, ds.NumFrames()*stack.N)
	done := k.tile(ds.data, ds.NumFrames(), dotShifts, acc)
	for f := range ds.NumFrames() {
		dy, dx := dotShifts[2*f], dotShifts[2*f+1]
		row, ok := acc[f*stack.N:(f+1)*stack.N], done[f]
		kx, fx := split(dx)
		reach := 0 // the source columns of g column v: v + kx to v + kx + reach
		if fx > 0 {
			reach = 1
		}
		cols := min(w, w-kx-reach) - max(0, -kx) // g columns whose source pixels lie in the row
		require.Equal(t, cols >= 8, ok, "shift (%v, %v): %d columns", dy, dx, cols)
		if ok {
			requireClose(t, row, want[f*stack.N:(f+1)*stack.N], mag[f*stack.N:(f+1)*stack.N], 5e-7)
		}
	}
}

// dotAdapter adapts shiftDot[N].tile to frames in bytes.
type dotAdapter[N native] struct{ *shiftDot[N] }

func (d dotAdapter[N]) tile(b []byte, frames int, shifts []float64, acc []float64) []bool {
	return d.shiftDot.tile(asNative[N](b), frames, shifts, acc)
}

func dotOf[N native](s *masks.Stack) dotAdapter[N] {
	return dotAdapter[N]{newShiftDot[N](&Job{Masks: s, NMasks: s.N})}
}

// TestApplyMasksShiftedRing: sparse stacks dense in their box (rings: sparseDot) take the
// fused kernels over the box (shiftSparseDot), sparse ones spread over the frame the
// gather; both against the direct float64 reference, for the shifts of dotShifts (rows
// and columns of the box moved past the frame's edges, whole, sub-pixel, far outside).
func TestApplyMasksShiftedRing(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	sig := [2]int{30, 41}
	nf := len(dotShifts) / 2
	for _, dt := range []dataset.DType{dataset.Uint16, dataset.Int8, dataset.Float32} {
		ds := randomDataset(rng, dt, []int{nf}, sig)
		for _, nMasks := range []int{1, 3} {
			stack := &masks.Stack{N: nMasks, SigY: sig[0], SigX: sig[1], Data: make([]float32, nMasks*sig[0]*sig[1])}
			for m := range nMasks { // rings of radii [3+2m, 7+2m) about (12, 17)
				for y := range sig[0] {
					for x := range sig[1] {
						if r2 := (y-12)*(y-12) + (x-17)*(x-17); r2 >= (3+2*m)*(3+2*m) && r2 < (7+2*m)*(7+2*m) {
							stack.Data[m*sig[0]*sig[1]+y*sig[1]+x] = float32(rng.Float64() + 0.5)
						}
					}
				}
			}
			csr := stack.ToCSR()
			require.True(t, sparseDot(csr, sig), "rings are dense in their box")
			kern := newShiftedKernel[uint16](&Job{Dataset: ds, Masks: &masks.Stack{N: nMasks, SigY: sig[0], SigX: sig[1], Sparse: csr}, Sparse: csr, NMasks: nMasks, TileFrames: 4})
			if shiftDotKernels[uint16]() != nil {
				require.IsType(t, &shiftSparseDot[uint16]{}, kern)
			} else { // no fused kernels on this CPU: the gather
				require.IsType(t, &shiftSparse[uint16]{}, kern)
			}
			want, mag := shiftedReference(ds, stack, dotShifts)
			s := *stack
			s.Sparse, s.Data = csr, nil
			res, err := ApplyMasks(context.Background(), ds, &s, splitPlan(anyCPUs, 3, 7, 15), Options{Shifts: dotShifts, TileFrames: 4, NoPin: true})
			require.NoError(t, err)
			require.True(t, res.Stats.Sparse)
			requireClose(t, res.F32, want, mag, 5e-7)
		}
	}
}

// TestApplyMasksShiftedWholeNaN: whole-pixel shifts of 1 and 2 dense masks (wholeQuad's
// quad kernels, frames read at their own offsets) keep NaN locality: a NaN pixel outside
// a mask's shifted support leaves it alone, one inside gives NaN, against the float64
// reference, for shifts positive, negative, beyond the frame.
func TestApplyMasksShiftedWholeNaN(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	sig := [2]int{16, 40}
	p := sig[0] * sig[1]
	shifts := []float64{0, 0, 1, 3, -2, -5, 3, -1, 0, 7, -1, 0, 20, 1, 2, -50, 5, 5, -4, 2}
	n := len(shifts) / 2
	ds := randomDataset(rng, dataset.Float32, []int{n}, sig)
	for f := range n {
		ds.setFloat(f*p+9*sig[1]+30, math.NaN()) // pixel (9, 30)
	}
	for _, nMasks := range []int{1, 2} {
		stack := &masks.Stack{N: nMasks, SigY: sig[0], SigX: sig[1], Data: make([]float32, nMasks*p)}
		for i := range stack.Data {
			if i%sig[1] < 20 || i >= p { // mask 0: the left half of the frame; mask 1: all of it
				stack.Data[i] = float32(rng.Float64() + 0.5)
			}
		}
		want, mag := shiftedReference(ds, stack, shifts)
		require.False(t, nonFinite(want[0]), "mask 0 unshifted misses the NaN pixel")
		res, err := ApplyMasks(context.Background(), ds, stack, splitPlan(anyCPUs, 2, 3, 4, 3), Options{Shifts: shifts, TileFrames: 4, NoPin: true})
		require.NoError(t, err)
		requireSameNonFinite(t, res.F32, want, mag, 5e-7, fmt.Sprintf("%d masks", nMasks))
	}
}
