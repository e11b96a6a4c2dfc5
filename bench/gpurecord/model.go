package main

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/stemdot/stemdot/planner"
)

// The speed model on the record's own rates: the planner's model (planner.Shape.PredictWith)
// fed by this run's measurements, its prediction written beside every measured plan row.
//
// The rates, all from this record (a rate the record lacks is not measured, and so is
// every prediction that needs it; nothing is filled in from the planner's defaults):
//
//   - CPU worker, by mask count and for the ring (sparse): plans.raw.MASKS.cpu_only's GB/s
//     ÷ its CPU workers. The CPU-only rows on the raw file are therefore the model's
//     calibration, not predictions; they are labelled so.
//   - host bound: the fastest of those rows (at 1-4 masks and the ring, CPU workers are
//     bound by host memory), per core: ÷ their CPU workers, which are the usable cores.
//   - GPU kernel: kernel_gbps.dense.MASKS (the engine's default dense kernel), and
//     kernel_gbps.sparse.ring for the ring. Only a row's own mask count is used: a kernel
//     rate that was not timed at it is not interpolated from its neighbours.
//   - one GPU worker's feed: the busy rate of the GPU worker of feed_gbps.engine_worker.raw
//     (one GPU worker alone, 1 and 64 masks; their mean). That is what the model's feed is,
//     a GPU worker moving frames end to end in the engine (claims, registration, DMA,
//     kernel, results) while it has work; gpucheck's runner feed moves one mapping with
//     nothing else to do (run 3: 25.6 GB/s against 11.6-12.2 in the engine) and would
//     overstate a worker. Its rate while busy, not over the run, because the model adds the
//     start-up itself.
//   - one GPU's link: feed_gbps.runner.raw, the copy-free feed streaming a mapping of a raw
//     file alone: the most one GPU's feed moved with nothing else bounding it.
//   - GPU start-up: the mean "ready after" of the GPU workers of feed_gbps.engine_worker
//     (raw and MIB), the engine's own account of the time until a GPU worker took work.
//
// Every prediction is of the row as it ran: its CPU workers, its GPU workers on their
// GPUs, the frames of its file (the script's 256×256 uint16 frames: the raw file's bytes,
// the MIB file's less its 384-byte frame headers). For the "auto" plans the model's own
// choice of GPU workers on these rates is written beside (planner.Shape.FastestGPUCount, up
// to planner.DefaultMaxWorkersPerGPU on each GPU nvidia-smi listed and one a core; the
// record has no free GPU memory, so auto's memory cap is not applied).

const (
	frameBytes = 256 * 256 * 2 // one frame of the script's files: 256×256 uint16
	mibHeader  = 384           // the MIB frame header stemdot synth writes (dataset's MIB writer)
	gb         = 1e9
)

// value is a number read from the record or the reason it is missing.
type value struct {
	v   float64
	why string // "" when measured
}

func (x value) ok() bool { return x.why == "" }

// json returns x as the record writes it: the number, or not_measured with the reason.
func (x value) json() any {
	if x.ok() {
		return x.v
	}
	return notMeasured(x.why)
}

// notMeasured is NotMeasured in the form of a record decoded from JSON.
func notMeasured(why string) map[string]any { return map[string]any{"not_measured": why} }

// lookup returns the value at path of a record decoded from JSON, or why it is missing:
// not in the record, or not measured (at path or above it) with the record's reason.
func lookup(rec map[string]any, path ...string) (any, string) {
	var v any = rec
	for i := 0; ; i++ {
		m, ok := v.(map[string]any)
		if ok {
			if r, ok := m["not_measured"]; ok {
				return nil, fmt.Sprintf("%s not measured (%v)", strings.Join(path[:i], "."), r)
			}
		}
		if i == len(path) {
			return v, ""
		}
		if !ok {
			return nil, strings.Join(path[:i], ".") + " is not an object"
		}
		if v, ok = m[path[i]]; !ok {
			return nil, strings.Join(path[:i+1], ".") + " is not in the record"
		}
	}
}

// number returns the number at path.
func number(rec map[string]any, path ...string) value {
	v, why := lookup(rec, path...)
	if why != "" {
		return value{why: why}
	}
	f, ok := v.(float64)
	if !ok || math.IsNaN(f) || math.IsInf(f, 0) {
		return value{why: fmt.Sprintf("%s is %v, not a number", strings.Join(path, "."), v)}
	}
	return value{v: f}
}

// positive returns the number at path, refusing one that is not positive.
func positive(rec map[string]any, path ...string) value {
	x := number(rec, path...)
	if x.ok() && x.v <= 0 {
		return value{why: fmt.Sprintf("%s is %g, not a positive rate", strings.Join(path, "."), x.v)}
	}
	return x
}

