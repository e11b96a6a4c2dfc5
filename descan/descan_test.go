package descan

import (
	"math"
	"strings"
	"testing"
)

func near(t *testing.T, what string, got, want, tol float64) {
	t.Helper()
	if math.Abs(got-want) > tol {
		t.Fatalf("%s: got %v, want %v", what, got, want)
	}
}

// Fit recovers a known plane from its values (with NaN holes and noise-free), and Eval
// gives the values back.
func TestFitRecoversPlane(t *testing.T) {
	want := Plane{Y: Coeffs{A: 1.25, B: 0.03, C: -0.02}, X: Coeffs{A: -0.5, B: -0.015, C: 0.04}}
	nav := []int{17, 23}
	shifts, err := want.Eval(nav)
	if err != nil {
		t.Fatal(err)
	}
	near(t, "Eval at (2, 5), y", shifts[2*(2*23+5)], 1.25+0.03*2-0.02*5, 1e-15)
	near(t, "Eval at (2, 5), x", shifts[2*(2*23+5)+1], -0.5-0.015*2+0.04*5, 1e-15)
	shifts[0], shifts[7] = math.NaN(), math.Inf(1) // positions 0 and 3 left out
	shifts[100] = math.NaN()
	got, err := Fit(shifts, nav)
	if err != nil {
		t.Fatal(err)
	}
	if got.Used != 17*23-3 {
		t.Fatalf("Used = %d, want %d", got.Used, 17*23-3)
	}
	for _, c := range []struct {
		name      string
		got, want Coeffs
	}{{"y", got.Y, want.Y}, {"x", got.X, want.X}} {
		near(t, c.name+".A", c.got.A, c.want.A, 1e-12)
		near(t, c.name+".B", c.got.B, c.want.B, 1e-12)
		near(t, c.name+".C", c.got.C, c.want.C, 1e-12)
	}
	near(t, "RMS y", got.RMS[0], 0, 1e-12)
}

// A least-squares fit of points off the plane: the residual's mean is 0 and the fit
// equals numpy.linalg.lstsq's on the same points (computed independently here by the
// normal equations of a 2×2 scan: exact plane through 3 points + 1 off by e).
func TestFitLeastSquares(t *testing.T) {
	// Values of y: positions (0,0)=0, (0,1)=1, (1,0)=2, (1,1)=3+4e: the LS plane is
	// A = -e, B = 2+2e, C = 1+2e (residuals ±e), the x component 0.
	e := 0.25
	shifts := []float64{0, 0, 1, 0, 2, 0, 3 + 4*e, 0}
	p, err := Fit(shifts, []int{2, 2})
	if err != nil {
		t.Fatal(err)
	}
	near(t, "A", p.Y.A, -e, 1e-12)
	near(t, "B", p.Y.B, 2+2*e, 1e-12)
	near(t, "C", p.Y.C, 1+2*e, 1e-12)
	near(t, "RMS", p.RMS[0], e, 1e-12)
}

func TestFitShapes(t *testing.T) {
	// A series (n,): x is the position, no y slope.
	p, err := Fit([]float64{1, 5, 1.5, 4, 2, 3}, []int{3})
	if err != nil {
		t.Fatal(err)
	}
	near(t, "series y.C", p.Y.C, 0.5, 1e-12)
	near(t, "series x.C", p.X.C, -1, 1e-12)
	near(t, "series y.B", p.Y.B, 0, 0)
	// One row of a 2-D scan.
	if _, err := Fit([]float64{1, 1, 2, 2}, []int{1, 2}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		shifts []float64
		nav    []int
		want   string
	}{
		{[]float64{1, 2}, []int{2, 2}, "shift map holds 2 values, want 2 (y, x) for each of the 4 scan positions of nav_shape [2 2]"},
		{[]float64{math.NaN(), 0, 1, 1, 2, 2, math.NaN(), 0}, []int{2, 2}, "2 of the 4 scan positions have a finite shift, the plane needs at least 3"},
		{nil, []int{0, 3}, "nav_shape [0 3]: want (n,) or (nav_y, nav_x)"},
	} {
		if _, err := Fit(c.shifts, c.nav); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("Fit(%v, %v): error %v, want %q", c.shifts, c.nav, err, c.want)
		}
	}
	// Usable positions on one line of a 2-D scan do not determine a plane.
	nan := math.NaN()
	if _, err := Fit([]float64{0, 0, 1, 1, 2, 2, nan, nan, nan, nan, nan, nan}, []int{2, 3}); err == nil {
		t.Fatal("Fit of collinear positions: no error")
	}
}
