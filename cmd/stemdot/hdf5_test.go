//go:build !nohdf5

package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
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
		require.Equal(t, []int{2, 2, 1, 5}, shape, "the stored nav axes, as LiberTEM 0.16 reads them (#33)")
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

// Case 45-dectris-multiblock-master (LiberTEM #1544; xia2 #23, h5py #860): a DECTRIS
// master file holds no frames, only external links /entry/data/data_000001 to
// data_000004 to blocks of 16 frames (32×32 uint16) of an 8×8 scan, each in its own file
// beside the master. info and apply read the master as format dectris: the 4 blocks in
// order as one scan of 64 frames (the nav shape from --nav-shape, else one row and the
// warning naming --nav-shape); --dataset-path reads one block as format hdf5; the master
// given by a relative path from its parent directory, which holds a decoy of the first
// block's file, reads the blocks beside the master, as libhdf5 looks for them.
func TestCaseDECTRISMultiblockMaster(t *testing.T) {
	dir := t.TempDir()
	acq := filepath.Join(dir, "acq")
	require.NoError(t, os.Mkdir(acq, 0o755))
	const sy, sx, nb, per = 32, 32, 4, 16
	rng := rand.New(rand.NewPCG(1544, 1))
	values := make([]uint16, nb*per*sy*sx)
	frames := make([][]float64, nb*per)
	for f := range frames {
		frames[f] = make([]float64, sy*sx)
		for i := range frames[f] {
			v := uint16(20 + rng.IntN(21))
			if i == 16*sx+16 {
				v += uint16(100 * f) // the frame's index, as a marker
			}
			values[f*sy*sx+i], frames[f][i] = v, float64(v)
		}
	}
	master := filepath.Join(acq, "scan_master.h5")
	nimages := []uint16{nb * per}
	require.NoError(t, h5ref.Write(master, h5ref.Dataset{Path: "/entry/instrument/detector/detectorSpecific/nimages", Dims: []int{1}, Type: h5ref.U16LE, Data: unsafe.Pointer(&nimages[0])}))
	for b := range nb {
		file := fmt.Sprintf("scan_data_%06d.h5", b+1)
		require.NoError(t, h5ref.Write(filepath.Join(acq, file), h5ref.Dataset{Path: "/entry/data/data", Dims: []int{per, sy, sx}, Chunk: []int{1, sy, sx},
			Type: h5ref.U16LE, Data: unsafe.Pointer(&values[b*per*sy*sx])}))
		require.NoError(t, h5ref.ExternalLink(master, fmt.Sprintf("/entry/data/data_%06d", b+1), file, "/entry/data/data"))
	}
	sevens := make([]uint16, per*sy*sx)
	for i := range sevens {
		sevens[i] = 7
	}
	require.NoError(t, h5ref.Write(filepath.Join(dir, "scan_data_000001.h5"), h5ref.Dataset{Path: "/entry/data/data", Dims: []int{per, sy, sx}, Type: h5ref.U16LE, Data: unsafe.Pointer(&sevens[0])}))
	ms := [][]float64{diskMask(sy, sx, 16, 16, 6), onesMask(sy * sx)}
	masks := filepath.Join(dir, "m.npy")
	writeMaskNPY(t, masks, sy, sx, ms...)

	blocks := "/entry/data/data_000002 (16, 32, 32), /entry/data/data_000003 (16, 32, 32), /entry/data/data_000004 (16, 32, 32)"
	notes := "stemdot: warning: " + master + ": the scan is 4 blocks linked from /entry/data: data_000001 to data_000004, 64 frames\n" +
		"stemdot: warning: " + master + ": the master has no pixel_mask of the frames' 32×32 pixels (/entry/instrument/detector/detectorSpecific/pixel_mask): no pixel is masked; " +
		"values 65535 (2^16−1, DECTRIS's marker of masked and of overflowing pixels) are kept: without a pixel_mask the two cannot be told apart\n"

	stdout, stderr, code := run(t, "info", master)
	require.Zero(t, code, stderr)
	require.Contains(t, stdout, "format:     dectris\n")
	require.Contains(t, stdout, "nav_shape:  (1, 64)  (guessed: give --nav-shape)\n")
	require.Equal(t, notes+"stemdot: warning: "+master+": the file gives no scan shape, read as 1 row of 64 frames: give --nav-shape (e.g. 8,8)\n", stderr)
	shape, got, stderr := applyCase(t, master, "--masks", masks, "--nav-shape", "8,8")
	require.Equal(t, []int{8, 8, 2}, shape)
	checkResult(t, got, frames, ms)
	require.Equal(t, notes, stderr)
	refuseCase(t, `"/entry/data" is a group, not a dataset (--dataset-path); datasets of rank 3 to 5 in it: /entry/data/data_000001 (16, 32, 32), `+blocks,
		master, "--masks", masks, "--dataset-path", "/entry/data")

	t.Chdir(dir)
	for b := range nb {
		shape, got, stderr = applyCase(t, "acq/scan_master.h5", "--masks", "m.npy", "--nav-shape", "2,8", "--dataset-path", fmt.Sprintf("/entry/data/data_%06d", b+1))
		require.Equal(t, []int{2, 8, 2}, shape)
		checkResult(t, got, frames[b*per:(b+1)*per], ms)
		require.Empty(t, stderr)
	}
}