// bytesPerSecond returns the positive GB/s at path in bytes per second.
func bytesPerSecond(rec map[string]any, path ...string) value {
	x := positive(rec, path...)
	if x.ok() {
		x.v *= gb
	}
	return x
}

// gpuWorkers returns the GPU workers' accounts of the entry at path.
func gpuWorkers(rec map[string]any, path ...string) ([]map[string]any, string) {
	v, why := lookup(rec, append(path, "gpu_workers")...)
	if why != "" {
		return nil, why
	}
	list, ok := v.([]any)
	if !ok {
		return nil, strings.Join(path, ".") + ".gpu_workers is not a list"
	}
	var out []map[string]any
	for _, w := range list {
		m, ok := w.(map[string]any)
		if !ok {
			return nil, strings.Join(path, ".") + ".gpu_workers holds a non-object"
		}
		out = append(out, m)
	}
	return out, ""
}

// recordRates are the model's rates read from one record, each with its reason when the
// record lacks it.
type recordRates struct {
	cores     int
	coresWhy  string
	cpu       map[string]value // one CPU worker, bytes/s, by mask key (ring: sparse)
	host      value            // bytes/s per core
	kernel    map[string]value // dense kernel by mask key, sparse kernel at "ring"
	feed      value
	link      value
	startup   value // seconds
	gpuIndex  []int // the GPUs nvidia-smi listed
	gpuIdxWhy string
}

// readRates reads the model's rates from the record (see the file's comment).
func readRates(rec map[string]any) recordRates {
	r := recordRates{cpu: map[string]value{}, kernel: map[string]value{}}
	r.coresWhy = "no CPU-only row on the raw file was measured (plans.raw.*.cpu_only: its CPU workers are the usable cores)"
	var fastest value
	for _, m := range MaskCounts {
		p := []string{"plans", "raw", m, "cpu_only"}
		g := positive(rec, append(p, "gbps")...)
		cpus := number(rec, append(p, "workers", "cpu")...)
		gpus := number(rec, append(p, "workers", "gpu")...)
		switch {
		case !g.ok():
			r.cpu[m] = g
			continue
		case !cpus.ok():
			r.cpu[m] = cpus
			continue
		case cpus.v < 1 || cpus.v != math.Trunc(cpus.v) || !gpus.ok() || gpus.v != 0:
			r.cpu[m] = value{why: fmt.Sprintf("%s ran %v CPU and %v GPU workers, not CPU workers only", strings.Join(p, "."), cpus.json(), gpus.json())}
			continue
		}
		if r.coresWhy != "" {
			r.cores, r.coresWhy = int(cpus.v), ""
		} else if int(cpus.v) != r.cores {
			r.cpu[m] = value{why: fmt.Sprintf("%s ran %d CPU workers, the other CPU-only rows %d (the usable cores differ between runs)", strings.Join(p, "."), int(cpus.v), r.cores)}
			continue
		}
		r.cpu[m] = value{v: g.v * gb / cpus.v}
		if g.v > fastest.v {
			fastest = g
		}
	}
	if r.coresWhy != "" {
		r.host = value{why: r.coresWhy}
	} else {
		r.host = value{v: fastest.v * gb / float64(r.cores)}
	}

	for _, m := range []string{"1", "4", "16", "32", "64"} {
		r.kernel[m] = bytesPerSecond(rec, "kernel_gbps", "dense", m)
	}
	r.kernel["ring"] = bytesPerSecond(rec, "kernel_gbps", "sparse", "ring")

	var busy []float64
	var whys []string
	for _, m := range []string{"1", "64"} {
		p := []string{"feed_gbps", "engine_worker", "raw", m}
		ws, why := gpuWorkers(rec, p...)
		switch {
		case why != "":
			whys = append(whys, why)
		case len(ws) != 1:
			whys = append(whys, fmt.Sprintf("%s has %d GPU worker accounts, want 1", strings.Join(p, "."), len(ws)))
		default:
			b, ok := ws[0]["gbps_busy"].(float64)
			if !ok || !(b > 0) {
				whys = append(whys, strings.Join(p, ".")+".gpu_workers[0] has no positive gbps_busy")
				continue
			}
			busy = append(busy, b*gb)
		}
	}
	if len(busy) > 0 {
		r.feed = value{v: mean(busy)}
	} else {
		r.feed = value{why: strings.Join(slices.Compact(whys), "; ")}
	}
	r.link = bytesPerSecond(rec, "feed_gbps", "runner", "raw")

	var ready []float64
	for _, f := range []string{"raw", "mib"} {
		for _, m := range []string{"1", "64"} {
			ws, _ := gpuWorkers(rec, "feed_gbps", "engine_worker", f, m)
			for _, w := range ws {
				if s, ok := w["ready_s"].(float64); ok && s >= 0 {
					ready = append(ready, s)
				}
			}
		}
	}
	if len(ready) > 0 {
		r.startup = value{v: mean(ready)}
	} else {
		r.startup = value{why: "no GPU worker of feed_gbps.engine_worker.{raw,mib}.{1,64} says when it was ready (ready_s)"}
	}

	smi, why := lookup(rec, "device", "nvidia_smi")
	list, ok := smi.([]any)
	switch {
	case why != "":
		r.gpuIdxWhy = why
	case !ok || len(list) == 0:
		r.gpuIdxWhy = "device.nvidia_smi lists no GPU"
	default:
		for _, g := range list {
			m, _ := g.(map[string]any)
			i, ok := m["index"].(float64)
			if !ok {
				r.gpuIndex, r.gpuIdxWhy = nil, "device.nvidia_smi has a GPU without an index"
				break
			}
			r.gpuIndex = append(r.gpuIndex, int(i))
		}
	}
	return r
}

