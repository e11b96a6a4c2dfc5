package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"sync"
	"unsafe"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/internal/memlimit"
	"github.com/stemdot/stemdot/planner"
)

// ReduceOptions select the frames Reduce computes over all frames of a dataset (at least
// one) and tune the run. Only what is asked is accumulated: the sum and mean share one
// accumulator; the standard deviation adds a second (and gives the sum and mean too).
type ReduceOptions struct {
	// Sum is Σ_f frame_f, per pixel (LiberTEM's SumUDF).
	Sum bool
	// Mean is the sum divided by the number of frames.
	Mean bool
	// Max is max_f frame_f, per pixel.
	Max bool
	// Std is the population standard deviation sqrt(Σ_f (frame_f − mean)² / n), ddof 0,
	// as LiberTEM's StdDevUDF and numpy's std.
	Std bool
	// TileFrames is the number of frames a worker reads at once; 0 picks AutoTileFrames.
	TileFrames int
	// Progress, NoPin: as Options.Progress and Options.NoPin.
	Progress func(framesDone, total int)
	NoPin    bool
}

func (o ReduceOptions) any() bool { return o.Sum || o.Mean || o.Max || o.Std }

// Reduction is the outcome of Reduce: the frames asked for, each of shape sig_shape
// (sig_y × sig_x values, C order), float64; nil where not asked.
type Reduction struct {
	// SigShape is the frames' shape; Frames the number of frames reduced.
	SigShape [2]int
	Frames   int
	// Sum, Mean, Max and Std are the frames ReduceOptions names. A NaN pixel in any frame
	// makes that pixel NaN in each of them (numpy's sum, mean, max and std); +Inf and
	// -Inf give ±Inf sums, means and maxima (NaN where both occur) and a NaN std.
	Sum, Mean, Max, Std []float64
	// Stats describe the run (NonFinite and Sparse stay zero).
	Stats Stats
}

// Reduce computes the sum, mean, maximum and standard deviation frames of ds (those opt
// asks for) in one pass over its frames, running the CPU workers and partitions of plan
// with ApplyMasks' executor (claims, pinning, progress, cancellation, memory check).
// Each worker accumulates the frames it is given into its own buffers of sig_shape; the
// workers' accumulators are merged when all are done.
//
// Numerics: integer frames are summed exactly in int64; float frames in float64. The
// standard deviation is computed from sums shifted by a per-worker reference frame (the
// first frame the worker reads; Σ(x−K) and Σ(x−K)², exact in integers for frames of up
// to 16 bits), each worker's (n, mean, M2) merged by Chan, Golub and LeVeque's pairwise
// update, as LiberTEM's StdDevUDF merges its partitions (Schubert and Gertz 2018), not by
// the cancellation-prone Σx² − (Σx)²/n. It is finite for any finite frames: a float64
// pixel whose deviation |x−K| exceeds 2⁴⁰⁰ is accumulated in units of a power of two
// from then on (addShifted64; (x−K)² overflows above about 1.3e154), and the merge works
// on σ = √(M2/n) scaled per pixel by a power of two (mergeStd), as M2 = n·σ² overflows
// for σ above about 1e154 / √n. Frames without such values take the same path as before.
//
// Errors: nothing asked, a plan with GPU workers (reductions are bound by memory
// bandwidth: they run on CPU workers only), or partitions that do not cover the frames,
// are refused before any work; so is a run whose buffers do not fit in memory. Worker
// errors and cancellation are reported as by ApplyMasks.
func Reduce(ctx context.Context, ds dataset.Dataset, plan *planner.Plan, opt ReduceOptions) (*Reduction, error) {
	if ds == nil {
		return nil, errors.New("reduce: no dataset")
	}
	if !opt.any() {
		return nil, errors.New("reduce: nothing to compute: ask for at least one of Sum, Mean, Max and Std")
	}
	if err := validateDataset(ds); err != nil {
		return nil, fmt.Errorf("reduce: %w", err)
	}
	if err := validatePlan(plan, ds.NumFrames()); err != nil {
		return nil, fmt.Errorf("reduce %s: %w", describe(ds), err)
	}
	if n := gpuWorkers(plan); n > 0 {
		return nil, fmt.Errorf("reduce %s: the plan has %d GPU workers, but reductions run on CPU workers only (they are bound by memory bandwidth)", describe(ds), n)
	}
	tile := opt.TileFrames
	switch {
	case tile < 0:
		return nil, fmt.Errorf("reduce: TileFrames %d is negative", tile)
	case tile == 0:
		tile = AutoTileFrames(ds.FrameBytes())
	}
	if err := checkReduceMemory(ds, plan, opt, tile); err != nil {
		return nil, fmt.Errorf("reduce %s: %w", describe(ds), err)
	}
	var mu sync.Mutex
	var workers []accumulator
	r := newRun(ctx, "reduce", plan, ds, tile, Output{}, opt.Progress)
	r.execute(func(planner.Worker) (Worker, error) {
		w, err := newReduceWorker(ds, opt, tile)
		if err == nil {
			mu.Lock()
			workers = append(workers, w.acc)
			mu.Unlock()
		}
		return w, err
	}, !opt.NoPin)
	if err := r.err(ctx); err != nil {
		return nil, err
	}
	res := merge(workers, opt)
	res.SigShape = ds.SigShape()
	res.Stats = r.stats(ds)
	return res, nil
}

