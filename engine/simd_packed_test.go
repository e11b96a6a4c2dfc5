//go:build amd64 && linux

package engine

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/masks"
)

// setAVX512 sets haveAVX512 (the ZMM packed kernels) for the rest of test t.
func setAVX512(t *testing.T, on bool) {
	t.Helper()
	old := haveAVX512
	haveAVX512 = on
	t.Cleanup(func() { haveAVX512 = old })
}

// packedISAs are the packed kernel sets this CPU can run: "zmm" (AVX-512) where it has
// it, and "ymm" (AVX2+FMA).
func packedISAs() []bool {
	if haveAVX512 {
		return []bool{true, false}
	}
	return []bool{false}
}

// TestPackedKernels checks the register-blocked packed kernels through simdDense (whole
// groups of 8 masks packed, the rest through the block kernels) against a float64
// reference for every pixel type they handle, with the AVX-512 and the AVX2 kernels: 8 to
// 100 masks (1 to 12 packed groups, 0 to 5 masks left over), frames of 5 to 2067 pixels
// (less than one 16-pixel step, whole steps, whole 1024-pixel blocks and a tail of 19),
// tiles of 1 to 7 frames (calls of 3 frames and a last call of 1 or 2), and a tile that
// starts off its alignment.
func TestPackedKernels(t *testing.T) {
	if packedKernelsFor[uint16]() == nil {
		t.Skip("no packed kernels on this CPU")
	}
	rng := rand.New(rand.NewPCG(11, 12))
	dtypes := []dataset.DType{dataset.Uint8, dataset.Int8, dataset.Uint16, dataset.Int16, dataset.Int32, dataset.Float32}
	for _, zmm := range packedISAs() {
		for _, dt := range dtypes {
			for _, sig := range [][2]int{{1, 5}, {4, 8}, {32, 32}, {3, 689}} {
				ds := randomDataset(rng, dt, []int{8}, sig)
				for _, nMasks := range []int{8, 13, 16, 24, 100} {
					stack := randomStack(rng, nMasks, sig)
					want, mag := reference(ds, stack)
					for _, frames := range []int{1, 2, 3, 4, 5, 7} {
						t.Run(fmt.Sprintf("zmm=%v/%v/%dx%d/masks%d/frames%d", zmm, dt, sig[0], sig[1], nMasks, frames), func(t *testing.T) {
							setSIMD(t, true)
							setAVX512(t, zmm)
							if zmm && dt == dataset.Float32 && nMasks >= bcastMinMasks {
								t.Skip("takes the broadcast kernels (TestBcastKernels)")
							}
							// Frames 1..frames of the dataset: the tile starts one frame in.
							fb := ds.FrameBytes()
							tile := ds.data[fb : (1+frames)*fb]
							acc := make([]float64, frames*nMasks)
							applySIMDDense(t, dt, stack, tile, frames, acc)
							requireClose(t, acc, want[nMasks:(1+frames)*nMasks], mag[nMasks:(1+frames)*nMasks], 1e-5)
						})
					}
				}
			}
		}
	}
}

// applySIMDDense runs a simdDense kernel of dtype dt, which must take the packed path.
func applySIMDDense(t *testing.T, dt dataset.DType, stack *masks.Stack, tile []byte, frames int, acc []float64) {
	t.Helper()
	switch dt {
	case dataset.Uint8:
		applyPacked[uint8](t, stack, tile, frames, acc)
	case dataset.Int8:
		applyPacked[int8](t, stack, tile, frames, acc)
	case dataset.Uint16:
		applyPacked[uint16](t, stack, tile, frames, acc)
	case dataset.Int16:
		applyPacked[int16](t, stack, tile, frames, acc)
	case dataset.Int32:
		applyPacked[int32](t, stack, tile, frames, acc)
	case dataset.Float32:
		applyPacked[float32](t, stack, tile, frames, acc)
	default:
		t.Fatalf("no packed kernels for %v", dt)
	}
}

func applyPacked[N native](t *testing.T, stack *masks.Stack, tile []byte, frames int, acc []float64) {
	t.Helper()
	d := newSIMDDense(stack.Data, stack.N, stack.Pixels(), simdKernels[N](), nil)
	require.NotNil(t, d.pk, "packed kernels")
	require.Equal(t, haveAVX512, d.pk.tails, "ZMM kernels have masked tails")
	d.apply(tile, frames, acc)
}