// D4: frames behind an external link are found by info and apply; a dangling link is
// named in the warning when apply reads another dataset.
func TestHDF5ExternalLinkCLI(t *testing.T) {
	dir := t.TempDir()
	const sy, sx = 16, 16
	frames := poissonish(4, 8, sy*sx)
	values := make([]uint16, 8*sy*sx)
	for f, fr := range frames {
		for i, v := range fr {
			values[f*sy*sx+i] = uint16(v)
		}
	}
	small := []uint16{1, 2, 3, 4}
	require.NoError(t, h5ref.Write(filepath.Join(dir, "src0.h5"), h5ref.Dataset{Path: "/data", Dims: []int{2, 4, sy, sx}, Type: h5ref.U16LE, Data: unsafe.Pointer(&values[0])}))
	elink := filepath.Join(dir, "elink.h5")
	require.NoError(t, h5ref.Write(elink, h5ref.Dataset{Path: "/meta", Dims: []int{2, 2}, Type: h5ref.U16LE, Data: unsafe.Pointer(&small[0])}))
	require.NoError(t, h5ref.ExternalLink(elink, "/frames", "src0.h5", "/data"))
	ms := [][]float64{diskMask(sy, sx, 8, 8, 4), onesMask(sy * sx)}
	masks := filepath.Join(dir, "m.npy")
	writeMaskNPY(t, masks, sy, sx, ms...)
	t.Chdir("/")

	stdout, stderr, code := run(t, "info", elink)
	require.Zero(t, code, stderr)
	require.Contains(t, stdout, "nav_shape:  (2, 4)\n")
	require.Empty(t, stderr)
	shape, got, stderr := applyCase(t, elink, "--masks", masks)
	require.Equal(t, []int{2, 4, 2}, shape)
	checkResult(t, got, frames, ms)
	require.Empty(t, stderr)

	dangling := filepath.Join(dir, "dangling.h5")
	require.NoError(t, h5ref.Write(dangling, h5ref.Dataset{Path: "/other", Dims: []int{2, 2, sy, sx}, Type: h5ref.U16LE, Data: unsafe.Pointer(&values[0])}))
	require.NoError(t, h5ref.ExternalLink(dangling, "/frames", "gone.h5", "/data"))
	shape, got, stderr = applyCase(t, dangling, "--masks", masks)
	require.Equal(t, []int{2, 2, 2}, shape)
	checkResult(t, got, frames[:4], ms)
	require.Equal(t, "stemdot: warning: "+dangling+": reading /other (2, 2, 16, 16); could not follow link /frames to gone.h5:/data: file gone.h5 not found (looked for "+
		filepath.Join(dir, "gone.h5")+", gone.h5)\n", stderr)
}
