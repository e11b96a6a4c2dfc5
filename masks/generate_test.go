package masks

import (
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// grid renders mask m as rows of '#' (weight 1) and '.' (weight 0), failing on any other
// weight.
func grid(t *testing.T, s *Stack, m int) string {
	t.Helper()
	var b strings.Builder
	for y := 0; y < s.SigY; y++ {
		if y > 0 {
			b.WriteByte('\n')
		}
		for x := 0; x < s.SigX; x++ {
			switch v := s.Mask(m)[y*s.SigX+x]; v {
			case 0:
				b.WriteByte('.')
			case 1:
				b.WriteByte('#')
			default:
				t.Fatalf("mask %d pixel (y=%d, x=%d) has weight %v, want 0 or 1", m, y, x, v)
			}
		}
	}
	return b.String()
}

func rows(r ...string) string { return strings.Join(r, "\n") }

func TestDiskPixels(t *testing.T) {
	cases := []struct {
		name      string
		sig       [2]int
		cx, cy, r float64
		want      string
	}{
		// LiberTEM's d² ≤ r²: the 4 neighbours at distance exactly 1 are in (with d² < r²
		// only the centre would be).
		{"r=1 cross", [2]int{5, 5}, 2, 2, 1, rows(
			".....",
			"..#..",
			".###.",
			"..#..",
			"....."),
		},
		{"r=1.5 block", [2]int{5, 5}, 2, 2, 1.5, rows(
			".....",
			".###.",
			".###.",
			".###.",
			"....."),
		},
		{"r=2 includes axis pixels at distance 2", [2]int{5, 5}, 2, 2, 2, rows(
			"..#..",
			".###.",
			"#####",
			".###.",
			"..#.."),
		},
		{"centre between pixels", [2]int{4, 4}, 1.5, 1.5, 1, rows(
			"....",
			".##.",
			".##.",
			"...."),
		},
		{"centre left of the frame", [2]int{5, 5}, -1, 2, 1.5, rows(
			".....",
			"#....",
			"#....",
			"#....",
			"....."),
		},
		{"non-square frame, x is the column", [2]int{3, 6}, 4, 1, 1, rows(
			"....#.",
			"...###",
			"....#."),
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := Disk(c.sig, c.cx, c.cy, c.r)
			require.NoError(t, err)
			assert.Equal(t, 1, s.N)
			assert.Equal(t, []string{"disk"}, s.Names)
			assert.Equal(t, c.want, grid(t, s, 0))
		})
	}
}

func TestRingPixels(t *testing.T) {
	// ri² < d² ≤ ro²: d² = 1 (inner circle) excluded, d² = 2 and 4 included, d² = 5 out.
	s, err := Ring([2]int{5, 5}, 2, 2, 1, 2)
	require.NoError(t, err)
	assert.Equal(t, []string{"ring"}, s.Names)
	assert.Equal(t, rows(
		"..#..",
		".#.#.",
		"#...#",
		".#.#.",
		"..#.."), grid(t, s, 0))
}

// TestRingInnerZero (LiberTEM peer G02): a ring of inner radius 0 is accepted and is
// libertem.masks.ring's, outer & ~inner with both disks made by its formula (x, y =
// np.ogrid[-cy:sig_y-cy, -cx:sig_x-cx]; x*x + y*y <= r*r): the disk of radius RO less
// the centre pixel when the centre is a pixel, the whole disk otherwise; the peer's four
// refused cases among them.
func TestRingInnerZero(t *testing.T) {
	libertem := func(sig [2]int, cx, cy, ri, ro float64) []float32 {
		out := make([]float32, sig[0]*sig[1])
		for row := range sig[0] {
			for col := range sig[1] {
				x, y := -cy+float64(row), -cx+float64(col)
				d := x*x + y*y
				if d <= ro*ro && !(d <= ri*ri) {
					out[row*sig[1]+col] = 1
				}
			}
		}
		return out
	}
	s, err := Ring([2]int{5, 5}, 2, 2, 0, 1)
	require.NoError(t, err)
	assert.Equal(t, rows(
		".....",
		"..#..",
		".#.#.",
		"..#..",
		"....."), grid(t, s, 0))
	sig := [2]int{37, 53}
	cases := [][2]float64{{8, 14}, {31, 36}, {29.60552980371328, 1.7540725867249307}, {47.128378152843744, 11.013023882987456}}
	radii := []float64{2, 14, 3.4663, 18.71}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 100 {
		cx, cy := rng.Float64()*60-4, rng.Float64()*44-4
		if len(cases)%2 == 0 {
			cx, cy = math.Round(cx), math.Round(cy)
		}
		cases, radii = append(cases, [2]float64{cx, cy}), append(radii, 0.5+rng.Float64()*20)
	}
	for i, c := range cases {
		want := libertem(sig, c[0], c[1], 0, radii[i])
		ring, err := Ring(sig, c[0], c[1], 0, radii[i])
		if !slices.Contains(want, 1) {
			require.ErrorContains(t, err, "selects no pixel")
			continue
		}
		require.NoError(t, err, "ring:%v,%v,0,%v", c[0], c[1], radii[i])
		require.Equal(t, want, ring.Mask(0), "ring:%v,%v,0,%v", c[0], c[1], radii[i])
		parsed, err := Parse(fmt.Sprintf("ring:%v,%v,0,%v", c[0], c[1], radii[i]), sig)
		require.NoError(t, err)
		require.Equal(t, want, parsed.Mask(0))
	}
}

