package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fixedKeys are the record's keys that every record holds (a value or not_measured),
// written out here independently of Assemble's own lists.
func fixedKeys() [][]string {
	keys := [][]string{{"schema"}, {"date"}, {"commit"}, {"device", "nvidia_smi"}, {"device", "cuda"}, {"driver"},
		{"host"}, {"data"}, {"tests"}, {"limits", "d2d"}, {"limits", "h2d_pinned"}, {"limits", "memcpy_1core"},
		{"feed_gbps", "runner", "raw"}, {"feed_gbps", "runner", "mib"}, {"feed_gbps", "runner", "mib_shifted"},
		{"feed_gbps", "runner", "staged_1_stream"}, {"feed_gbps", "runner", "staged_3_streams"},
		{"resident_ms", "1"}, {"resident_ms", "64"}, {"resident"}, {"registration"},
		{"startup_s", "gpus_0"}, {"startup_s", "gpus_auto"}, {"startup_s", "gpus_1"}}
	for _, v := range []string{"dense", "dense_tiled", "dense_f64", "sparse"} {
		for _, m := range []string{"1", "4", "16", "64", "ring"} {
			keys = append(keys, []string{"kernel_gbps", v, m})
		}
	}
	for _, f := range []string{"raw", "mib"} {
		for _, m := range []string{"1", "4", "16", "64", "ring"} {
			for _, p := range []string{"cpu_only", "hybrid_auto", "gpu_only"} {
				keys = append(keys, []string{"plans", f, m, p})
			}
		}
		for _, m := range []string{"1", "64"} {
			keys = append(keys, []string{"feed_gbps", "engine_worker", f, m})
		}
		for _, m := range []string{"1", "16"} {
			for _, p := range []string{"cpu_only", "gpu_only"} {
				keys = append(keys, []string{"shifted", f, m, p})
			}
		}
	}
	return keys
}

// get returns the value at path in a record decoded from JSON, and whether it is there.
func get(rec map[string]any, path ...string) (any, bool) {
	var v any = rec
	for _, k := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = m[k]; !ok {
			return nil, false
		}
	}
	return v, true
}

// reason returns the not_measured reason at path ("" when the value was measured).
func reason(t *testing.T, rec map[string]any, path ...string) string {
	t.Helper()
	v, ok := get(rec, path...)
	require.True(t, ok, "key %s missing", strings.Join(path, "."))
	m, ok := v.(map[string]any)
	if !ok {
		return ""
	}
	r, _ := m["not_measured"].(string)
	return r
}

// decode assembles a record and round-trips it through JSON, as gpurecord writes it.
func decode(t *testing.T, lines string, gpucheck []byte) map[string]any {
	t.Helper()
	rec, err := Assemble(strings.NewReader(lines), gpucheck)
	require.NoError(t, err)
	b, err := json.Marshal(rec)
	require.NoError(t, err)
	var out map[string]any
	require.NoError(t, json.Unmarshal(b, &out))
	return out
}

// requireFixedKeys checks that every fixed key is present and is a number, a string, an
// object or an array, or not_measured with a reason.
func requireFixedKeys(t *testing.T, rec map[string]any) {
	t.Helper()
	for _, k := range fixedKeys() {
		v, ok := get(rec, k...)
		require.True(t, ok, "key %s missing", strings.Join(k, "."))
		if m, ok := v.(map[string]any); ok {
			if r, ok := m["not_measured"]; ok {
				assert.NotEmpty(t, r, "%s: not_measured without a reason", strings.Join(k, "."))
				assert.Len(t, m, 1, "%s: not_measured beside values", strings.Join(k, "."))
			}
		}
	}
}

