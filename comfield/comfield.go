// Package comfield computes what differential phase contrast (DPC) users read from a
// centre-of-mass (CoM) shift field: the field corrected for scan rotation and a flipped
// detector y axis, its magnitude, divergence and curl, and the integrated CoM (iCoM), a
// phase image, by Fourier integration.
//
// A field is two maps over the scan grid (ny, nx), row-major: Y[i*nx+j] and X[i*nx+j],
// the CoM shift of scan position (row i, column j) along the detector's y (rows) and x
// (columns), in pixels, as stemdot.COMShifts gives them.
//
// Conventions, those of LiberTEM's CoM analysis (libertem.udf.com: apply_correction,
// magnitude, divergence, curl_2d; libertem.corrections.coordinates), so that results
// agree with LiberTEM's:
//
//   - Correct: flip_y first (y → −y), then the scan rotation by rotation degrees:
//     y' = cos θ·y + sin θ·x, x' = −sin θ·y + cos θ·x. A positive angle rotates the
//     shift vector clockwise in (x right, y down) image coordinates.
//   - Derivatives are numpy.gradient's along the scan axes, in units of one scan step:
//     central differences (f[i+1] − f[i−1])/2 inside, one-sided f[1] − f[0] and
//     f[n−1] − f[n−2] at the edges.
//   - Magnitude = √(y² + x²); Divergence = ∂y/∂row + ∂x/∂column; Curl = ∂y/∂column −
//     ∂x/∂row (the z component, "dFy/dx − dFx/dy" of LiberTEM's curl_2d).
//   - ICoM: the φ whose gradient is the field, (∂φ/∂column, ∂φ/∂row) = (x, y), by
//     Fourier integration (Lazić, Bosch and Lazar, Ultramicroscopy 160 (2016) 265;
//     Ishizuka et al., Microscopy 66 (2017) 397; as LiberTEM-iCoM's iDPC):
//     φ = F⁻¹[(k_x·F[x] + k_y·F[y]) / (2πi·(k_x² + k_y²))], with k_x, k_y the
//     frequencies of the discrete Fourier transform in cycles per scan step
//     (numpy.fft.fftfreq), the k = 0 term set to 0 (φ has zero mean), and the real
//     part taken. φ is in pixels × scan steps: the phase up to the scale of the shift
//     calibration. The integration treats the scan as periodic: a field whose
//     potential is not periodic gets artefacts at the edges, as in every Fourier
//     integration.
//
// LiberTEM's regression option (subtracting the mean shift or a plane fitted to the
// shifts, i.e. the descan) is not applied here: the shifts are used as given, so remove
// the descan first (a descan-compensated apply, or a plane fitted to the shift map).
// py4DSTEM reconstructs the phase from DPC iteratively; the direct Fourier integration
// here is its starting point, and the method of LiberTEM-iCoM.
//
// Positions whose shift is NaN (a frame summing to 0, a position outside an ROI) give NaN
// magnitude, divergence and curl there, as LiberTEM leaves positions outside its ROI NaN,
// and NaN (or ±Inf) divergence and curl where the differences use them (their
// neighbours), as numpy does; ICoM reads them as 0 and returns them, for the caller to
// warn about.
package comfield

import (
	"fmt"
	"math"

	"gonum.org/v1/gonum/dsp/fourier"
)

// Field is a CoM shift field over a scan grid of NY rows × NX columns: Y and X hold
// NY·NX values each, row-major, in pixels of the detector.
type Field struct {
	NY, NX int
	Y, X   []float64
}

// FromShifts is the field of shifts interleaved as stemdot.COMShifts writes them,
// shifts[2f] the y and shifts[2f+1] the x shift of scan position f, over a scan of
// ny × nx positions, flipped (flipY) and rotated by rotation degrees (see Correct). It
// panics when len(shifts) != 2·ny·nx.
func FromShifts(shifts []float64, ny, nx int, rotation float64, flipY bool) Field {
	if len(shifts) != 2*ny*nx {
		panic(fmt.Sprintf("comfield: %d shift values for a scan of %d × %d positions", len(shifts), ny, nx))
	}
	f := Field{NY: ny, NX: nx, Y: make([]float64, ny*nx), X: make([]float64, ny*nx)}
	for i := range f.Y {
		f.Y[i], f.X[i] = Correct(shifts[2*i], shifts[2*i+1], rotation, flipY)
	}
	return f
}

// Correct is the shift (y, x) flipped along y when flipY, then rotated by rotation
// degrees, as LiberTEM's apply_correction: y' = cos θ·y + sin θ·x, x' = −sin θ·y +
// cos θ·x.
func Correct(y, x, rotation float64, flipY bool) (float64, float64) {
	if flipY {
		y = -y
	}
	if rotation == 0 {
		return y, x
	}
	s, c := math.Sincos(rotation * math.Pi / 180)
	return c*y + s*x, -s*y + c*x
}

