package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
)

// Schema is the record's format version (the "schema" key).
const Schema = 1

// MaskCounts are the mask counts of every by-mask-count key ("ring": the plans' single ring
// mask, ring:128,128,90,100, which the engine runs on the sparse kernel).
var MaskCounts = []string{"1", "4", "16", "64", "ring"}

// NotMeasured is the value of a key that this run did not measure, with the reason.
type NotMeasured struct {
	Reason string `json:"not_measured"`
}

// gpucheckResult is what `gpucheck -json` writes (bench/gpucheck).
type gpucheckResult struct {
	Device map[string]any `json:"device"`
	Sig    int            `json:"sig"`
	Rows   []struct {
		Key   string  `json:"key"`
		Name  string  `json:"name"`
		GBps  float64 `json:"gbps"`
		Bound float64 `json:"bound"`
		Ms    float64 `json:"ms"`
		GB    float64 `json:"gb"`
	} `json:"rows"`
	Error string `json:"error"`
}

// record is the JSON object under construction: nested maps, keys set by path.
type record map[string]any

func (r record) set(v any, path ...string) {
	m := map[string]any(r)
	for _, k := range path[:len(path)-1] {
		next, ok := m[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[k] = next
		}
		m = next
	}
	m[path[len(path)-1]] = v
}

func (r record) has(path ...string) bool {
	m := map[string]any(r)
	for i, k := range path {
		v, ok := m[k]
		if !ok {
			return false
		}
		if i == len(path)-1 {
			return true
		}
		if m, ok = v.(map[string]any); !ok {
			return false
		}
	}
	return false
}

// gpuWorkerLine matches engine.WorkerStats.String of a GPU worker.
var gpuWorkerLine = regexp.MustCompile(`^worker (\d+) \(gpu (\d+), cpu (\d+)(?:, ([^)]*))?\): (\d+) frames in (\d+) claims, ([0-9.]+) GB at ([0-9.]+) GB/s, ready after ([0-9.]+) s$`)

// workersSummary matches the worker counts of engine.Stats.Summary.
var workersSummary = regexp.MustCompile(`^(\d+) workers? \((\d+) cpu, (\d+) gpu\)$`)

// apply is one `stemdot apply` run of the script (an "apply" line).
type apply struct {
	key, file, masks string
	fields           []string
}

// entry is the record's value for one apply: GB/s of native frame bytes while the engine
// ran, the process's wall seconds, the workers planned and each GPU worker's account.
func (a apply) entry() (any, error) {
	f := a.fields
	if f[7] != "" {
		return NotMeasured{"stemdot apply failed: " + f[7]}, nil
	}
	e := map[string]any{}
	if f[3] == "" {
		e["gbps"] = NotMeasured{"stemdot apply printed no GB/s"}
	} else {
		v, err := strconv.ParseFloat(f[3], 64)
		if err != nil {
			return nil, fmt.Errorf("apply %s %s %s: GB/s %q: %v", a.key, a.file, a.masks, f[3], err)
		}
		e["gbps"] = v
	}
	wall, err := strconv.ParseFloat(f[4], 64)
	if err != nil {
		return nil, fmt.Errorf("apply %s %s %s: wall seconds %q: %v", a.key, a.file, a.masks, f[4], err)
	}
	e["wall_s"] = wall
	if m := workersSummary.FindStringSubmatch(f[5]); m != nil {
		e["workers"] = map[string]any{"cpu": atoi(m[2]), "gpu": atoi(m[3])}
	} else {
		e["workers"] = NotMeasured{fmt.Sprintf("stemdot apply printed no worker counts (%q)", f[5])}
	}
	gpus := []any{}
	if f[6] != "" {
		for _, l := range strings.Split(f[6], " | ") {
			m := gpuWorkerLine.FindStringSubmatch(strings.TrimSpace(l))
			if m == nil {
				gpus = append(gpus, map[string]any{"line": l})
				continue
			}
			gpus = append(gpus, map[string]any{"worker": atoi(m[1]), "gpu": atoi(m[2]), "cpu": atoi(m[3]), "feed": m[4],
				"frames": atoi(m[5]), "claims": atoi(m[6]), "gb": atof(m[7]), "gbps_busy": atof(m[8]), "ready_s": atof(m[9])})
		}
	}
	e["gpu_workers"] = gpus
	return e, nil
}