// TestAssembleNothingMeasured: a run that stopped at once gives every fixed key, each not
// measured with the reason.
func TestAssembleNothingMeasured(t *testing.T) {
	rec := decode(t, "date\t2026-12-02T15:00:00Z\n", nil)
	requireFixedKeys(t, rec)
	assert.Equal(t, "2026-12-02T15:00:00Z", rec["date"])
	assert.EqualValues(t, Schema, rec["schema"])
	assert.Equal(t, "gpucheck did not run", reason(t, rec, "limits", "d2d"))
	assert.Equal(t, "the script stopped before this run", reason(t, rec, "plans", "raw", "64", "hybrid_auto"))
	assert.Contains(t, reason(t, rec, "registration"), "TestRegistrationScaling")
	assert.Contains(t, reason(t, rec, "commit"), "build.tsv")
	assert.Equal(t, "nvidia-smi not available", reason(t, rec, "device", "nvidia_smi"))
	assert.Contains(t, reason(t, rec, "driver"), "nvidia-smi not available")
	for _, k := range fixedKeys() {
		if k[0] != "schema" && k[0] != "date" && k[0] != "tests" {
			assert.NotEmpty(t, reason(t, rec, k...), "%s measured in an empty run", strings.Join(k, "."))
		}
	}
}

// TestAssembleGpucheckStopped: gpucheck's reason for the rows it did not reach.
func TestAssembleGpucheckStopped(t *testing.T) {
	rec := decode(t, "gpucheck\t124\n", nil)
	assert.Equal(t, "gpucheck ran past its time limit before this case", reason(t, rec, "kernel_gbps", "dense", "64"))
	rec = decode(t, "gpucheck\t1\n", nil)
	assert.Equal(t, "gpucheck wrote no JSON (exit status 1)", reason(t, rec, "limits", "h2d_pinned"))
	partial := `{"sig": 256, "rows": [{"key": "limits.d2d", "name": "d2d copy (read+write)", "gbps": 4268.2}],
		"error": "cuda: cudaMalloc: out of memory"}`
	rec = decode(t, "gpucheck\t1\n", []byte(partial))
	assert.InDelta(t, 4268.2, rec["limits"].(map[string]any)["d2d"], 1e-9)
	assert.Equal(t, "gpucheck stopped before this case: cuda: cudaMalloc: out of memory", reason(t, rec, "limits", "h2d_pinned"))
	requireFixedKeys(t, rec)
}

// TestAssembleBadInput: lines gpurecord cannot read are an error naming the line, not a
// record with holes.
func TestAssembleBadInput(t *testing.T) {
	for in, want := range map[string]string{
		"date\t2026\nfrob\t1\n":                    `line 2: unknown kind "frob"`,
		"tests\tcuda.test\t3\n":                    "line 1 (tests): 3 fields, want 5",
		"registration\t4\tfast\n":                  `line 1: registration GB/s "fast"`,
		"nvidia-smi\t0, H200\n":                    "want 6 comma-separated fields",
		"apply\tcpu_only\traw\t1\t8x\t1.0\t\t\t\n": `GB/s "8x"`,
		"apply\tsomething\traw\t1\t8\t1.0\t\t\t\n": `unknown key "something"`,
		"apply\tcpu_only\traw\t1\t8\tsoon\t\t\t\n": `wall seconds "soon"`,
	} {
		_, err := Assemble(strings.NewReader(in), nil)
		require.Error(t, err, "%q", in)
		assert.Contains(t, err.Error(), want, "%q", in)
	}
	_, err := Assemble(strings.NewReader(""), []byte(`{"rows": [{"key": "kernel.warp.3", "gbps": 1}]}`))
	assert.ErrorContains(t, err, `unknown row key "kernel.warp.3"`)
	_, err = Assemble(strings.NewReader(""), []byte(`{"rows": `))
	assert.ErrorContains(t, err, "gpucheck JSON")
}