func TestRingIsOuterDiskMinusInnerDisk(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	sig := [2]int{17, 23}
	for i := 0; i < 200; i++ {
		cx, cy := rng.Float64()*30-4, rng.Float64()*24-4
		ri := 0.2 + rng.Float64()*6
		ro := ri + 0.1 + rng.Float64()*8
		// Half of the cases on the pixel grid, where ties d² = r² decide.
		if i%2 == 0 {
			cx, cy, ri, ro = math.Round(cx), math.Round(cy), math.Round(ri)+1, math.Round(ro)+2
		}
		outer, errOuter := Disk(sig, cx, cy, ro)
		ring, errRing := Ring(sig, cx, cy, ri, ro)
		if errOuter != nil {
			require.ErrorContains(t, errOuter, "selects no pixel")
			require.ErrorContains(t, errRing, "selects no pixel")
			continue
		}
		inner, errInner := Disk(sig, cx, cy, ri)
		innerMask := make([]float32, outer.Pixels())
		if errInner != nil {
			require.ErrorContains(t, errInner, "selects no pixel")
		} else {
			innerMask = inner.Mask(0)
		}
		want := make([]float32, outer.Pixels())
		selected := false
		for p := range want {
			want[p] = outer.Mask(0)[p] - innerMask[p]
			selected = selected || want[p] != 0
		}
		if !selected {
			require.ErrorContains(t, errRing, "selects no pixel", "cx=%g cy=%g ri=%g ro=%g", cx, cy, ri, ro)
			continue
		}
		require.NoError(t, errRing)
		assert.Equal(t, want, ring.Mask(0), "cx=%g cy=%g ri=%g ro=%g", cx, cy, ri, ro)
	}
}

func TestPointAndRectPixels(t *testing.T) {
	p, err := Point([2]int{3, 4}, 3, 1)
	require.NoError(t, err)
	assert.Equal(t, []string{"point"}, p.Names)
	assert.Equal(t, rows(
		"....",
		"...#",
		"...."), grid(t, p, 0))

	r, err := Rect([2]int{4, 6}, 1, 2, 5, 2)
	require.NoError(t, err)
	assert.Equal(t, []string{"rect"}, r.Names)
	assert.Equal(t, rows(
		"......",
		"......",
		".#####",
		".#####"), grid(t, r, 0))
}

// A rect partly outside the frame keeps its pixels inside, as a disk or ring does, and
// one entirely outside selects no pixel (an error): against a reference built pixel by
// pixel with exact (big) integers, for rects on every side of the frame and beyond the
// range of int.
func TestRectClippedToFrame(t *testing.T) {
	sig := [2]int{8, 10}
	rng := rand.New(rand.NewPCG(17, 19))
	type rect struct{ x, y, w, h int }
	cases := []rect{{-3, -2, 5, 4}, {7, 6, 10, 10}, {-1, 3, 12, 1}, {2, -100, 1, 1000},
		{3, 2, math.MaxInt, math.MaxInt}, {math.MinInt, math.MinInt, math.MaxInt, math.MaxInt},
		{math.MaxInt, 0, math.MaxInt, 1}, {-5, 0, 5, 1}, {0, 8, 1, 1}}
	for range 300 {
		cases = append(cases, rect{rng.IntN(30) - 15, rng.IntN(24) - 12, 1 + rng.IntN(20), 1 + rng.IntN(16)})
	}
	in := func(p, start, n int) bool { // start <= p < start+n, exactly
		b := big.NewInt(int64(p))
		end := new(big.Int).Add(big.NewInt(int64(start)), big.NewInt(int64(n)))
		return b.Cmp(big.NewInt(int64(start))) >= 0 && b.Cmp(end) < 0
	}
	for _, c := range cases {
		want := make([]float32, sig[0]*sig[1])
		selected := false
		for py := range sig[0] {
			for px := range sig[1] {
				if in(px, c.x, c.w) && in(py, c.y, c.h) {
					want[py*sig[1]+px], selected = 1, true
				}
			}
		}
		s, err := Rect(sig, c.x, c.y, c.w, c.h)
		if !selected {
			require.ErrorContains(t, err, "selects no pixel of the frame of sig_shape (8, 10)", "%+v", c)
			continue
		}
		require.NoError(t, err, "%+v", c)
		require.Equal(t, want, s.Mask(0), "%+v", c)
		p, err := Parse(fmt.Sprintf("rect:%d,%d,%d,%d", c.x, c.y, c.w, c.h), sig)
		require.NoError(t, err, "%+v", c)
		require.Equal(t, want, p.Mask(0), "%+v", c)
	}
}

