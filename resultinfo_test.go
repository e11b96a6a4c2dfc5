package stemdot_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/npy"
)

// readSidecar reads a result's JSON sidecar as generic JSON (what any reader sees).
func readSidecar(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	return m
}

// Item #18.5: Save writes RESULT.json beside RESULT.npy naming the columns (masks from
// a file and from specs, in column order), the shapes, dtype, dataset, options given,
// workers and the com shift maps written.
func TestResultSidecar(t *testing.T) {
	dir := t.TempDir()
	scan := filepath.Join(dir, "scan.npy")
	frames := make([]float32, 2*3*8*8)
	for i := range frames {
		frames[i] = float32(i % 7)
	}
	require.NoError(t, npy.WriteFile(scan, []int{2, 3, 8, 8}, frames))
	stackFile := filepath.Join(dir, "stack.npy")
	require.NoError(t, npy.WriteFile(stackFile, []int{2, 8, 8}, make([]float32, 2*64)))
	ds, err := stemdot.Open(scan, stemdot.Options{NavShape: []int{3, 2}})
	require.NoError(t, err)
	defer ds.Close()
	stack, info, err := stemdot.MasksInfo(ds.SigShape(), nil, []string{stackFile}, []string{"disk:4,4,2", "com"})
	require.NoError(t, err)
	res, err := stemdot.Apply(t.Context(), ds, stack, stemdot.Plan{CPUs: "1"}, stemdot.ApplyOptions{Float64: true})
	require.NoError(t, err)
	res.Info.SetMasks(info)
	res.Info.SetOptions(map[string]string{"nav_shape": "3,2"})
	out := stemdot.Outputs{NPY: filepath.Join(dir, "r.npy"), COMShifts: filepath.Join(dir, "sub", "s.npy")}
	require.NoError(t, os.Mkdir(filepath.Join(dir, "sub"), 0o755))
	require.NoError(t, stemdot.Save(res, out))
	got := readSidecar(t, filepath.Join(dir, "r.json"))
	mask := func(col int, name, spec, file string, index int) map[string]any {
		m := map[string]any{"column": float64(col), "name": name, "index": float64(index)}
		if spec != "" {
			m["spec"] = spec
		}
		if file != "" {
			m["file"] = file
		}
		return m
	}
	want := map[string]any{
		"format": "stemdot-result", "format_version": 1.0, "stemdot_version": stemdot.Version,
		"shape": []any{3.0, 2.0, 6.0}, "dtype": "float64", "nav_shape": []any{3.0, 2.0}, "sig_shape": []any{8.0, 8.0},
		"masks": []any{
			mask(0, "stack[0]", "", stackFile, 0), mask(1, "stack[1]", "", stackFile, 1),
			mask(2, "disk", "disk:4,4,2", "", 0),
			mask(3, "com_sum", "com", "", 0), mask(4, "com_y", "com", "", 1), mask(5, "com_x", "com", "", 2),
		},
		"dataset": map[string]any{"path": scan, "format": "npy", "options": map[string]any{"nav_shape": "3,2"}},
		"plan":    map[string]any{"cpu_workers": 1.0, "gpu_workers": 0.0},
		"com_shifts": map[string]any{"file": "sub/s.npy", "shape": []any{3.0, 2.0, 2.0}, "dtype": "float64",
			"components": []any{"y", "x"}, "columns": []any{3.0, 4.0, 5.0}},
	}
	require.Equal(t, want, got)
	f, err := os.Open(out.NPY)
	require.NoError(t, err)
	info2, _, err := npy.Read(f, 1<<20)
	f.Close()
	require.NoError(t, err)
	require.Equal(t, []int{3, 2, 6}, info2.Shape)

	// A Result made by hand: its names, shape and dtype; no dataset; float32.
	hand := &stemdot.Result{NavShape: []int{2}, NMasks: 2, F32: []float32{1, 2, 3, 4}, Names: []string{"a", "b"}}
	require.NoError(t, stemdot.Save(hand, stemdot.Outputs{NPY: filepath.Join(dir, "hand.NPY")}))
	got = readSidecar(t, filepath.Join(dir, "hand.json"))
	require.Equal(t, []any{2.0, 2.0}, got["shape"])
	require.Equal(t, "float32", got["dtype"])
	require.Equal(t, []any{mask(0, "a", "", "", 0), mask(1, "b", "", "", 1)}, got["masks"])
	require.Equal(t, map[string]any{"path": "", "format": "", "options": map[string]any{}}, got["dataset"])
	require.NotContains(t, got, "com_shifts")

	// The sidecar is an output like the others: never over an input, and a failure to
	// write it leaves no NPY.
	err = stemdot.Outputs{NPY: filepath.Join(dir, "scan2.npy")}.Check(res.Names, filepath.Join(dir, "scan2.json"))
	require.NoError(t, err, "an input that does not exist yet is no conflict")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "in.json"), []byte("{}"), 0o644))
	err = stemdot.Outputs{NPY: filepath.Join(dir, "in.npy")}.Check(res.Names, filepath.Join(dir, "in.json"))
	require.ErrorContains(t, err, "in.json is an input of this run: not replacing it")
	require.Equal(t, errs.IO, errs.KindOf(err))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "x.json"), 0o755))
	err = stemdot.Save(hand, stemdot.Outputs{NPY: filepath.Join(dir, "x.npy")})
	require.ErrorContains(t, err, "x.json exists and is a directory")
	_, err = os.Stat(filepath.Join(dir, "x.npy"))
	require.True(t, os.IsNotExist(err), "no NPY without its sidecar")
}

func TestSidecarPath(t *testing.T) {
	for in, want := range map[string]string{"r.npy": "r.json", "a/b.c.NPY": "a/b.c.json", "x": "x.json"} {
		require.Equal(t, want, stemdot.SidecarPath(in))
	}
}