// TestAssembleEmulatorRun reads the JSON that gpucheck wrote on the CUDA emulator
// (testdata/gpucheck-emu.json: -sig 32, small sizes) beside lines as the script writes them.
func TestAssembleEmulatorRun(t *testing.T) {
	gc, err := os.ReadFile("testdata/gpucheck-emu.json")
	require.NoError(t, err)
	var raw struct {
		Rows []struct {
			Key  string
			GBps float64
			Ms   float64
		}
	}
	require.NoError(t, json.Unmarshal(gc, &raw))
	want := map[string]float64{}
	for _, r := range raw.Rows {
		want[r.Key] = r.GBps
		if strings.HasPrefix(r.Key, "resident.") && r.Key != "resident.load" {
			want[r.Key] = r.Ms
		}
	}
	lines := strings.Join([]string{
		"date\t2026-12-02T15:00:00Z",
		"commit\t2f28b9a0c0ffee\tdirty\t2026-12-02T14:00:00Z",
		"nvidia-smi\t0, NVIDIA H200, 580.159, 143771 MiB, 5, 16",
		"host\t16\t126\tIntel(R) Xeon(R) Platinum 8480+",
		"tests\tcuda.test\t154\t0\t2",
		"registration\t1\t41.3", "registration\t2\t48.0", "registration\t4\t50.2", "registration\t8\t49.9",
		"gpucheck\t0",
		"data\traw\t17179869184",
		"apply\tcpu_only\traw\t64\t7.90\t2.301\t16 workers (16 cpu, 0 gpu)\t\t",
		"apply\thybrid_auto\traw\t64\t12.0\t1.512\t19 workers (16 cpu, 2 gpu)\t" +
			"worker 16 (gpu 0, cpu 3, mapped): 40960 frames in 20 claims, 5.369 GB at 3.1 GB/s, ready after 0.131 s | " +
			"worker 17 (gpu 0, cpu 7, mapped): 61440 frames in 31 claims, 8.053 GB at 4.7 GB/s, ready after 0.140 s\t",
		"apply\tone_gpu_worker\tmib\t1\t3.6\t0.400\t1 worker (0 cpu, 1 gpu)\t" +
			"worker 0 (gpu 0, cpu 0, mapped): 8192 frames in 3 claims, 1.074 GB at 13.1 GB/s, ready after 0.200 s\t",
		"apply\tshifted_gpu_only\traw\t16\t\t\t\t\tError: cuda: cudaHostRegister: invalid argument",
		"apply\tstartup_gpus_1\ttiny_mib\t4\t0.01\t0.128\t3 workers (2 cpu, 1 gpu)\t\t",
	}, "\n") + "\n"
	rec := decode(t, lines, gc)
	requireFixedKeys(t, rec)

	// Every gpucheck row is where the record says.
	for key, path := range map[string][]string{
		"limits.d2d": {"limits", "d2d"}, "limits.h2d_pinned": {"limits", "h2d_pinned"},
		"limits.memcpy_1core": {"limits", "memcpy_1core"},
		"kernel.dense.1":      {"kernel_gbps", "dense", "1"}, "kernel.dense.4": {"kernel_gbps", "dense", "4"},
		"kernel.dense.16": {"kernel_gbps", "dense", "16"}, "kernel.dense.32": {"kernel_gbps", "dense", "32"},
		"kernel.dense.64": {"kernel_gbps", "dense", "64"}, "kernel.dense_tiled.16": {"kernel_gbps", "dense_tiled", "16"},
		"kernel.dense_tiled.32": {"kernel_gbps", "dense_tiled", "32"}, "kernel.dense_tiled.64": {"kernel_gbps", "dense_tiled", "64"},
		"kernel.dense_f64.4": {"kernel_gbps", "dense_f64", "4"}, "kernel.sparse.ring": {"kernel_gbps", "sparse", "ring"},
		"kernel.sparse.disc+ring": {"kernel_gbps", "sparse", "disc+ring"},
		"resident.1":              {"resident_ms", "1"}, "resident.64": {"resident_ms", "64"},
		"resident.sparse_disc+ring": {"resident_ms", "sparse_disc+ring"}, "resident.load": {"resident", "load_gbps"},
		"runner.staged_1_streams": {"feed_gbps", "runner", "staged_1_stream"},
		"runner.staged_3_streams": {"feed_gbps", "runner", "staged_3_streams"},
		"mapped.raw":              {"feed_gbps", "runner", "raw"}, "mapped.mib": {"feed_gbps", "runner", "mib"},
		"mapped.mib_shifted": {"feed_gbps", "runner", "mib_shifted"},
	} {
		w, ok := want[key]
		require.True(t, ok, "gpucheck-emu.json has no row %s", key)
		v, ok := get(rec, path...)
		require.True(t, ok, "%s missing", strings.Join(path, "."))
		assert.Equal(t, w, v, "%s (gpucheck's %s)", strings.Join(path, "."), key)
	}
	assert.Len(t, want, 23, "gpucheck rows (update this test and gpurecord when gpucheck gains one)")
	assert.Contains(t, reason(t, rec, "kernel_gbps", "dense_tiled", "4"), "tiled kernel serves groups of 16 to 64 masks")
	assert.Contains(t, reason(t, rec, "kernel_gbps", "dense", "ring"), "sparse kernel")
	assert.Equal(t, "stemdot CUDA emulator (CPU)", rec["device"].(map[string]any)["cuda"].(map[string]any)["name"])

	assert.Equal(t, map[string]any{"sha": "2f28b9a0c0ffee", "dirty": true, "built": "2026-12-02T14:00:00Z"}, rec["commit"])
	assert.Equal(t, "580.159", rec["driver"])
	smi, _ := get(rec, "device", "nvidia_smi")
	assert.Equal(t, []any{map[string]any{"index": 0.0, "name": "NVIDIA H200", "driver": "580.159", "memory": "143771 MiB",
		"pcie_gen": 5.0, "pcie_width": 16.0}}, smi)
	assert.Equal(t, map[string]any{"cpus": 16.0, "memory_gib": 126.0, "cpu_model": "Intel(R) Xeon(R) Platinum 8480+"}, rec["host"])
	assert.Equal(t, map[string]any{"cuda.test": map[string]any{"passed": 154.0, "failed": 0.0, "skipped": 2.0}}, rec["tests"])
	assert.Equal(t, map[string]any{"gbps_by_threads": map[string]any{"1": 41.3, "2": 48.0, "4": 50.2, "8": 49.9}}, rec["registration"])
	assert.Equal(t, map[string]any{"raw_bytes": 17179869184.0}, rec["data"])

	hybrid, _ := get(rec, "plans", "raw", "64", "hybrid_auto")
	assert.Equal(t, map[string]any{"gbps": 12.0, "wall_s": 1.512, "workers": map[string]any{"cpu": 16.0, "gpu": 2.0},
		"gpu_workers": []any{
			map[string]any{"worker": 16.0, "gpu": 0.0, "cpu": 3.0, "feed": "mapped", "frames": 40960.0, "claims": 20.0,
				"gb": 5.369, "gbps_busy": 3.1, "ready_s": 0.131},
			map[string]any{"worker": 17.0, "gpu": 0.0, "cpu": 7.0, "feed": "mapped", "frames": 61440.0, "claims": 31.0,
				"gb": 8.053, "gbps_busy": 4.7, "ready_s": 0.14},
		}}, hybrid)
	cpu, _ := get(rec, "plans", "raw", "64", "cpu_only")
	assert.Equal(t, map[string]any{"gbps": 7.9, "wall_s": 2.301, "workers": map[string]any{"cpu": 16.0, "gpu": 0.0},
		"gpu_workers": []any{}}, cpu)
	one, _ := get(rec, "feed_gbps", "engine_worker", "mib", "1", "gpu_workers")
	assert.InDelta(t, 13.1, one.([]any)[0].(map[string]any)["gbps_busy"], 1e-12)
	assert.Equal(t, "stemdot apply failed: Error: cuda: cudaHostRegister: invalid argument", reason(t, rec, "shifted", "raw", "16", "gpu_only"))
	assert.Equal(t, 0.128, rec["startup_s"].(map[string]any)["gpus_1"])
	assert.Equal(t, "the script stopped before this run", reason(t, rec, "startup_s", "gpus_0"))
	assert.Equal(t, "the script stopped before this run", reason(t, rec, "plans", "mib", "ring", "gpu_only"))
}

