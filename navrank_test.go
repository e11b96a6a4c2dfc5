package stemdot_test

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"codeberg.org/sbinet/npyio"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot"
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/frontend"
	"github.com/stemdot/stemdot/internal/npy"
)

// readNPY64 reads a float64 NPY file.
func readNPY64(t *testing.T, path string) ([]int, []float64) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	r, err := npyio.NewReader(f)
	require.NoError(t, err)
	var v []float64
	require.NoError(t, r.Read(&v))
	return r.Header.Descr.Shape, v
}

// A 5-D NPY file, a scan of planes (2, 3, 4) of 6×7 frames, through the front door
// (#33): its nav shape is kept, as LiberTEM keeps it (not folded to (6, 4)); the result,
// its sidecar, the com shift maps, an ROI, per-position shifts and Pick are of nav shape
// (2, 3, 4), with the values of a float64 reference; what is of 2-D scans only (PNG
// images, CoM products, the descan plane) is refused naming the nav_shape that reads it
// as one.
func TestScanOfPlanes(t *testing.T) {
	const sy, sx = 6, 7
	nav := []int{2, 3, 4}
	frames := make([]float32, 24*sy*sx)
	for i := range frames {
		frames[i] = float32(i%29) + 1
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "planes.npy")
	require.NoError(t, npy.WriteFile(path, []int{2, 3, 4, sy, sx}, frames))
	ds, err := stemdot.Open(path, stemdot.Options{})
	require.NoError(t, err)
	defer ds.Close()
	require.Equal(t, nav, ds.NavShape())
	require.Empty(t, stemdot.OpenWarnings(ds), "the nav shape is the file's, read without a word")
	// ref is frame f's point:2,3, rect:4,1,3,2 and com (sum, y and x moments about (3, 3)).
	ref := func(f int) []float64 {
		frame := frames[f*sy*sx : (f+1)*sy*sx]
		var rect, sum, my, mx float64
		for y := range sy {
			for x := range sx {
				v := float64(frame[y*sx+x])
				if y >= 1 && y < 3 && x >= 4 {
					rect += v
				}
				sum, my, mx = sum+v, my+float64(y-3)*v, mx+float64(x-3)*v
			}
		}
		return []float64{float64(frame[3*sx+2]), rect, sum, my, mx}
	}
	stack, err := stemdot.Masks(ds.SigShape(), "point:2,3", "rect:4,1,3,2", "com")
	require.NoError(t, err)
	plan := stemdot.Plan{CPUs: "1"}
	res, err := stemdot.Apply(t.Context(), ds, stack, plan, stemdot.ApplyOptions{Float64: true})
	require.NoError(t, err)
	require.Equal(t, nav, res.NavShape)
	out := stemdot.Outputs{NPY: filepath.Join(dir, "r.npy"), COMShifts: filepath.Join(dir, "s.npy")}
	require.NoError(t, stemdot.Save(res, out))
	shape, got := readNPY64(t, out.NPY)
	require.Equal(t, []int{2, 3, 4, 5}, shape)
	shape, shifts := readNPY64(t, out.COMShifts)
	require.Equal(t, []int{2, 3, 4, 2}, shape)
	for f := range 24 {
		want := ref(f)
		require.Equal(t, want, got[5*f:5*f+5], "frame %d", f)
		require.InDelta(t, want[3]/want[2], shifts[2*f], 1e-12, "frame %d", f)
		require.InDelta(t, want[4]/want[2], shifts[2*f+1], 1e-12, "frame %d", f)
	}
	b, err := os.ReadFile(stemdot.SidecarPath(out.NPY))
	require.NoError(t, err)
	var side struct {
		Shape     []int `json:"shape"`
		NavShape  []int `json:"nav_shape"`
		COMShifts struct {
			Shape []int `json:"shape"`
		} `json:"com_shifts"`
	}
	require.NoError(t, json.Unmarshal(b, &side))
	require.Equal(t, []int{2, 3, 4, 5}, side.Shape)
	require.Equal(t, nav, side.NavShape)
	require.Equal(t, []int{2, 3, 4, 2}, side.COMShifts.Shape)

	// An ROI (rect: the rectangle in every plane) placed back in the scan of planes.
	roi, err := dataset.ParseROI("rect:3,1,1,2")
	require.NoError(t, err)
	sel, err := stemdot.Open(path, stemdot.Options{ROI: roi})
	require.NoError(t, err)
	defer sel.Close()
	part, err := stemdot.Apply(t.Context(), sel, stack, plan, stemdot.ApplyOptions{Float64: true})
	require.NoError(t, err)
	require.Equal(t, nav, part.NavShape)
	require.Equal(t, []int{7, 11, 19, 23}, part.Positions)
	for f := range 24 {
		if f == 7 || f == 11 || f == 19 || f == 23 {
			require.Equal(t, ref(f), part.F64[5*f:5*f+5], "frame %d", f)
		} else {
			require.True(t, math.IsNaN(part.F64[5*f]), "frame %d outside the ROI", f)
		}
	}

	// Shifts of nav_shape + (2,): one (0, -1) per position moves the point mask to x = 1.
	shiftsPath := filepath.Join(dir, "shifts.npy")
	one := make([]float64, 48)
	for f := range 24 {
		one[2*f+1] = -1
	}
	require.NoError(t, stemdot.SaveShifts(shiftsPath, nav, one))
	loaded, err := stemdot.LoadShifts(shiftsPath, nav)
	require.NoError(t, err)
	point, err := stemdot.Masks(ds.SigShape(), "point:2,3")
	require.NoError(t, err)
	moved, err := stemdot.Apply(t.Context(), ds, point, plan, stemdot.ApplyOptions{Float64: true, Shifts: loaded})
	require.NoError(t, err)
	for f := range 24 {
		require.Equal(t, float64(frames[f*sy*sx+3*sx+1]), moved.F64[f], "frame %d", f)
	}
	_, err = stemdot.LoadShifts(shiftsPath, []int{6, 4})
	require.ErrorContains(t, err, "has shape (2, 3, 4, 2), want nav_shape + (2,) = (6, 4, 2)")

	// Pick (z, y, x), and the PNG names of picked frames.
	fr, err := stemdot.Pick(t.Context(), ds, [][]int{{1, 2, 3}, {0, 0, 1}})
	require.NoError(t, err)
	require.Equal(t, []int{23, 1}, fr.Indices)
	for k, f := range fr.Indices {
		for p, v := range fr.Pixels(k) {
			require.Equal(t, float64(frames[f*sy*sx+p]), v)
		}
	}
	_, err = stemdot.Pick(t.Context(), ds, [][]int{{2, 3}})
	require.EqualError(t, err, "Pick's positions: scan position (2, 3) has 2 coordinates, but the nav shape (2, 3, 4) has 3 axes: give Z,Y,X")
	require.NoError(t, stemdot.SaveFrames(fr, nav, "", filepath.Join(dir, "pick")))
	for _, name := range []string{"pick_0_z1_y2_x3.png", "pick_1_z0_y0_x1.png"} {
		require.FileExists(t, filepath.Join(dir, name))
	}

	// Of 2-D scans only: refused before any work or file, naming the nav shape.
	png := stemdot.Outputs{NPY: filepath.Join(dir, "p.npy"), PNGPrefix: filepath.Join(dir, "img")}
	const pngErr = "Outputs.PNGPrefix: PNG images are of 1-D and 2-D scans, not of nav shape (2, 3, 4): give Options.NavShape 6,4 to read the scan as a 2-D one, its 2 planes one below the other"
	require.EqualError(t, png.CheckNavShape(nav), pngErr)
	err = stemdot.Save(res, png)
	require.EqualError(t, err, pngErr)
	require.Equal(t, errs.Shape, errs.KindOf(err))
	require.NoFileExists(t, png.NPY)
	require.NoError(t, png.CheckNavShape([]int{6, 4}))
	require.EqualError(t, frontend.CheckScan2D([]int{2, 2, 1}, "option png: PNG images are"),
		"Outputs.PNGPrefix: PNG images are of 1-D and 2-D scans, not of nav shape (2, 2, 1): give Options.NavShape 2,2 to read the scan as a 2-D one, without its axes of size 1")
	_, err = stemdot.NewCOMProducts(shifts, nav, stemdot.COMOptions{})
	require.ErrorContains(t, err, "CoM products need a 2-D scan (derivatives along its rows and columns), as LiberTEM's CoMUDF, got nav_shape (2, 3, 4)")
	_, _, err = stemdot.ReadCOMShifts(out.COMShifts)
	require.ErrorContains(t, err, "shape (2, 3, 4, 2) is the shift maps of a scan of planes (nav_z, nav_y, nav_x, 2): CoM products are of a 2-D scan")
	require.Equal(t, errs.Shape, errs.KindOf(err))
	_, err = stemdot.DescanFit(t.Context(), ds, "com", plan)
	require.EqualError(t, err, "descan fit: the plane is fitted in the scan positions of 1-D and 2-D scans, not of nav shape (2, 3, 4): give Options.NavShape 6,4 to read the scan as a 2-D one, its 2 planes one below the other")

	// Read as a 2-D scan, as the messages say: the same values, in rows of all planes.
	flat, err := stemdot.Open(path, stemdot.Options{NavShape: []int{6, 4}})
	require.NoError(t, err)
	defer flat.Close()
	res2, err := stemdot.Apply(t.Context(), flat, stack, plan, stemdot.ApplyOptions{Float64: true})
	require.NoError(t, err)
	require.Equal(t, []int{6, 4}, res2.NavShape)
	require.Equal(t, res.F64, res2.F64)
	require.NoError(t, stemdot.Save(res2, png))
}
