package engine

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/internal/testfiles"
	"github.com/stemdot/stemdot/synth"
)

// TestQuadFramesMoreMasks: stacks of 5, 6, 8 and 9 masks (float32 frames on AVX-512: 5
// and 6 take the quad kernels, two masks per call and one for an odd last mask; 8 and 9
// the packed kernels next to them), and 1-7 masks on tiles of up to 40 frames, on
// float32, uint16 and int8 frames, with NaN and ±Inf in float32 frames. Against a
// float64 reference, and bit for bit the same for a given tile whatever the partition
// cuts and the number of workers.
func TestQuadFramesMoreMasks(t *testing.T) {
	rng := rand.New(rand.NewPCG(43, 44))
	sigs := [][2]int{{3, 5}, {31, 33}, {32, 32}, {1, 1025}}
	for _, dt := range []dataset.DType{dataset.Float32, dataset.Uint16, dataset.Int8} {
		for _, sig := range sigs {
			for _, c := range [][2]int{{5, 5}, {6, 3}, {8, 5}, {9, 3}, {1, 41}, {3, 41}, {5, 41}, {7, 41}} {
				nMasks, n := c[0], c[1]
				t.Run(fmt.Sprintf("%v/%dx%d/%dmasks/%dframes", dt, sig[0], sig[1], nMasks, n), func(t *testing.T) {
					ds := randomDataset(rng, dt, []int{n}, sig)
					stack := randomStack(rng, nMasks, sig)
					p := sig[0] * sig[1]
					if dt == dataset.Float32 {
						for _, v := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
							ds.setFloat(rng.IntN(n*p), v)
						}
					}
					want, mag := reference(ds, stack)
					tiles := []int{2, 3, 4, 5, 7, 9}
					if n > 9 {
						tiles = []int{2, 3, 4, 5, 13, 32, 40}
					}
					for _, tile := range tiles {
						var first []float32
						plans := [][]int{{n}, {1, n - 1}, {n - 2, 1, 1}, {2, n - 2}}
						for _, cut := range plans {
							for _, workers := range []int{1, 3} {
								res, err := ApplyMasks(context.Background(), ds, stack, splitPlan(anyCPUs, workers, cut...), Options{TileFrames: tile, NoPin: true})
								require.NoError(t, err)
								for j := range want {
									g := float64(res.F32[j])
									switch {
									case math.IsNaN(want[j]):
										require.True(t, math.IsNaN(g), "result %d: got %v, want NaN (tile %d, cut %v)", j, g, tile, cut)
									case math.IsInf(want[j], 0):
										require.Equal(t, want[j], g, "result %d (tile %d, cut %v)", j, tile, cut)
									default:
										require.InDelta(t, want[j], g, 2e-6*mag[j]+1e-30, "result %d (tile %d, cut %v, %d workers)", j, tile, cut, workers)
									}
								}
								if first == nil {
									first = res.F32
									continue
								}
								for j := range want {
									require.Equal(t, math.Float32bits(first[j]), math.Float32bits(res.F32[j]), "result %d: %v against %v (tile %d, cut %v, %d workers)", j, res.F32[j], first[j], tile, cut, workers)
								}
							}
						}
					}
				})
			}
		}
	}
}

// TestQuadFramesLargeSig: 512×512 float32 and uint16 frames, 1-7 masks, 5 frames, the
// default tile and tiles of 1-4 frames: against a float64 reference.
func TestQuadFramesLargeSig(t *testing.T) {
	if testing.Short() {
		t.Skip("large frames")
	}
	rng := rand.New(rand.NewPCG(45, 46))
	sig := [2]int{512, 512}
	for _, dt := range []dataset.DType{dataset.Float32, dataset.Uint16} {
		ds := randomDataset(rng, dt, []int{5}, sig)
		for nMasks := 1; nMasks <= 7; nMasks++ {
			stack := randomStack(rng, nMasks, sig)
			want, mag := reference(ds, stack)
			for _, tile := range []int{0, 1, 3, 4} {
				res, err := ApplyMasks(context.Background(), ds, stack, splitPlan(anyCPUs, 2, 2, 3), Options{TileFrames: tile, NoPin: true})
				require.NoError(t, err)
				requireClose(t, res.F32, want, mag, 2e-6)
			}
		}
	}
}

// TestQuadFramesShifted: shifted masks (Options.Shifts) with 1-7 masks on float32 and
// uint16 frames, integer and fractional shifts, against the shifted float64 reference.
func TestQuadFramesShifted(t *testing.T) {
	rng := rand.New(rand.NewPCG(47, 48))
	sig := [2]int{33, 31}
	for _, dt := range []dataset.DType{dataset.Float32, dataset.Uint16} {
		ds := randomDataset(rng, dt, []int{11}, sig)
		for _, integer := range []bool{true, false} {
			shifts := randomShifts(rng, 11, integer)
			for nMasks := 1; nMasks <= 7; nMasks++ {
				stack := randomStack(rng, nMasks, sig)
				want, mag := shiftedReference(ds, stack, shifts)
				for _, tile := range []int{1, 3, 5} {
					res, err := ApplyMasks(context.Background(), ds, stack, splitPlan(anyCPUs, 3, 2, 5, 4),
						Options{TileFrames: tile, Shifts: shifts, NoPin: true})
					require.NoError(t, err, "%v, %d masks, tile %d", dt, nMasks, tile)
					requireClose(t, res.F32, want, mag, 2e-6)
				}
			}
		}
	}
}