// TestScript runs scripts/gpu-check.sh's GPU-machine half with stand-ins for nvidia-smi,
// the test binaries, gpucheck and stemdot (each printing what the real one prints; the
// stemdot stand-in encodes its arguments in the GB/s it reports) and the real gpurecord,
// and checks that every measurement lands under its key in $OUT/gpu.json.
func TestScript(t *testing.T) {
	for _, tool := range []string{"bash", "gzip", "go", "timeout", "tee"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found: %v", tool, err)
		}
	}
	root := t.TempDir()
	script, err := os.ReadFile("../../scripts/gpu-check.sh")
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Join(root, "scripts"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "scripts", "gpu-check.sh"), script, 0o755))
	bin := filepath.Join(root, "bin", "gpu")
	require.NoError(t, os.MkdirAll(bin, 0o755))
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "gpurecord"), ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)

	gc, err := filepath.Abs("testdata/gpucheck-emu.json")
	require.NoError(t, err)
	stub := func(name, body string) {
		require.NoError(t, os.WriteFile(filepath.Join(bin, name), []byte("#!/usr/bin/env bash\n"+body), 0o755))
	}
	stub("cuda.test", `cat <<'END'
=== RUN   TestKernels
--- PASS: TestKernels (0.50s)
=== RUN   TestRegistrationScaling
    feed_test.go:231: registration: 1 thread(s): 41.3 GB/s (register + unregister)
    feed_test.go:231: registration: 2 thread(s): 48.0 GB/s (register + unregister)
    feed_test.go:231: registration: 4 thread(s): 50.2 GB/s (register + unregister)
    feed_test.go:231: registration: 8 thread(s): 49.9 GB/s (register + unregister)
--- PASS: TestRegistrationScaling (1.20s)
=== RUN   TestNeedsData
    feed_test.go:40: no detector files
--- SKIP: TestNeedsData (0.00s)
PASS
END
`)
	for _, b := range []string{"engine.test", "affinity.test", "stemdot.test"} {
		stub(b, "echo '--- PASS: TestOne (0.01s)'; echo PASS\n")
	}
	stub("gpucheck", fmt.Sprintf(`while [ $# -gt 0 ]; do [ "$1" = -json ] && cp %q "$2"; shift; done
echo 'device 0: stemdot CUDA emulator (CPU)'
`, gc))
	// stemdot: synth writes a small file; apply reports GB/s = masks*1000 + plan (1: --gpus
	// 0, 2: --gpus auto, 3: --cpus 0 --gpus auto, 4: --gpus 1) + 0.5 when shifted, +100000
	// for a MIB file, the ring counting as 999 masks; GPU workers print a worker line whose
	// busy GB/s is the same number + 0.25. Shifted GPU-only on the MIB file at 16 masks fails.
	stub("stemdot", `set -e
if [ "$1" = synth ]; then
	while [ "$1" != --out ]; do shift; done
	head -c 4096 /dev/zero >"$2"
	echo "wrote $2"
	exit 0
fi
shift
file=$1 masks=0 cpus=16 gpus=0 shifted=0
for a in "$@"; do
	case "$prev" in
	--mask) case "$a" in ring:*) masks=999 ;; *) masks=$((masks + 1)) ;; esac ;;
	--cpus) cpus=$a ;;
	--gpus) gpus=$a ;;
	--shift) shifted=1 ;;
	esac
	prev=$a
done
plan=1
if [ "$gpus" = auto ] && [ "$cpus" = 0 ]; then plan=3; elif [ "$gpus" = auto ]; then plan=2; elif [ "$gpus" = 1 ]; then plan=4; fi
case "$file" in *.mib) base=100000 ;; *) base=0 ;; esac
if [ "$shifted" = 1 ] && [ "$plan" = 3 ] && [ "$masks" = 16 ] && [ "$base" = 100000 ]; then
	echo "Error: cuda: cudaHostRegister: invalid argument" >&2
	exit 1
fi
gbs=$(awk -v m="$masks" -v p="$plan" -v s="$shifted" -v b="$base" 'BEGIN { printf "%.2f", b + m * 1000 + p + s / 2 }')
ng=0
[ "$plan" = 1 ] || ng=1
nc=$cpus
[ "$plan" = 3 ] || [ "$plan" = 4 ] && nc=0
w=workers
[ $((nc + ng)) = 1 ] && w=worker
echo "8192 frames, 1.074 GB in 0.100 s ($gbs GB/s), $((nc + ng)) $w ($nc cpu, $ng gpu) → r.npy"
for ((i = 0; i < nc; i++)); do echo "  worker $i (cpu $i): 100 frames in 1 claims, 0.013 GB at 9.0 GB/s, ready after 0.001 s"; done
if [ "$ng" = 1 ]; then
	echo "  worker $nc (gpu 0, cpu 2, mapped): 8192 frames in 4 claims, 1.074 GB at $(awk -v g="$gbs" 'BEGIN { printf "%.2f", g + 0.25 }') GB/s, ready after 0.150 s"
fi
`)
	for _, b := range []string{"cuda.test", "engine.test", "affinity.test", "stemdot.test", "gpucheck", "stemdot", "gpurecord"} {
		out, err := exec.Command("gzip", "-9", filepath.Join(bin, b)).CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	require.NoError(t, os.WriteFile(filepath.Join(bin, "build.tsv"), []byte("commit\t0123abcd\tclean\t2026-12-02T14:00:00Z\n"), 0o644))
	path := filepath.Join(root, "path")
	require.NoError(t, os.MkdirAll(path, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(path, "nvidia-smi"), []byte(`#!/usr/bin/env bash
[ "$1" = -L ] && { echo "GPU 0: NVIDIA H200"; exit 0; }
echo "0, NVIDIA H200, 580.159, 143771 MiB, 5, 16"
`), 0o755))

	rec := filepath.Join(root, "out")
	require.NoError(t, os.MkdirAll(rec, 0o755))
	cmd := exec.Command("bash", filepath.Join(root, "scripts", "gpu-check.sh"))
	cmd.Env = append(os.Environ(), "PATH="+path+string(os.PathListSeparator)+os.Getenv("PATH"),
		"OUT="+rec, "GPU_CHECK_DIR="+filepath.Join(root, "data"), "STEMDOT_TESTDATA="+filepath.Join(root, "none"))
	stdout, err := cmd.CombinedOutput()
	// The failed apply makes the run fail, after the record is written.
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "%s", stdout)
	assert.Equal(t, 1, exit.ExitCode(), "%s", stdout)
	assert.Contains(t, string(stdout), "GPU record: "+filepath.Join(rec, "gpu.json"))
	for _, f := range []string{"gpu-check.log", "gpu-check.tsv", "gpucheck.json", "gpu.json"} {
		assert.FileExists(t, filepath.Join(rec, f))
	}
	assert.NoDirExists(t, filepath.Join(root, "data"), "the data files outlive the run")

	b, err := os.ReadFile(filepath.Join(rec, "gpu.json"))
	require.NoError(t, err)
	var got map[string]any
	require.NoError(t, json.Unmarshal(b, &got))
	requireFixedKeys(t, got)

	code := map[string]float64{"cpu_only": 1, "hybrid_auto": 2, "gpu_only": 3}
	for file, base := range map[string]float64{"raw": 0, "mib": 100000} {
		for _, m := range []string{"1", "4", "16", "64", "ring"} {
			masks := map[string]float64{"1": 1, "4": 4, "16": 16, "64": 64, "ring": 999}[m]
			for plan, c := range code {
				v, ok := get(got, "plans", file, m, plan, "gbps")
				require.True(t, ok, "plans.%s.%s.%s: %v", file, m, plan, reason(t, got, "plans", file, m, plan))
				assert.Equal(t, base+masks*1000+c, v, "plans.%s.%s.%s", file, m, plan)
			}
			gw, _ := get(got, "plans", file, m, "gpu_only", "gpu_workers")
			require.Len(t, gw, 1)
			assert.Equal(t, base+masks*1000+3.25, gw.([]any)[0].(map[string]any)["gbps_busy"])
			w, _ := get(got, "plans", file, m, "hybrid_auto", "workers")
			assert.Equal(t, map[string]any{"cpu": 16.0, "gpu": 1.0}, w)
		}
		for _, m := range []string{"1", "64"} {
			v, _ := get(got, "feed_gbps", "engine_worker", file, m, "gpu_workers")
			require.Len(t, v, 1, "feed_gbps.engine_worker.%s.%s", file, m)
			masks := map[string]float64{"1": 1, "64": 64}[m]
			assert.Equal(t, base+masks*1000+4.25, v.([]any)[0].(map[string]any)["gbps_busy"])
		}
		for _, m := range []string{"1", "16"} {
			masks := map[string]float64{"1": 1, "16": 16}[m]
			v, _ := get(got, "shifted", file, m, "cpu_only", "gbps")
			assert.Equal(t, base+masks*1000+1.5, v, "shifted.%s.%s.cpu_only", file, m)
			if file == "mib" && m == "16" {
				assert.Equal(t, "stemdot apply failed: Error: cuda: cudaHostRegister: invalid argument",
					reason(t, got, "shifted", file, m, "gpu_only"))
				continue
			}
			v, _ = get(got, "shifted", file, m, "gpu_only", "gbps")
			assert.Equal(t, base+masks*1000+3.5, v, "shifted.%s.%s.gpu_only", file, m)
		}
	}
	for plan := range map[string]bool{"gpus_0": true, "gpus_auto": true, "gpus_1": true} {
		v, _ := get(got, "startup_s", plan)
		assert.IsType(t, 0.0, v, "startup_s.%s", plan)
	}
	assert.Equal(t, map[string]any{"gbps_by_threads": map[string]any{"1": 41.3, "2": 48.0, "4": 50.2, "8": 49.9}}, got["registration"])
	assert.Equal(t, map[string]any{"sha": "0123abcd", "dirty": false, "built": "2026-12-02T14:00:00Z"}, got["commit"])
	assert.Equal(t, "580.159", got["driver"])
	assert.Equal(t, map[string]any{"passed": 2.0, "failed": 0.0, "skipped": 1.0}, got["tests"].(map[string]any)["cuda.test"])
	assert.Equal(t, map[string]any{"raw_bytes": 16 * 4096.0, "mib_bytes": 4096.0, "tiny_mib_bytes": 4096.0}, got["data"])
	d2d, _ := get(got, "limits", "d2d")
	assert.Greater(t, d2d, 0.0)

	// The speed model's table and predictions (the stand-ins' files hold no whole frame,
	// so each row says why it is not predicted).
	assert.Contains(t, string(stdout), "speed model on this record's rates")
	assert.Contains(t, string(stdout), "raw 64 hybrid_auto not predicted: data.raw_bytes (65536) is not a whole number of 256×256 uint16 frames")
	assert.Contains(t, reason(t, got, "plans", "raw", "64", "hybrid_auto", "predicted_gbps"), "not a whole number of 256×256 uint16 frames")
	cpu16, _ := get(got, "model", "rates", "cpu_worker_gbps", "16")
	assert.Equal(t, 16001.0/16, cpu16, "the CPU-only row's GB/s ÷ its 16 CPU workers")
}