func mean(x []float64) float64 {
	s := 0.0
	for _, v := range x {
		s += v
	}
	return s / float64(len(x))
}

// rates returns the planner's Rates for a job at the mask key m, or why the record cannot
// give them: the CPU rate at m and the host bound with CPU workers, the kernel at m, the
// feed, the link and the start-up with GPU workers.
func (r recordRates) rates(m string, cpu, gpu bool) (planner.Rates, string) {
	var pr planner.Rates
	var why []string
	if !r.host.ok() {
		why = append(why, "host bound: "+r.host.why)
	}
	pr.HostPerCore = r.host.v
	if cpu {
		if c := r.cpu[m]; !c.ok() {
			why = append(why, "CPU worker rate: "+c.why)
		}
	}
	for _, k := range []string{"1", "4", "16", "64"} {
		if c := r.cpu[k]; c.ok() {
			n, _ := strconv.Atoi(k)
			pr.CPUDense = append(pr.CPUDense, planner.Rate{Masks: n, BPS: c.v})
		}
	}
	pr.CPUSparse = r.cpu["ring"].v
	if gpu {
		for _, x := range []struct {
			name string
			v    value
		}{{"GPU kernel", r.kernel[m]}, {"GPU worker feed", r.feed}, {"GPU link", r.link}, {"GPU start-up", r.startup}} {
			if !x.v.ok() {
				why = append(why, x.name+": "+x.v.why)
			}
		}
	}
	for _, k := range []string{"1", "4", "16", "32", "64"} {
		if c := r.kernel[k]; c.ok() {
			n, _ := strconv.Atoi(k)
			pr.GPUDense = append(pr.GPUDense, planner.Rate{Masks: n, BPS: c.v})
		}
	}
	pr.GPUSparse = r.kernel["ring"].v
	pr.GPUFeed, pr.GPULink = r.feed.v, r.link.v
	pr.GPUStartup = time.Duration(r.startup.v * float64(time.Second))
	return pr, strings.Join(why, "; ")
}

// ModelRow is one measured plan row beside the model's prediction.
type ModelRow struct {
	File, Masks, Plan string
	// Measured and Predicted are GB/s; Predicted is 0 with Why when not predicted.
	Measured, Predicted float64
	Why                 string
	// Calibration: the row's GB/s is an input of the model (CPU-only on the raw file).
	Calibration bool
	// RanGPU is the GPU workers the row ran; ModelGPU the model's choice for "auto" plans
	// (-1: not an auto plan or not predicted, with ModelWhy).
	RanGPU, ModelGPU int
	ModelWhy         string
}

// Ratio is Predicted / Measured.
func (r ModelRow) Ratio() float64 { return r.Predicted / r.Measured }

// Within20 tells whether the prediction is within 20% of the measured GB/s.
func (r ModelRow) Within20() bool { return math.Abs(r.Ratio()-1) <= 0.2 }

// shape is the job of a plan row: the file's frames and the masks (the ring: one sparse
// mask).
func shape(rec map[string]any, file, m string) (planner.Shape, string) {
	header := map[string]float64{"raw": 0, "mib": mibHeader}[file]
	b := positive(rec, "data", file+"_bytes")
	if !b.ok() {
		return planner.Shape{}, b.why
	}
	frames := b.v / (frameBytes + header)
	if frames != math.Trunc(frames) {
		return planner.Shape{}, fmt.Sprintf("data.%s_bytes (%g) is not a whole number of 256×256 uint16 frames (with %g-byte headers): not the script's file", file, b.v, header)
	}
	s := planner.Shape{NumFrames: int(frames), SigY: 256, SigX: 256, DTypeSize: 2, NMasks: 1, Sparse: m == "ring"}
	if m != "ring" {
		s.NMasks, _ = strconv.Atoi(m)
	}
	return s, ""
}

