// Package synth writes synthetic 4D-STEM datasets with a known, documented model, for
// tests, benchmarks and demonstrations.
//
// # Model
//
// Scan position (iy, ix) of nav shape (ny, nx) has normalised coordinates
// u = (ix+½)/nx and v = (iy+½)/ny in (0, 1) (a 1-D nav shape (n,) is (1, n)). Its frame of
// sig shape (sy, sx) holds, in counts per pixel (expected value λ at pixel (y, x)):
//
//   - a bright-field disc of radius DiscRadius pixels, with a one-pixel linear edge:
//     disc(r) = clamp(DiscRadius + ½ − r, 0, 1), centred at
//     (cy, cx) = (sy/2 + Shift·(2v−1), sx/2 + Shift·(2u−1)): the disc moves linearly by up
//     to ±Shift pixels along each scan axis, as a descan error does;
//   - a diffuse ring of radius RingRadius and Gaussian profile of standard deviation
//     RingWidth pixels, ring(r) = exp(−(r−RingRadius)²/(2·RingWidth²)), centred with the
//     disc;
//   - a flat background of Background counts per pixel.
//
// With r the distance of the pixel centre from (cy, cx) and t = sin(πu)·sin(πv) a
// "specimen thickness" map (0 at the scan edges, 1 in the middle),
//
//	λ = DiscCounts·(1 − t/2)·disc(r) + RingCounts·(½ + t/2)·ring(r) + Background,
//
// so that the bright field dims where the diffuse scattering grows. Each pixel then gets a
// Poisson count of mean λ (see poisson.go for the sampler and its accuracy), clipped to
// the dtype's maximum; float dtypes store the same integer counts as floats.
//
// The noise of frame i comes from a PCG generator seeded with (Seed, i): a dataset is a
// deterministic function of its Options, whatever the number of CPUs.
package synth

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/stemdot/stemdot/dataset"
)

// Options describe a synthetic dataset. The model parameters (DiscRadius ... Background)
// are pointers: nil takes the parameter's default, and every value given counts, 0
// included (Shift: new(0.0) writes a scan without descan, DiscCounts: new(0.0) one
// without a disc, Background: new(0.0) one without background).
type Options struct {
	// NavShape is (nav_y, nav_x), (n,) or (nav_z, nav_y, nav_x) (a scan of planes: each
	// plane the model's scan, with noise of its own); required.
	NavShape []int
	// SigShape is (sig_y, sig_x) in pixels; required.
	SigShape [2]int
	// DType of the stored pixels; default uint16.
	DType dataset.DType
	// Format is "raw", "npy" or "mib"; default from the path's extension (.raw/.bin,
	// .npy, .mib).
	Format string
	// Seed selects the noise.
	Seed uint64

	// DiscRadius in pixels; default min(sig)/8.
	DiscRadius *float64
	// DiscCounts is the disc's counts per pixel at the scan edge; default 40.
	DiscCounts *float64
	// Shift is the largest disc displacement in pixels along each axis; default 3.
	Shift *float64
	// RingRadius in pixels; default 0.3·min(sig).
	RingRadius *float64
	// RingWidth is the ring's Gaussian standard deviation in pixels, in (0,
	// max(1, min(sig))]; default max(1, min(sig)/40).
	RingWidth *float64
	// RingCounts is the ring's peak counts per pixel in the scan middle; default 4.
	RingCounts *float64
	// Background counts per pixel; default 0.5.
	Background *float64
}

// model is an Options with defaults filled in and derived quantities.
type model struct {
	Options
	frames int       // product(NavShape)
	ny, nx int       // the rows and columns of the scan (of each plane)
	ring0  int       // ring[k] is ring(r) at r = (ring0+k)/ringStep; 0 outside the table
	ring   []float64 // ring(r) where it is not 0 in float64, within the frame's reach

	// The model parameters: Options' or their defaults.
	discRadius, discCounts, shift, ringRadius, ringWidth, ringCounts, background float64
}

