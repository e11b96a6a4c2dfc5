package engine

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/masks"
)

// bcast64Variants are the float64 broadcast kernel sets this CPU runs: AVX-512 where it
// has it, AVX2+FMA where it has that.
func bcast64Variants(t *testing.T) map[string]*bcast64Kernels {
	v := map[string]*bcast64Kernels{}
	if bcast64KernelsFor(1) != nil { // AVX2 and FMA
		v["avx2"] = bcast64KernelsY()
		if k := bcast64KernelsFor(64); k != bcast64KernelsY() { // AVX-512
			v["avx512"] = k
		}
	}
	if len(v) == 0 {
		t.Skip("no float64 SIMD kernels on this CPU (needs amd64 with AVX2 and FMA)")
	}
	return v
}

// stackWithLo returns n masks whose float64 weights in [-1, 1) are not exact in float32
// (Data the float32 rounding, Lo the remainder), and those weights.
func stackWithLo(rng *rand.Rand, n int, sig [2]int) (*masks.Stack, []float64) {
	s := &masks.Stack{N: n, SigY: sig[0], SigX: sig[1], Data: make([]float32, n*sig[0]*sig[1]), Lo: make([]float32, n*sig[0]*sig[1])}
	w := make([]float64, len(s.Data))
	for i := range w {
		w[i] = rng.Float64()*2 - 1
		s.Data[i] = float32(w[i])
		s.Lo[i] = float32(w[i] - float64(s.Data[i]))
		w[i] = float64(s.Data[i]) + float64(s.Lo[i]) // the weight the stack holds
	}
	for i := range n {
		s.Names = append(s.Names, fmt.Sprintf("lo%d", i))
	}
	return s, w
}

// reference64 is the product in float64 with a plain loop, pixels in reverse order (not
// the kernels' order), and Σ|w·p| for its rounding bound.
func reference64(ds *memDataset, w []float64, nMasks int) (want, mag []float64) {
	p := len(w) / nMasks
	n := ds.NumFrames()
	want, mag = make([]float64, n*nMasks), make([]float64, n*nMasks)
	for f := range n {
		for m := range nMasks {
			var s, a float64
			for i := p - 1; i >= 0; i-- {
				v := pixel(ds.data, ds.dt, f*p+i) * w[m*p+i]
				s += v
				a += math.Abs(v)
			}
			want[f*nMasks+m], mag[f*nMasks+m] = s, a
		}
	}
	return want, mag
}

// float64Kernel builds the float64 kernel for dtype dt on kernels k.
func float64Kernel(k *bcast64Kernels, dt dataset.DType, stack *masks.Stack, tile int) kernel {
	packed := packBcast64(stack, simdBlock64, k.chunk(), k.lanes)
	p := stack.Pixels()
	switch dt {
	case dataset.Uint8:
		return newSIMDDense64[uint8](k, packed, stack.N, p, tile)
	case dataset.Int8:
		return newSIMDDense64[int8](k, packed, stack.N, p, tile)
	case dataset.Uint16:
		return newSIMDDense64[uint16](k, packed, stack.N, p, tile)
	case dataset.Int16:
		return newSIMDDense64[int16](k, packed, stack.N, p, tile)
	case dataset.Uint32:
		return newSIMDDense64[uint32](k, packed, stack.N, p, tile)
	case dataset.Int32:
		return newSIMDDense64[int32](k, packed, stack.N, p, tile)
	case dataset.Float32:
		return newSIMDDense64[float32](k, packed, stack.N, p, tile)
	case dataset.Float64:
		return newSIMDDense64[float64](k, packed, stack.N, p, tile)
	}
	panic("bad dtype")
}

// runTiles applies k to the frames of ds tile by tile (the last tile shorter).
func runTiles(k kernel, ds *memDataset, nMasks, tile int) []float64 {
	n, fb := ds.NumFrames(), ds.FrameBytes()
	got := make([]float64, n*nMasks)
	for f0 := 0; f0 < n; f0 += tile {
		frames := min(tile, n-f0)
		k.apply(ds.data[f0*fb:(f0+frames)*fb], frames, got[f0*nMasks:(f0+frames)*nMasks])
	}
	return got
}

