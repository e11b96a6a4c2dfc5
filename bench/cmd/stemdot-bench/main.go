// Command stemdot-bench measures stemdot's mask job on synthetic 4D-STEM files against
// its limits and its peers, checks every result, and writes the report.
//
// For each dtype (uint16 and float32 frames of 256×256 by default) it writes a raw file
// with the synth package into the scratch directory (or reuses it), reads it once so that
// it is in the page cache (and checks that with mincore), and then, for 1, 4, 16 and 64
// dense masks and a sparse ring mask:
//
//   - runs the Python peers (bench/peers/*.py: numpy, LiberTEM, and CuPy on a GPU machine)
//     on the same file, masks and CPUs; their results are kept as NPY references;
//   - runs stemdot's engine.ApplyMasks under every plan the machine allows (CPU-only on
//     all usable cores, CPU-only on one core, hybrid and GPU-only where GPUs and a CUDA
//     build exist; others are listed as skipped with the reason), one untimed warm-up
//     run then -repeats timed runs, each result compared with the numpy peer's (relative
//     tolerance 1e-4 of each mask's largest value) and, always, with a float64 reference
//     on sampled frames: a mismatch stops the bench with an error;
//   - measures the sum reduction (engine.Reduce: the sum frame over all frames) under
//     every CPU-only plan, each result checked against a float64 sum of the frames;
//   - with -shifted (the default), runs every plan again with the masks shifted per frame
//     along a descan plane (engine.Options.Shifts), sub-pixel (bilinear; rows
//     "<plan>+shifted/<kernels>") and rounded to whole pixels (rows
//     "<plan>+shifted-whole/<kernels>"), checked against a float64 reference of the
//     shifted masks on sampled frames; ratio_unshifted is each one's throughput over the
//     same plan's unshifted row;
//   - measures the streaming-read floor: the plan's workers, pinned the same way, read
//     the same partitions tile by tile through dataset ReadFrames and touch every byte.
//
// Beside the uint16 file (part sparse of -only, sparse.go), a scan of 8 times its frames
// as counted frames in LiberTEM's raw_csr format (1% of each frame's pixels hit, counts 1-20 in
// uint16; indptr int64, indices int32): stemdot with 1, 4 and 16 dense masks under the
// CPU-only plans, checked against a float64 product of every frame's events; throughput
// in sparse bytes, against the file's own read floor (a pinned sweep summing the
// partitions' indptr, indices and data, as engine.BenchmarkGatherTargets' floor), and
// ratio_dense: its frames/s over the uint16 raw file's row of the same masks and plan.
// And (part hdf5, compressed.go) the uint16 file's first 16 scan rows (2,048 frames)
// written as HDF5, one frame per chunk, with shuffle+deflate (libhdf5, level 4) and with
// bitshuffle-LZ4 (h5filter.EncodeBSLZ4, chunks stored as they are): stemdot with 1 mask
// under the CPU-only plans, checked against the numpy peer's result of the same frames
// and the float64 sample; ratio_uncompressed is its frames/s over the raw file's row,
// scaling its cpu-all frames/s over cpu-1's (given for every cpu-all row). Every file
// is read once before timing, as the raw files are.
//
// Other builds of this program (-with, e.g. the -tags openblas build) run as
// subprocesses with -rows-out for their stemdot rows, on the same files and references.
// The report goes to <results>/latest.{json,csv,png} and a table on stdout.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/stemdot/stemdot/bench"
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/internal/cpupeak"
)

// config is the command line.
type config struct {
	quick    bool
	size     string
	dtypes   []dataset.DType
	cases    []maskCase
	repeats  int
	scratch  string
	results  string
	python   string
	peersDir string
	with     []string
	rowsOut  string
	oneCore  bool
	cpuProf  string
	sum      bool
	shifted  bool
	only     []string // the parts measured: raw, sparse, hdf5
}

// parts are the parts of a run that -only selects.
var parts = []string{"raw", "sparse", "hdf5"}