// MaxFramePixels is the largest frame synth generates, sig_y·sig_x ≤ 2²⁵ pixels (32 Mi,
// e.g. 5792×5792, above the largest detectors in use). Each generating CPU holds 12 bytes
// of scratch per pixel (expected counts and counts), so memory use is about 400 MiB per
// CPU at this size, plus two batches of frames.
const MaxFramePixels = 1 << 25

// MaxCounts bounds the counts per pixel of the model's disc, ring and background: 2³²,
// the largest value a uint32 pixel holds; the Poisson sampler is accurate far beyond it.
const MaxCounts = 1 << 32

// ringCutoff is the distance from the ring radius, in ring widths, beyond which the ring
// profile exp(−d²/2) is exactly 0 in float64 (exp(−800) underflows).
const ringCutoff = 40

// ringStep is the radial sampling of the ring profile table, per pixel.
const ringStep = 16

func newModel(opt Options) (*model, error) {
	if len(opt.NavShape) == 0 || len(opt.NavShape) > dataset.MaxNavDims {
		return nil, fmt.Errorf("synth: nav shape %v: want (nav_y, nav_x), (n,) or (nav_z, nav_y, nav_x)", opt.NavShape)
	}
	dt := opt.DType
	if dt == dataset.Invalid {
		dt = dataset.Uint16
	}
	frames, _, err := dataset.CheckShape(opt.NavShape, opt.SigShape, dt)
	if err != nil {
		return nil, fmt.Errorf("synth: %w", err)
	}
	if opt.SigShape[0] > MaxFramePixels/opt.SigShape[1] {
		return nil, fmt.Errorf("synth: sig shape (%d, %d) is too large: synth generates frames of at most %d pixels",
			opt.SigShape[0], opt.SigShape[1], MaxFramePixels)
	}
	m := &model{Options: opt, frames: frames, ny: 1, nx: opt.NavShape[len(opt.NavShape)-1]}
	if len(opt.NavShape) >= 2 {
		m.ny = opt.NavShape[len(opt.NavShape)-2]
	}
	minSig := float64(min(opt.SigShape[0], opt.SigShape[1]))
	def := func(p *float64, v float64) float64 {
		if p == nil {
			return v
		}
		return *p
	}
	m.DType = dt
	m.discRadius = def(opt.DiscRadius, minSig/8)
	m.discCounts = def(opt.DiscCounts, 40)
	m.shift = def(opt.Shift, 3)
	m.ringRadius = def(opt.RingRadius, 0.3*minSig)
	m.ringWidth = def(opt.RingWidth, math.Max(1, minSig/40))
	m.ringCounts = def(opt.RingCounts, 4)
	m.background = def(opt.Background, 0.5)
	for _, p := range []struct {
		name  string
		value float64
		max   float64
	}{
		{"disc radius", m.discRadius, math.MaxFloat64}, {"shift", m.shift, math.MaxFloat64},
		{"ring radius", m.ringRadius, math.MaxFloat64}, {"ring width", m.ringWidth, math.MaxFloat64},
		{"disc counts", m.discCounts, MaxCounts}, {"ring counts", m.ringCounts, MaxCounts}, {"background", m.background, MaxCounts},
	} {
		if !(p.value >= 0 && p.value <= p.max) { // NaN fails both
			if p.max == math.MaxFloat64 {
				return nil, fmt.Errorf("synth: %s %g: want a finite, non-negative value", p.name, p.value)
			}
			return nil, fmt.Errorf("synth: %s %g: want a value in [0, %g]", p.name, p.value, p.max)
		}
	}
	if m.ringWidth == 0 {
		return nil, fmt.Errorf("synth: ring width 0: want a width above 0 pixels")
	}
	if m.ringWidth > max(1, minSig) {
		return nil, fmt.Errorf("synth: ring width %g pixels exceeds the frame's smaller side, %g pixels", m.ringWidth, max(1, minSig))
	}
	// The ring profile table covers the radii within ringCutoff widths of the ring radius
	// (the profile is 0 beyond) and within the largest distance of a pixel from the disc
	// centre: at most 2·ringCutoff·RingWidth·ringStep entries.
	rMax := math.Hypot(float64(opt.SigShape[0])/2+m.shift+1, float64(opt.SigShape[1])/2+m.shift+1)
	lo := math.Max(0, math.Floor((m.ringRadius-ringCutoff*m.ringWidth)*ringStep))
	hi := math.Min(rMax, m.ringRadius+ringCutoff*m.ringWidth)*ringStep + 2
	if hi > lo {
		m.ring0 = int(lo)
		m.ring = make([]float64, int(hi-lo))
		for k := range m.ring {
			d := (float64(m.ring0+k)/ringStep - m.ringRadius) / m.ringWidth
			m.ring[k] = math.Exp(-d * d / 2)
		}
	}
	return m, nil
}