func atoi(s string) int     { v, _ := strconv.Atoi(s); return v }           // only on regexp-checked digits
func atof(s string) float64 { v, _ := strconv.ParseFloat(s, 64); return v } // likewise

// Assemble builds the GPU record from the script's lines (tab-separated, see
// scripts/gpu-check.sh) and gpucheck's JSON (nil when gpucheck wrote none). Every key of
// the record's fixed set is present: a measured value, or NotMeasured with the reason.
// It returns an error for lines it cannot read (a script and gpurecord out of step).
func Assemble(lines io.Reader, gpucheckJSON []byte) (map[string]any, error) {
	r := record{"schema": Schema}
	var (
		gpucheckStatus = -1 // -1: no gpucheck line
		applies        []apply
		registration   = map[string]any{}
		smi            []any
		tests          = map[string]any{}
	)
	sc := bufio.NewScanner(lines)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for n := 1; sc.Scan(); n++ {
		if sc.Text() == "" {
			continue
		}
		f := strings.Split(sc.Text(), "\t")
		want := map[string]int{"date": 2, "commit": 4, "host": 4, "nvidia-smi": 2, "tests": 5, "registration": 3,
			"gpucheck": 2, "data": 3, "apply": 9}[f[0]]
		if want == 0 {
			return nil, fmt.Errorf("line %d: unknown kind %q", n, f[0])
		}
		if len(f) != want {
			return nil, fmt.Errorf("line %d (%s): %d fields, want %d", n, f[0], len(f), want)
		}
		switch f[0] {
		case "date":
			r.set(f[1], "date")
		case "commit":
			r.set(map[string]any{"sha": f[1], "dirty": f[2] == "dirty", "built": f[3]}, "commit")
		case "host":
			r.set(map[string]any{"cpus": atoi(f[1]), "memory_gib": atoi(f[2]), "cpu_model": f[3]}, "host")
		case "nvidia-smi":
			// index, name, driver_version, memory.total, pcie.link.gen.current, pcie.link.width.current
			c := strings.Split(f[1], ", ")
			if len(c) != 6 {
				return nil, fmt.Errorf("line %d: nvidia-smi %q: want 6 comma-separated fields", n, f[1])
			}
			smi = append(smi, map[string]any{"index": atoi(c[0]), "name": c[1], "driver": c[2], "memory": c[3],
				"pcie_gen": atoi(c[4]), "pcie_width": atoi(c[5])})
			if !r.has("driver") {
				r.set(c[2], "driver")
			}
		case "tests":
			tests[f[1]] = map[string]any{"passed": atoi(f[2]), "failed": atoi(f[3]), "skipped": atoi(f[4])}
		case "registration":
			v, err := strconv.ParseFloat(f[2], 64)
			if err != nil {
				return nil, fmt.Errorf("line %d: registration GB/s %q: %v", n, f[2], err)
			}
			registration[f[1]] = v
		case "gpucheck":
			gpucheckStatus = atoi(f[1])
		case "data":
			r.set(atoi(f[2]), "data", f[1]+"_bytes")
		case "apply":
			applies = append(applies, apply{key: f[1], file: f[2], masks: f[3], fields: f[1:]})
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	r.set(tests, "tests")

	// The device: nvidia-smi's view and the CUDA runtime's (gpucheck).
	var gc *gpucheckResult
	if gpucheckJSON != nil {
		gc = new(gpucheckResult)
		if err := json.Unmarshal(gpucheckJSON, gc); err != nil {
			return nil, fmt.Errorf("gpucheck JSON: %v", err)
		}
	}
	if len(smi) > 0 {
		r.set(smi, "device", "nvidia_smi")
	} else {
		r.set(NotMeasured{"nvidia-smi not available"}, "device", "nvidia_smi")
		r.set(NotMeasured{"nvidia-smi not available (device.cuda.cuda_driver is the CUDA version the driver supports)"}, "driver")
	}
	if gc != nil && gc.Device != nil {
		r.set(gc.Device, "device", "cuda")
	}

	// gpucheck's rows.
	gpucheckKeys := map[string][]string{
		"limits.d2d":              {"limits", "d2d"},
		"limits.h2d_pinned":       {"limits", "h2d_pinned"},
		"limits.memcpy_1core":     {"limits", "memcpy_1core"},
		"runner.staged_1_streams": {"feed_gbps", "runner", "staged_1_stream"},
		"runner.staged_3_streams": {"feed_gbps", "runner", "staged_3_streams"},
		"mapped.raw":              {"feed_gbps", "runner", "raw"},
		"mapped.mib":              {"feed_gbps", "runner", "mib"},
		"mapped.mib_shifted":      {"feed_gbps", "runner", "mib_shifted"},
	}
	for _, v := range []string{"dense", "dense_tiled", "dense_f64", "sparse"} {
		for _, m := range append(MaskCounts, "32", "disc+ring") {
			gpucheckKeys["kernel."+v+"."+m] = []string{"kernel_gbps", v, m}
		}
	}
	if gc != nil {
		for _, row := range gc.Rows {
			switch {
			case gpucheckKeys[row.Key] != nil:
				r.set(row.GBps, gpucheckKeys[row.Key]...)
			case row.Key == "resident.load":
				r.set(map[string]any{"gb": row.GB, "load_gbps": row.GBps}, "resident")
			case strings.HasPrefix(row.Key, "resident."):
				r.set(row.Ms, "resident_ms", strings.TrimPrefix(row.Key, "resident."))
			default:
				return nil, fmt.Errorf("gpucheck JSON: unknown row key %q (%s)", row.Key, row.Name)
			}
		}
	}
	gpucheckReason := "gpucheck did not run"
	switch {
	case gpucheckStatus == 124:
		gpucheckReason = "gpucheck ran past its time limit before this case"
	case gc == nil && gpucheckStatus >= 0:
		gpucheckReason = fmt.Sprintf("gpucheck wrote no JSON (exit status %d)", gpucheckStatus)
	case gc != nil && gc.Error != "":
		gpucheckReason = "gpucheck stopped before this case: " + gc.Error
	case gc != nil:
		gpucheckReason = "gpucheck has no such row"
	}
	// Kernel keys that no gpucheck case measures, by design.
	for _, m := range []string{"1", "4"} {
		r.setIfAbsent(NotMeasured{"the tiled kernel serves groups of 16 to 64 masks; " + m + " mask(s) run the streaming kernel (kernel_gbps.dense)"}, "kernel_gbps", "dense_tiled", m)
	}
	for _, v := range []string{"dense", "dense_tiled", "dense_f64"} {
		r.setIfAbsent(NotMeasured{"a ring mask runs on the sparse kernel (kernel_gbps.sparse.ring)"}, "kernel_gbps", v, "ring")
	}
	for _, m := range []string{"1", "16", "64"} {
		r.setIfAbsent(NotMeasured{"gpucheck times the float64 kernel at 4 masks only"}, "kernel_gbps", "dense_f64", m)
	}
	for _, m := range []string{"1", "4", "16", "64"} {
		r.setIfAbsent(NotMeasured{"the engine runs dense masks (rects) on the dense kernels; gpucheck times the sparse kernel on the ring"}, "kernel_gbps", "sparse", m)
	}
	for _, p := range [][]string{{"limits", "d2d"}, {"limits", "h2d_pinned"}, {"limits", "memcpy_1core"},
		{"feed_gbps", "runner", "raw"}, {"feed_gbps", "runner", "mib"}, {"feed_gbps", "runner", "mib_shifted"},
		{"feed_gbps", "runner", "staged_1_stream"}, {"feed_gbps", "runner", "staged_3_streams"},
		{"resident_ms", "1"}, {"resident_ms", "64"}, {"resident"}} {
		r.setIfAbsent(NotMeasured{gpucheckReason}, p...)
	}
	for _, v := range []string{"dense", "dense_tiled", "dense_f64", "sparse"} {
		for _, m := range MaskCounts {
			r.setIfAbsent(NotMeasured{gpucheckReason}, "kernel_gbps", v, m)
		}
	}
	if !r.has("device", "cuda") {
		r.set(NotMeasured{gpucheckReason}, "device", "cuda")
	}

	// The script's applies.
	for _, a := range applies {
		e, err := a.entry()
		if err != nil {
			return nil, err
		}
		switch a.key {
		case "cpu_only", "hybrid_auto", "gpu_only":
			r.set(e, "plans", a.file, a.masks, a.key)
		case "one_gpu_worker":
			r.set(e, "feed_gbps", "engine_worker", a.file, a.masks)
		case "shifted_cpu_only", "shifted_gpu_only":
			r.set(e, "shifted", a.file, a.masks, strings.TrimPrefix(a.key, "shifted_"))
		case "startup_gpus_0", "startup_gpus_auto", "startup_gpus_1":
			if m, ok := e.(map[string]any); ok {
				e = m["wall_s"]
			}
			r.set(e, "startup_s", strings.TrimPrefix(a.key, "startup_"))
		default:
			return nil, fmt.Errorf("apply line: unknown key %q", a.key)
		}
	}
	const noApply = "the script stopped before this run"
	for _, file := range []string{"raw", "mib"} {
		for _, m := range MaskCounts {
			for _, plan := range []string{"cpu_only", "hybrid_auto", "gpu_only"} {
				r.setIfAbsent(NotMeasured{noApply}, "plans", file, m, plan)
			}
		}
		for _, m := range []string{"1", "64"} {
			r.setIfAbsent(NotMeasured{noApply}, "feed_gbps", "engine_worker", file, m)
		}
		for _, m := range []string{"1", "16"} {
			for _, plan := range []string{"cpu_only", "gpu_only"} {
				r.setIfAbsent(NotMeasured{noApply}, "shifted", file, m, plan)
			}
		}
	}
	for _, p := range []string{"gpus_0", "gpus_auto", "gpus_1"} {
		r.setIfAbsent(NotMeasured{noApply}, "startup_s", p)
	}

	if len(registration) > 0 {
		r.set(registration, "registration", "gbps_by_threads")
	} else {
		r.set(NotMeasured{"no registration lines in cuda.test's log (TestRegistrationScaling did not pass on this run)"}, "registration")
	}
	for _, k := range []string{"date", "host"} {
		r.setIfAbsent(NotMeasured{"the script wrote no " + k + " line"}, k)
	}
	r.setIfAbsent(NotMeasured{"bin/gpu has no build.tsv (built by an older scripts/gpu-check.sh --build)"}, "commit")
	r.setIfAbsent(NotMeasured{"no data lines (the script stopped before making the files)"}, "data")
	return r, nil
}

func (r record) setIfAbsent(v any, path ...string) {
	if !r.has(path...) {
		r.set(v, path...)
	}
}

// CountNotMeasured returns the number of NotMeasured values in v (a record).
func CountNotMeasured(v any) int {
	switch v := v.(type) {
	case NotMeasured:
		return 1
	case map[string]any:
		n := 0
		for _, x := range v {
			n += CountNotMeasured(x)
		}
		return n
	case record:
		return CountNotMeasured(map[string]any(v))
	}
	return 0
}