// reduceMemory is the memory one worker of Reduce(ds, plan, opt) allocates: its
// accumulators (8 bytes per pixel for the sum, 8 more for the std, the native frame for
// the max and for the std's reference frame) and its tile of native frames (none when
// the dataset's frames are read in place).
func reduceMemory(ds dataset.Dataset, opt ReduceOptions, tile int) int64 {
	px, size := int64(ds.SigShape()[0])*int64(ds.SigShape()[1]), int64(ds.DType().Size())
	var b int64
	if opt.Sum || opt.Mean || opt.Std {
		b += 8 * px
	}
	if opt.Std {
		b += (8 + size) * px
	}
	if opt.Max {
		b += size * px
	}
	if !dataset.ViewsInPlace(ds) { // an ROI's frames that are not consecutive are read into a tile
		b += 2 * int64(tile) * int64(ds.FrameBytes())
	}
	return b
}

// checkReduceMemory refuses a run whose workers' buffers and the merged frames do not
// fit in the memory the process may still allocate.
func checkReduceMemory(ds dataset.Dataset, plan *planner.Plan, opt ReduceOptions, tile int) error {
	per := reduceMemory(ds, opt, tile)
	px := int64(ds.SigShape()[0]) * int64(ds.SigShape()[1])
	result := 8 * px * int64(btoi(opt.Sum)+btoi(opt.Mean)+btoi(opt.Max)+btoi(opt.Std))
	what := fmt.Sprintf("the reduction (%d workers × %s, result %s)", len(plan.Workers), memlimit.Size(per), memlimit.Size(result))
	return memlimit.CheckRun(what, int64(len(plan.Workers))*per+result, max(per, result), len(plan.Workers), "fewer workers (option cpus) hold fewer accumulators")
}

// reduceBlock is the number of pixels a worker accumulates over all frames of a tile
// before it moves on: its accumulators (up to 2 × 8 bytes and 2 native values per
// pixel) stay in L1/L2 while the tile's frames pass over them.
const reduceBlock = 2048

// accumulator is one worker's accumulators (moments).
type accumulator interface {
	// add accumulates the frames of tile (native dtype, host order).
	add(tile []byte, frames int)
	// moments returns the frames accumulated and, per pixel in float64: the sum (nil
	// unless the sum, mean or std is asked; exact for integer frames up to 2⁵³), the mean
	// and the standard deviation √(M2/n) (nil unless the std is asked), and the maximum
	// (nil unless asked).
	moments() (n int, sum, mean, std, mx []float64)
}

// reduceWorker is a Worker that accumulates the frames it is given into acc.
type reduceWorker struct {
	cpuWorker // for its frame reads (frames, release)
	acc       accumulator
}