func (c *config) part(name string) bool { return slices.Contains(c.only, name) }

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "stemdot-bench:", err)
		os.Exit(1)
	}
}

func parseFlags() (*config, error) {
	c := &config{}
	var dtypes, cases, with, only string
	flag.BoolVar(&c.quick, "quick", false, "quick run: datasets of at most 1 GiB, peers on all cores only")
	flag.StringVar(&c.size, "size", "auto", "bytes of each dataset (e.g. 2GiB), or auto: 4× the last-level cache, at least 1 GiB, at most RAM/8")
	flag.StringVar(&dtypes, "dtypes", "uint16,float32", "frame dtypes to measure")
	flag.StringVar(&cases, "masks", "1,4,16,64,ring", "mask cases: dense mask counts and ring (one sparse ring); empty: none (e.g. -masks '' -sum for the sum row alone)")
	flag.BoolVar(&c.sum, "sum", true, "measure the sum reduction (engine.Reduce) under the CPU-only plans")
	flag.IntVar(&c.repeats, "repeats", 3, "timed runs per case (after one untimed warm-up run)")
	flag.StringVar(&c.scratch, "scratch", "bench/scratch", "directory for the datasets, masks and reference results")
	flag.StringVar(&c.results, "results", "bench/results", "directory for latest.json, latest.csv and latest.png")
	flag.StringVar(&c.python, "python", "bench/.venv/bin/python", "Python interpreter with numpy and libertem for the peers (empty: no peers)")
	flag.StringVar(&c.peersDir, "peers", "bench/peers", "directory of the peer scripts")
	flag.StringVar(&with, "with", "", "comma-separated other builds of stemdot-bench (e.g. bin/stemdot-bench-openblas) whose stemdot rows join the report")
	flag.StringVar(&c.rowsOut, "rows-out", "", "measure only this build's stemdot rows (references from the scratch directory) and write them as JSON to this file")
	flag.BoolVar(&c.oneCore, "peers-one-core", false, "also run the peers on one core (default: on in full runs, off with -quick)")
	flag.StringVar(&c.cpuProf, "cpuprofile", "", "write a CPU profile of the whole run to this file (go tool pprof)")
	flag.BoolVar(&c.shifted, "shifted", true, "also measure every stemdot plan with shifted masks (descan compensation: per-frame shifts along a plane), sub-pixel (rows \"<plan>+shifted/<kernels>\") and rounded to whole pixels (\"<plan>+shifted-whole/<kernels>\")")
	flag.StringVar(&only, "only", strings.Join(parts, ","), "the parts to measure, comma-separated: raw (peers, stemdot, sum and read floor on the raw file of each dtype), sparse (a raw_csr file of the uint16 scan's counted frames), hdf5 (the uint16 file's first frames in compressed HDF5 files); sparse and hdf5 need uint16 among -dtypes, and compare with raw's rows")
	flag.Parse()
	if flag.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	if !c.quick {
		c.oneCore = true
	}
	for _, s := range strings.Split(dtypes, ",") {
		dt, err := dataset.ParseDType(s)
		if err != nil {
			return nil, fmt.Errorf("-dtypes: %w", err)
		}
		c.dtypes = append(c.dtypes, dt)
	}
	for _, s := range strings.Split(cases, ",") {
		if strings.TrimSpace(cases) == "" {
			break
		}
		mc, err := parseMaskCase(s)
		if err != nil {
			return nil, fmt.Errorf("-masks: %w", err)
		}
		c.cases = append(c.cases, mc)
	}
	if c.repeats < 1 {
		return nil, fmt.Errorf("-repeats %d: need at least 1", c.repeats)
	}
	if with != "" {
		c.with = strings.Split(with, ",")
	}
	for _, s := range strings.Split(only, ",") {
		if s = strings.TrimSpace(s); !slices.Contains(parts, s) {
			return nil, fmt.Errorf("-only: part %q: want %s", s, strings.Join(parts, ", "))
		}
		c.only = append(c.only, s)
	}
	return c, nil
}

