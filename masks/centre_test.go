package masks_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/masks"
)

// beam renders a frame of sig: background bg, a disk of amplitude amp, centre (cx, cy)
// and radius r (each pixel weighted by the fraction of it inside the disk, from 16×16
// sub-pixel samples), a diffuse halo of amplitude halo and width 2r about the same
// centre, and Gaussian noise of standard deviation sigma.
func beam(rng *rand.Rand, sig [2]int, cx, cy, r, amp, bg, halo, sigma float64) []float64 {
	f := make([]float64, sig[0]*sig[1])
	const sub = 16
	for y := range sig[0] {
		for x := range sig[1] {
			in := 0
			for sy := range sub {
				for sx := range sub {
					dx := float64(x) - 0.5 + (float64(sx)+0.5)/sub - cx
					dy := float64(y) - 0.5 + (float64(sy)+0.5)/sub - cy
					if dx*dx+dy*dy <= r*r {
						in++
					}
				}
			}
			d2 := (float64(x)-cx)*(float64(x)-cx) + (float64(y)-cy)*(float64(y)-cy)
			f[y*sig[1]+x] = bg + amp*float64(in)/sub/sub + halo*math.Exp(-d2/(8*r*r)) + sigma*rng.NormFloat64()
		}
	}
	return f
}

func TestFindCentreSyntheticDisks(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, c := range []struct {
		sig                         [2]int
		cx, cy, r                   float64
		amp, bg, halo, sigma, hotpx float64
	}{
		{[2]int{64, 64}, 31.3, 29.8, 6.2, 100, 0, 0, 0, 0},
		{[2]int{128, 128}, 64.5, 70.25, 12.7, 1000, 50, 0, 20, 0},            // noise and background
		{[2]int{128, 96}, 40.37, 77.61, 3.4, 500, 10, 0, 15, 0},              // a small disk
		{[2]int{256, 256}, 127.9, 131.2, 40.6, 3000, 100, 600, 60, 0},        // a bright halo around it
		{[2]int{256, 256}, 90.15, 150.85, 20.3, 2000, 5, 0, 30, 50000},       // a hot pixel far brighter
		{[2]int{128, 128}, 6.4, 60.3, 15.2, 800, 20, 0, 10, 0},               // cut by the left edge
		{[2]int{128, 128}, 70.6, 120.1, 18.9, 800, 20, 100, 10, 0},           // cut by the bottom edge, with a halo
		{[2]int{144, 144}, 73.0, 72.0, 4.5, 300, 40, 0, 3, 0},                // like the BLO file
		{[2]int{256, 256}, 200.77, 40.21, 25.5, 10000, 1000, 2000, 100, 1e6}, // all at once
	} {
		t.Run(fmt.Sprintf("%v_%g_%g_r%g", c.sig, c.cx, c.cy, c.r), func(t *testing.T) {
			f := beam(rng, c.sig, c.cx, c.cy, c.r, c.amp, c.bg, c.halo, c.sigma)
			if c.hotpx > 0 {
				f[3*c.sig[1]+7] = c.hotpx
			}
			got, err := masks.FindCentre(f, c.sig)
			require.NoError(t, err)
			t.Logf("found x %.3f y %.3f r %.3f (errors %+.3f %+.3f %+.3f)", got.X, got.Y, got.R, got.X-c.cx, got.Y-c.cy, got.R-c.r)
			assert.InDelta(t, c.cx, got.X, 0.5, "x")
			assert.InDelta(t, c.cy, got.Y, 0.5, "y")
			assert.InDelta(t, c.r, got.R, 0.5, "radius")
		})
	}
}

func TestFindCentreErrors(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	sig := [2]int{64, 64}
	flat := make([]float64, 64*64)
	for i := range flat {
		flat[i] = 7
	}
	noise := make([]float64, 64*64)
	for i := range noise {
		noise[i] = 100 + rng.NormFloat64()
	}
	hot := make([]float64, 64*64)
	hot[64*20+20] = 1e6 // one hot pixel on a dark frame: no disk
	nan := beam(rng, sig, 32, 32, 8, 100, 0, 0, 0)
	nan[100] = math.NaN()
	cut := beam(rng, sig, -3, 30, 10, 100, 0, 0, 0) // less than half inside
	for _, c := range []struct {
		name  string
		frame []float64
		sig   [2]int
		msg   string
	}{
		{"flat", flat, sig, "no bright disk: the frame is flat"},
		{"noise", noise, sig, "no bright disk stands out"},
		{"hot pixel", hot, sig, "no bright disk: the frame is flat"},
		{"NaN", nan, sig, "pixel (row 1, column 36) of the frame is NaN"},
		{"size", flat, [2]int{32, 64}, "the frame holds 4096 values, but sig_shape (32, 64) has 2048 pixels"},
		{"tiny", flat[:4], [2]int{2, 2}, "too small"},
		{"cut", cut, sig, "cut by the frame's edge and shows half of its circle or less"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := masks.FindCentre(c.frame, c.sig)
			require.ErrorContains(t, err, c.msg)
		})
	}
}

// #35: a faint disk, under 5 times the noise at any pixel but spread over hundreds, is
// found (in the frame binned); one hardly above the noise is refused, not misplaced; and
// noise alone gives no centre, whatever its size or kind.
func TestFindCentreFaint(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	sig := [2]int{128, 128}
	for _, c := range []struct{ cx, cy, r, amp float64 }{
		{60.3, 70.6, 12.4, 7.5}, {60.3, 70.6, 25.2, 7.5}, {70.8, 50.1, 12.4, 10}, {50.5, 64.2, 25.2, 10}, {64.4, 61.7, 40.3, 7.5},
	} {
		f := beam(rng, sig, c.cx, c.cy, c.r, c.amp, 100, 0, 10)
		got, err := masks.FindCentre(f, sig)
		require.NoError(t, err, "%+v", c)
		t.Logf("disk %+v: found x %.2f y %.2f r %.2f", c, got.X, got.Y, got.R)
		assert.InDelta(t, c.cx, got.X, 1.5, "x of %+v", c)
		assert.InDelta(t, c.cy, got.Y, 1.5, "y of %+v", c)
		assert.InDelta(t, c.r, got.R, 2, "radius of %+v", c)
	}
	// Half the noise on a disk of radius 12: at the edge of what a sum frame shows; the
	// brightest region, two pixels of noise, is refused (it was taken for the disk).
	f := beam(rand.New(rand.NewPCG(1, 17)), sig, 60.3, 70.6, 12, 5, 100, 0, 10)
	_, err := masks.FindCentre(f, sig)
	require.ErrorContains(t, err, "standard errors above its surroundings (want 10 or more)")

	for _, n := range []int{64, 256} {
		for seed := range 100 {
			rng := rand.New(rand.NewPCG(7, uint64(seed)))
			f := make([]float64, n*n)
			for i := range f {
				if seed%2 == 0 {
					f[i] = 100 + 10*rng.NormFloat64()
				} else {
					f[i] = math.Floor(3 * rng.ExpFloat64()) // sparse counts
				}
			}
			c, err := masks.FindCentre(f, [2]int{n, n})
			require.Error(t, err, "noise %d² seed %d: found %+v", n, seed, c)
			require.ErrorContains(t, err, "no bright disk")
		}
	}
}