func newReduceWorker(ds dataset.Dataset, opt ReduceOptions, tile int) (*reduceWorker, error) {
	w := &reduceWorker{cpuWorker: cpuWorker{ds: ds, tileFrames: tile, frameBytes: ds.FrameBytes(), elemSize: ds.DType().Size(), dt: ds.DType()}}
	w.viewer, _ = ds.(dataset.Viewer)
	acc, ok := newAccumulator(ds.SigShape()[0]*ds.SigShape()[1], ds.DType(), opt)
	if !ok {
		return nil, fmt.Errorf("reduce worker: %s has unsupported dtype %v", describe(ds), ds.DType())
	}
	w.acc = acc
	return w, nil
}

// newAccumulator is the accumulator of frames of px pixels of dtype dt; false for a
// dtype it does not know.
func newAccumulator(px int, dt dataset.DType, opt ReduceOptions) (accumulator, bool) {
	switch dt {
	case dataset.Uint8:
		return newMoments[uint8, int64, uint64](px, opt), true
	case dataset.Int8:
		return newMoments[int8, int64, uint64](px, opt), true
	case dataset.Uint16:
		return newMoments[uint16, int64, uint64](px, opt), true
	case dataset.Int16:
		return newMoments[int16, int64, uint64](px, opt), true
	case dataset.Uint32:
		return newMoments[uint32, int64, float64](px, opt), true
	case dataset.Int32:
		return newMoments[int32, int64, float64](px, opt), true
	case dataset.Float32:
		return newMoments[float32, float64, float64](px, opt), true
	case dataset.Float64:
		return newMoments[float64, float64, float64](px, opt), true
	}
	return nil, false
}

// Process implements Worker: it accumulates frames p, tile by tile (out is not used).
func (w *reduceWorker) Process(ctx context.Context, p planner.Partition, _ Output, progress func(frames int)) error {
	if n := w.ds.NumFrames(); p.Start < 0 || p.End > n || p.Start >= p.End {
		return fmt.Errorf("partition [%d, %d) is empty or outside the %d frames of %s", p.Start, p.End, n, describe(w.ds))
	}
	for start := p.Start; start < p.End; {
		if err := ctx.Err(); err != nil {
			return err
		}
		end := min(start+w.tileFrames, p.End)
		tile, err := w.frames(start, end)
		if err != nil {
			return err
		}
		w.acc.add(tile, end-start)
		if progress != nil {
			progress(end - start)
		}
		start = end
	}
	w.release(p)
	return nil
}

// moments accumulates frames of pixel type N: sums in S (int64 for integer frames,
// float64 for float frames), squared deviations in Q (uint64 for frames of up to 16
// bits, exact; float64 otherwise).
type moments[N native, S int64 | float64, Q uint64 | float64] struct {
	pixels int
	n      int
	sum    bool // s1 is kept (sum, mean or std)
	std    bool // k and s2 are kept
	k      []N  // the reference frame of the shifted sums (std): the worker's first frame, non-finite values as 0
	s1     []S  // Σ(x − k), k = 0 without std
	s2     []Q  // Σ(x − k)²
	// inv are float64 frames' per-pixel units of s1 and s2 (addShifted64): s1 holds
	// Σ(x − k)·inv; nil until a deviation needs them, 1 where none did.
	inv []float64
	mx  []N // the maximum, NaN once a NaN is seen
	// The SIMD kernels (sumKernelFor, maxKernelFor, stdKernelFor), each on pixel
	// multiples of its group; nil: Go loops.
	sumKernel                    func(px *N, stride, frames, n int, acc *S)
	maxKernel                    func(px *N, stride, frames, n int, mx *N)
	stdKernel                    func(px *N, stride, frames, n int, k *N, s1 *S, s2 *Q)
	sumGroup, maxGroup, stdGroup int
}

func newMoments[N native, S int64 | float64, Q uint64 | float64](pixels int, opt ReduceOptions) *moments[N, S, Q] {
	m := &moments[N, S, Q]{pixels: pixels, sum: opt.Sum || opt.Mean || opt.Std, std: opt.Std}
	m.sumKernel, m.sumGroup = sumKernelFor[N, S]()
	m.maxKernel, m.maxGroup = maxKernelFor[N]()
	m.stdKernel, m.stdGroup = stdKernelFor[N, S, Q]()
	if m.sum {
		m.s1 = make([]S, pixels)
	}
	if m.std {
		m.s2 = make([]Q, pixels)
		m.k = make([]N, pixels)
	}
	if opt.Max {
		m.mx = make([]N, pixels)
	}
	return m
}