// TestQuadFramesFiles: stacks of 1-7 dense masks over memory-mapped (NPY float32 and
// uint16, raw int16) and read (MIB, HDF5) datasets, the default tile and tiles of 1-5
// frames, one worker and three with partitions cut at odd places, ROI subsets: against a
// float64 reference from the frames read, and bit for bit the same for a given tile
// whatever the cuts and workers.
func TestQuadFramesFiles(t *testing.T) {
	rng := rand.New(rand.NewPCG(49, 50))
	dir := t.TempDir()
	type file struct {
		path string
		opt  dataset.Options
	}
	var files []file
	for _, c := range []struct {
		ext string
		dt  dataset.DType
	}{{"npy", dataset.Float32}, {"npy", dataset.Uint16}, {"raw", dataset.Int16}} {
		path := filepath.Join(dir, fmt.Sprintf("scan-%s.%s", c.dt, c.ext))
		nav, sig := []int{3, 7}, [2]int{33, 47}
		_, err := synth.Write(context.Background(), path, synth.Options{NavShape: nav, SigShape: sig, DType: c.dt})
		require.NoError(t, err)
		opt := dataset.Options{}
		if c.ext == "raw" {
			opt = dataset.Options{SigShape: sig[:], DType: c.dt, NavShape: nav}
		}
		files = append(files, file{path, opt})
		roi := make([]bool, 21)
		for i := range roi {
			roi[i] = rng.IntN(3) > 0
		}
		opt.ROI = dataset.ROI{Mask: roi, Shape: nav}
		files = append(files, file{path, opt})
	}
	if d, ok := testfiles.Lookup(); ok {
		for _, name := range []string{"mib/Single_9_Frame_CounterDepth_12_Rows_256.mib", "mib/001_4x2_6bit.mib", "hdf5/fpd_file_test.hdf5"} {
			files = append(files, file{filepath.Join(d, name), dataset.Options{}})
		}
	} else {
		t.Log("no test data directory (STEMDOT_TESTDATA, ../shared/data): the real files are not tried")
	}
	for _, fl := range files {
		ds, err := dataset.Open(fl.path, fl.opt)
		require.NoError(t, err, fl.path)
		defer ds.Close()
		n := ds.NumFrames()
		mem := &memDataset{nav: []int{n}, sig: ds.SigShape(), dt: ds.DType(), data: make([]byte, n*ds.FrameBytes())}
		require.NoError(t, ds.ReadFrames(0, n, mem.data))
		for nMasks := 1; nMasks <= 7; nMasks++ {
			t.Run(fmt.Sprintf("%s/roi=%v/%dmasks", filepath.Base(fl.path), fl.opt.ROI.Mask != nil, nMasks), func(t *testing.T) {
				stack := randomStack(rng, nMasks, ds.SigShape())
				want, mag := reference(mem, stack)
				for _, tile := range []int{0, 1, 2, 3, 5} {
					var first []float32
					for _, cut := range [][]int{{n}, {1, n - 1}, {n - 3, 2, 1}} {
						for _, workers := range []int{1, 3} {
							res, err := ApplyMasks(context.Background(), ds, stack, splitPlan(anyCPUs, workers, cut...), Options{TileFrames: tile, NoPin: true})
							require.NoError(t, err)
							requireClose(t, res.F32, want, mag, 2e-6)
							if first == nil {
								first = res.F32
								continue
							}
							for j := range want {
								require.Equal(t, math.Float32bits(first[j]), math.Float32bits(res.F32[j]), "result %d (tile %d, cut %v, %d workers)", j, tile, cut, workers)
							}
						}
					}
				}
			})
		}
	}
}

// TestFewMaskHugeFrames: 4096×4096 uint16 frames (32 MiB each), 1 and 2 of them (fewer
// than any tile), 2, 3 and 7 dense masks with the default tile (few-mask tiles) and two
// workers, in float32 and float64: against a float64 reference; and the memory estimate
// counts tiles of one frame, as the default tile of such frames is.
func TestFewMaskHugeFrames(t *testing.T) {
	if testing.Short() {
		t.Skip("huge frames")
	}
	rng := rand.New(rand.NewPCG(51, 52))
	sig := [2]int{4096, 4096}
	for _, n := range []int{1, 2} {
		ds := randomDataset(rng, dataset.Uint16, []int{n}, sig)
		for _, nMasks := range []int{2, 3, 7} {
			stack := randomStack(rng, nMasks, sig)
			want, mag := reference(ds, stack)
			for _, f64 := range []bool{false, true} {
				res, err := ApplyMasks(context.Background(), ds, stack, splitPlan(anyCPUs, 2, n), Options{Float64: f64, NoPin: true})
				require.NoError(t, err, "%d frames, %d masks", n, nMasks)
				if f64 {
					requireClose(t, res.F64, want, mag, 1e-13)
				} else {
					requireClose(t, res.F32, want, mag, 2e-6)
				}
			}
			e := estimateMemory(ds, stack, stack.Count(), splitPlan(anyCPUs, 2, n), Options{})
			one := estimateMemory(ds, stack, stack.Count(), splitPlan(anyCPUs, 2, n), Options{TileFrames: 1})
			require.Equal(t, one, e, "%d frames, %d masks", n, nMasks)
		}
	}
}
