package comfield

import (
	"math"
	"math/cmplx"
	"math/rand/v2"
	"os"
	"testing"

	"codeberg.org/sbinet/npyio"
)

// grad is numpy.gradient(v, axis=0) (rows) or axis=1 of an ny × nx map, written out
// position by position.
func grad(v []float64, ny, nx int, rows bool) []float64 {
	out := make([]float64, ny*nx)
	for i := range ny {
		for j := range nx {
			at := func(i, j int) float64 { return v[i*nx+j] }
			k, n := j, nx
			if rows {
				k, n = i, ny
			}
			d := func(a, b int) float64 { // v at index a minus v at index b along the axis
				if rows {
					return at(a, j) - at(b, j)
				}
				return at(i, a) - at(i, b)
			}
			switch k {
			case 0:
				out[i*nx+j] = d(1, 0)
			case n - 1:
				out[i*nx+j] = d(n-1, n-2)
			default:
				out[i*nx+j] = d(k+1, k-1) / 2
			}
		}
	}
	return out
}

func random(rng *rand.Rand, n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = rng.NormFloat64()
	}
	return v
}

func maxDiff(a, b []float64) float64 {
	d := 0.0
	for i := range a {
		d = math.Max(d, math.Abs(a[i]-b[i]))
	}
	return d
}