// TestPackedTailReadsNoFurther runs the packed kernels on frames that end where a page
// without access begins: the AVX-512 kernels' masked tail loads must not touch it (a
// fault would kill the test), nor the AVX2 kernels' whole steps with the tail in Go.
func TestPackedTailReadsNoFurther(t *testing.T) {
	if packedKernelsFor[uint16]() == nil {
		t.Skip("no packed kernels on this CPU")
	}
	page := unix.Getpagesize()
	mem, err := unix.Mmap(-1, 0, 2*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	require.NoError(t, err)
	t.Cleanup(func() { unix.Munmap(mem) })
	require.NoError(t, unix.Mprotect(mem[page:], unix.PROT_NONE))
	rng := rand.New(rand.NewPCG(13, 14))
	sig := [2]int{3, 37} // 111 pixels: 6 whole steps and 15 more
	for _, zmm := range packedISAs() {
		for _, dt := range []dataset.DType{dataset.Uint8, dataset.Uint16, dataset.Float32} {
			t.Run(fmt.Sprintf("zmm=%v/%v", zmm, dt), func(t *testing.T) {
				setSIMD(t, true)
				setAVX512(t, zmm)
				ds := randomDataset(rng, dt, []int{3}, sig)
				tile := mem[page-len(ds.data) : page]
				copy(tile, ds.data)
				nMasks := bcastMinMasks - 1 // packed groups (and masks left over) for every dtype
				stack := randomStack(rng, nMasks, sig)
				want, mag := reference(ds, stack)
				acc := make([]float64, 3*nMasks)
				applySIMDDense(t, dt, stack, tile, 3, acc)
				requireClose(t, acc, want, mag, 1e-5)
			})
		}
	}
}

// TestBcastKernels checks the broadcast kernels (float32 frames, AVX-512) through simdDense
// against a float64 reference: 32 to 100 masks (panels of 64 and a last one of 16 to 64,
// zero-padded), frames of 1 to 2067 pixels (under one 4-pixel step, whole blocks and a
// tail), and tiles of 1 to 29 frames (calls of 6 to 12 frames and every smaller last call),
// starting off its alignment; and on frames that end where a page without access begins.
func TestBcastKernels(t *testing.T) {
	if bcastKernelsFor[float32]() == nil {
		t.Skip("no AVX-512 on this CPU")
	}
	setSIMD(t, true)
	rng := rand.New(rand.NewPCG(15, 16))
	for _, sig := range [][2]int{{1, 3}, {4, 8}, {3, 689}} {
		ds := randomDataset(rng, dataset.Float32, []int{30}, sig)
		for _, nMasks := range []int{32, 33, 40, 48, 64, 100, 113} {
			stack := randomStack(rng, nMasks, sig)
			want, mag := reference(ds, stack)
			for _, frames := range []int{1, 2, 5, 11, 12, 13, 24, 29} {
				t.Run(fmt.Sprintf("%dx%d/masks%d/frames%d", sig[0], sig[1], nMasks, frames), func(t *testing.T) {
					fb := ds.FrameBytes()
					d := newSIMDDense(stack.Data, nMasks, stack.Pixels(), simdKernels[float32](), nil)
					require.NotNil(t, d.bk, "broadcast kernels")
					acc := make([]float64, frames*nMasks)
					d.apply(ds.data[fb:(1+frames)*fb], frames, acc)
					requireClose(t, acc, want[nMasks:(1+frames)*nMasks], mag[nMasks:(1+frames)*nMasks], 1e-5)
				})
			}
		}
	}
	t.Run("last page", func(t *testing.T) {
		page := unix.Getpagesize()
		mem, err := unix.Mmap(-1, 0, 2*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
		require.NoError(t, err)
		t.Cleanup(func() { unix.Munmap(mem) })
		require.NoError(t, unix.Mprotect(mem[page:], unix.PROT_NONE))
		sig := [2]int{3, 37}
		ds := randomDataset(rng, dataset.Float32, []int{5}, sig)
		tile := mem[page-len(ds.data) : page]
		copy(tile, ds.data)
		stack := randomStack(rng, 40, sig)
		want, mag := reference(ds, stack)
		d := newSIMDDense(stack.Data, stack.N, stack.Pixels(), simdKernels[float32](), nil)
		acc := make([]float64, 5*40)
		d.apply(tile, 5, acc)
		requireClose(t, acc, want, mag, 1e-5)
	})
}

// The broadcast kernels in the tree are what gen_bcast.go writes (run `go generate
// ./engine` after changing it).
func TestBcastKernelsGenerated(t *testing.T) {
	dir := t.TempDir()
	run := exec.Command("go", "run", "gen_bcast.go", "-out", dir)
	out, err := run.CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, name := range []string{"simd_bcast_amd64.s", "simd_bcast_amd64.go"} {
		want, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		got, err := os.ReadFile(name)
		require.NoError(t, err)
		require.True(t, bytes.Equal(want, got), "%s differs from what gen_bcast.go writes: run go generate ./engine", name)
	}
}