// The float64 kernels match a float64 reference on every pixel type (int32 and uint32
// over their whole range, which float32 would round), weights with Lo parts, odd pixel
// counts (13×41 = 533: a block of simdBlock64 and a 21-pixel one, neither a multiple of
// 4; 1×3: fewer pixels than a loop iteration), mask counts that leave partial vectors and
// panels, and tiles of 1 to 13 frames.
func TestSIMDDense64MatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(64, 1))
	for name, k := range bcast64Variants(t) {
		for _, sig := range [][2]int{{13, 41}, {1, 3}} {
			for _, dt := range allDTypes {
				ds := randomDataset(rng, dt, []int{13}, sig)
				for _, nMasks := range []int{1, 2, 5, 8, 13, 33, 70} {
					stack, w := stackWithLo(rng, nMasks, sig)
					want, mag := reference64(ds, w, nMasks)
					for _, tile := range []int{1, 6, 13} {
						t.Run(fmt.Sprintf("%s/%dx%d/%v/masks%d/tile%d", name, sig[0], sig[1], dt, nMasks, tile), func(t *testing.T) {
							got := runTiles(float64Kernel(k, dt, stack, tile), ds, nMasks, tile)
							requireClose(t, got, want, mag, 1e-14)
						})
					}
				}
			}
		}
	}
}

// Integer frames and integer weights give exact sums (below 2⁵³): no pixel passes
// through float32, which holds integers only up to 2²⁴.
func TestSIMDDense64IntegerExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(64, 2))
	sig := [2]int{9, 57}
	for name, k := range bcast64Variants(t) {
		for _, dt := range []dataset.DType{dataset.Int32, dataset.Uint32, dataset.Uint16} {
			ds := randomDataset(rng, dt, []int{11}, sig)
			stack := &masks.Stack{N: 19, SigY: sig[0], SigX: sig[1], Data: make([]float32, 19*sig[0]*sig[1])}
			w := make([]float64, len(stack.Data))
			for i := range w {
				w[i] = float64(rng.IntN(15) - 7)
				stack.Data[i] = float32(w[i])
			}
			want, _ := reference64(ds, w, stack.N)
			t.Run(fmt.Sprintf("%s/%v", name, dt), func(t *testing.T) {
				got := runTiles(float64Kernel(k, dt, stack, 4), ds, stack.N, 4)
				require.Equal(t, want, got)
			})
		}
	}
}

// A NaN or Inf pixel of a float64 or float32 frame makes that frame's sums non-finite for
// the masks that meet it (0·NaN is NaN), and no other frame's: the rows exactNonFinite
// then recomputes.
func TestSIMDDense64NonFinite(t *testing.T) {
	rng := rand.New(rand.NewPCG(64, 3))
	sig := [2]int{7, 11}
	for name, k := range bcast64Variants(t) {
		for _, dt := range []dataset.DType{dataset.Float32, dataset.Float64} {
			ds := randomDataset(rng, dt, []int{9}, sig)
			ds.setFloat(2*77+5, math.NaN())
			ds.setFloat(6*77+76, math.Inf(-1))
			stack := randomStack(rng, 10, sig)
			t.Run(fmt.Sprintf("%s/%v", name, dt), func(t *testing.T) {
				got := runTiles(float64Kernel(k, dt, stack, 9), ds, stack.N, 9)
				for f := range 9 {
					for m := range stack.N {
						v := got[f*stack.N+m]
						switch f {
						case 2:
							require.True(t, math.IsNaN(v), "frame 2 mask %d = %v", m, v)
						case 6:
							require.True(t, math.IsInf(v, 0) || math.IsNaN(v), "frame 6 mask %d = %v", m, v)
						default:
							require.False(t, math.IsNaN(v) || math.IsInf(v, 0), "frame %d mask %d = %v", f, m, v)
						}
					}
				}
			})
		}
	}
}

