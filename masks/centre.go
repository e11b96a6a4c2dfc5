package masks

import (
	"fmt"
	"math"
	"slices"
)

// Centre is the direct beam's disk on the detector, in the masks' pixel coordinates
// (x = column, y = row, pixel centres at integers): its centre (X, Y) and its radius R,
// in pixels. FindCentre finds it; ParseCentred's auto specs use it.
type Centre struct {
	X, Y, R float64
}

// FindCentre finds the direct beam's disk in frame (sig_y × sig_x values, C order; in
// practice the scan's sum frame): the brightest disk of the pattern, found as a
// maximally stable bright region and measured at half maximum above its surroundings.
//
//  1. A 3×3 median filter removes isolated hot and dead pixels. The background is the
//     median of the filtered frame, the peak its brightest pixel.
//  2. For 64 thresholds between them, the 8-connected region above the threshold that
//     holds the peak: the disk is the region of 9 pixels or more and at most half the
//     frame whose area changes least from one threshold to the next (a maximally stable
//     extremal region: Matas et al., BMVC 2002). Its stability sets it apart from the
//     diffuse halo or scattering around it.
//  3. Half maximum above its surroundings: the disk's plateau is the median of the
//     pixels within half its radius of its centre, its surroundings the median of a
//     ring 2 to 2+R/2 pixels outside it; the disk is the region above the level half way
//     between them (its edge at half maximum, as the full width at half maximum
//     measures a peak), unless that region reaches out of the disk (streaks or
//     scattering above half maximum: its centre moves by more than a pixel and a tenth
//     of the radius from the stable region's), where the stable region is the disk.
//  4. A disk clear of the frame's edge: its centre is the centroid of its pixels
//     weighted by their height above the surroundings (the intensity-weighted centre
//     of mass), its radius √(area/π). A disk cut by the frame's edge: the circle fitted
//     by least squares (Kåsa, IEEE Trans. Instrum. Meas. 25, 1976) to its edge at half
//     maximum (sub-pixel points, interpolated linearly between the pixels on either
//     side) away from the frame's edge, which must show more than half the circle.
//  5. The disk must stand out: the mean of the frame's pixels within it at least 10
//     standard errors above that of its surroundings (the ring of step 3), a pixel's
//     noise the robust standard deviation of the differences of neighbouring pixels
//     over √2. A region picked out of noise stands about 5 (it is refused: no false
//     centre in 200 frames of Gaussian or sparse-count noise, where the 5σ peak of
//     step 1 alone gave 5).
//  6. A faint disk, whose brightest region does not stand out (steps 1 or 5), is looked
//     for in the frame binned 2×2, 4×4, ... (while 16 pixels or more a side): there a
//     pixel's noise falls k-fold and the disk's brightness above its surroundings not.
//     Its centre and radius are scaled back, and step 5 holds them to the whole frame.
//
// A disk with a soft edge, noise and a background is found within a few tenths of a
// pixel (the tests check 0.5 px on synthetic disks with known sub-pixel centres and
// radii, whole and cut by the frame's edge, and the real files against independent
// estimates); a faint one (three quarters of the noise's standard deviation above the
// background, radius 12 px or more) within a pixel and a half. Errors (no disk to
// find): a frame of another size than sig or with NaN or infinite values; a flat
// frame; a peak that does not stand out of the background's noise (under 5 times its
// robust standard deviation, 1.4826 × the median absolute deviation), nor a region
// (step 5), also binned; no region of 9 pixels or more above the background within
// half the frame; a disk cut by the frame's edge that shows half of its circle or less.
func FindCentre(frame []float64, sig [2]int) (Centre, error) {
	sy, sx := sig[0], sig[1]
	switch {
	case sy < 3 || sx < 3:
		return Centre{}, fmt.Errorf("centre: frames of %d×%d pixels are too small to find a disk in (want at least 3×3)", sy, sx)
	case len(frame) != sy*sx:
		return Centre{}, fmt.Errorf("centre: the frame holds %d values, but sig_shape (%d, %d) has %d pixels", len(frame), sy, sx, sy*sx)
	}
	for i, v := range frame {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return Centre{}, fmt.Errorf("centre: pixel (row %d, column %d) of the frame is %v: the frame must be finite", i/sx, i%sx, v)
		}
	}
	c, err := locate(frame, sig)
	noise := pixelNoise(frame, sig)
	if err == nil {
		if z, ok := significant(frame, sig, noise, c); !ok {
			err = faintError{fmt.Sprintf("centre: no bright disk stands out: the brightest region, about x %.1f, y %.1f, r %.1f px, is %.1f standard errors above its surroundings (want %d or more)", c.X, c.Y, c.R, z, minSignificance)}
		}
	}
	if err == nil {
		return c, nil
	}
	if _, faint := err.(faintError); !faint {
		return Centre{}, err
	}
	// 6. A faint disk: in the frame binned k×k the noise of a pixel falls k-fold and a
	// disk's brightness above its surroundings not, while the disk spans a few binned
	// pixels.
	for k := 2; sy/k >= minBinned && sx/k >= minBinned; k *= 2 {
		binned, bsig := binFrame(frame, sig, k)
		bc, berr := locate(binned, bsig)
		if berr != nil {
			continue
		}
		f := float64(k)
		c := Centre{X: bc.X*f + (f-1)/2, Y: bc.Y*f + (f-1)/2, R: bc.R * f}
		if _, ok := significant(frame, sig, noise, c); ok {
			return c, nil
		}
	}
	if sy/2 >= minBinned && sx/2 >= minBinned {
		err = fmt.Errorf("%w; nor binned 2×2 or more", err)
	}
	return Centre{}, err
}