// add accumulates the frames of tile (native dtype, host order), block by block of
// pixels so that the block's accumulators stay in cache over the tile.
func (m *moments[N, S, Q]) add(tile []byte, frames int) {
	px := asNative[N](tile)
	if m.n == 0 { // the first frame is accumulated like the others too
		first := px[:m.pixels]
		if m.std {
			for i, v := range first {
				if v == v && v-v == 0 { // finite
					m.k[i] = v
				}
			}
		}
		if m.mx != nil {
			copy(m.mx, first)
		}
	}
	stride := m.pixels * int(unsafe.Sizeof(px[0]))
	for b := 0; b < m.pixels; b += reduceBlock {
		e := min(b+reduceBlock, m.pixels)
		// Pixels [b, b+simd) and [b, b+simdMax) go through the SIMD kernels (when there
		// are), the rest through the Go loops.
		simd, simdMax := 0, 0
		switch {
		case m.std && m.stdKernel != nil:
			simd = (e - b) / m.stdGroup * m.stdGroup
		case m.sum && !m.std && m.sumKernel != nil:
			simd = (e - b) / m.sumGroup * m.sumGroup
		}
		if m.mx != nil && m.maxKernel != nil {
			simdMax = (e - b) / m.maxGroup * m.maxGroup
		}
		for f0 := 0; f0 < frames; f0 += kernelFrames {
			p, n := &px[f0*m.pixels+b], min(frames-f0, kernelFrames)
			switch {
			case simd == 0:
			case m.std:
				m.stdKernel(p, stride, n, simd, &m.k[b], &m.s1[b], &m.s2[b])
			default:
				m.sumKernel(p, stride, n, simd, &m.s1[b])
			}
			if simdMax > 0 {
				m.maxKernel(p, stride, n, simdMax, &m.mx[b])
			}
		}
		for f := range frames {
			x := px[f*m.pixels+b : f*m.pixels+e]
			switch {
			case m.std:
				if x64, ok := any(x).([]float64); ok {
					addShifted64(x64[simd:], any(m.k).([]float64), any(m.s1).([]float64), any(m.s2).([]float64), &m.inv, b+simd)
				} else {
					addShifted(x[simd:], m.k[b+simd:e], m.s1[b+simd:e], m.s2[b+simd:e])
				}
			case m.sum:
				addSum(x[simd:], m.s1[b+simd:e])
			}
			if m.mx != nil {
				addMax(x[simdMax:], m.mx[b+simdMax:e])
			}
		}
	}
	m.n += frames
}

// kernelFrames is the most frames one call of a SIMD reduction kernel takes: stdU16
// holds its sums of (x − k) in int32, exact up to 32768 frames of uint16 pixels.
const kernelFrames = 1 << 15

func addSum[N native, S int64 | float64](x []N, s []S) {
	s = s[:len(x)]
	for i, v := range x {
		s[i] += S(v)
	}
}

func addShifted[N native, S int64 | float64, Q uint64 | float64](x, k []N, s1 []S, s2 []Q) {
	k, s1, s2 = k[:len(x)], s1[:len(x)], s2[:len(x)]
	for i, v := range x {
		d := S(v) - S(k[i])
		s1[i] += d
		q := Q(d) // uint64: d² mod 2⁶⁴ is d² for |d| < 2¹⁶
		s2[i] += q * q
	}
}

// maxDev bounds the deviations |x − k|·inv that addShifted64 adds: their squares stay
// below 2⁸⁰⁰, so that neither Σ(x − k)² nor (Σ(x − k))² overflows below 2¹¹¹ frames.
const maxDev = 0x1p400