// AddPredictions writes the model's prediction beside every plan row of the record (decoded
// from JSON) with a measured GB/s: predicted_gbps (a number, or not_measured with the
// reason), predicted_is on the calibration rows, and model_gpu_workers on the "auto" plans
// (hybrid_auto, gpu_only); and the rates it used under "model". It returns the rows in
// file, mask count and plan order.
func AddPredictions(rec map[string]any) []ModelRow {
	r := readRates(rec)
	rec["model"] = map[string]any{
		"rates": map[string]any{
			"cpu_worker_gbps":      gbpsByMasks(r.cpu),
			"host_gbps_per_core":   gbps(r.host),
			"cores":                value{v: float64(r.cores), why: r.coresWhy}.json(),
			"gpu_kernel_gbps":      gbpsByMasks(r.kernel),
			"gpu_worker_feed_gbps": gbps(r.feed),
			"gpu_link_gbps":        gbps(r.link),
			"gpu_startup_s":        r.startup.json(),
		},
		"sources": map[string]any{
			"cpu_worker_gbps":      "plans.raw.MASKS.cpu_only: GB/s ÷ CPU workers (those rows are the model's calibration)",
			"host_gbps_per_core":   "the fastest plans.raw.*.cpu_only row ÷ its CPU workers (host memory bounds CPU-only runs at 1-4 masks and the ring)",
			"cores":                "plans.raw.*.cpu_only: CPU workers (one a usable core)",
			"gpu_kernel_gbps":      "kernel_gbps.dense.MASKS (the default dense kernel); ring: kernel_gbps.sparse.ring",
			"gpu_worker_feed_gbps": "feed_gbps.engine_worker.raw.{1,64}: the one GPU worker's busy GB/s, their mean",
			"gpu_link_gbps":        "feed_gbps.runner.raw: the copy-free feed streaming one mapping alone",
			"gpu_startup_s":        "feed_gbps.engine_worker.{raw,mib}.{1,64}: the GPU workers' ready_s, their mean",
		},
	}
	var rows []ModelRow
	for _, file := range []string{"raw", "mib"} {
		for _, m := range MaskCounts {
			for _, plan := range []string{"cpu_only", "hybrid_auto", "gpu_only"} {
				p := []string{"plans", file, m, plan}
				v, _ := lookup(rec, p...)
				entry, ok := v.(map[string]any)
				meas := number(rec, append(p, "gbps")...)
				if !ok || !meas.ok() || meas.v <= 0 {
					continue
				}
				row := predictRow(rec, r, file, m, plan)
				row.Measured = meas.v
				if row.Why != "" {
					entry["predicted_gbps"] = notMeasured(row.Why)
				} else {
					entry["predicted_gbps"] = row.Predicted
				}
				if row.Calibration {
					entry["predicted_is"] = "calibration: the model's CPU worker rate at these masks is this row's GB/s ÷ its CPU workers"
				}
				if plan != "cpu_only" {
					if row.ModelWhy != "" {
						entry["model_gpu_workers"] = notMeasured(row.ModelWhy)
					} else {
						entry["model_gpu_workers"] = float64(row.ModelGPU) // as JSON numbers decode
					}
				}
				rows = append(rows, row)
			}
		}
	}
	return rows
}

// gbps is x (bytes/s) in GB/s as the record writes it.
func gbps(x value) any {
	if x.ok() {
		x.v /= gb
	}
	return x.json()
}

// gbpsByMasks is gbps of every rate of a by-mask-key table.
func gbpsByMasks(t map[string]value) map[string]any {
	out := map[string]any{}
	for k, x := range t {
		out[k] = gbps(x)
	}
	return out
}