// faintError is the error for a frame whose brightest region does not stand out of its
// noise: FindCentre then looks in the frame binned.
type faintError struct{ msg string }

func (e faintError) Error() string { return e.msg }

// minSignificance is the fewest standard errors (significant) by which a disk's mean
// must stand above its surroundings': a region picked out of noise stands 5 or fewer.
const minSignificance = 10

// minBinned is the fewest rows and columns of a frame binned to find a faint disk in.
const minBinned = 16

// significant returns by how many standard errors the mean of frame's pixels within
// c.R of c's centre stands above that of its surroundings (a ring 2 to 2+max(R/2, 2)
// pixels outside, as step 3), a pixel's noise being noise (pixelNoise), and whether
// that is minSignificance or more.
func significant(frame []float64, sig [2]int, noise float64, c Centre) (float64, bool) {
	sy, sx := sig[0], sig[1]
	var in, out, nIn, nOut float64
	for y := range sy {
		for x := range sx {
			switch d := math.Hypot(float64(x)-c.X, float64(y)-c.Y); {
			case d <= c.R:
				in, nIn = in+frame[y*sx+x], nIn+1
			case d >= c.R+2 && d <= c.R+2+max(c.R/2, 2):
				out, nOut = out+frame[y*sx+x], nOut+1
			}
		}
	}
	if nIn == 0 || nOut == 0 {
		return 0, false
	}
	z := (in/nIn - out/nOut) / (noise * math.Sqrt(1/nIn+1/nOut))
	return z, z >= minSignificance
}

// pixelNoise is the standard deviation of a pixel's noise in frame (sig): the robust
// standard deviation (1.4826 × the median absolute value) of the differences of
// horizontally neighbouring pixels over √2, or their standard deviation over √2 where
// the robust one is 0 (sparse counts).
func pixelNoise(frame []float64, sig [2]int) float64 {
	sy, sx := sig[0], sig[1]
	diffs := make([]float64, 0, sy*(sx-1))
	var sum2 float64
	for y := range sy {
		for x := 1; x < sx; x++ {
			d := frame[y*sx+x] - frame[y*sx+x-1]
			diffs, sum2 = append(diffs, math.Abs(d)), sum2+d*d
		}
	}
	if noise := 1.4826 * median(diffs) / math.Sqrt2; noise > 0 {
		return noise
	}
	return math.Sqrt(sum2/float64(len(diffs))) / math.Sqrt2
}