// addShifted64 is addShifted for float64 frames x of pixels [at, at+len(x)) (k, s1, s2
// of all pixels), whose (x − k)² can overflow: a finite value whose deviation exceeds
// maxDev moves its pixel to units of a power of two (addOne64), after which each of its
// values is multiplied by the pixel's inv before k·inv is subtracted. Until a pixel
// needs it (*inv nil), 4 values at a time are tested by the sum of their squares: 0.86
// ns a value in L1 against addShifted's 0.81, where a test of each value took 1.09
// (2048 pixels, best of 60 runs, this project's shared 2-core machine).
func addShifted64(x, k, s1, s2 []float64, inv *[]float64, at int) {
	n := len(x)
	kk, t1, t2 := k[at:][:n], s1[at:][:n], s2[at:][:n]
	if *inv != nil {
		u := (*inv)[at:][:n]
		for i, v := range x {
			d := v*u[i] - kk[i]*u[i]
			if !(d*d <= maxDev*maxDev) {
				addOne64(v, at+i, k, s1, s2, inv)
				continue
			}
			t1[i] += d
			t2[i] += d * d
		}
		return
	}
	for i := 0; i < n; {
		for ; i+4 <= n; i += 4 {
			x4, k4 := x[i:i+4:i+4], kk[i:i+4:i+4]
			d0, d1, d2, d3 := x4[0]-k4[0], x4[1]-k4[1], x4[2]-k4[2], x4[3]-k4[3]
			q0, q1, q2, q3 := d0*d0, d1*d1, d2*d2, d3*d3
			if !(q0+q1+q2+q3 <= maxDev*maxDev) { // one too large, infinite or NaN
				break
			}
			a, b := t1[i:i+4:i+4], t2[i:i+4:i+4]
			a[0], a[1], a[2], a[3] = a[0]+d0, a[1]+d1, a[2]+d2, a[3]+d3
			b[0], b[1], b[2], b[3] = b[0]+q0, b[1]+q1, b[2]+q2, b[3]+q3
		}
		for e := min(i+4, n); i < e; i++ { // those 4, or the last 1 to 3
			addOne64(x[i], at+i, k, s1, s2, inv)
		}
	}
}

// addOne64 adds value v of pixel p to addShifted64's sums: (v − k)·inv and its square,
// once the pixel's inv is small enough for them; a finite value whose deviation exceeds
// maxDev first makes the pixel's inv a power of two that brings it below 1 (*inv
// allocated at the first, 1 for every pixel) and rescales its sums by it. A pixel's
// other values in the same frame row are other pixels: the row goes on unscaled.
// Non-finite values are added as they are (the std is then NaN, as numpy's).
func addOne64(v float64, p int, k, s1, s2 []float64, inv *[]float64) {
	u := 1.0
	if *inv != nil {
		u = (*inv)[p]
	}
	for {
		d := v*u - k[p]*u
		if d*d <= maxDev*maxDev || math.IsNaN(v) || math.IsInf(v, 0) {
			s1[p] += d
			s2[p] += d * d
			return
		}
		if *inv == nil {
			*inv = make([]float64, len(k))
			for j := range *inv {
				(*inv)[j] = 1
			}
		}
		f := 0x1p-512 // d is infinite: v and k of opposite signs near the float64 limit
		if !math.IsInf(d, 0) {
			_, exp := math.Frexp(d)
			f = math.Ldexp(1, -exp) // |d·f| in [0.5, 1)
		}
		u *= f
		(*inv)[p] = u
		s1[p] *= f
		s2[p] *= f * f
	}
}

func addMax[N native](x, mx []N) {
	mx = mx[:len(x)]
	for i, v := range x {
		if v > mx[i] || v != v {
			mx[i] = v
		}
	}
}

func (m *moments[N, S, Q]) moments() (n int, sum, mean, std, mx []float64) {
	n = m.n
	if n == 0 {
		return
	}
	if m.sum {
		sum = make([]float64, m.pixels)
		for i, s := range m.s1 {
			var k S
			if m.std {
				k = S(m.k[i])
			}
			sum[i] = float64(S(n)*k + s) // exact in int64 for integer frames
			if m.inv != nil && m.inv[i] != 1 {
				sum[i] = (float64(n)*(float64(k)*m.inv[i]) + float64(s)) / m.inv[i] // float64 sums in units of 1/inv
			}
		}
	}
	if m.std {
		mean, std = make([]float64, m.pixels), make([]float64, m.pixels)
		for i, s := range m.s1 {
			if m.inv != nil && m.inv[i] != 1 { // float64 sums in units of 1/inv
				u := m.inv[i]
				mean[i] = (float64(m.k[i])*u + float64(s)/float64(n)) / u
				std[i] = math.Sqrt(sqDev(n, s, m.s2[i])/float64(n)) / u
				continue
			}
			mean[i] = float64(m.k[i]) + float64(s)/float64(n)
			std[i] = math.Sqrt(sqDev(n, s, m.s2[i]) / float64(n))
		}
	}
	if m.mx != nil {
		mx = make([]float64, m.pixels)
		for i, v := range m.mx {
			mx[i] = float64(v)
		}
	}
	return
}