func TestGeneratorErrors(t *testing.T) {
	sig := [2]int{8, 10}
	cases := []struct {
		name string
		make func() (*Stack, error)
		want string
	}{
		{"disk zero radius", func() (*Stack, error) { return Disk(sig, 4, 4, 0) }, "radius must be positive and finite, got 0"},
		{"disk negative radius", func() (*Stack, error) { return Disk(sig, 4, 4, -2) }, "got -2"},
		{"disk NaN radius", func() (*Stack, error) { return Disk(sig, 4, 4, math.NaN()) }, "got NaN"},
		{"disk infinite radius", func() (*Stack, error) { return Disk(sig, 4, 4, math.Inf(1)) }, "got +Inf"},
		{"disk NaN centre", func() (*Stack, error) { return Disk(sig, math.NaN(), 4, 2) }, "centre (cx=NaN, cy=4) must be finite"},
		{"disk outside", func() (*Stack, error) { return Disk(sig, 30, 4, 2) }, "disk at (cx=30, cy=4) with r=2 selects no pixel of the frame of sig_shape (8, 10)"},
		{"disk between pixels", func() (*Stack, error) { return Disk(sig, 4.5, 4.5, 0.5) }, "selects no pixel"},
		{"disk bad sig", func() (*Stack, error) { return Disk([2]int{0, 10}, 4, 4, 2) }, "sig_shape (0, 10) must be positive"},
		{"ring inner = outer", func() (*Stack, error) { return Ring(sig, 4, 4, 3, 3) }, "inner radius 3 must be less than outer radius 3"},
		{"ring inner > outer", func() (*Stack, error) { return Ring(sig, 4, 4, 5, 3) }, "inner radius 5 must be less"},
		{"ring negative inner", func() (*Stack, error) { return Ring(sig, 4, 4, -0.5, 3) }, "inner radius must be 0 or positive, and finite, got -0.5"},
		{"ring NaN inner", func() (*Stack, error) { return Ring(sig, 4, 4, math.NaN(), 3) }, "inner radius must be 0 or positive, and finite, got NaN"},
		{"ring outside", func() (*Stack, error) { return Ring(sig, -20, 4, 1, 3) }, "ring at (cx=-20, cy=4) with radii 1..3 selects no pixel"},
		{"point x outside", func() (*Stack, error) { return Point(sig, 10, 0) }, "pixel (x=10, y=0) is outside the frame of sig_shape (8, 10)"},
		{"point negative y", func() (*Stack, error) { return Point(sig, 0, -1) }, "outside the frame"},
		{"rect outside", func() (*Stack, error) { return Rect(sig, 10, 0, 6, 2) }, "rect (x=10, y=0, w=6, h=2) selects no pixel of the frame of sig_shape (8, 10)"},
		{"rect above", func() (*Stack, error) { return Rect(sig, 0, -2, 2, 2) }, "selects no pixel"},
		{"rect zero height", func() (*Stack, error) { return Rect(sig, 0, 0, 2, 0) }, "width 2 and height 0 must be positive"},
		{"com negative radius", func() (*Stack, error) { return COM(sig, 4, 4, -1) }, "got -1"},
		{"com infinite centre", func() (*Stack, error) { return COM(sig, 4, math.Inf(-1), 0) }, "must be finite"},
		{"com outside", func() (*Stack, error) { return COM(sig, 40, 40, 3) }, "selects no pixel"},
		{"com too large", func() (*Stack, error) { return COM([2]int{1 << 15, 1 << 15}, 4, 4, 0) }, "com: three masks of sig_shape (32768, 32768) exceed 2147483647 weights"},
		{"rect far outside", func() (*Stack, error) { return Rect(sig, math.MinInt, 1, math.MaxInt, 2) }, "selects no pixel"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := c.make()
			assert.Nil(t, s)
			assert.ErrorContains(t, err, c.want)
		})
	}
}