// binFrame sums the k×k blocks of frame (sig), the rows and columns of an incomplete
// last block left out: a frame of sig/k.
func binFrame(frame []float64, sig [2]int, k int) ([]float64, [2]int) {
	by, bx := sig[0]/k, sig[1]/k
	out := make([]float64, by*bx)
	for y := range by * k {
		for x := range bx * k {
			out[y/k*bx+x/k] += frame[y*sig[1]+x]
		}
	}
	return out, [2]int{by, bx}
}

// locate is steps 1 to 4 on frame (sig: at least 3×3; finite values).
func locate(frame []float64, sig [2]int) (Centre, error) {
	sy, sx := sig[0], sig[1]
	f := median3x3(frame, sy, sx)
	bg := median(f)
	peakAt := 0
	for i, v := range f {
		if v > f[peakAt] {
			peakAt = i
		}
	}
	peak := f[peakAt]
	dev := make([]float64, len(f))
	for i, v := range f {
		dev[i] = math.Abs(v - bg)
	}
	noise := 1.4826 * median(dev)
	switch {
	case peak <= bg:
		return Centre{}, fmt.Errorf("centre: no bright disk: the frame is flat (its median and its maximum are both %g, after a 3×3 median filter)", bg)
	case peak-bg < 5*noise:
		return Centre{}, faintError{fmt.Sprintf("centre: no bright disk stands out: the brightest region is %.3g above the background %.3g, %.1f times its noise (want 5 or more)", peak-bg, bg, (peak-bg)/noise)}
	}
	g := &beamGrid{f: f, sy: sy, sx: sx, peak: peakAt}

	// 2. The maximally stable region containing the peak.
	const levels = 64
	var areas [levels + 1]int
	var valid [levels + 1]bool
	for k := 1; k < levels; k++ {
		r := g.region(bg + (peak-bg)*float64(k)/levels)
		areas[k], valid[k] = r.area, r.area >= 9 && 2*r.area <= sy*sx
	}
	best, bestScore := 0, math.Inf(1)
	for k := 3; k < levels-2; k++ {
		if !valid[k] || !valid[k+2] || areas[k-2] == 0 {
			continue
		}
		// Growth of the area over ±2 thresholds, and a slight preference for half
		// maximum where a soft edge leaves no level more stable than the others.
		score := float64(areas[k-2]-areas[k+2])/float64(areas[k]) + 1e-3*math.Abs(float64(k)-levels/2)/levels
		if !valid[k-2] {
			score += float64(areas[k-2]) / float64(areas[k]) // the region below breaks out: less stable
		}
		if score < bestScore {
			best, bestScore = k, score
		}
	}
	if best == 0 {
		return Centre{}, fmt.Errorf("centre: no bright disk: no region of 9 pixels or more around the brightest pixel (row %d, column %d) stands above the background within half the frame",
			peakAt/sx, peakAt%sx)
	}
	r := g.region(bg + (peak-bg)*float64(best)/levels)

	// 3. Half maximum above the surroundings.
	c, err := r.centre(g, bg, bg+(peak-bg)*float64(best)/levels)
	if err != nil {
		return Centre{}, err
	}
	var inner, ring []float64
	for y := range sy {
		for x := range sx {
			d := math.Hypot(float64(x)-c.X, float64(y)-c.Y)
			switch {
			case d <= c.R/2:
				inner = append(inner, f[y*sx+x])
			case d >= c.R+2 && d <= c.R+2+max(c.R/2, 2):
				ring = append(ring, f[y*sx+x])
			}
		}
	}
	if len(inner) > 0 && len(ring) > 0 {
		plateau, around := median(inner), median(ring)
		if half := g.region((plateau + around) / 2); plateau > around && half.area >= 9 && 2*half.area <= sy*sx {
			// Kept unless it reaches out of the disk (streaks or scattering above half
			// maximum): then its centre moves away from the stable region's.
			if hc, err := half.centre(g, around, (plateau+around)/2); err == nil && math.Hypot(hc.X-c.X, hc.Y-c.Y) <= max(1, c.R/10) {
				return hc, nil
			}
		}
	}
	return c, nil
}