func run() error {
	cfg, err := parseFlags()
	if err != nil {
		return err
	}
	if cfg.cpuProf != "" {
		f, err := os.Create(cfg.cpuProf)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	start := time.Now()
	env, err := detectMachine()
	if err != nil {
		return err
	}
	rep := &bench.Report{
		Date:    start.UTC().Format(time.RFC3339),
		Command: strings.Join(os.Args, " "),
		Machine: env.describe(),
		Method:  method,
	}
	if cfg.rowsOut == "" {
		if env.peak, err = cpupeak.Measure(); err != nil {
			log("no FMA peak: %v", err)
		} else {
			rep.Machine["fma_peak_per_core"] = env.peak.String()
			log("FMA peak per core: %s", env.peak)
		}
	}
	size, err := datasetBytes(cfg, env)
	if err != nil {
		return err
	}
	ctx := context.Background()
	if (cfg.part("sparse") || cfg.part("hdf5")) && !slices.Contains(cfg.dtypes, dataset.Uint16) {
		log("no uint16 among -dtypes: no raw_csr and no HDF5 rows (they are the uint16 file's frames)")
	}
	for _, dt := range cfg.dtypes {
		if !cfg.part("raw") && dt != dataset.Uint16 {
			continue
		}
		data, err := prepareData(cfg, dt, size)
		if err != nil {
			return err
		}
		rep.Datasets = append(rep.Datasets, data.describe())
		log("%s: %s, nav %v, %.2f GB, %.1f%% of its pages in the page cache, %.1f%% mapped in 2 MiB pages", dt, data.path, data.nav,
			float64(data.bytes())/1e9, 100*data.cached, 100*data.huge)
		mcs, err := prepareMasks(cfg, data)
		if err != nil {
			return err
		}
		plans := env.plans(data, &rep.Skipped)
		if err := runRaw(ctx, cfg, env, data, mcs, plans, rep); err != nil {
			return err
		}
		if dt == dataset.Uint16 && cfg.rowsOut == "" { // the other builds measure the raw files only
			for _, part := range []struct {
				name string
				run  func(context.Context, *config, *machine, *benchData, []*caseMasks, *bench.Report) ([]bench.Row, error)
			}{{"sparse", runSparse}, {"hdf5", runCompressed}} {
				if !cfg.part(part.name) {
					continue
				}
				rows, err := part.run(ctx, cfg, env, data, mcs, rep)
				if err != nil {
					return err
				}
				rep.Rows = append(rep.Rows, rows...)
			}
		}
		if err := data.ds.Close(); err != nil {
			return err
		}
	}
	if cfg.rowsOut != "" {
		return writeJSONFile(cfg.rowsOut, rep.Rows)
	}
	for _, bin := range cfg.with {
		rows, err := runOtherBuild(cfg, bin)
		if err != nil {
			rep.Skipped = append(rep.Skipped, bench.Skip{What: bin, Reason: err.Error()})
			log("skipped %s: %v", bin, err)
			continue
		}
		rep.Rows = append(rep.Rows, rows...)
	}
	rep.Machine["stemdot_builds"] = builds(rep.Rows)
	rep.Machine["bench_seconds"] = time.Since(start).Seconds()
	rep.Rows = bench.Sorted(rep.Rows)
	return writeReport(cfg, rep, env.peak)
}

// runRaw measures the raw file d (part raw): the peers, stemdot (plain and shifted), the
// sum and the read floor; another build (-rows-out) measures its stemdot rows only.
func runRaw(ctx context.Context, cfg *config, env *machine, d *benchData, mcs []*caseMasks, plans []namedPlan, rep *bench.Report) error {
	if !cfg.part("raw") {
		return nil
	}
	if cfg.rowsOut == "" && len(mcs) > 0 {
		rows, err := runPeers(cfg, env, d, mcs, plans, rep)
		if err != nil {
			return err
		}
		rep.Rows = append(rep.Rows, rows...)
	}
	rows, err := runStemdot(ctx, cfg, d, mcs, plans)
	if err != nil {
		return err
	}
	rep.Rows = append(rep.Rows, rows...)
	if cfg.sum && cfg.rowsOut == "" { // the sum uses no BLAS: one build measures it
		rows, err := runSum(ctx, cfg, d, plans)
		if err != nil {
			return err
		}
		rep.Rows = append(rep.Rows, rows...)
	}
	if cfg.rowsOut == "" {
		rows, err := readFloor(cfg, d, plans)
		if err != nil {
			return err
		}
		rep.Rows = append(rep.Rows, rows...)
	}
	return nil
}

// method says how each source is timed; it goes into the JSON report.
var method = []string{
	"Throughput = raw (native dtype) frame bytes of the whole file / median wall time of the timed runs; GB = 1e9 bytes. One untimed warm-up run precedes the timed runs of every case.",
	"The file is dropped from the page cache (fsync, posix_fadvise DONTNEED) and read once before timing through a mapping advised MADV_HUGEPAGE, as stemdot's datasets map files, so that it is in the page cache as after stemdot's first read of a file from disk; 'page_cached' in datasets is the fraction of its pages resident (mincore) just before the runs, 'huge_pages' the fraction mapped in 2 MiB pages. A file left in the cache by its writer may be held in small folios, which each run maps again at a cost (dataset.mapReadOnly).",
	"faults/GB: the process's minor page faults (getrusage) per GB of frames during the timed runs: the workers drop the pages of each claim, so every run maps the file again.",
	"stemdot: wall time of one engine.ApplyMasks call (worker start, pinning, reading, conversion, product, result in memory), in this process.",
	"sum: wall time of one engine.Reduce call asking for the sum frame only (worker start, pinning, reading, accumulating, merging), under the CPU-only plans; checked against a float64 sum of the frames read with ReadFrames (exact for integer frames, 1e-12 relative for float ones).",
	"read-floor: the same plan's workers, pinned the same way, pull the same partitions from a queue and read them tile by tile (engine.AutoTileFrames frames), in place where the dataset is mapped, else with ReadFrames into a reused buffer, sweeping every byte (bytes.Count). For the raw_csr file: the same workers sum the partitions' indptr, indices and data from the mapped files (as engine.BenchmarkGatherTargets' floor).",
	"+shifted / +shifted-whole: the masks shifted per frame along a descan plane (dy -1.2 to 2.1, dx 0.4 to -2.3 px across the scan), sub-pixel (bilinear) / rounded to whole pixels; ratios.unshifted: GB/s over the same plan's unshifted row.",
	"raw_csr (dataset raw_csr): counted frames of the uint16 scan's sig shape, its first nav axis 8 times longer (65,536 frames for nav (64, 128): 258 MB of events), 1% of the pixels hit (655 of 256×256, distinct, in pixel order), counts 1-20 as uint16, indptr int64, indices int32, viewed in place by the gather; GB/s of sparse bytes (indptr + indices + data), 5× the timed runs of the other rows; checked against a float64 product of every frame's events; ratios.dense: frames/s over the uint16 raw file's stemdot row of the same masks and plan.",
	"hdf5-gzip / hdf5-bslz4: the uint16 raw file's first 2,048 frames in HDF5, one frame per chunk, shuffle+deflate level 4 (libhdf5) / bitshuffle-LZ4 (filter 32008); GB/s of decoded frame bytes; ratios.uncompressed: frames/s over the uint16 raw file's stemdot row of the same plan; ratios.scaling (every cpu-all row): frames/s over the cpu-1 row of the same case.",
	"×floor of a stemdot row under a CPU-only plan: the median over its timed runs of (the read floor's time, measured right after that run under the same plan) / (the run's time), so that each pair sees the same memory bandwidth (floor_times_s in the JSON); the read-floor rows are separate runs after all cases.",
	"numpy: np.memmap of the raw file, chunks of 64 MiB float32 converted with astype and multiplied by the flattened stack with np.matmul (BLAS threads limited to the workers, process pinned to their CPUs); sparse: gather of the pixels where a mask is nonzero, then the product. Timed in-process from opening the memmap to the full result (interpreter start-up and imports excluded).",
	"libertem: ctx.run_udf(ApplyMasksUDF) on Context.make_with('dask', cpus=[the workers' CPUs]) with a raw dataset; Context, worker processes and dataset metadata are set up outside the clock; use_sparse for the ring.",
	"cupy (GPU machines): frames copied to the device once outside the clock (h2d_s reported), product with cupy.matmul on the device.",
	"Checks: every stemdot run's result is compared with the numpy peer's (|a-b| <= 1e-4 * max|b| of the mask) and with a float64 reference on sampled frames; LiberTEM's result with numpy's. A mismatch fails the bench.",
}

// runOtherBuild runs another build of this program for its stemdot rows.
func runOtherBuild(cfg *config, bin string) ([]bench.Row, error) {
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("not built: %w", err)
	}
	out := filepath.Join(cfg.scratch, "rows-"+filepath.Base(bin)+".json")
	args := []string{"-rows-out", out, "-size", cfg.size, "-repeats", fmt.Sprint(cfg.repeats),
		"-scratch", cfg.scratch, "-dtypes", joinDTypes(cfg.dtypes), "-masks", joinCases(cfg.cases), "-only", strings.Join(cfg.only, ","),
		fmt.Sprintf("-shifted=%t", cfg.shifted)}
	if cfg.quick {
		args = append(args, "-quick")
	}
	log("running %s %s", bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	// An OpenBLAS build computes on the pinned worker's own thread, no BLAS thread pool.
	cmd.Env = append(os.Environ(), "OPENBLAS_NUM_THREADS=1")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s failed: %w", bin, err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		return nil, err
	}
	var rows []bench.Row
	if err := json.Unmarshal(b, &rows); err != nil {
		return nil, fmt.Errorf("%s: %w", out, err)
	}
	return rows, nil
}

