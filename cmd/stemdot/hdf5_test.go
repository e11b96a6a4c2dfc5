//go:build !nohdf5

package main

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/internal/h5ref"
	"github.com/stemdot/stemdot/internal/testfiles"
)

// hdf5Flavour is what --version says of HDF5 in a build with it: the version of
// libhdf5 that pkg-config gives (the one cgo built against, and runs with here).
func hdf5Flavour(t *testing.T) string {
	out, err := exec.Command("pkg-config", "--modversion", "hdf5").Output()
	require.NoError(t, err)
	return "with HDF5 (libhdf5 " + strings.TrimSpace(string(out)) + ")"
}

// The fpd HDF5 file: virtual images against its raw chunks decoded here (inflate,
// unshuffle, big-endian), not through the library's filter pipeline.
func TestApplyHDF5(t *testing.T) {
	path := testfiles.File(t, "hdf5/fpd_file_test.hdf5")
	raw, err := h5ref.ReadChunks(path, "/fpd_expt/fpd_data/data")
	require.NoError(t, err)
	all, err := raw.Decode(2, binary.BigEndian, false)
	require.NoError(t, err)
	frames := make([][]float64, 4)
	for f := range frames {
		frames[f] = all[f*256*256 : (f+1)*256*256]
	}
	ms := refMasks(256, 256, 128, 128, 30, 40, 120)
	masks := []string{"--mask", "disk:128,128,30", "--mask", "ring:128,128,40,120", "--mask", "com:128,128"}
	for _, extra := range [][]string{nil, {"--dataset-path", "/fpd_expt/fpd_data/data", "--cpus", "0,1", "--partition-size", "150000"}} {
		shape, got, _ := applyCase(t, append(append([]string{path}, masks...), extra...)...)
		require.Equal(t, []int{2, 2, 5}, shape)
		checkResult(t, got, frames, ms)
	}
	refuseCase(t, `no dataset "/nope" (--dataset-path); datasets of rank 3 to 5 in the file: /fpd_expt/fpd_data/data (2, 2, 1, 256, 256)`,
		path, "--dataset-path", "/nope", "--mask", "disk:128,128,30")
}

// Case 46-vds-missing-source (h5py #1546, HDFGroup/hdf5 #5088): a (8, 8, 32, 32) uint16
// virtual dataset of two source files of 4 scan rows each, named relative to it (as
// h5py writes them), run from another directory; then one source renamed, then replaced
// by a file that is not HDF5. libhdf5 reads the missing part as zeros without an error:
// stemdot refuses it naming the frames and the file, or with --allow-fill reads it as the
// fill value with a warning.
func TestCaseVDSMissingSource(t *testing.T) {
	dir := t.TempDir()
	const sy, sx = 32, 32
	rng := rand.New(rand.NewPCG(1546, 1))
	values := make([]uint16, 64*sy*sx)
	frames := make([][]float64, 64)
	for f := range frames {
		frames[f] = make([]float64, sy*sx)
		for i := range frames[f] {
			values[f*sy*sx+i] = uint16(1 + rng.IntN(40))
			frames[f][i] = float64(values[f*sy*sx+i])
		}
	}
	var maps []h5ref.Mapping
	for i, name := range []string{"part0.h5", "part1.h5"} {
		require.NoError(t, h5ref.Write(filepath.Join(dir, name), h5ref.Dataset{Path: "/data", Dims: []int{4, 8, sy, sx}, Type: h5ref.U16LE, Data: unsafe.Pointer(&values[i*32*sy*sx])}))
		maps = append(maps, h5ref.Mapping{File: name, Dataset: "/data", SourceDims: []int{4, 8, sy, sx},
			Virtual: h5ref.Hyperslab{Start: []int{4 * i, 0, 0, 0}, Count: []int{1, 1, 1, 1}, Block: []int{4, 8, sy, sx}}})
	}
	vds := filepath.Join(dir, "vds.h5")
	require.NoError(t, h5ref.Write(vds, h5ref.Dataset{Path: "/frames", Dims: []int{8, 8, sy, sx}, Type: h5ref.U16LE, Virtual: maps}))
	ms := [][]float64{diskMask(sy, sx, 16, 16, 8), onesMask(sy * sx)}
	masks := filepath.Join(dir, "m.npy")
	writeMaskNPY(t, masks, sy, sx, ms...)
	t.Chdir("/")

	shape, got, stderr := applyCase(t, vds, "--masks", masks)
	require.Equal(t, []int{8, 8, 2}, shape)
	checkResult(t, got, frames, ms)
	require.NotContains(t, stderr, "warning")

	part1 := filepath.Join(dir, "part1.h5")
	require.NoError(t, os.Rename(part1, part1+".moved"))
	refuseCase(t, "stemdot: dataset: "+vds+": dataset /frames: 32 of its 64 frames would be read as the fill value 0, not as recorded: frames 32-63: "+
		"source part1.h5:/data: file part1.h5 not found (looked for "+part1+", part1.h5); give --allow-fill to read them as the fill value", vds, "--masks", masks)
	shape, got, stderr = applyCase(t, vds, "--masks", masks, "--allow-fill")
	require.Equal(t, []int{8, 8, 2}, shape)
	blank := make([][]float64, 32)
	for i := range blank {
		blank[i] = make([]float64, sy*sx)
	}
	checkResult(t, got, append(frames[:32:32], blank...), ms)
	require.Contains(t, stderr, "stemdot: warning: "+vds+": dataset /frames: 32 of its 64 frames are read as the fill value 0 (--allow-fill): frames 32-63: source part1.h5:/data: file part1.h5 not found")

	require.NoError(t, os.WriteFile(part1, bytes.Repeat([]byte("not an hdf5 file\n"), 100), 0o644))
	refuseCase(t, "frames 32-63: source part1.h5:/data: file part1.h5 "+part1+" is not an HDF5 file (looked for "+part1+", part1.h5)", vds, "--masks", masks)
	_, stderr, code := run(t, "info", vds)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "give --allow-fill")
}

// External raw storage named relative to the HDF5 file, found beside it with
// HDF5_EXTFILE_PREFIX='${ORIGIN}' (which libhdf5 reads when it starts).
func TestCaseHDF5ExternalPrefix(t *testing.T) {
	dir := t.TempDir()
	const sy, sx = 16, 16
	frames := make([][]float64, 6)
	var raw []byte
	for f := range frames {
		frames[f] = make([]float64, sy*sx)
		for i := range frames[f] {
			v := uint16(f*1000 + i)
			frames[f][i] = float64(v)
			raw = binary.LittleEndian.AppendUint16(raw, v)
		}
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "frames.raw"), raw, 0o644))
	path := filepath.Join(dir, "ext.h5")
	require.NoError(t, h5ref.Write(path, h5ref.Dataset{Path: "/frames", Dims: []int{2, 3, sy, sx}, Type: h5ref.U16LE, External: []h5ref.External{{Name: "frames.raw", Size: int64(len(raw))}}}))
	ms := [][]float64{onesMask(sy * sx)}
	masks := filepath.Join(dir, "m.npy")
	writeMaskNPY(t, masks, sy, sx, ms...)
	t.Chdir("/")
	refuseCase(t, "set HDF5_EXTFILE_PREFIX='${ORIGIN}' to read the one beside the HDF5 file", path, "--masks", masks)
	t.Setenv("HDF5_EXTFILE_PREFIX", "${ORIGIN}")
	shape, got, _ := applyCase(t, path, "--masks", masks)
	require.Equal(t, []int{2, 3, 1}, shape)
	checkResult(t, got, frames, ms)
}
