package stemdot_test

import (
	"math"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot"
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
)

// Item #18.6: a synthetic phase object through the real apply and com masks. Every
// frame holds a Gaussian spot displaced from the com reference point (16, 16) by
// α·∇φ of a known periodic phase φ; the iCoM of the measured shift maps is α·φ less
// its mean, and the magnitude, divergence and curl are those of the exact shifts.
func TestCOMProductsPhaseObject(t *testing.T) {
	const ny, nx, sig, alpha, sigma = 16, 20, 32, 3.0, 2.5
	phi := func(i, j float64) (p, dy, dx float64) {
		a, b := 2*math.Pi*2/ny, 2*math.Pi*1/nx
		return math.Sin(a*i) * math.Cos(b*j), a * math.Cos(a*i) * math.Cos(b*j), -b * math.Sin(a*i) * math.Sin(b*j)
	}
	frames := make([]float32, ny*nx*sig*sig)
	want := make([]float64, ny*nx)
	mean := 0.0
	for i := range ny {
		for j := range nx {
			p, dy, dx := phi(float64(i), float64(j))
			want[i*nx+j] = alpha * p
			mean += alpha * p / (ny * nx)
			cy, cx := 16+alpha*dy, 16+alpha*dx
			frame := frames[(i*nx+j)*sig*sig:]
			for y := range sig {
				for x := range sig {
					frame[y*sig+x] = float32(math.Exp(-((float64(y)-cy)*(float64(y)-cy) + (float64(x)-cx)*(float64(x)-cx)) / (2 * sigma * sigma)))
				}
			}
		}
	}
	ds, err := dataset.FromMemory(unsafe.Slice((*byte)(unsafe.Pointer(&frames[0])), 4*len(frames)), []int{ny, nx}, [2]int{sig, sig}, dataset.Float32)
	require.NoError(t, err)
	stack, err := stemdot.Masks(ds.SigShape(), "com")
	require.NoError(t, err)
	res, err := stemdot.Apply(t.Context(), ds, stack, stemdot.Plan{CPUs: "1"}, stemdot.ApplyOptions{Float64: true})
	require.NoError(t, err)
	shifts, err := stemdot.COMShifts(res, 0)
	require.NoError(t, err)
	p, err := stemdot.NewCOMProducts(shifts, res.NavShape, stemdot.COMOptions{})
	require.NoError(t, err)
	require.Empty(t, p.Warnings)
	worst := 0.0
	for i := range want {
		worst = math.Max(worst, math.Abs(p.ICoM[i]-(want[i]-mean)))
	}
	// The Gaussian's centroid on the pixel grid equals its centre within 1e-9 px; what
	// is left is the float64 sums: the iCoM is φ·α within 1e-6 of its range 2α.
	require.Less(t, worst, 1e-6, "iCoM vs α·(φ − mean φ)")
	// The other products equal those of the exact shifts α·∇φ.
	exact := make([]float64, 2*ny*nx)
	for i := range ny {
		for j := range nx {
			_, dy, dx := phi(float64(i), float64(j))
			exact[2*(i*nx+j)], exact[2*(i*nx+j)+1] = alpha*dy, alpha*dx
		}
	}
	q, err := stemdot.NewCOMProducts(exact, []int{ny, nx}, stemdot.COMOptions{})
	require.NoError(t, err)
	for _, c := range [][2][]float64{{p.Magnitude, q.Magnitude}, {p.Divergence, q.Divergence}, {p.Curl, q.Curl}} {
		require.InDeltaSlice(t, c[1], c[0], 1e-6)
	}
}

// NewCOMProducts' errors and its warning for frames summing to 0; SaveCOMProducts and
// ReadCOMShifts round trip; bad outputs are refused before any file is written.
func TestCOMProductsFiles(t *testing.T) {
	_, err := stemdot.NewCOMProducts(make([]float64, 8), []int{4}, stemdot.COMOptions{})
	require.ErrorContains(t, err, "CoM products need a 2-D scan of at least 2×2 positions")
	require.Equal(t, errs.Shape, errs.KindOf(err))
	_, err = stemdot.NewCOMProducts(make([]float64, 7), []int{2, 2}, stemdot.COMOptions{})
	require.Equal(t, errs.Shape, errs.KindOf(err))
	_, err = stemdot.NewCOMProducts(make([]float64, 8), []int{2, 2}, stemdot.COMOptions{Rotation: math.NaN()})
	require.EqualError(t, err, "COMOptions.Rotation NaN is not a finite angle in degrees")

	shifts := []float64{0, 1, math.NaN(), math.NaN(), 1, 0, 2, 2, 0, 0, 1, 1}
	p, err := stemdot.NewCOMProducts(shifts, []int{2, 3}, stemdot.COMOptions{})
	require.NoError(t, err)
	require.Equal(t, []string{"1 of 6 scan positions have no finite CoM shift (NaN: frames summing to 0, or positions left out of an ROI), at (y, x) (0, 1): the iCoM reads them as 0; the magnitude, divergence and curl are NaN there, and the divergence and curl where their differences use them"}, p.Warnings)

	dir := t.TempDir()
	o := stemdot.COMOutputs{Field: filepath.Join(dir, "f.npy"), ICoM: filepath.Join(dir, "i.npy"), PNGPrefix: filepath.Join(dir, "c")}
	require.NoError(t, stemdot.SaveCOMProducts(p, o))
	field, nav, err := stemdot.ReadCOMShifts(o.Field)
	require.NoError(t, err)
	require.Equal(t, []int{2, 3}, nav)
	require.Equal(t, shifts[:2], field[:2])
	_, err = os.Stat(filepath.Join(dir, "c_icom.png"))
	require.NoError(t, err)
	_, _, err = stemdot.ReadCOMShifts(o.ICoM)
	require.ErrorContains(t, err, "shape (2, 3) is not the shift maps' (nav_y, nav_x, 2)")
	require.Equal(t, errs.Shape, errs.KindOf(err))

	for _, c := range []struct {
		o    stemdot.COMOutputs
		want string
	}{
		{stemdot.COMOutputs{}, "no output: give COMOutputs.Magnitude, COMOutputs.Divergence, COMOutputs.Curl, COMOutputs.ICoM, COMOutputs.Field or Outputs.PNGPrefix"},
		{stemdot.COMOutputs{Curl: filepath.Join(dir, "c.png")}, "COMOutputs.Curl " + dir + "/c.png: products are written as NPY: give a path ending in .npy, after a file name"},
		{stemdot.COMOutputs{Curl: filepath.Join(dir, "x.npy"), ICoM: filepath.Join(dir, "x.npy")}, "COMOutputs.Curl " + dir + "/x.npy and COMOutputs.ICoM " + dir + "/x.npy are the same file: give each output its own path"},
	} {
		require.EqualError(t, stemdot.SaveCOMProducts(p, c.o), c.want)
	}
	err = stemdot.COMOutputs{ICoM: o.Field}.Check(o.Field)
	require.ErrorContains(t, err, "is an input of this run: not replacing it")
}
