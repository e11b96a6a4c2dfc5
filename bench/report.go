// Package bench holds the report side of `make bench`: the measured rows of one benchmark
// run (stemdot's mask job under each plan and build, the streaming-read floor, and the
// peers numpy, LiberTEM and CuPy), the ratios between them, and their output as a text
// table, CSV, JSON and a PNG plot. The program that measures is bench/cmd/stemdot-bench.
//
// Throughput is counted in raw frame bytes: the native (on-disk) bytes of all frames of
// the dataset divided by the median wall time of the repeated runs, in GB/s (10⁹ bytes
// per second), and in frames per second. A ratio is a row's throughput over another
// measurement's, taken at the same dtype, dataset and worker count (and, for peers, the
// same mask case); a figure (Figure) compares a stemdot row with another stemdot row of
// the same run: shifted with unshifted masks, counted or compressed data with the raw
// file, all workers with one.
package bench

import (
	"cmp"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/stemdot/stemdot/dataset"
)

// Sources of a row: stemdot's mask job, the streaming-read floor, or a peer.
const (
	Stemdot   = "stemdot"
	ReadFloor = "read-floor"
	NumPy     = "numpy"
	LiberTEM  = "libertem"
	CuPy      = "cupy"
)

// Mask kinds of a case.
const (
	Dense      = "dense"
	SparseRing = "sparse-ring"
	NoMasks    = "none" // the read floor applies no mask
	// Sum is the sum reduction over all frames (engine.Reduce), Masks 0: no mask.
	Sum = "sum"
)

// Row is one measured case: a source (stemdot under one plan and build, the read floor,
// or a peer) applied to one dataset with one mask stack, repeated.
type Row struct {
	// Source is Stemdot, ReadFloor, NumPy, LiberTEM or CuPy.
	Source string `json:"source"`
	// DType is the frames' native dtype ("uint16", "float32").
	DType string `json:"dtype"`
	// Masks is the number of masks (0 for the read floor and the sum); MaskKind is
	// Dense, SparseRing, Sum or NoMasks.
	Masks    int    `json:"masks"`
	MaskKind string `json:"mask_kind"`
	// Plan names how it ran: for stemdot "<plan>/<kernels>" ("cpu-all/stemdot",
	// "cpu-1/openblas", "hybrid/stemdot"; "cpu-all+shifted/stemdot" with shifted masks), for the read floor "read-floor/<plan>", for a
	// peer its name.
	Plan string `json:"plan"`
	// Workers is the number of workers (threads or processes) it ran with.
	Workers int `json:"workers"`
	// Frames and Bytes are the frames and raw frame bytes of one run.
	Frames int   `json:"frames"`
	Bytes  int64 `json:"bytes"`
	// Seconds are the wall times of the timed runs.
	Seconds []float64 `json:"times_s"`
	// FloorSeconds, for stemdot under a CPU-only plan, are the read floor's wall times
	// (same plan, see ReadFloor), each measured right after the run of Seconds with the
	// same index, so that a pair sees the same memory bandwidth: on a shared machine the
	// floor swings by 2× between minutes. Ratio uses their pairs where present.
	FloorSeconds []float64 `json:"floor_times_s,omitempty"`
	// Check says how the result was verified ("" for the read floor).
	Check string `json:"check,omitempty"`
	// MinorFaults are the process's minor page faults (getrusage) during the timed runs,
	// all together: mapping the file's pages, which the engine's workers drop after each
	// claim, so that every run maps them again (0 where not counted).
	MinorFaults int64 `json:"minor_faults,omitempty"`
	// Dataset names the file measured beside the plain raw file of the dtype ("", which
	// tables and CSV show as "raw"): DatasetCSR (the same scan's counted frames as
	// raw_csr events), DatasetGzip or DatasetBSLZ4 (frames of the uint16 raw file in a
	// compressed HDF5 file). Rows compare only with rows of the same Dataset, except
	// through Figure.
	Dataset string `json:"dataset,omitempty"`
	// Data says where the frames were when the timed runs started: "" (in a file,
	// read during the run) or DataOnGPU (already in GPU memory: no read, no PCIe copy
	// timed). Plots and tables label the latter.
	Data string `json:"data,omitempty"`
}

// DataOnGPU is Row.Data for frames held in GPU memory before the timed runs.
const DataOnGPU = "gpu"