// predictRow predicts one measured plan row.
func predictRow(rec map[string]any, r recordRates, file, m, plan string) ModelRow {
	row := ModelRow{File: file, Masks: m, Plan: plan, RanGPU: -1, ModelGPU: -1,
		Calibration: file == "raw" && plan == "cpu_only"}
	p := []string{"plans", file, m, plan}
	s, why := shape(rec, file, m)
	if why != "" {
		row.Why, row.ModelWhy = why, why
		return row
	}
	if plan != "cpu_only" {
		row.ModelGPU, row.ModelWhy = modelChoice(r, s, m, plan)
	}

	cpus, gpus := number(rec, append(p, "workers", "cpu")...), number(rec, append(p, "workers", "gpu")...)
	if !cpus.ok() || !gpus.ok() {
		row.Why = "the row's workers: " + cpus.why + gpus.why
		return row
	}
	row.RanGPU = int(gpus.v)
	perGPU := map[int]int{}
	if gpus.v > 0 {
		ws, why := gpuWorkers(rec, p...)
		if why != "" || len(ws) != int(gpus.v) {
			row.Why = fmt.Sprintf("%s ran %d GPU workers, its gpu_workers account for %d (%s)", strings.Join(p, "."), int(gpus.v), len(ws), why)
			return row
		}
		for _, w := range ws {
			g, ok := w["gpu"].(float64)
			if !ok {
				row.Why = strings.Join(p, ".") + ".gpu_workers: a worker's line was not read (no GPU index)"
				return row
			}
			perGPU[int(g)]++
		}
	}
	rates, why := r.rates(m, cpus.v > 0, gpus.v > 0)
	if why != "" {
		row.Why = why
		return row
	}
	counts := make([]int, 0, len(perGPU))
	for _, g := range slices.Sorted(maps.Keys(perGPU)) {
		counts = append(counts, perGPU[g])
	}
	t, err := s.PredictWith(rates, int(cpus.v), counts, r.cores)
	if err != nil {
		row.Why = err.Error()
		return row
	}
	row.Predicted = float64(s.NumFrames) * frameBytes / t.Seconds() / gb
	return row
}

// modelChoice is the GPU workers the model chooses for an "auto" plan on the record's
// rates: up to planner.DefaultMaxWorkersPerGPU on each GPU of nvidia-smi's list, taking
// turns, one a usable core; the CPU workers take the other cores (hybrid_auto) or none
// (gpu_only, --cpus 0).
func modelChoice(r recordRates, s planner.Shape, m, plan string) (int, string) {
	if r.gpuIdxWhy != "" {
		return -1, "the GPUs auto could use: " + r.gpuIdxWhy
	}
	rates, why := r.rates(m, plan == "hybrid_auto", true)
	if why != "" {
		return -1, why
	}
	var order []int
	for n := 0; n < planner.DefaultMaxWorkersPerGPU; n++ {
		for _, g := range r.gpuIndex {
			if len(order) < r.cores {
				order = append(order, g)
			}
		}
	}
	cpuWorkers := func(g int) int { return r.cores - g }
	if plan == "gpu_only" {
		cpuWorkers = func(int) int { return 0 }
	}
	best, _, _, err := s.FastestGPUCount(rates, order, cpuWorkers, r.cores)
	if err != nil {
		return -1, err.Error()
	}
	return best, ""
}

// PrintModel writes the rows as a table: measured and predicted GB/s, their ratio and
// whether the prediction is within 20%; calibration rows say so instead.
func PrintModel(w io.Writer, rows []ModelRow) {
	fmt.Fprintln(w, "speed model on this record's rates (the CPU-only rows on the raw file are its calibration, not predictions):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "file\tmasks\tplan\tGPU workers (ran, model)\tmeasured GB/s\tpredicted GB/s\tpredicted/measured\twithin 20%\t")
	for _, r := range rows {
		workers := ""
		if r.RanGPU >= 0 {
			workers = strconv.Itoa(r.RanGPU)
		}
		if r.Plan != "cpu_only" {
			if r.ModelGPU >= 0 {
				workers += ", " + strconv.Itoa(r.ModelGPU)
			} else {
				workers += ", -"
			}
		}
		if r.Why != "" {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.2f\tnot predicted\t\t\t\n", r.File, r.Masks, r.Plan, workers, r.Measured)
			continue
		}
		within := map[bool]string{true: "yes", false: "no"}[r.Within20()]
		if r.Calibration {
			within = "calibration"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.2f\t%.2f\t%.2f\t%s\t\n", r.File, r.Masks, r.Plan, workers, r.Measured, r.Predicted, r.Ratio(), within)
	}
	tw.Flush()
	for _, r := range rows {
		if r.Why != "" {
			fmt.Fprintf(w, "  %s %s %s not predicted: %s\n", r.File, r.Masks, r.Plan, r.Why)
		} else if r.ModelWhy != "" && r.Plan != "cpu_only" {
			fmt.Fprintf(w, "  %s %s %s: the model's choice of GPU workers not predicted: %s\n", r.File, r.Masks, r.Plan, r.ModelWhy)
		}
	}
}