// Magnitude is √(y² + x²) at every position.
func (f Field) Magnitude() []float64 {
	out := make([]float64, len(f.Y))
	for i := range out {
		out[i] = math.Hypot(f.Y[i], f.X[i])
	}
	return out
}

// Divergence is ∂y/∂row + ∂x/∂column (numpy.gradient) at every position, in pixels per
// scan step, NaN where the position's own shift is NaN. The scan must have at least 2
// rows and 2 columns.
func (f Field) Divergence() []float64 {
	out := f.gradient(f.Y, true)
	for i, v := range f.gradient(f.X, false) {
		out[i] += v
	}
	return f.withoutShift(out)
}

// Curl is ∂y/∂column − ∂x/∂row (numpy.gradient) at every position, in pixels per scan
// step, NaN where the position's own shift is NaN. The scan must have at least 2 rows
// and 2 columns.
func (f Field) Curl() []float64 {
	out := f.gradient(f.Y, false)
	for i, v := range f.gradient(f.X, true) {
		out[i] -= v
	}
	return f.withoutShift(out)
}

// withoutShift sets out to NaN at the positions whose shift is NaN: a central difference
// does not read its own position, but a position without a shift has no derivative.
func (f Field) withoutShift(out []float64) []float64 {
	for i := range out {
		if math.IsNaN(f.Y[i]) || math.IsNaN(f.X[i]) {
			out[i] = math.NaN()
		}
	}
	return out
}

// gradient is numpy.gradient(v, axis=0) (alongRows: along the rows, i.e. between rows)
// or axis=1 of the map v.
func (f Field) gradient(v []float64, alongRows bool) []float64 {
	n, stride, lines, lineStride := f.NY, f.NX, f.NX, 1
	if !alongRows {
		n, stride, lines, lineStride = f.NX, 1, f.NY, f.NX
	}
	out := make([]float64, len(v))
	for l := range lines {
		at := func(i int) int { return l*lineStride + i*stride }
		out[at(0)] = v[at(1)] - v[at(0)]
		out[at(n-1)] = v[at(n-1)] - v[at(n-2)]
		for i := 1; i < n-1; i++ {
			out[at(i)] = (v[at(i+1)] - v[at(i-1)]) / 2
		}
	}
	return out
}

// ICoM is the integrated centre of mass φ (see the package doc), NY·NX values,
// row-major, with zero mean. Positions whose y or x shift is not finite are read as 0;
// their indices are returned in order (none: nil).
func (f Field) ICoM() (phi []float64, nonFinite []int) {
	ny, nx := f.NY, f.NX
	sy, sx := make([]complex128, ny*nx), make([]complex128, ny*nx)
	for i := range sy {
		y, x := f.Y[i], f.X[i]
		if math.IsNaN(y) || math.IsInf(y, 0) || math.IsNaN(x) || math.IsInf(x, 0) {
			nonFinite = append(nonFinite, i)
			continue
		}
		sy[i], sx[i] = complex(y, 0), complex(x, 0)
	}
	fft2(sy, ny, nx, false)
	fft2(sx, ny, nx, false)
	rows, cols := fourier.NewCmplxFFT(ny), fourier.NewCmplxFFT(nx)
	for r := range ny {
		ky := rows.Freq(r)
		for c := range nx {
			kx := cols.Freq(c)
			k2 := kx*kx + ky*ky
			i := r*nx + c
			if k2 == 0 {
				sy[i] = 0
				continue
			}
			sy[i] = (complex(kx, 0)*sx[i] + complex(ky, 0)*sy[i]) / complex(0, 2*math.Pi*k2)
		}
	}
	fft2(sy, ny, nx, true)
	phi = make([]float64, ny*nx)
	scale := 1 / float64(ny*nx)
	for i, v := range sy {
		phi[i] = real(v) * scale
	}
	return phi, nonFinite
}

// fft2 transforms the row-major ny × nx array a in place: the forward discrete Fourier
// transform (Σ a·e^{−2πi·k·n/N} along both axes), or with inverse the unnormalized
// backward one (gonum's Coefficients and Sequence).
func fft2(a []complex128, ny, nx int, inverse bool) {
	rows, cols := fourier.NewCmplxFFT(nx), fourier.NewCmplxFFT(ny)
	do := func(t *fourier.CmplxFFT, v []complex128) {
		if inverse {
			t.Sequence(v, v)
		} else {
			t.Coefficients(v, v)
		}
	}
	for r := range ny {
		do(rows, a[r*nx:(r+1)*nx])
	}
	col := make([]complex128, ny)
	for c := range nx {
		for r := range ny {
			col[r] = a[r*nx+c]
		}
		do(cols, col)
		for r := range ny {
			a[r*nx+c] = col[r]
		}
	}
}