// beamGrid is a filtered frame and its peak, for FindCentre.
type beamGrid struct {
	f        []float64
	sy, sx   int
	peak     int
	in       []bool
	stack    []int
	selected []int
}

// region is the 8-connected region above t holding the peak.
type region struct {
	pixels []int
	area   int
	edge   bool // it touches the frame's edge
}

func (g *beamGrid) region(t float64) region {
	if g.in == nil {
		g.in = make([]bool, len(g.f))
	}
	for _, i := range g.selected {
		g.in[i] = false
	}
	g.selected, g.stack = g.selected[:0], append(g.stack[:0], g.peak)
	g.in[g.peak] = true
	edge := false
	for len(g.stack) > 0 {
		i := g.stack[len(g.stack)-1]
		g.stack = g.stack[:len(g.stack)-1]
		g.selected = append(g.selected, i)
		y, x := i/g.sx, i%g.sx
		edge = edge || y == 0 || x == 0 || y == g.sy-1 || x == g.sx-1
		for ny := max(y-1, 0); ny <= min(y+1, g.sy-1); ny++ {
			for nx := max(x-1, 0); nx <= min(x+1, g.sx-1); nx++ {
				if j := ny*g.sx + nx; !g.in[j] && g.f[j] > t {
					g.in[j] = true
					g.stack = append(g.stack, j)
				}
			}
		}
	}
	return region{pixels: slices.Clone(g.selected), area: len(g.selected), edge: edge}
}

// centre measures the disk of region r, above threshold t over background bg: the
// weighted centroid and √(area/π) when r is clear of the frame's edge, else the circle
// fitted to its edge (see FindCentre).
func (r region) centre(g *beamGrid, bg, t float64) (Centre, error) {
	if !r.edge {
		var sw, swx, swy float64
		for _, i := range r.pixels {
			w := max(g.f[i]-bg, 0)
			sw += w
			swx += w * float64(i%g.sx)
			swy += w * float64(i/g.sx)
		}
		return Centre{X: swx / sw, Y: swy / sw, R: math.Sqrt(float64(r.area) / math.Pi)}, nil
	}
	// The edge at t between each pixel of r and its 4-neighbours outside r, both away
	// from the frame's edge.
	in := make(map[int]bool, len(r.pixels))
	for _, i := range r.pixels {
		in[i] = true
	}
	var xs, ys []float64
	for _, i := range r.pixels {
		y, x := i/g.sx, i%g.sx
		if y == 0 || x == 0 || y == g.sy-1 || x == g.sx-1 {
			continue
		}
		for _, d := range [4][2]int{{0, 1}, {0, -1}, {1, 0}, {-1, 0}} {
			ny, nx := y+d[0], x+d[1]
			j := ny*g.sx + nx
			if in[j] || ny == 0 || nx == 0 || ny == g.sy-1 || nx == g.sx-1 {
				continue
			}
			a := (g.f[i] - t) / (g.f[i] - g.f[j])
			xs, ys = append(xs, float64(x)+a*float64(d[1])), append(ys, float64(y)+a*float64(d[0]))
		}
	}
	// Edge points of streaks or scattering that leak out of the disk lie off its circle:
	// refit without the points further from the circle than 3 times the median distance
	// (and 1 px) until none is dropped.
	c, ok := fitCircle(xs, ys)
	for range 20 {
		if !ok {
			break
		}
		res := make([]float64, len(xs))
		for i := range xs {
			res[i] = math.Abs(math.Hypot(xs[i]-c.X, ys[i]-c.Y) - c.R)
		}
		limit := max(3*median(res), 1)
		kx, ky := xs[:0:0], ys[:0:0]
		for i := range xs {
			if res[i] <= limit {
				kx, ky = append(kx, xs[i]), append(ky, ys[i])
			}
		}
		if len(kx) == len(xs) {
			break
		}
		xs, ys = kx, ky
		c, ok = fitCircle(xs, ys)
	}
	if !ok || !halfCircle(xs, ys, c) {
		return Centre{}, fmt.Errorf("centre: the brightest disk is cut by the frame's edge and shows half of its circle or less: its centre cannot be measured")
	}
	return c, nil
}

