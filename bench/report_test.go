package bench

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"image/png"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rows is a small run: 1 GB of uint16 frames (8 frames of 125 MB, for round numbers).
func rows() []Row {
	const gb = int64(1e9)
	return []Row{
		{Source: Stemdot, DType: "uint16", Masks: 1, MaskKind: Dense, Plan: "cpu-all/stemdot", Workers: 2, Frames: 8, Bytes: gb, Seconds: []float64{0.5, 0.4, 0.6}, MinorFaults: 1500},
		{Source: Stemdot, DType: "uint16", Masks: 1, MaskKind: Dense, Plan: "cpu-1/stemdot", Workers: 1, Frames: 8, Bytes: gb, Seconds: []float64{1, 1}},
		{Source: ReadFloor, DType: "uint16", MaskKind: NoMasks, Plan: "read-floor/cpu-all", Workers: 2, Frames: 8, Bytes: gb, Seconds: []float64{0.25}},
		{Source: NumPy, DType: "uint16", Masks: 1, MaskKind: Dense, Plan: NumPy, Workers: 2, Frames: 8, Bytes: gb, Seconds: []float64{2}},
		{Source: NumPy, DType: "uint16", Masks: 1, MaskKind: SparseRing, Plan: NumPy, Workers: 2, Frames: 8, Bytes: gb, Seconds: []float64{4}},
		{Source: LiberTEM, DType: "uint16", Masks: 4, MaskKind: Dense, Plan: LiberTEM, Workers: 2, Frames: 8, Bytes: gb, Seconds: []float64{1}},
		{Source: Stemdot, DType: "uint16", Masks: 4, MaskKind: Dense, Plan: "cpu-all/stemdot", Workers: 2, Frames: 8, Bytes: gb, Seconds: []float64{0.5}},
		{Source: Stemdot, DType: "float32", Masks: 1, MaskKind: Dense, Plan: "cpu-all/stemdot", Workers: 2, Frames: 4, Bytes: gb, Seconds: []float64{0.8}},
	}
}

func TestMedianAndSpread(t *testing.T) {
	assert.Equal(t, 2.0, Median([]float64{3, 1, 2}))
	assert.Equal(t, 2.5, Median([]float64{4, 1, 3, 2}))
	assert.True(t, math.IsNaN(Median(nil)))
	xs := []float64{3, 1, 2}
	Median(xs)
	assert.Equal(t, []float64{3, 1, 2}, xs, "Median must not reorder its input")

	r := rows()[0]
	assert.InDelta(t, 0.5, r.Median(), 1e-12)
	assert.InDelta(t, (0.6-0.4)/0.5, r.Spread(), 1e-12)
	assert.InDelta(t, 2.0, r.GBps(), 1e-12)
	assert.InDelta(t, 16.0, r.FramesPerS(), 1e-12)
}

func TestRatio(t *testing.T) {
	rs := rows()
	cases := []struct {
		row    int
		source string
		want   float64
		ok     bool
	}{
		{0, ReadFloor, 2.0 / 4.0, true}, // same dtype and workers; masks do not matter
		{0, NumPy, 2.0 / 0.5, true},     // dense 1-mask numpy, not the sparse one
		{0, LiberTEM, 0, false},         // LiberTEM measured only 4 masks
		{1, ReadFloor, 0, false},        // no 1-worker read floor
		{1, NumPy, 0, false},            // no 1-worker numpy
		{6, LiberTEM, 2.0 / 1.0, true},
		{6, NumPy, 0, false},
		{3, NumPy, 0, false},          // a row is not compared with itself
		{3, ReadFloor, 0.5 / 4, true}, // peers get a read-floor ratio too
		{7, ReadFloor, 0, false},      // no float32 read floor
		{2, ReadFloor, 0, false},
	}
	for _, c := range cases {
		got, ok := Ratio(rs, c.row, c.source)
		require.Equal(t, c.ok, ok, "row %d vs %s", c.row, c.source)
		assert.InDelta(t, c.want, got, 1e-12, "row %d vs %s", c.row, c.source)
	}
}