func TestCOMMaskWeights(t *testing.T) {
	sig := [2]int{4, 5}
	s, err := COM(sig, 2, 1.5, 0)
	require.NoError(t, err)
	assert.Equal(t, []string{"com_sum", "com_y", "com_x"}, s.Names)
	for y := 0; y < sig[0]; y++ {
		for x := 0; x < sig[1]; x++ {
			p := y*sig[1] + x
			assert.Equal(t, float32(1), s.Mask(0)[p])
			assert.Equal(t, float32(y)-1.5, s.Mask(1)[p])
			assert.Equal(t, float32(x)-2, s.Mask(2)[p])
		}
	}

	// Within r = 1 about (2, 1): the 5-pixel cross of Disk, moments relative to the centre.
	s, err = COM(sig, 2, 1, 1)
	require.NoError(t, err)
	disk, err := Disk(sig, 2, 1, 1)
	require.NoError(t, err)
	assert.Equal(t, disk.Mask(0), s.Mask(0))
	wantY := []float32{
		0, 0, -1, 0, 0,
		0, 0, 0, 0, 0,
		0, 0, 1, 0, 0,
		0, 0, 0, 0, 0,
	}
	wantX := []float32{
		0, 0, 0, 0, 0,
		0, -1, 0, 1, 0,
		0, 0, 0, 0, 0,
		0, 0, 0, 0, 0,
	}
	assert.Equal(t, wantY, s.Mask(1))
	assert.Equal(t, wantX, s.Mask(2))
}

// apply returns the mask-dot product of every mask of s with frame, in float64.
func apply(s *Stack, frame []float64) []float64 {
	out := make([]float64, s.N)
	for m := range out {
		for p, w := range s.Mask(m) {
			out[m] += float64(w) * frame[p]
		}
	}
	return out
}

// centreOfMass is the centre of mass (y, x) from the COM mask results, as documented on COM.
func centreOfMass(r []float64, cx, cy float64) (y, x float64) {
	return r[1]/r[0] + cy, r[2]/r[0] + cx
}

func TestCOMSingleSpot(t *testing.T) {
	sig := [2]int{16, 20}
	s, err := COM(sig, 9.5, 7.25, 0)
	require.NoError(t, err)
	for _, spot := range [][2]int{{0, 0}, {15, 19}, {7, 9}, {3, 17}, {12, 2}} {
		frame := make([]float64, sig[0]*sig[1])
		frame[spot[0]*sig[1]+spot[1]] = 7
		r := apply(s, frame)
		assert.Equal(t, 7.0, r[0])
		y, x := centreOfMass(r, 9.5, 7.25)
		assert.InDelta(t, float64(spot[0]), y, 1e-12, "spot %v", spot)
		assert.InDelta(t, float64(spot[1]), x, 1e-12, "spot %v", spot)
	}

	// A spot outside the disk of radius 3 contributes nothing.
	s, err = COM(sig, 9.5, 7.25, 3)
	require.NoError(t, err)
	frame := make([]float64, sig[0]*sig[1])
	frame[0] = 7
	assert.Equal(t, []float64{0, 0, 0}, apply(s, frame))
}

func TestCOMGaussianBlob(t *testing.T) {
	sig := [2]int{24, 32}
	const by, bx, sigma = 9.3, 12.7, 2.1
	frame := make([]float64, sig[0]*sig[1])
	for y := 0; y < sig[0]; y++ {
		for x := 0; x < sig[1]; x++ {
			dy, dx := float64(y)-by, float64(x)-bx
			frame[y*sig[1]+x] = 1000 * math.Exp(-(dy*dy+dx*dx)/(2*sigma*sigma))
		}
	}
	// reference is the float64 centre of mass of the frame over the pixels within r of
	// (cx, cy) (r = 0: all), straight from the definition Σ y·f / Σ f.
	reference := func(cx, cy, r float64) (float64, float64) {
		var sum, sy, sx float64
		for y := 0; y < sig[0]; y++ {
			for x := 0; x < sig[1]; x++ {
				dy, dx := float64(y)-cy, float64(x)-cx
				if r == 0 || dy*dy+dx*dx <= r*r {
					f := frame[y*sig[1]+x]
					sum += f
					sy += float64(y) * f
					sx += float64(x) * f
				}
			}
		}
		return sy / sum, sx / sum
	}
	for _, c := range []struct{ cx, cy, r float64 }{
		{16, 12, 0},  // parse's default centre, whole frame
		{0, 0, 0},    // reference point in a corner
		{13, 9, 5},   // disk around the blob
		{10.5, 8, 3}, // disk cutting the blob off-centre
	} {
		s, err := COM(sig, c.cx, c.cy, c.r)
		require.NoError(t, err)
		y, x := centreOfMass(apply(s, frame), c.cx, c.cy)
		wy, wx := reference(c.cx, c.cy, c.r)
		assert.InDelta(t, wy, y, 1e-5, "%+v", c)
		assert.InDelta(t, wx, x, 1e-5, "%+v", c)
		if c.r == 0 {
			// The whole-frame centre of mass is the blob's centre (tails are negligible).
			assert.InDelta(t, by, y, 1e-3)
			assert.InDelta(t, bx, x, 1e-3)
		}
	}
}