// fitCircle fits the circle x² + y² + Dx + Ey + F = 0 to the points by linear least
// squares (Kåsa 1976): centre (−D/2, −E/2), radius √(D²/4 + E²/4 − F).
func fitCircle(xs, ys []float64) (Centre, bool) {
	if len(xs) < 3 {
		return Centre{}, false
	}
	// Centred coordinates keep the normal equations well conditioned.
	var mx, my float64
	for i := range xs {
		mx += xs[i]
		my += ys[i]
	}
	mx /= float64(len(xs))
	my /= float64(len(xs))
	var a [3][4]float64 // normal equations [A | b] for (D, E, F)
	for i := range xs {
		x, y := xs[i]-mx, ys[i]-my
		row := [3]float64{x, y, 1}
		z := -(x*x + y*y)
		for p := range 3 {
			for q := range 3 {
				a[p][q] += row[p] * row[q]
			}
			a[p][3] += row[p] * z
		}
	}
	for p := range 3 { // Gauss-Jordan elimination with partial pivoting
		piv := p
		for q := p + 1; q < 3; q++ {
			if math.Abs(a[q][p]) > math.Abs(a[piv][p]) {
				piv = q
			}
		}
		a[p], a[piv] = a[piv], a[p]
		if math.Abs(a[p][p]) < 1e-12 {
			return Centre{}, false
		}
		for q := range 3 {
			if q != p {
				k := a[q][p] / a[p][p]
				for c := p; c < 4; c++ {
					a[q][c] -= k * a[p][c]
				}
			}
		}
	}
	d, e, f := a[0][3]/a[0][0], a[1][3]/a[1][1], a[2][3]/a[2][2]
	r2 := d*d/4 + e*e/4 - f
	if !(r2 > 0) {
		return Centre{}, false
	}
	return Centre{X: mx - d/2, Y: my - e/2, R: math.Sqrt(r2)}, true
}

// halfCircle reports whether the points show more than half of circle c: no gap
// between their angles around its centre of 180° or more.
func halfCircle(xs, ys []float64, c Centre) bool {
	angles := make([]float64, len(xs))
	for i := range xs {
		angles[i] = math.Atan2(ys[i]-c.Y, xs[i]-c.X)
	}
	slices.Sort(angles)
	gap := angles[0] + 2*math.Pi - angles[len(angles)-1]
	for i := 1; i < len(angles); i++ {
		gap = max(gap, angles[i]-angles[i-1])
	}
	return gap < math.Pi
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// median3x3 is frame filtered by the median of each pixel's 3×3 neighbourhood (the
// neighbours inside the frame at its edges and corners: 6 or 4 values, whose median is
// the mean of the two middle ones).
func median3x3(frame []float64, sy, sx int) []float64 {
	out := make([]float64, len(frame))
	var win [9]float64
	for y := range sy {
		for x := range sx {
			n := 0
			for ny := max(y-1, 0); ny <= min(y+1, sy-1); ny++ {
				for nx := max(x-1, 0); nx <= min(x+1, sx-1); nx++ {
					win[n] = frame[ny*sx+nx]
					n++
				}
			}
			w := win[:n]
			slices.Sort(w)
			if n%2 == 1 {
				out[y*sx+x] = w[n/2]
			} else {
				out[y*sx+x] = (w[n/2-1] + w[n/2]) / 2
			}
		}
	}
	return out
}
