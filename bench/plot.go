package bench

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Plottable tells whether WritePlot draws row r: a row of dense masks (at least one)
// over a raw file (the plain rows, no Dataset), whose GB/s count the same bytes as the
// read floor's; WritePlot draws a panel for each dtype that has one.
func Plottable(r Row) bool { return r.Dataset == "" && r.MaskKind == Dense && r.Masks >= 1 }

// WritePlot draws throughput (GB/s of raw frame bytes, log₁₀ axis, so that values
// orders of magnitude apart stay readable) against the number of dense masks (log₂
// axis), one line per stemdot plan and per peer, one panel per dtype, with each read
// floor as a dashed horizontal line, and writes it as PNG. Each panel's legend sits
// below its plot area, never over the lines; rows whose frames were held in GPU memory
// (Row.Data) are labelled "data on GPU". Sparse cases are left out (they are one mask
// of another kind), and so are the rows of other datasets than the raw file
// (Row.Dataset).
func WritePlot(w io.Writer, rows []Row) error {
	var dtypes []string
	for _, r := range rows {
		if Plottable(r) && !slices.Contains(dtypes, r.DType) {
			dtypes = append(dtypes, r.DType)
		}
	}
	if len(dtypes) == 0 {
		return fmt.Errorf("plot: no dense-mask rows of the raw files")
	}
	panels := make([][]*plot.Plot, 1)
	var legends []*legend
	for _, dt := range dtypes {
		p, l, err := panel(rows, dt)
		if err != nil {
			return err
		}
		panels[0] = append(panels[0], p)
		legends = append(legends, l)
	}
	legendHeight := vg.Length(0)
	for _, p := range legends {
		legendHeight = max(legendHeight, vg.Length(len(p.entries))*legendRow+vg.Centimeter/2)
	}
	width, height := vg.Length(len(dtypes))*14*vg.Centimeter, 12*vg.Centimeter+legendHeight
	img := vgimg.New(width, height)
	dc := draw.New(img)
	top := draw.Crop(dc, 0, 0, legendHeight, 0)
	canvases := plot.Align(panels, draw.Tiles{Rows: 1, Cols: len(dtypes), PadX: vg.Centimeter}, top)
	for i, p := range panels[0] {
		p.Draw(canvases[0][i])
		c := canvases[0][i]
		below := draw.Canvas{Canvas: dc, Rectangle: vg.Rectangle{
			Min: vg.Point{X: c.Min.X, Y: dc.Min.Y}, Max: vg.Point{X: c.Max.X, Y: dc.Min.Y + legendHeight}}}
		legends[i].Draw(below)
	}
	_, err := vgimg.PngCanvas{Canvas: img}.WriteTo(w)
	return err
}

// legendRow is the height of one legend entry.
const legendRow = 0.55 * vg.Centimeter

// legend is a panel's legend, drawn in its own area below the plot.
type legend struct {
	plot.Legend
	entries []string
}

func (l *legend) add(name string, thumbs ...plot.Thumbnailer) {
	l.Add(name, thumbs...)
	l.entries = append(l.entries, name)
}

// SeriesName is the legend label of a row: the plan for stemdot ("cpu-all/stemdot"),
// "source (N workers)" for a peer, with ", data on GPU" when its frames were held in
// GPU memory.
func SeriesName(r Row) string {
	name := r.Plan
	if r.Source != Stemdot {
		name = fmt.Sprintf("%s (%d workers)", r.Source, r.Workers)
	}
	if r.Data == DataOnGPU {
		name += ", data on GPU"
	}
	return name
}

func panel(rows []Row, dtype string) (*plot.Plot, *legend, error) {
	p := plot.New()
	p.Title.Text = dtype + " frames, dense masks"
	p.X.Label.Text = "masks"
	p.Y.Label.Text = "GB/s (raw frame bytes, log scale)"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = maskTicks{}
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Add(plotter.NewGrid())
	leg := &legend{Legend: plot.NewLegend()}
	leg.Top, leg.Left, leg.YOffs = true, true, -vg.Centimeter/4
	ymin, ymax := math.Inf(1), 0.0

	var series []string
	lines := map[string]plotter.XYs{}
	floors := map[string]float64{}
	var xmin, xmax float64
	for _, r := range rows {
		if r.DType != dtype || r.Dataset != "" {
			continue // the other datasets' rows count other bytes or other frames
		}
		if g := r.GBps(); g > 0 && !math.IsInf(g, 0) && (r.Source == ReadFloor || r.MaskKind == Dense && r.Masks >= 1) {
			ymin, ymax = min(ymin, g), max(ymax, g)
		}
		if r.Source == ReadFloor {
			floors[r.Plan] = r.GBps()
			continue
		}
		if r.MaskKind != Dense || r.Masks < 1 || !(r.GBps() > 0) || math.IsInf(r.GBps(), 0) {
			continue // a log axis has no place for a zero or undefined throughput
		}
		name := SeriesName(r)
		if _, ok := lines[name]; !ok {
			series = append(series, name)
		}
		lines[name] = append(lines[name], plotter.XY{X: float64(r.Masks), Y: r.GBps()})
		if xmin == 0 || float64(r.Masks) < xmin {
			xmin = float64(r.Masks)
		}
		xmax = max(xmax, float64(r.Masks))
	}
	if len(series) == 0 {
		return nil, nil, fmt.Errorf("plot: no dense-mask rows for dtype %s", dtype)
	}
	for i, name := range series {
		xys := lines[name]
		slices.SortFunc(xys, func(a, b plotter.XY) int { return int(a.X - b.X) })
		l, pts, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, nil, fmt.Errorf("plot %s: %w", name, err)
		}
		l.Color = plotutil.Color(i)
		pts.Color = plotutil.Color(i)
		pts.Shape = plotutil.Shape(i)
		p.Add(l, pts)
		leg.add(name, l, pts)
	}
	floorNames := make([]string, 0, len(floors))
	for name := range floors {
		floorNames = append(floorNames, name)
	}
	slices.Sort(floorNames)
	for i, name := range floorNames {
		l, err := plotter.NewLine(plotter.XYs{{X: xmin, Y: floors[name]}, {X: xmax, Y: floors[name]}})
		if err != nil {
			return nil, nil, err
		}
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		l.Color = color.Gray{Y: uint8(80 + 60*i)}
		p.Add(l)
		leg.add(name+" (dashed)", l)
	}
	// A log axis needs positive, distinct limits, also for a single mask count or value.
	p.X.Min, p.X.Max = xmin/1.25, xmax*1.25
	if ymax > 0 {
		p.Y.Min, p.Y.Max = ymin/1.5, ymax*1.5
	}
	return p, leg, nil
}

// maskTicks puts a tick at every power of two between the axis limits.
type maskTicks struct{}

func (maskTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for x := 1.0; x <= hi*1.0001; x *= 2 {
		if x >= lo*0.9999 {
			ticks = append(ticks, plot.Tick{Value: x, Label: strconv.Itoa(int(x))})
		}
	}
	return ticks
}