// position returns, for frame i, the disc centre (cy, cx) in pixels and the thickness t
// (every plane of a scan of planes alike).
func (m *model) position(i int) (cy, cx, t float64) {
	u := (float64(i%m.nx) + 0.5) / float64(m.nx)
	v := (float64(i/m.nx%m.ny) + 0.5) / float64(m.ny)
	cy = float64(m.SigShape[0])/2 + m.shift*(2*v-1)
	cx = float64(m.SigShape[1])/2 + m.shift*(2*u-1)
	return cy, cx, math.Sin(math.Pi*u) * math.Sin(math.Pi*v)
}

// lambda writes the expected counts of frame i into lam (sig_y·sig_x values, row-major).
func (m *model) lambda(i int, lam []float64) {
	cy, cx, t := m.position(i)
	disc := m.discCounts * (1 - t/2)
	ring := m.ringCounts * (0.5 + t/2)
	sx := m.SigShape[1]
	for y := range m.SigShape[0] {
		dy := float64(y) + 0.5 - cy
		row := lam[y*sx : (y+1)*sx]
		for x := range row {
			dx := float64(x) + 0.5 - cx
			r := math.Sqrt(dx*dx + dy*dy)
			l := m.background
			if k := int(r*ringStep+0.5) - m.ring0; uint(k) < uint(len(m.ring)) {
				l += ring * m.ring[k]
			}
			if e := m.discRadius + 0.5 - r; e > 0 {
				l += disc * math.Min(e, 1)
			}
			row[x] = l
		}
	}
}

// frame writes the noisy frame i into dst (native dtype, host byte order), using lam as
// scratch; it returns the number of counts clipped to the dtype's largest value.
func (m *model) frame(i int, dst []byte, lam []float64, counts []uint32) int {
	m.lambda(i, lam)
	rng := rand.New(rand.NewPCG(m.Seed, uint64(i)))
	pt := poisson()
	for j, l := range lam {
		counts[j] = pt.sample(rng, l)
	}
	return encode(dst, counts, m.DType)
}