// Datasets of a row beside the plain raw file (Row.Dataset).
const (
	// DatasetCSR is a raw_csr file of counted frames (1% of the pixels hit, uint16
	// counts); its rows count Bytes in sparse bytes (indptr, indices and data).
	DatasetCSR = "raw_csr"
	// DatasetGzip and DatasetBSLZ4 are HDF5 files of the uint16 raw file's first frames,
	// one frame per chunk, compressed with shuffle and deflate or with bitshuffle-LZ4; their
	// rows count Bytes in decoded frame bytes.
	DatasetGzip  = "hdf5-gzip"
	DatasetBSLZ4 = "hdf5-bslz4"
)

// DatasetName is r.Dataset, "raw" for the plain raw file.
func DatasetName(r Row) string { return cmp.Or(r.Dataset, "raw") }

// Median is the median of the row's times in seconds (NaN without times).
func (r Row) Median() float64 { return Median(r.Seconds) }

// FaultsPerGB is the row's minor page faults per GB of frames read (NaN where not
// counted).
func (r Row) FaultsPerGB() float64 {
	if r.MinorFaults == 0 || len(r.Seconds) == 0 || r.Bytes == 0 {
		return math.NaN()
	}
	return float64(r.MinorFaults) / (float64(len(r.Seconds)) * float64(r.Bytes) / 1e9)
}

// Spread is (max − min)/median of the times, the run-to-run variation (NaN without
// times).
func (r Row) Spread() float64 {
	if len(r.Seconds) == 0 {
		return math.NaN()
	}
	return (slices.Max(r.Seconds) - slices.Min(r.Seconds)) / r.Median()
}

// GBps is Bytes over the median time in 10⁹ bytes per second.
func (r Row) GBps() float64 { return float64(r.Bytes) / 1e9 / r.Median() }

// FramesPerS is Frames over the median time.
func (r Row) FramesPerS() float64 { return float64(r.Frames) / r.Median() }

// Median returns the median of xs (the mean of the middle two for an even count), NaN
// for none. xs is not modified.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// PairedFloor is the median over the row's runs of floor time / run time (see
// FloorSeconds): its fraction of the read floor; ok is false without pairs.
func (r Row) PairedFloor() (ratio float64, ok bool) {
	if len(r.FloorSeconds) == 0 || len(r.FloorSeconds) != len(r.Seconds) {
		return 0, false
	}
	ratios := make([]float64, len(r.Seconds))
	for i, s := range r.Seconds {
		ratios[i] = r.FloorSeconds[i] / s
	}
	return Median(ratios), true
}

// Ratio is row i's throughput over the row of source other measured at the same dtype
// and worker count (and for a peer, the same masks and mask kind); ok is false when no
// such row exists or when row i is that row itself. Against the read floor, a row with
// FloorSeconds gives its PairedFloor.
func Ratio(rows []Row, i int, other string) (ratio float64, ok bool) {
	r := rows[i]
	if other == ReadFloor {
		if paired, ok := r.PairedFloor(); ok {
			return paired, true
		}
	}
	for j, o := range rows {
		if o.Source != other || o.DType != r.DType || o.Workers != r.Workers || o.Dataset != r.Dataset {
			continue
		}
		if other != ReadFloor && (o.Masks != r.Masks || o.MaskKind != r.MaskKind) {
			continue
		}
		if j == i {
			return 0, false
		}
		return r.GBps() / o.GBps(), true
	}
	return 0, false
}

// RatioSources are the sources every row is compared with, in CSV column order.
var RatioSources = []string{ReadFloor, NumPy, LiberTEM, CuPy}

// Figures compare a stemdot row with another stemdot row of the same run (Figure), in
// CSV column order.
const (
	// Unshifted: a row with shifted masks (plan "<plan>+shifted…/<kernels>") over the same
	// plan's unshifted row (the same frames: GB/s and frames/s alike).
	Unshifted = "unshifted"
	// DenseData: a DatasetCSR row over the raw uint16 file's row of the same plan and
	// masks, frames/s.
	DenseData = "dense"
	// Uncompressed: a compressed HDF5 row over the raw uint16 file's row of the same plan
	// and masks, frames/s.
	Uncompressed = "uncompressed"
	// Scaling: a cpu-all row over the cpu-1 row of the same case, frames/s.
	Scaling = "scaling"
)

// Figures are the figures of Figure, in CSV column order.
var Figures = []string{Unshifted, DenseData, Uncompressed, Scaling}

