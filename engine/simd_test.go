package engine

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/planner"
)

// setSIMD sets useSIMD for the rest of test t.
func setSIMD(t *testing.T, on bool) {
	t.Helper()
	old := useSIMD
	useSIMD = on
	t.Cleanup(func() { useSIMD = old })
}

// TestDotBlock checks the block kernels, through dotBlock (one frame) and dotPair (two
// frames: the pair kernel for each 4 masks, dotBlock for the rest), and the quad kernels
// (1 or 2 masks, four frames: the two frames, each twice, on whole 16-pixel steps), against a float64
// reference for every pixel type they handle: blocks of 1 to 70 and 2048 pixels (the
// kernels' 16-pixel steps and the float64 tail), 1 to 9 masks (every group split: 8, 4,
// 2, 1; 4+4, 4+remainder), and frames and masks starting off their 32-byte alignment.
func TestDotBlock(t *testing.T) {
	setSIMD(t, true)
	rng := rand.New(rand.NewPCG(7, 8))
	for _, dt := range []dataset.DType{dataset.Uint8, dataset.Int8, dataset.Uint16, dataset.Int16, dataset.Int32, dataset.Float32} {
		t.Run(dt.String(), func(t *testing.T) {
			switch dt {
			case dataset.Uint8:
				testDotBlock[uint8](t, rng, dt)
			case dataset.Int8:
				testDotBlock[int8](t, rng, dt)
			case dataset.Uint16:
				testDotBlock[uint16](t, rng, dt)
			case dataset.Int16:
				testDotBlock[int16](t, rng, dt)
			case dataset.Int32:
				testDotBlock[int32](t, rng, dt)
			case dataset.Float32:
				testDotBlock[float32](t, rng, dt)
			}
		})
	}
}

func testDotBlock[N native](t *testing.T, rng *rand.Rand, dt dataset.DType) {
	k := simdKernels[N]()
	if k == nil {
		t.Skip("no AVX2+FMA block kernels on this CPU")
	}
	lengths := []int{pixelChunk}
	for n := 1; n <= 70; n++ {
		lengths = append(lengths, n)
	}
	for _, n := range lengths {
		for nm := 1; nm <= 9; nm++ {
			wOff := rng.IntN(8)
			ldw := n + rng.IntN(5)
			// Two frames of n random pixels, each after 0 to 7 others, so that they start
			// anywhere in a 32-byte line.
			var px [2][]N
			var data [2][]byte
			var pxOff [2]int
			for f := range 2 {
				pxOff[f] = rng.IntN(8)
				data[f] = randomDataset(rng, dt, []int{1}, [2]int{1, pxOff[f] + n}).data
				px[f] = asNative[N](data[f])[pxOff[f]:]
			}
			w := make([]float32, wOff+(nm-1)*ldw+n)
			for i := range w {
				w[i] = float32(rng.Float64()*2 - 1)
			}
			w = w[wOff:]
			pf := &prefetcher{w: w, ldw: ldw, rows: nm}
			part := make([]float32, max(nm, 8))

			// dotBlock and dotPair add to acc: start from m + 10f.
			var single [2][]float64
			var pair [2][]float64
			for f := range 2 {
				single[f], pair[f] = make([]float64, nm), make([]float64, nm)
				for m := range nm {
					single[f][m] = float64(m + 10*f)
					pair[f][m] = float64(m + 10*f)
				}
				dotBlock(k, px[f], w, ldw, pf, single[f], part)
			}
			dotPair(k, px[0], px[1], w, ldw, pf, pair[0], pair[1], part)
			var quad [8]float32 // frame f, mask m at f·nm+m
			if kn := n &^ 15; nm <= 2 && kn > 0 {
				if nm == 1 {
					k.quad(&px[0][0], &px[1][0], &px[1][0], &px[0][0], kn, &w[0], &quad[0])
				} else {
					k.quad2(&px[0][0], &px[1][0], &px[1][0], &px[0][0], kn, &w[0], ldw, &quad[0])
				}
				for j, q := range quad[:4*nm] {
					f, m := j/nm, j%nm
					src := [4]int{0, 1, 1, 0}[f]
					want, mag := 0.0, 0.0
					for i := range kn {
						v := pixel(data[src], dt, pxOff[src]+i) * float64(w[m*ldw+i])
						want += v
						mag += math.Abs(v)
					}
					require.InDelta(t, want, float64(q), 1e-5*mag+1e-30, "quad kernel: %d pixels, frame %d of 4, mask %d of %d (ldw %d)", kn, f, m, nm, ldw)
				}
			}
			for f := range 2 {
				for m := range nm {
					want, mag := float64(m+10*f), 0.0
					for i := range n {
						v := pixel(data[f], dt, pxOff[f]+i) * float64(w[m*ldw+i])
						want += v
						mag += math.Abs(v)
					}
					msg := fmt.Sprintf("%d pixels (offset %d), frame %d, mask %d of %d (offset %d, ldw %d)", n, pxOff[f], f, m, nm, wOff, ldw)
					require.InDelta(t, want, single[f][m], 1e-5*mag+1e-30, "dotBlock: "+msg)
					require.InDelta(t, want, pair[f][m], 1e-5*mag+1e-30, "dotPair: "+msg)
				}
			}
		}
	}
}