// Write writes the synthetic dataset described by opt to path (atomically: nothing is
// left at path on error). Frames are generated in parallel on runtime.GOMAXPROCS(0) CPUs
// and streamed to the file in batches; memory use is a few batches of frames, whatever
// the dataset size.
//
// It returns an error, before writing, for shapes that dataset.CheckShape rejects, frames
// over MaxFramePixels, invalid model parameters, a path that dataset.Create refuses, and a
// file larger than the free space of the target file system. It checks ctx between
// frames: when ctx is done it removes the temporary file and returns an error wrapping
// ctx's error (context.Canceled or context.DeadlineExceeded).
//
// Saturated counts the pixel values clipped to the dtype's largest value (255 for uint8):
// counts a real detector of that depth would saturate on too.
func Write(ctx context.Context, path string, opt Options) (saturated int64, err error) {
	m, err := newModel(opt)
	if err != nil {
		return 0, err
	}
	format := opt.Format
	if format == "" {
		switch strings.ToLower(filepath.Ext(path)) {
		case ".npy":
			format = "npy"
		case ".mib":
			format = "mib"
		case ".raw", ".bin":
			format = "raw"
		default:
			return 0, fmt.Errorf("synth: %s: the extension does not say the format: give option format (raw, npy or mib)", path)
		}
	}
	w, err := dataset.Create(path, format, opt.NavShape, opt.SigShape, m.DType)
	if err != nil {
		return 0, err
	}
	if err := checkFreeSpace(path, w.FileBytes()); err != nil {
		w.Abort()
		return 0, err
	}
	nFrames := m.frames
	frameBytes := m.SigShape[0] * m.SigShape[1] * m.DType.Size()
	workers := runtime.GOMAXPROCS(0)
	batch := max(1, min(nFrames, 4*workers, (64<<20)/frameBytes))

	// Two batch buffers: one filled by the workers while the other is written.
	free := make(chan []byte, 2)
	free <- make([]byte, batch*frameBytes)
	free <- make([]byte, batch*frameBytes)
	full := make(chan []byte, 1)
	writeErr := make(chan error, 1)
	var failed atomic.Bool // set when a write fails: stop generating
	var clipped atomic.Int64
	go func() {
		var err error
		for b := range full {
			if err == nil {
				if err = w.WriteFrames(b); err != nil {
					failed.Store(true)
				}
			}
			free <- b[:cap(b)]
		}
		writeErr <- err
	}()

	scratch := make([]struct {
		lam    []float64
		counts []uint32
	}, workers)
	pixels := m.SigShape[0] * m.SigShape[1]
	for k := range scratch {
		scratch[k].lam = make([]float64, pixels)
		scratch[k].counts = make([]uint32, pixels)
	}
	for start := 0; start < nFrames && !failed.Load() && ctx.Err() == nil; start += batch {
		end := min(start+batch, nFrames)
		buf := <-free
		var wg sync.WaitGroup
		for k := range workers {
			wg.Go(func() {
				for i := start + k; i < end && ctx.Err() == nil; i += workers {
					off := (i - start) * frameBytes
					clipped.Add(int64(m.frame(i, buf[off:off+frameBytes], scratch[k].lam, scratch[k].counts)))
				}
			})
		}
		wg.Wait()
		if ctx.Err() != nil {
			free <- buf
			break
		}
		full <- buf[:(end-start)*frameBytes]
	}
	close(full)
	if err := <-writeErr; err != nil {
		w.Abort()
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		w.Abort()
		return 0, fmt.Errorf("synth: %s: %w", path, context.Cause(ctx))
	}
	return clipped.Load(), w.Close()
}

// checkFreeSpace returns an error when the file system that will hold path has fewer than
// need bytes available to an unprivileged user (statfs f_bavail). The file replaced at
// path, if any, is not counted as free: it is removed only by the final rename.
func checkFreeSpace(path string, need int64) error {
	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Dir(path), &st); err != nil {
		return fmt.Errorf("synth: %s: free space of %s: %w", path, filepath.Dir(path), err)
	}
	// Blocks count in fragment-size units, as statvfs(3), df and Python's
	// shutil.disk_usage read them; f_frsize is 0 on kernels before 2.6.
	block := uint64(st.Frsize)
	if block == 0 {
		block = uint64(st.Bsize)
	}
	avail := st.Bavail * block
	if uint64(need) > avail {
		return fmt.Errorf("synth: %s: the file needs %d bytes (%.3g GB) but the file system of %s has only %d bytes (%.3g GB) free",
			path, need, float64(need)/1e9, filepath.Dir(path), avail, float64(avail)/1e9)
	}
	return nil
}
