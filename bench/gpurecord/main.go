// Command gpurecord assembles the GPU record (bench/results/gpu.json) of one run of
// scripts/gpu-check.sh on a GPU machine: the date, the commit bin/gpu was built from,
// the device, driver and host, the copy limits, the kernels' GB/s by mask count, the
// feeds', the plans' (CPU-only, hybrid auto, GPU-only) on the >= 16 GB raw file and the
// MIB file, shifted masks, resident applies, start-up times and the driver's
// registration rate by thread count.
//
//	gpurecord -lines LINES.tsv [-gpucheck GPUCHECK.json] -o gpu.json
//
// LINES.tsv is what the script writes while it runs, one measurement a line, fields
// separated by tabs, the first naming the kind:
//
//	date      ISO-8601 UTC time of the run
//	commit    SHA  clean|dirty  build time       (bin/gpu/build.tsv, written by --build)
//	host      CPUs  memory GiB  CPU model
//	nvidia-smi  "index, name, driver_version, memory.total, pcie gen, pcie width"
//	tests     binary  passed  failed  skipped
//	registration  threads  GB/s                (cuda.test's TestRegistrationScaling)
//	gpucheck  exit status
//	data      file label  bytes
//	apply     key  file label  masks  GB/s  wall s  workers  GPU worker lines (" | ")  error
//
//	gpurecord -predict gpu.json
//
// GPUCHECK.json is `gpucheck -json`'s output (absent when gpucheck wrote none). Every key
// of the record's fixed set is present: a value measured in that run, or
// {"not_measured": "reason"}; nothing is filled in otherwise. gpurecord exits non-zero
// only when it cannot read its input (the script and it out of step).
//
// The record also holds the planner's speed model fed by this run's own rates (see
// model.go): beside every plan row with a measured GB/s, predicted_gbps (and for the
// "auto" plans model_gpu_workers, the GPU workers the model chooses), the rates used under
// "model"; gpurecord prints them as a table, predicted beside measured. -predict prints
// that table for a record already written (a committed bench/results/gpu.json), writing
// nothing.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
)

func main() {
	lines := flag.String("lines", "", "the script's measurement lines (TSV)")
	gpucheck := flag.String("gpucheck", "", "gpucheck -json's output (missing file: gpucheck wrote none)")
	out := flag.String("o", "", "the record to write (JSON)")
	predict := flag.String("predict", "", "a record (JSON) to print the speed model's predictions of, beside its measurements")
	flag.Parse()
	if *predict != "" {
		if err := printPredictions(*predict); err != nil {
			fmt.Fprintln(os.Stderr, "gpurecord:", err)
			os.Exit(1)
		}
		return
	}
	if *lines == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "gpurecord: -lines and -o are required")
		os.Exit(2)
	}
	if err := write(*lines, *gpucheck, *out); err != nil {
		fmt.Fprintln(os.Stderr, "gpurecord:", err)
		os.Exit(1)
	}
}

func write(linesPath, gpucheckPath, out string) error {
	f, err := os.Open(linesPath)
	if err != nil {
		return err
	}
	defer f.Close()
	var gc []byte
	if gpucheckPath != "" {
		gc, err = os.ReadFile(gpucheckPath)
		if errors.Is(err, fs.ErrNotExist) {
			gc, err = nil, nil
		}
		if err != nil {
			return err
		}
	}
	rec, err := Assemble(f, gc)
	if err != nil {
		return fmt.Errorf("%s: %w", linesPath, err)
	}
	// The model works on the record as JSON holds it, the form a committed record is read in.
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	var dec map[string]any
	if err := json.Unmarshal(b, &dec); err != nil {
		return err
	}
	rows := AddPredictions(dec)
	if b, err = json.MarshalIndent(dec, "", "  "); err != nil {
		return err
	}
	if err := os.WriteFile(out, append(b, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Printf("GPU record: %s (%d values not measured, each with its reason)\n", out, CountNotMeasured(rec))
	PrintModel(os.Stdout, rows)
	return nil
}

func printPredictions(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("%s: %v", path, err)
	}
	rec, ok := v.(map[string]any)
	if !ok { // null (a nil map, which AddPredictions cannot write to), a list, a number
		kind := map[bool]string{true: "null"}[v == nil]
		switch v.(type) {
		case []any:
			kind = "a list"
		case float64:
			kind = "a number"
		case string:
			kind = "a string"
		case bool:
			kind = "a boolean"
		}
		return fmt.Errorf("%s: the record is %s, not a JSON object (a record as gpurecord writes it)", path, kind)
	}
	PrintModel(os.Stdout, AddPredictions(rec))
	return nil
}