func writeReport(cfg *config, rep *bench.Report, peak cpupeak.Peak) error {
	if err := os.MkdirAll(cfg.results, 0o755); err != nil {
		return err
	}
	fmt.Println()
	if err := bench.WriteTable(os.Stdout, rep.Rows); err != nil {
		return err
	}
	if peak.ClockHz > 0 {
		fmt.Printf("\ndense masks on CPU: FLOP/s reached (2 per pixel and mask) against the workers' cores'\nfloat32 FMA peak, per core %s (internal/cpupeak):\n", peak)
		if err := bench.WriteFLOPS(os.Stdout, rep.Rows, peak.FLOPS()); err != nil {
			return err
		}
	}
	for _, s := range rep.Skipped {
		fmt.Printf("skipped %s: %s\n", s.What, s.Reason)
	}
	files := []struct {
		name  string
		write func(*os.File) error
	}{
		{"latest.json", func(f *os.File) error { return rep.WriteJSON(f) }},
		{"latest.csv", func(f *os.File) error { return bench.WriteCSV(f, rep.Rows) }},
		{"latest.png", func(f *os.File) error { return bench.WritePlot(f, rep.Rows) }},
	}
	if !slices.ContainsFunc(rep.Rows, bench.Plottable) {
		files = files[:2] // the plot is of the raw files' dense-mask rows by mask count
		fmt.Println("no dense-mask rows of the raw files: latest.png not written")
	}
	for _, file := range files {
		path := filepath.Join(cfg.results, file.name)
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		err = file.write(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		fmt.Println("wrote", path)
	}
	return nil
}

func writeJSONFile(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

func builds(rows []bench.Row) []string {
	var out []string
	for _, r := range rows {
		if r.Source != bench.Stemdot {
			continue
		}
		if _, b, ok := strings.Cut(r.Plan, "/"); ok && !slices.Contains(out, b) {
			out = append(out, b)
		}
	}
	return out
}

func joinDTypes(dts []dataset.DType) string {
	s := make([]string, len(dts))
	for i, dt := range dts {
		s[i] = dt.String()
	}
	return strings.Join(s, ",")
}

func log(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[%s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}
