package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot"
	"github.com/stemdot/stemdot/internal/npy"
	"github.com/stemdot/stemdot/internal/testfiles"
)

// Item #18.5: apply writes RESULT.json beside RESULT.npy: the columns in the order of
// the NPY (the --masks stacks first, then the --mask specs), the dataset flags given,
// and the --com-shifts file.
func TestApplySidecar(t *testing.T) {
	mib := testfiles.File(t, "mib/001_4x2_6bit.mib")
	dir := t.TempDir()
	stackFile := filepath.Join(dir, "vd.npy")
	require.NoError(t, npy.WriteFile(stackFile, []int{256, 256}, make([]float32, 256*256)))
	out := filepath.Join(dir, "r.npy")
	_, stderr, code := run(t, "apply", mib, "--nav-shape", "2,4", "--mask", "disk:128,128,20", "--mask", "com", "--masks", stackFile,
		"--out", out, "--com-shifts", filepath.Join(dir, "s.npy"), "--cpus", "1")
	require.Zero(t, code, stderr)
	b, err := os.ReadFile(filepath.Join(dir, "r.json"))
	require.NoError(t, err)
	var info stemdot.ResultInfo
	require.NoError(t, json.Unmarshal(b, &info))
	abs, _ := filepath.Abs(mib)
	require.Equal(t, stemdot.ResultInfo{
		Format: "stemdot-result", FormatVersion: 1, StemdotVersion: stemdot.Version,
		Shape: []int{2, 4, 5}, DType: "float32", NavShape: []int{2, 4}, SigShape: []int{256, 256},
		Masks: []stemdot.MaskInfo{
			{Column: 0, Name: "vd", File: stackFile},
			{Column: 1, Name: "disk", Spec: "disk:128,128,20"},
			{Column: 2, Name: "com_sum", Spec: "com"},
			{Column: 3, Name: "com_y", Spec: "com", Index: 1},
			{Column: 4, Name: "com_x", Spec: "com", Index: 2},
		},
		Dataset: stemdot.DatasetInfo{Path: abs, Format: "mib", Options: map[string]string{"nav_shape": "2,4"}},
		Plan:    stemdot.PlanInfo{CPUWorkers: 1},
		COMShifts: &stemdot.COMShiftsInfo{File: "s.npy", Shape: []int{2, 4, 2}, DType: "float64",
			Components: []string{"y", "x"}, Columns: []int{2, 3, 4}},
	}, info)
}

// The sidecar of a result of an ROI places its rows: the scan shape, the positions
// selected, whether the result is compact, and the positions' file.
func TestApplySidecarROI(t *testing.T) {
	mib := testfiles.File(t, "mib/001_4x2_6bit.mib")
	dir := t.TempDir()
	sidecar := func(args ...string) stemdot.ResultInfo {
		t.Helper()
		_, stderr, code := run(t, append([]string{"apply", mib, "--nav-shape", "2,4", "--mask", "disk:128,128,20", "--roi", "rect:1,0,2,2",
			"--out", filepath.Join(dir, "r.npy"), "--cpus", "1"}, args...)...)
		require.Zero(t, code, stderr)
		b, err := os.ReadFile(filepath.Join(dir, "r.json"))
		require.NoError(t, err)
		var info stemdot.ResultInfo
		require.NoError(t, json.Unmarshal(b, &info))
		return info
	}
	info := sidecar()
	require.Equal(t, &stemdot.ROIInfo{ScanShape: []int{2, 4}, Selected: 4}, info.ROI)
	require.Equal(t, []int{2, 4, 1}, info.Shape)
	require.Equal(t, "rect:1,0,2,2", info.Dataset.Options["roi"])
	info = sidecar("--roi-compact")
	require.Equal(t, &stemdot.ROIInfo{ScanShape: []int{2, 4}, Selected: 4, Compact: true, Positions: "r_positions.npy"}, info.ROI)
	require.Equal(t, []int{4, 1}, info.Shape)
}