// A row with floor runs beside its own is compared with them pair by pair: the median of
// floor time / run time, not the separate read-floor row.
func TestRatioPairedFloor(t *testing.T) {
	rs := rows()
	rs[0].Seconds = []float64{1, 2, 4}
	rs[0].FloorSeconds = []float64{0.9, 1, 3.2} // ratios 0.9, 0.5, 0.8
	got, ok := Ratio(rs, 0, ReadFloor)
	require.True(t, ok)
	assert.InDelta(t, 0.8, got, 1e-12)
	got, ok = Ratio(rs, 0, NumPy) // the other sources are unchanged
	require.True(t, ok)
	assert.InDelta(t, rs[0].GBps()/0.5, got, 1e-12)
	rs[0].FloorSeconds = rs[0].FloorSeconds[:2] // not one per run: not paired
	_, ok = rs[0].PairedFloor()
	assert.False(t, ok)
}

// Each figure compares a stemdot row with the row of the same run it names: the same
// dtype, masks, kind and build, and the plan, dataset or workers the figure is about.
func TestFigure(t *testing.T) {
	const gb = int64(1e9)
	row := func(dataset, dtype, plan string, masks, frames int, bytes int64, s float64) Row {
		return Row{Source: Stemdot, Dataset: dataset, DType: dtype, Masks: masks, MaskKind: Dense, Plan: plan, Frames: frames, Bytes: bytes, Seconds: []float64{s}}
	}
	rs := []Row{
		0:  row("", "uint16", "cpu-1/stemdot", 1, 8, gb, 1),
		1:  row("", "uint16", "cpu-all/stemdot", 1, 8, gb, 0.5),
		2:  row("", "uint16", "cpu-1+shifted/stemdot", 1, 8, gb, 4),
		3:  row("", "uint16", "cpu-1+shifted-whole/stemdot", 1, 8, gb, 2),
		4:  row("", "uint16", "cpu-1+shifted/openblas", 1, 8, gb, 4), // no unshifted openblas row
		5:  row(DatasetCSR, "uint16", "cpu-1/stemdot", 1, 8, gb/100, 0.1),
		6:  row(DatasetCSR, "uint16", "cpu-1/stemdot", 16, 8, gb/100, 0.1), // no dense 16-mask row
		7:  row(DatasetGzip, "uint16", "cpu-1/stemdot", 1, 2, gb/4, 1),
		8:  row(DatasetGzip, "uint16", "cpu-all/stemdot", 1, 2, gb/4, 0.6),
		9:  row(DatasetBSLZ4, "uint16", "cpu-all/stemdot", 1, 2, gb/4, 0.2),
		10: row("", "float32", "cpu-all/stemdot", 1, 8, 2*gb, 1), // no float32 cpu-1 row
		11: {Source: NumPy, DType: "uint16", Masks: 1, MaskKind: Dense, Plan: NumPy, Workers: 2, Frames: 8, Bytes: gb, Seconds: []float64{2}},
	}
	cases := []struct {
		row  int
		name string
		want float64
		ok   bool
	}{
		{2, Unshifted, 0.25, true},
		{3, Unshifted, 0.5, true},
		{4, Unshifted, 0, false},
		{0, Unshifted, 0, false},
		{5, DenseData, 80.0 / 8, true}, // frames/s over frames/s, not GB/s
		{5, Uncompressed, 0, false},
		{6, DenseData, 0, false},
		{7, Uncompressed, 2.0 / 8, true},
		{8, Uncompressed, (2 / 0.6) / 16, true},
		{8, Scaling, 1 / 0.6, true},
		{9, Scaling, 0, false}, // no cpu-1 bslz4 row
		{9, Uncompressed, 10.0 / 16, true},
		{1, Scaling, 2, true},
		{0, Scaling, 0, false},
		{10, Scaling, 0, false},
		{11, Scaling, 0, false}, // peers have no figures
		{1, DenseData, 0, false},
	}
	for _, c := range cases {
		got, ok := Figure(rs, c.row, c.name)
		require.Equal(t, c.ok, ok, "row %d %s", c.row, c.name)
		assert.InDelta(t, c.want, got, 1e-12, "row %d %s", c.row, c.name)
	}
	// Ratios to other sources stay within a dataset: the sparse row has no numpy ratio.
	rs[5].Workers = rs[11].Workers
	_, ok := Ratio(rs, 5, NumPy)
	assert.False(t, ok)
}