// sqDev is M2 = Σ(x − mean)² of n values from their shifted sums s1 = Σ(x − k) and
// s2 = Σ(x − k)²: (n·s2 − s1²)/n, in 128-bit integers (exact) for uint64 s2.
func sqDev[S int64 | float64, Q uint64 | float64](n int, s1 S, s2 Q) float64 {
	switch s2 := any(s2).(type) {
	case uint64:
		a := uint64(max(int64(s1), -int64(s1)))
		ahi, alo := bits.Mul64(a, a)
		bhi, blo := bits.Mul64(uint64(n), s2)
		lo, borrow := bits.Sub64(blo, alo, 0)
		hi, _ := bits.Sub64(bhi, ahi, borrow) // n·s2 ≥ s1² (Cauchy–Schwarz)
		return (float64(hi)*0x1p64 + float64(lo)) / float64(n)
	default:
		f1 := float64(s1)
		return max(float64(any(s2).(float64))-f1*f1/float64(n), 0)
	}
}

// merge combines the workers' accumulators: sums added (in float64 for integer frames
// once each worker's sum is exact), maxima compared (NaN kept), (n, mean, σ) merged by
// Chan et al.'s pairwise update (mergeStd).
func merge(workers []accumulator, opt ReduceOptions) *Reduction {
	res := &Reduction{}
	var mean []float64
	for _, w := range workers {
		n, sum, wMean, wStd, mx := w.moments()
		if n == 0 {
			continue
		}
		if res.Frames == 0 {
			res.Frames, res.Sum, mean, res.Std, res.Max = n, sum, wMean, wStd, mx
			continue
		}
		for i := range sum {
			res.Sum[i] += sum[i]
		}
		for i, mb := range wMean {
			mean[i], res.Std[i] = mergeStd(float64(res.Frames), float64(n), mean[i], res.Std[i], mb, wStd[i])
		}
		for i, v := range mx {
			if v > res.Max[i] || v != v {
				res.Max[i] = v
			}
		}
		res.Frames += n
	}
	n := float64(res.Frames)
	if opt.Mean {
		res.Mean = make([]float64, len(res.Sum))
		for i, s := range res.Sum {
			res.Mean[i] = s / n
		}
	}
	if !opt.Sum {
		res.Sum = nil
	}
	return res
}

// mergeStd merges the mean and standard deviation of na values with those of nb others
// (Chan, Golub and LeVeque's update, M2 = M2a + M2b + δ²·na·nb/n, divided by n): σ² =
// wa·σa² + wb·σb² + wa·wb·δ² with w = n_part/n and δ = mean_b − mean_a, every term scaled
// by a power of two 1/c ≥ the means and deviations, so that neither the squares nor δ
// overflow for finite values (σ and |δ| are above 1e154 for values near 1e300). A
// deviation is at least a rounding step of its values (or 0), so scaling it with the
// means loses nothing to underflow. NaN and infinite inputs give NaN, as numpy's std.
func mergeStd(na, nb, meanA, stdA, meanB, stdB float64) (mean, std float64) {
	n := na + nb
	wa, wb := na/n, nb/n
	c := max(stdA, stdB, math.Abs(meanA), math.Abs(meanB))
	f := 1.0
	if c > 0 && c <= math.MaxFloat64 {
		_, exp := math.Frexp(c)
		f = math.Ldexp(1, -exp) // c·f in [0.5, 1)
	}
	a, b, x, y := meanA*f, meanB*f, stdA*f, stdB*f
	d := b - a
	return (a + d*wb) / f, math.Sqrt(wa*x*x+wb*y*y+wa*wb*d*d) / f
}
