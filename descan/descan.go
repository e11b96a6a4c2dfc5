// Package descan models the descan error of a 4D-STEM scan: the shift of the
// diffraction pattern on the detector that follows the probe position when the
// descan coils do not fully cancel the scan. Over a scan it is close to linear in the
// probe position, so a plane per component describes it:
//
//	dy(y, x) = Y.A + Y.B·y + Y.C·x,   dx(y, x) = X.A + X.B·y + X.C·x,
//
// with (y, x) the scan position (row and column index of nav_shape, from 0) and dy, dx
// in detector pixels (dy down the rows, dx along a row). Fit finds the planes from a
// shift map (the centre-of-mass shifts of a scan, e.g. in vacuum) by least squares;
// Eval gives the shift of every scan position, the per-frame mask shifts that
// compensate the descan (a mask moved by (dy, dx) follows the pattern).
package descan

import (
	"errors"
	"fmt"
	"math"

	"gonum.org/v1/gonum/mat"
)

// Coeffs are one component's plane: value(y, x) = A + B·y + C·x, in pixels (A) and
// pixels per scan step (B, C).
type Coeffs struct {
	A, B, C float64
}

// At is the plane's value at scan position (y, x).
func (c Coeffs) At(y, x float64) float64 { return c.A + c.B*y + c.C*x }

// Plane is the descan model: the planes of the y and the x shift.
type Plane struct {
	Y, X Coeffs
	// Used is the number of scan positions the fit used (those with finite shifts).
	Used int
	// RMS is the root-mean-square residual of the fit, y then x, in pixels.
	RMS [2]float64
}

// position is scan position i's (y, x) for nav shape nav: (row, column) of a 2-D scan,
// (0, i) of a 1-D one.
func position(nav []int, i int) (float64, float64) {
	if len(nav) == 2 {
		return float64(i / nav[1]), float64(i % nav[1])
	}
	return 0, float64(i)
}

// count is the number of scan positions of nav shape nav, or an error for a nav shape
// Fit and Eval do not take.
func count(nav []int) (int, error) {
	switch {
	case len(nav) == 1 && nav[0] >= 1:
		return nav[0], nil
	case len(nav) == 2 && nav[0] >= 1 && nav[1] >= 1:
		return nav[0] * nav[1], nil
	}
	return 0, fmt.Errorf("nav_shape %v: want (n,) or (nav_y, nav_x) with every size at least 1", nav)
}

// Fit fits the planes of the shift map shifts, 2 values per scan position of nav
// shape nav ((nav_y, nav_x), or (n,) for a series: y = 0), y then x, C order (as
// stemdot.COMShifts gives them), by linear least squares (gonum's QR). Positions
// whose y or x shift is NaN or infinite (frames without counts) are left out. A scan
// of one row has no y slope to fit: B is 0; one of one column likewise C.
//
// Errors: a map of another length than 2 per position, and fewer usable positions
// than the plane has free coefficients (or a usable set on one line).
func Fit(shifts []float64, nav []int) (Plane, error) {
	n, err := count(nav)
	if err != nil {
		return Plane{}, err
	}
	if len(shifts) != 2*n {
		return Plane{}, fmt.Errorf("shift map holds %d values, want 2 (y, x) for each of the %d scan positions of nav_shape %v", len(shifts), n, nav)
	}
	var rows []int
	for i := range n {
		if finite(shifts[2*i]) && finite(shifts[2*i+1]) {
			rows = append(rows, i)
		}
	}
	// The columns of the design matrix: 1, y (when the scan has several rows), x (when
	// it has several columns).
	useY := len(nav) == 2 && nav[0] > 1
	useX := nav[len(nav)-1] > 1
	cols := 1
	if useY {
		cols++
	}
	if useX {
		cols++
	}
	if len(rows) < cols {
		return Plane{}, fmt.Errorf("%d of the %d scan positions have a finite shift, the plane needs at least %d", len(rows), n, cols)
	}
	a := mat.NewDense(len(rows), cols, nil)
	b := mat.NewDense(len(rows), 2, nil)
	for r, i := range rows {
		y, x := position(nav, i)
		a.Set(r, 0, 1)
		c := 1
		if useY {
			a.Set(r, c, y)
			c++
		}
		if useX {
			a.Set(r, c, x)
		}
		b.Set(r, 0, shifts[2*i])
		b.Set(r, 1, shifts[2*i+1])
	}
	var qr mat.QR
	qr.Factorize(a)
	var sol mat.Dense
	if err := qr.SolveTo(&sol, false, b); err != nil {
		return Plane{}, fmt.Errorf("the %d usable scan positions do not determine a plane (%v)", len(rows), err)
	}
	coeffs := func(k int) Coeffs {
		c := Coeffs{A: sol.At(0, k)}
		j := 1
		if useY {
			c.B = sol.At(j, k)
			j++
		}
		if useX {
			c.C = sol.At(j, k)
		}
		return c
	}
	p := Plane{Y: coeffs(0), X: coeffs(1), Used: len(rows)}
	if !finite(p.Y.A + p.Y.B + p.Y.C + p.X.A + p.X.B + p.X.C) {
		return Plane{}, errors.New("the usable scan positions do not determine a plane (they lie on one line)")
	}
	var ss [2]float64
	for _, i := range rows {
		y, x := position(nav, i)
		ry, rx := shifts[2*i]-p.Y.At(y, x), shifts[2*i+1]-p.X.At(y, x)
		ss[0] += ry * ry
		ss[1] += rx * rx
	}
	p.RMS = [2]float64{math.Sqrt(ss[0] / float64(len(rows))), math.Sqrt(ss[1] / float64(len(rows)))}
	return p, nil
}

// Eval returns the plane's shifts at every scan position of nav shape nav: 2 values
// per position, dy then dx, C order, the layout of Fit's input and of
// stemdot.ApplyOptions.Shifts.
func (p Plane) Eval(nav []int) ([]float64, error) {
	n, err := count(nav)
	if err != nil {
		return nil, err
	}
	out := make([]float64, 2*n)
	for i := range n {
		y, x := position(nav, i)
		out[2*i], out[2*i+1] = p.Y.At(y, x), p.X.At(y, x)
	}
	return out, nil
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