// Figure is the figure name (one of Figures) of stemdot row i: its throughput over the
// stemdot row it is measured against in the same run, which has the same dtype, masks,
// mask kind and build ("/<kernels>"); ok is false where the figure does not apply to row
// i or that row was not measured.
func Figure(rows []Row, i int, name string) (ratio float64, ok bool) {
	r := rows[i]
	if r.Source != Stemdot {
		return 0, false
	}
	plan, kernels, _ := strings.Cut(r.Plan, "/")
	base, shift, _ := strings.Cut(plan, "+")
	want := Row{Dataset: r.Dataset, DType: r.DType, Plan: r.Plan}
	switch {
	case name == Unshifted && shift != "":
		want.Plan = base + "/" + kernels
	case name == DenseData && r.Dataset == DatasetCSR,
		name == Uncompressed && (r.Dataset == DatasetGzip || r.Dataset == DatasetBSLZ4):
		want.Dataset, want.DType = "", "uint16"
	case name == Scaling && base == "cpu-all":
		want.Plan = strings.Replace(r.Plan, "cpu-all", "cpu-1", 1)
	default:
		return 0, false
	}
	for _, o := range rows {
		if o.Source == Stemdot && o.Dataset == want.Dataset && o.DType == want.DType && o.Plan == want.Plan &&
			o.Masks == r.Masks && o.MaskKind == r.MaskKind {
			return r.FramesPerS() / o.FramesPerS(), true
		}
	}
	return 0, false
}

// CSVHeader is the exact header of WriteCSV.
var CSVHeader = []string{"dtype", "dataset", "masks", "mask_kind", "plan", "workers", "gbps", "frames_per_s",
	"ratio_read_floor", "ratio_numpy", "ratio_libertem", "ratio_cupy", "ratio_unshifted", "ratio_dense", "ratio_uncompressed", "scaling"}

// Sorted returns the rows ordered for reading: by dtype and dataset (as first seen), mask
// kind (dense, sparse, sum, none), mask count, then stemdot before the read floor and the
// peers, then plan name.
func Sorted(rows []Row) []Row {
	var dtypes, datasets []string
	for _, r := range rows {
		if !slices.Contains(dtypes, r.DType) {
			dtypes = append(dtypes, r.DType)
		}
		if !slices.Contains(datasets, r.Dataset) {
			datasets = append(datasets, r.Dataset)
		}
	}
	kinds := []string{Dense, SparseRing, Sum, NoMasks}
	sources := []string{Stemdot, ReadFloor, NumPy, LiberTEM, CuPy}
	out := slices.Clone(rows)
	slices.SortStableFunc(out, func(a, b Row) int {
		return cmp.Or(
			cmp.Compare(slices.Index(dtypes, a.DType), slices.Index(dtypes, b.DType)),
			cmp.Compare(slices.Index(datasets, a.Dataset), slices.Index(datasets, b.Dataset)),
			cmp.Compare(slices.Index(kinds, a.MaskKind), slices.Index(kinds, b.MaskKind)),
			cmp.Compare(a.Masks, b.Masks),
			cmp.Compare(slices.Index(sources, a.Source), slices.Index(sources, b.Source)),
			cmp.Compare(a.Workers, b.Workers),
			strings.Compare(a.Plan, b.Plan),
		)
	})
	return out
}