// Correct is LiberTEM's apply_correction: rotate_deg(θ) @ flip_y() applied to (y, x),
// rotate(r) = [[cos r, sin r], [−sin r, cos r]], flip_y = [[−1, 0], [0, 1]].
func TestCorrect(t *testing.T) {
	for _, c := range []struct {
		y, x, deg  float64
		flip       bool
		wantY, wnX float64
	}{
		{0, 1, 90, false, 1, 0},
		{1, 0, 90, false, 0, -1},
		{1, 2, 0, true, -1, 2},
		{1, 2, 180, true, 1, -2},
	} {
		y, x := Correct(c.y, c.x, c.deg, c.flip)
		if math.Abs(y-c.wantY) > 1e-12 || math.Abs(x-c.wnX) > 1e-12 {
			t.Errorf("Correct(%v, %v, %v, %v) = (%v, %v), want (%v, %v)", c.y, c.x, c.deg, c.flip, y, x, c.wantY, c.wnX)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		y, x, deg := rng.NormFloat64(), rng.NormFloat64(), rng.Float64()*720-360
		r := deg * math.Pi / 180
		m := [2][2]float64{{math.Cos(r), math.Sin(r)}, {-math.Sin(r), math.Cos(r)}}
		fy := -y // flip first
		gy, gx := Correct(y, x, deg, true)
		if wy, wx := m[0][0]*fy+m[0][1]*x, m[1][0]*fy+m[1][1]*x; math.Abs(gy-wy) > 1e-12 || math.Abs(gx-wx) > 1e-12 {
			t.Fatalf("Correct(%v, %v, %v, true) = (%v, %v), want (%v, %v)", y, x, deg, gy, gx, wy, wx)
		}
	}
}

// Magnitude, divergence and curl of a random field equal the formulas written out with
// numpy.gradient's differences; a gradient field has zero curl and a rotated gradient
// field zero divergence (the differences along the two axes commute).
func TestDerivatives(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, sz := range [][2]int{{2, 2}, {5, 7}, {8, 3}} {
		ny, nx := sz[0], sz[1]
		f := Field{NY: ny, NX: nx, Y: random(rng, ny*nx), X: random(rng, ny*nx)}
		div, curl := make([]float64, ny*nx), make([]float64, ny*nx)
		yr, yc, xr, xc := grad(f.Y, ny, nx, true), grad(f.Y, ny, nx, false), grad(f.X, ny, nx, true), grad(f.X, ny, nx, false)
		for i := range div {
			div[i], curl[i] = yr[i]+xc[i], yc[i]-xr[i]
			if m := f.Magnitude()[i]; math.Abs(m-math.Sqrt(f.Y[i]*f.Y[i]+f.X[i]*f.X[i])) > 1e-12 {
				t.Fatalf("%v: magnitude[%d] = %v", sz, i, m)
			}
		}
		if d := maxDiff(f.Divergence(), div); d > 1e-12 {
			t.Errorf("%v: divergence differs by %g", sz, d)
		}
		if d := maxDiff(f.Curl(), curl); d > 1e-12 {
			t.Errorf("%v: curl differs by %g", sz, d)
		}
		phi := random(rng, ny*nx)
		gradField := Field{NY: ny, NX: nx, Y: grad(phi, ny, nx, true), X: grad(phi, ny, nx, false)}
		if d := maxDiff(gradField.Curl(), make([]float64, ny*nx)); d > 1e-12 {
			t.Errorf("%v: curl of a gradient field is %g, not 0", sz, d)
		}
		rotField := Field{NY: ny, NX: nx, Y: grad(phi, ny, nx, false), X: grad(phi, ny, nx, true)}
		for i := range rotField.X {
			rotField.X[i] = -rotField.X[i]
		}
		if d := maxDiff(rotField.Divergence(), make([]float64, ny*nx)); d > 1e-12 {
			t.Errorf("%v: divergence of a divergence-free field is %g, not 0", sz, d)
		}
	}
}

// ICoM equals the formula evaluated with a direct (O(N²)) discrete Fourier transform,
// for even and odd scan sizes.
func TestICoMDirectDFT(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, sz := range [][2]int{{4, 6}, {5, 7}, {6, 3}} {
		ny, nx := sz[0], sz[1]
		f := Field{NY: ny, NX: nx, Y: random(rng, ny*nx), X: random(rng, ny*nx)}
		freq := func(k, n int) float64 {
			if k < (n+1)/2 {
				return float64(k) / float64(n)
			}
			return float64(k-n) / float64(n)
		}
		dft := func(v []float64, u, w int) complex128 {
			var s complex128
			for i := range ny {
				for j := range nx {
					s += complex(v[i*nx+j], 0) * cmplx.Exp(complex(0, -2*math.Pi*(float64(u*i)/float64(ny)+float64(w*j)/float64(nx))))
				}
			}
			return s
		}
		spec := make([]complex128, ny*nx)
		for u := range ny {
			for w := range nx {
				ky, kx := freq(u, ny), freq(w, nx)
				if u == 0 && w == 0 {
					continue
				}
				spec[u*nx+w] = (complex(kx, 0)*dft(f.X, u, w) + complex(ky, 0)*dft(f.Y, u, w)) / complex(0, 2*math.Pi*(kx*kx+ky*ky))
			}
		}
		want := make([]float64, ny*nx)
		for i := range ny {
			for j := range nx {
				var s complex128
				for u := range ny {
					for w := range nx {
						s += spec[u*nx+w] * cmplx.Exp(complex(0, 2*math.Pi*(float64(u*i)/float64(ny)+float64(w*j)/float64(nx))))
					}
				}
				want[i*nx+j] = real(s) / float64(ny*nx)
			}
		}
		got, bad := f.ICoM()
		if bad != nil {
			t.Fatalf("%v: non-finite positions %v in a finite field", sz, bad)
		}
		if d := maxDiff(got, want); d > 1e-12 {
			t.Errorf("%v: ICoM differs from the direct DFT by %g", sz, d)
		}
	}
}

// The iCoM of the exact gradient of a periodic phase, band-limited below the scan's
// Nyquist frequency, is that phase less its mean.
func TestICoMRecoversPhase(t *testing.T) {
	ny, nx := 24, 30
	phi := func(i, j float64) (p, dy, dx float64) {
		a, b := 2*math.Pi*2/float64(ny), 2*math.Pi*3/float64(nx)
		c := 2 * math.Pi * 5 / float64(nx)
		p = 1.5*math.Sin(a*i)*math.Cos(b*j) + 0.7*math.Cos(c*j+0.3) + 4
		dy = 1.5 * a * math.Cos(a*i) * math.Cos(b*j)
		dx = -1.5*b*math.Sin(a*i)*math.Sin(b*j) - 0.7*c*math.Sin(c*j+0.3)
		return
	}
	shifts := make([]float64, 2*ny*nx)
	want := make([]float64, ny*nx)
	for i := range ny {
		for j := range nx {
			p, dy, dx := phi(float64(i), float64(j))
			want[i*nx+j] = p - 4
			// As measured on a detector rotated by −30° and flipped: Correct undoes it.
			r := -30 * math.Pi / 180
			y, x := math.Cos(r)*dy+math.Sin(r)*dx, -math.Sin(r)*dy+math.Cos(r)*dx
			shifts[2*(i*nx+j)], shifts[2*(i*nx+j)+1] = -y, x
		}
	}
	f := FromShifts(shifts, ny, nx, 30, true)
	got, _ := f.ICoM()
	if d := maxDiff(got, want); d > 1e-9 {
		t.Errorf("iCoM differs from the phase by %g", d)
	}
}

// Non-finite shifts are read as 0 by ICoM and reported; the other products hold NaN.
func TestNonFinite(t *testing.T) {
	f := Field{NY: 3, NX: 3, Y: make([]float64, 9), X: make([]float64, 9)}
	f.Y[4], f.X[7] = math.NaN(), math.Inf(1)
	phi, bad := f.ICoM()
	if len(bad) != 2 || bad[0] != 4 || bad[1] != 7 {
		t.Errorf("non-finite positions %v, want [4 7]", bad)
	}
	if d := maxDiff(phi, make([]float64, 9)); d != 0 {
		t.Errorf("iCoM of a zero field with gaps read as 0: %v", phi)
	}
	if m := f.Magnitude(); !math.IsNaN(m[4]) || m[0] != 0 {
		t.Errorf("magnitude %v", m)
	}
	// ∂y/∂row uses Y[4] at (0, 1) and (2, 1); (1, 1) itself has no shift, so no
	// derivative, although its central difference does not read it (LiberTEM: NaN
	// outside its ROI).
	if d := f.Divergence(); !math.IsNaN(d[1]) || !math.IsNaN(d[7]) || !math.IsNaN(d[4]) || d[0] != 0 || d[3] != 0 {
		t.Errorf("divergence %v: NaN where the differences use (1, 1) and at (1, 1)", d)
	}
	if c := f.Curl(); !math.IsNaN(c[4]) || c[0] != 0 {
		t.Errorf("curl %v: NaN at (1, 1)", c)
	}
}

func readNPY(t *testing.T, path string) []float64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := npyio.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var v []float64
	if err := r.Read(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// The products of a random 9 × 12 field, flipped and rotated by 25°, equal numpy's
// (testdata/numpy_reference.py: numpy.gradient, numpy.fft).
func TestNumpyReference(t *testing.T) {
	shifts, want := readNPY(t, "testdata/shifts.npy"), readNPY(t, "testdata/products.npy")
	f := FromShifts(shifts, 9, 12, 25, true)
	icom, _ := f.ICoM()
	for i, c := range []struct {
		name string
		got  []float64
	}{{"field y", f.Y}, {"field x", f.X}, {"magnitude", f.Magnitude()}, {"divergence", f.Divergence()}, {"curl", f.Curl()}, {"icom", icom}} {
		if d := maxDiff(c.got, want[i*108:(i+1)*108]); d > 1e-12 {
			t.Errorf("%s differs from numpy's by %g", c.name, d)
		}
	}
}