func TestSorted(t *testing.T) {
	var got []string
	for _, r := range Sorted(rows()) {
		got = append(got, r.DType+" "+r.MaskKind+" "+r.Plan)
	}
	assert.Equal(t, []string{
		"uint16 dense cpu-1/stemdot",
		"uint16 dense cpu-all/stemdot",
		"uint16 dense numpy",
		"uint16 dense cpu-all/stemdot",
		"uint16 dense libertem",
		"uint16 sparse-ring numpy",
		"uint16 none read-floor/cpu-all",
		"float32 dense cpu-all/stemdot",
	}, got)
}

func TestWriteCSV(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, WriteCSV(&buf, rows()))
	recs, err := csv.NewReader(&buf).ReadAll()
	require.NoError(t, err)
	require.Len(t, recs, 1+len(rows()))
	assert.Equal(t, "dtype,dataset,masks,mask_kind,plan,workers,gbps,frames_per_s,ratio_read_floor,ratio_numpy,ratio_libertem,ratio_cupy,"+
		"ratio_unshifted,ratio_dense,ratio_uncompressed,scaling", strings.Join(recs[0], ","))
	assert.Equal(t, []string{"uint16", "raw", "1", "dense", "cpu-all/stemdot", "2", "2", "16", "0.500", "4.000", "", "", "", "", "", "2.000"}, recs[1])
	assert.Equal(t, []string{"uint16", "raw", "1", "dense", "cpu-1/stemdot", "1", "1", "8", "", "", "", "", "", "", "", ""}, recs[2])
	assert.Equal(t, []string{"uint16", "raw", "4", "dense", "cpu-all/stemdot", "2", "2", "16", "0.500", "", "2.000", "", "", "", "", ""}, recs[7])
}

func TestWriteTable(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, WriteTable(&buf, rows()))
	lines := strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
	require.Len(t, lines, 1+len(rows()))
	assert.Equal(t, []string{"dtype", "dataset", "masks", "kind", "plan", "workers", "GB/s", "frames/s", "spread", "faults/GB", "×floor", "×numpy", "×libertem", "×cupy",
		"×unshifted", "×dense", "×uncompr", "scaling"}, strings.Fields(lines[0]))
	// 1500 faults over 3 runs of 1 GB each.
	assert.Equal(t, []string{"uint16", "raw", "1", "dense", "cpu-all/stemdot", "2", "2.000", "16", "40%", "500", "0.50", "4.00", "-", "-", "-", "-", "-", "2.00"},
		strings.Fields(lines[1]))
	assert.Equal(t, []string{"uint16", "raw", "1", "dense", "cpu-1/stemdot", "1", "1.000", "8", "0%", "-", "-", "-", "-", "-", "-", "-", "-", "-"},
		strings.Fields(lines[2]))
}

