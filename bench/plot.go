package bench

import (
	"fmt"
	"image/color"
	"io"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// WritePlot draws throughput (GB/s of raw frame bytes) against the number of dense masks
// (log₂ axis), one line per stemdot plan and per peer, one panel per dtype, with each
// read floor as a dashed horizontal line, and writes it as PNG. Sparse cases are left
// out (they are one mask of another kind).
func WritePlot(w io.Writer, rows []Row) error {
	var dtypes []string
	for _, r := range rows {
		if !slices.Contains(dtypes, r.DType) {
			dtypes = append(dtypes, r.DType)
		}
	}
	if len(dtypes) == 0 {
		return fmt.Errorf("plot: no rows")
	}
	panels := make([][]*plot.Plot, 1)
	for _, dt := range dtypes {
		p, err := panel(rows, dt)
		if err != nil {
			return err
		}
		panels[0] = append(panels[0], p)
	}
	width, height := vg.Length(len(dtypes))*14*vg.Centimeter, 12*vg.Centimeter
	img := vgimg.New(width, height)
	dc := draw.New(img)
	canvases := plot.Align(panels, draw.Tiles{Rows: 1, Cols: len(dtypes), PadX: vg.Centimeter}, dc)
	for i, p := range panels[0] {
		p.Draw(canvases[0][i])
	}
	_, err := vgimg.PngCanvas{Canvas: img}.WriteTo(w)
	return err
}

func panel(rows []Row, dtype string) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = dtype + " frames, dense masks"
	p.X.Label.Text = "masks"
	p.Y.Label.Text = "GB/s (raw frame bytes)"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = maskTicks{}
	p.Y.Min = 0
	p.Legend.Top = true
	p.Add(plotter.NewGrid())

	var series []string
	lines := map[string]plotter.XYs{}
	floors := map[string]float64{}
	var xmin, xmax float64
	for _, r := range rows {
		if r.DType != dtype {
			continue
		}
		if r.Source == ReadFloor {
			floors[r.Plan] = r.GBps()
			continue
		}
		if r.MaskKind != Dense || r.Masks < 1 {
			continue
		}
		name := r.Plan
		if r.Source != Stemdot {
			name = fmt.Sprintf("%s (%d workers)", r.Source, r.Workers)
		}
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
		return nil, fmt.Errorf("plot: no dense-mask rows for dtype %s", dtype)
	}
	for i, name := range series {
		xys := lines[name]
		slices.SortFunc(xys, func(a, b plotter.XY) int { return int(a.X - b.X) })
		l, pts, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, fmt.Errorf("plot %s: %w", name, err)
		}
		l.Color = plotutil.Color(i)
		pts.Color = plotutil.Color(i)
		pts.Shape = plotutil.Shape(i)
		p.Add(l, pts)
		p.Legend.Add(name, l, pts)
	}
	floorNames := make([]string, 0, len(floors))
	for name := range floors {
		floorNames = append(floorNames, name)
	}
	slices.Sort(floorNames)
	for i, name := range floorNames {
		l, err := plotter.NewLine(plotter.XYs{{X: xmin, Y: floors[name]}, {X: xmax, Y: floors[name]}})
		if err != nil {
			return nil, err
		}
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		l.Color = color.Gray{Y: uint8(80 + 60*i)}
		p.Add(l)
		p.Legend.Add(name, l)
	}
	// A log axis needs positive, distinct limits, also for a single mask count.
	p.X.Min, p.X.Max = xmin/1.25, xmax*1.25
	return p, nil
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