// packBcast64 places weight (m, i) of the stack, Lo included, at bcast64Panel's offset,
// and zeros in the padding.
func TestPackBcast64(t *testing.T) {
	rng := rand.New(rand.NewPCG(64, 4))
	sig := [2]int{5, 7}
	for _, c := range []struct{ block, chunk, lanes, n int }{{16, 32, 8, 41}, {8, 12, 4, 13}, {35, 8, 8, 3}} {
		stack, w := stackWithLo(rng, c.n, sig)
		p := packBcast64(stack, c.block, c.chunk, c.lanes)
		pixels := stack.Pixels()
		padded := (c.n + c.lanes - 1) / c.lanes * c.lanes
		require.Len(t, p, padded*pixels)
		seen := make([]bool, len(p))
		for k0 := 0; k0 < pixels; k0 += c.block {
			for m0 := 0; m0 < c.n; m0 += c.chunk {
				off, width := bcast64Panel(c.n, pixels, c.block, c.chunk, c.lanes, k0, m0)
				require.Zero(t, width%c.lanes)
				for i := range min(c.block, pixels-k0) {
					for j := range width {
						want := 0.0
						if m0+j < c.n {
							want = w[(m0+j)*pixels+k0+i]
						}
						require.Equal(t, want, p[off+i*width+j], "block %d mask %d pixel %d", k0, m0+j, k0+i)
						seen[off+i*width+j] = true
					}
				}
			}
		}
		require.NotContains(t, seen, false, "every packed value belongs to one panel")
	}
}

// The float64 conversion kernels give float64(v) for every pixel type they handle, over
// the whole range of each (the extremes included), for lengths with and without a tail
// past the last 8 pixels.
func TestConvert64(t *testing.T) {
	if cvt64KernelFor[uint16]() == nil {
		t.Skip("no conversion kernels on this CPU")
	}
	rng := rand.New(rand.NewPCG(64, 6))
	for _, dt := range allDTypes {
		for _, n := range []int{1, 7, 8, 9, 64, 517} {
			ds := randomDataset(rng, dt, []int{1}, [2]int{1, n})
			switch dt { // the extremes of the integer types
			case dataset.Uint8, dataset.Int8:
				ds.data[0] = 0x80
				ds.data[n-1] = 0xff
			case dataset.Uint16, dataset.Int16, dataset.Uint32, dataset.Int32:
				for i := range dt.Size() {
					ds.data[i] = 0xff
					ds.data[(n-1)*dt.Size()+i] = 0
				}
				ds.data[(n-1)*dt.Size()+dt.Size()-1] = 0x80 // host order: little endian
			}
			want := make([]float64, n)
			for i := range want {
				want[i] = pixel(ds.data, dt, i)
			}
			t.Run(fmt.Sprintf("%v/%d", dt, n), func(t *testing.T) {
				var got []float64
				switch dt {
				case dataset.Uint8:
					got = convert64(ds.data, uint8(0))
				case dataset.Int8:
					got = convert64(ds.data, int8(0))
				case dataset.Uint16:
					got = convert64(ds.data, uint16(0))
				case dataset.Int16:
					got = convert64(ds.data, int16(0))
				case dataset.Uint32:
					got = convert64(ds.data, uint32(0))
				case dataset.Int32:
					got = convert64(ds.data, int32(0))
				case dataset.Float32:
					got = convert64(ds.data, float32(0))
				case dataset.Float64:
					got = convert64(ds.data, float64(0))
				}
				require.Equal(t, want, got)
			})
		}
	}
}

// convert64 converts the pixels of b (type N) through simdDense64's convert.
func convert64[N native](b []byte, _ N) []float64 {
	d := &simdDense64[N]{cvt: cvt64KernelFor[N]()}
	src := asNative[N](b)
	dst := make([]float64, len(src)+3) // room past the end: the kernel must not write there
	for i := range dst {
		dst[i] = -1
	}
	d.convert(dst, src)
	if dst[len(src)] != -1 || dst[len(src)+2] != -1 {
		panic("convert wrote past its pixels")
	}
	return dst[:len(src)]
}