func TestWriteJSON(t *testing.T) {
	rep := &Report{Date: "2026-01-02T03:04:05Z", Command: "stemdot-bench -quick", Machine: map[string]any{"cpu_model": "x"},
		Rows: rows(), Skipped: []Skip{{What: "hybrid", Reason: "no GPU found"}}}
	var buf bytes.Buffer
	require.NoError(t, rep.WriteJSON(&buf))
	var got struct {
		Date    string `json:"date"`
		Skipped []Skip `json:"skipped"`
		Rows    []struct {
			Plan    string             `json:"plan"`
			Seconds []float64          `json:"times_s"`
			GBps    float64            `json:"gbps"`
			Median  float64            `json:"median_s"`
			Ratios  map[string]float64 `json:"ratios"`
		} `json:"rows"`
	}
	require.NoError(t, json.Unmarshal(buf.Bytes(), &got))
	assert.Equal(t, rep.Date, got.Date)
	assert.Equal(t, rep.Skipped, got.Skipped)
	require.Len(t, got.Rows, len(rows()))
	assert.Equal(t, "cpu-all/stemdot", got.Rows[0].Plan)
	assert.Equal(t, []float64{0.5, 0.4, 0.6}, got.Rows[0].Seconds)
	assert.InDelta(t, 2.0, got.Rows[0].GBps, 1e-12)
	assert.InDelta(t, 0.5, got.Rows[0].Median, 1e-12)
	assert.Equal(t, map[string]float64{ReadFloor: 0.5, NumPy: 4, Scaling: 2}, got.Rows[0].Ratios)
	assert.Empty(t, got.Rows[1].Ratios)
}

func TestWritePlot(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, WritePlot(&buf, rows()))
	img, err := png.Decode(&buf)
	require.NoError(t, err)
	b := img.Bounds()
	assert.Greater(t, b.Dx(), b.Dy(), "two dtype panels side by side")

	csr := rows()[0]
	csr.Dataset = "raw_csr"
	for _, only := range [][]Row{{rows()[2]}, {csr}, nil} {
		assert.ErrorContains(t, WritePlot(&buf, only), "no dense-mask rows of the raw files", "%+v", only)
	}
}

func TestSeriesName(t *testing.T) {
	assert.Equal(t, "cpu-all/stemdot", SeriesName(Row{Source: Stemdot, Plan: "cpu-all/stemdot", Workers: 2}))
	assert.Equal(t, "cupy (1 workers), data on GPU", SeriesName(Row{Source: "cupy", Workers: 1, Data: DataOnGPU}))
	assert.Equal(t, "hybrid/stemdot, data on GPU", SeriesName(Row{Source: Stemdot, Plan: "hybrid/stemdot", Data: DataOnGPU}))

	// Rows on GPU data and values orders of magnitude apart plot on the log axis.
	rs := append(rows(), Row{Source: "cupy", DType: "uint16", Masks: 1, MaskKind: Dense, Workers: 1, Bytes: 1e12, Seconds: []float64{1}, Data: DataOnGPU},
		Row{Source: NumPy, DType: "uint16", Masks: 4, MaskKind: Dense, Workers: 1, Bytes: 1e6, Seconds: []float64{1}})
	var buf bytes.Buffer
	require.NoError(t, WritePlot(&buf, rs))
}

func TestFLOPS(t *testing.T) {
	rs := []Row{
		{Source: Stemdot, DType: "uint16", Masks: 64, MaskKind: Dense, Plan: "cpu-all/stemdot", Workers: 2,
			Frames: 100, Bytes: 100 * 256 * 256 * 2, Seconds: []float64{0.5, 1, 2}},
		{Source: Stemdot, DType: "uint16", Masks: 1, MaskKind: SparseRing, Plan: "cpu-all/stemdot", Workers: 2,
			Frames: 100, Bytes: 100 * 256 * 256 * 2, Seconds: []float64{1}},
	}
	// 2 flops × 65 536 pixels × 64 masks × 100 frames in 1 s (the median).
	assert.InDelta(t, 838_860_800, rs[0].FLOPS(), 1e-3)
	assert.True(t, math.IsNaN(rs[1].FLOPS()), "sparse rows have no dense FLOP/s")
	var b strings.Builder
	require.NoError(t, WriteFLOPS(&b, rs, 1e9))
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	require.Len(t, lines, 2, "header and the dense row")
	// 0.84 GFLOP/s over 2 cores of 1 GFLOP/s.
	assert.Equal(t, []string{"uint16", "64", "cpu-all/stemdot", "2", "0.8", "0.42"}, strings.Fields(lines[1]))
}