// WriteCSV writes rows with CSVHeader's columns: throughput with 4 significant digits,
// ratios and figures with 3 decimals, empty where not measured or not applicable.
func WriteCSV(w io.Writer, rows []Row) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(CSVHeader); err != nil {
		return err
	}
	for i, r := range rows {
		rec := []string{r.DType, DatasetName(r), strconv.Itoa(r.Masks), r.MaskKind, r.Plan, strconv.Itoa(r.Workers),
			strconv.FormatFloat(r.GBps(), 'g', 4, 64), strconv.FormatFloat(r.FramesPerS(), 'g', 4, 64)}
		for _, src := range RatioSources {
			rec = append(rec, formatRatio(rows, i, src, "%.3f", ""))
		}
		for _, name := range Figures {
			rec = append(rec, formatFigure(rows, i, name, "%.3f", ""))
		}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

func formatRatio(rows []Row, i int, src, format, missing string) string {
	if v, ok := Ratio(rows, i, src); ok {
		return fmt.Sprintf(format, v)
	}
	return missing
}

func formatFigure(rows []Row, i int, name, format, missing string) string {
	if v, ok := Figure(rows, i, name); ok {
		return fmt.Sprintf(format, v)
	}
	return missing
}

// WriteTable writes rows as an aligned text table: case, plan, workers, GB/s, frames/s,
// spread of the times, the minor page faults per GB ("-" where not counted), the
// ratios ("×floor", "×numpy", ...) and the figures ("×unshifted", "×dense",
// "×uncompr", "scaling"; "-" where not measured or not applicable).
func WriteTable(w io.Writer, rows []Row) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "dtype\tdataset\tmasks\tkind\tplan\tworkers\tGB/s\tframes/s\tspread\tfaults/GB\t×floor\t×numpy\t×libertem\t×cupy\t×unshifted\t×dense\t×uncompr\tscaling\t")
	for i, r := range rows {
		faults := "-"
		if f := r.FaultsPerGB(); !math.IsNaN(f) {
			faults = fmt.Sprintf("%.0f", f)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d\t%.3f\t%.0f\t%.0f%%\t%s\t", r.DType, DatasetName(r), r.Masks, r.MaskKind, r.Plan, r.Workers,
			r.GBps(), r.FramesPerS(), 100*r.Spread(), faults)
		for _, src := range RatioSources {
			fmt.Fprintf(tw, "%s\t", formatRatio(rows, i, src, "%.2f", "-"))
		}
		for _, name := range Figures {
			fmt.Fprintf(tw, "%s\t", formatFigure(rows, i, name, "%.2f", "-"))
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// FLOPS is the row's arithmetic rate in FLOP/s for a dense stack: 2 flops (a multiply
// and an add) per pixel and mask; NaN for other rows or an unknown dtype.
func (r Row) FLOPS() float64 {
	dt, err := dataset.ParseDType(r.DType)
	if r.MaskKind != Dense || err != nil || r.Frames == 0 {
		return math.NaN()
	}
	pixels := float64(r.Bytes) / float64(r.Frames) / float64(dt.Size())
	return 2 * pixels * float64(r.Masks) * r.FramesPerS()
}

// WriteFLOPS writes, for every CPU row with dense masks on the raw file (stemdot's CPU
// plans and the CPU peers), the FLOP/s reached and its fraction of the workers' cores' peak, given one
// core's peak FLOP/s (cpupeak.Peak.FLOPS).
func WriteFLOPS(w io.Writer, rows []Row, corePeak float64) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "dtype\tmasks\tplan\tworkers\tGFLOP/s\t×peak\t")
	for _, r := range rows {
		if r.MaskKind != Dense || r.Dataset != "" || r.Source == CuPy || strings.HasPrefix(r.Plan, "hybrid") || strings.HasPrefix(r.Plan, "gpu") {
			continue
		}
		f := r.FLOPS()
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%.1f\t%.2f\t\n", r.DType, r.Masks, r.Plan, r.Workers, f/1e9, f/(corePeak*float64(r.Workers)))
	}
	return tw.Flush()
}

// Skip is a plan or peer that was not measured, with the reason.
type Skip struct {
	What   string `json:"what"`
	Reason string `json:"reason"`
}

// Report is the whole result of one benchmark run, as written to latest.json.
type Report struct {
	// Date is when the run started (RFC 3339); Command the command line.
	Date    string `json:"date"`
	Command string `json:"command"`
	// Machine describes the machine and software versions (CPU model, cores, GPUs, Go,
	// numpy, BLAS, LiberTEM, ...).
	Machine map[string]any `json:"machine"`
	// Datasets describe the files measured (path, dtype, shapes, bytes, page-cache state).
	Datasets []map[string]any `json:"datasets"`
	// Method explains how each source was timed.
	Method []string `json:"method"`
	// Rows are the measurements; Skipped what was not measured and why.
	Rows    []Row  `json:"-"`
	Skipped []Skip `json:"skipped"`
}

// jsonRow is a Row with its derived figures, as written to JSON.
type jsonRow struct {
	Row
	Median     float64            `json:"median_s"`
	Spread     float64            `json:"spread"`
	GBps       float64            `json:"gbps"`
	FramesPerS float64            `json:"frames_per_s"`
	Ratios     map[string]float64 `json:"ratios"`
}

// WriteJSON writes the report as indented JSON; each row carries its median, spread,
// GB/s, frames/s and its ratios to the other sources ("read-floor", "numpy", ...) and
// its figures ("unshifted", "dense", "uncompressed", "scaling"; see Figure), all in
// "ratios" and only those measured.
func (rep *Report) WriteJSON(w io.Writer) error {
	rows := make([]jsonRow, len(rep.Rows))
	for i, r := range rep.Rows {
		jr := jsonRow{Row: r, Median: r.Median(), Spread: r.Spread(), GBps: r.GBps(), FramesPerS: r.FramesPerS(),
			Ratios: map[string]float64{}}
		for _, src := range RatioSources {
			if v, ok := Ratio(rep.Rows, i, src); ok {
				jr.Ratios[src] = v
			}
		}
		for _, name := range Figures {
			if v, ok := Figure(rep.Rows, i, name); ok {
				jr.Ratios[name] = v
			}
		}
		rows[i] = jr
	}
	type alias Report
	out := struct {
		*alias
		Rows []jsonRow `json:"rows"`
	}{(*alias)(rep), rows}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