// TestSIMDKernelChoice checks which kernel a CPU worker picks with the block kernels on
// and off, and that both compute the product of every dtype within float32 rounding of
// the float64 reference, for 1 to 9, 16 and 64 masks on frames of 50×47 pixels (two full
// pixel chunks and a tail of 254, not a multiple of 16), in tiles of 1, 2, 3 and 4
// frames (an odd last frame beside the frame pairs).
func TestSIMDKernelChoice(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	sig := [2]int{50, 47}
	const nFrames = 11
	dtypes := []dataset.DType{dataset.Uint8, dataset.Uint16, dataset.Uint32, dataset.Int8, dataset.Int16, dataset.Int32, dataset.Float32, dataset.Float64}
	for _, dt := range dtypes {
		ds := randomDataset(rng, dt, []int{nFrames}, sig)
		for _, nMasks := range []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 64} {
			stack := randomStack(rng, nMasks, sig)
			want, mag := reference(ds, stack)
			for _, c := range []struct {
				on         bool
				tileFrames int
			}{{true, 1}, {true, 2}, {true, 3}, {true, 4}, {false, 4}} {
				on := c.on
				t.Run(fmt.Sprintf("%v/masks%d/simd=%v/tile%d", dt, nMasks, on, c.tileFrames), func(t *testing.T) {
					setSIMD(t, on)
					w, err := NewCPUWorker(&Job{Dataset: ds, Masks: stack, NMasks: nMasks, TileFrames: c.tileFrames})
					require.NoError(t, err)
					kern := w.(*cpuWorker).kernel
					asm := on && simdKernelsFor(dt)
					switch {
					case asm:
						require.Contains(t, fmt.Sprintf("%T", kern), "simdDense")
					case nMasks == 1:
						require.Contains(t, fmt.Sprintf("%T", kern), "fused")
					default:
						require.Contains(t, fmt.Sprintf("%T", kern), "dense")
						require.NotContains(t, fmt.Sprintf("%T", kern), "simdDense")
					}
					out := Output{F32: make([]float32, nFrames*nMasks)}
					require.NoError(t, w.Process(context.Background(), planner.Partition{Start: 0, End: nFrames}, out, nil))
					requireClose(t, out.F32, want, mag, 1e-5)
				})
			}
		}
	}
}

// simdKernelsFor reports whether the block kernels handle dtype dt on this machine.
func simdKernelsFor(dt dataset.DType) bool {
	switch dt {
	case dataset.Uint8:
		return simdKernels[uint8]() != nil
	case dataset.Int8:
		return simdKernels[int8]() != nil
	case dataset.Uint16:
		return simdKernels[uint16]() != nil
	case dataset.Int16:
		return simdKernels[int16]() != nil
	case dataset.Int32:
		return simdKernels[int32]() != nil
	case dataset.Float32:
		return simdKernels[float32]() != nil
	}
	return false
}
