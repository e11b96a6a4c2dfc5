package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"sync"
	"time"

	"codeberg.org/sbinet/npyio"
	"golang.org/x/sys/unix"

	"github.com/stemdot/stemdot/bench"
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/engine"
	"github.com/stemdot/stemdot/internal/frontend"
	"github.com/stemdot/stemdot/planner"
)

// rtol is the tolerance of every result check, relative to the largest value of each
// mask's column of the reference.
const rtol = 1e-4

// sampleFrames is how many frames, spread over the scan, the float64 reference covers.
const sampleFrames = 16

// runStemdot measures the mask job for every case and plan, each run checked: with
// -shifted, also with the masks shifted by a sub-pixel descan plane ("+shifted") and by
// the same plane rounded to whole pixels ("+shifted-whole").
func runStemdot(ctx context.Context, cfg *config, d *benchData, mcs []*caseMasks, plans []namedPlan) ([]bench.Row, error) {
	type variant struct {
		suffix string
		shifts []float64
	}
	variants := []variant{{"", nil}}
	if cfg.shifted {
		variants = append(variants, variant{"+shifted", descanPlane(d.frames(), false)}, variant{"+shifted-whole", descanPlane(d.frames(), true)})
	}
	var rows []bench.Row
	for _, mc := range mcs {
		numpyRef, err := loadReference(mc.reference, d.frames()*mc.N)
		if err != nil {
			return nil, err
		}
		out := make([]float32, d.frames()*mc.N)
		for _, v := range variants {
			ref := numpyRef
			if v.shifts != nil {
				ref = nil // numpy applies the masks unshifted
			}
			s, err := sampledReference(d.ds, d.dt, d.frames(), mc, v.shifts...)
			if err != nil {
				return nil, err
			}
			for _, p := range plans {
				row, err := measureStemdot(ctx, cfg, d, mc, p, v.suffix, v.shifts, ref, s, out)
				if err != nil {
					return nil, err
				}
				rows = append(rows, row)
			}
		}
	}
	return rows, nil
}

// descanPlane is the per-frame mask shifts of the shifted rows: a descan plane across
// the scan, dy from -1.2 to 2.1 and dx from 0.4 to -2.3 pixels, sub-pixel almost
// everywhere; whole: rounded to whole pixels (dy -1 to 2, dx 0 to -2).
func descanPlane(n int, whole bool) []float64 {
	s := make([]float64, 2*n)
	for f := range n {
		t := float64(f) / float64(n)
		s[2*f], s[2*f+1] = 3.3*t-1.2, -2.7*t+0.4
		if whole {
			s[2*f], s[2*f+1] = math.Round(s[2*f]), math.Round(s[2*f+1])
		}
	}
	return s
}

// measureStemdot measures one case under one plan with the masks shifted by shifts (nil:
// unshifted; plan name suffix suffix), each run checked against ref (the numpy peer's
// result of the same frames, when given) and the float64 sample s; under a CPU-only
// plan, with d's read floor (when it has one) run after each timed run.
func measureStemdot(ctx context.Context, cfg *config, d *benchData, mc *caseMasks, p namedPlan, suffix string, shifts []float64,
	ref []float32, s *sample, out []float32) (bench.Row, error) {
	name := p.name + suffix + "/" + blasName()
	row := bench.Row{Source: bench.Stemdot, Dataset: d.kind, DType: d.dt.String(), Masks: mc.N, MaskKind: mc.Kind, Plan: name,
		Workers: len(p.plan.Workers), Frames: d.frames(), Bytes: d.bytes()}
	for i := range cfg.repeats + 1 {
		clear(out)
		f0, t0 := minorFaults(), time.Now()
		res, err := engine.ApplyMasks(ctx, d.ds, mc.stack, p.plan, engine.Options{Out32: out, Shifts: shifts})
		elapsed, faults := time.Since(t0).Seconds(), minorFaults()-f0
		if err != nil {
			return row, fmt.Errorf("stemdot %s, %s, masks %s: %w", name, d.label(), mc, err)
		}
		if d.kind == bench.DatasetCSR && !res.Stats.Gather {
			return row, fmt.Errorf("stemdot %s, %s, masks %s: the run over the events did not gather them", name, d.label(), mc)
		}
		check, err := checkResult(res.F32, mc.N, ref, s)
		if err != nil {
			return row, fmt.Errorf("RESULT CHECK FAILED: stemdot %s, %s, masks %s, run %d: %w", name, d.label(), mc, i, err)
		}
		if i > 0 {
			row.Seconds = append(row.Seconds, elapsed)
			row.MinorFaults += faults
			if cpuOnly(p.plan) && d.floor != nil {
				t0 := time.Now()
				if err := d.floor(p.plan); err != nil {
					return row, fmt.Errorf("read floor %s: %w", p.name, err)
				}
				row.FloorSeconds = append(row.FloorSeconds, time.Since(t0).Seconds())
			}
		}
		row.Check = check
	}
	floor := ""
	if paired, ok := row.PairedFloor(); ok {
		floor = fmt.Sprintf(", %.2f × the read floor run beside it", paired)
	}
	log("stemdot %-28s %-17s masks %-4s %d workers: %.3f GB/s, %.0f frames/s (%s%s)", name, d.label(), mc, row.Workers, row.GBps(), row.FramesPerS(), row.Check, floor)
	return row, nil
}

// loadReference reads the numpy peer's result (float32, n values) if it exists.
func loadReference(path string, n int) ([]float32, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var ref []float32
	if err := npyio.Read(f, &ref); err != nil {
		return nil, fmt.Errorf("numpy reference %s: %w", path, err)
	}
	if len(ref) != n {
		return nil, fmt.Errorf("numpy reference %s holds %d values, want %d", path, len(ref), n)
	}
	return ref, nil
}

// sample is a float64 reference on a few frames: values[i*n_masks+m] for frame
// frames[i].
type sample struct {
	frames []int
	values []float64
}

// sampledReference computes the mask-dot product in float64 with plain loops on
// sampleFrames frames spread over the first n frames of ds, of dtype dt (the first and
// the last included); with shifts (2 per frame), of each frame's masks moved by its
// shift (dy, dx): the bilinear interpolation of the mask at (y − dy, x − dx), zero
// outside it.
func sampledReference(ds dataset.Dataset, dt dataset.DType, n int, mc *caseMasks, shifts ...float64) (*sample, error) {
	s := &sample{}
	buf := make([]byte, ds.FrameBytes())
	pixels := make([]float64, sig[0]*sig[1])
	for i := range sampleFrames {
		f := i * (n - 1) / (sampleFrames - 1)
		if len(s.frames) > 0 && s.frames[len(s.frames)-1] == f {
			continue
		}
		if err := ds.ReadFrames(f, f+1, buf); err != nil {
			return nil, err
		}
		if err := decode(dt, buf, pixels); err != nil {
			return nil, err
		}
		s.frames = append(s.frames, f)
		for m := range mc.N {
			mask := mc.stack.Mask(m)
			if shifts != nil {
				mask = shiftedMask(mask, shifts[2*f], shifts[2*f+1])
			}
			var sum float64
			for p, w := range mask {
				sum += float64(w) * pixels[p]
			}
			s.values = append(s.values, sum)
		}
	}
	return s, nil
}

// shiftedMask is mask (sig, C order) moved by (dy, dx) pixels: at (y, x) the bilinear
// interpolation of mask at (y − dy, x − dx), zero outside the mask.
func shiftedMask(mask []float32, dy, dx float64) []float32 {
	at := func(y, x int) float64 {
		if y < 0 || y >= sig[0] || x < 0 || x >= sig[1] {
			return 0
		}
		return float64(mask[y*sig[1]+x])
	}
	out := make([]float32, len(mask))
	for y := range sig[0] {
		for x := range sig[1] {
			ty, tx := float64(y)-dy, float64(x)-dx
			y0, x0 := math.Floor(ty), math.Floor(tx)
			b, c := ty-y0, tx-x0
			yi, xi := int(y0), int(x0)
			out[y*sig[1]+x] = float32((1-b)*(1-c)*at(yi, xi) + (1-b)*c*at(yi, xi+1) + b*(1-c)*at(yi+1, xi) + b*c*at(yi+1, xi+1))
		}
	}
	return out
}

// decode converts one frame of native, host-order bytes to float64.
func decode(dt dataset.DType, b []byte, out []float64) error {
	e := binary.NativeEndian
	for i := range out {
		switch dt {
		case dataset.Uint8:
			out[i] = float64(b[i])
		case dataset.Int8:
			out[i] = float64(int8(b[i]))
		case dataset.Uint16:
			out[i] = float64(e.Uint16(b[2*i:]))
		case dataset.Int16:
			out[i] = float64(int16(e.Uint16(b[2*i:])))
		case dataset.Uint32:
			out[i] = float64(e.Uint32(b[4*i:]))
		case dataset.Int32:
			out[i] = float64(int32(e.Uint32(b[4*i:])))
		case dataset.Float32:
			out[i] = float64(math.Float32frombits(e.Uint32(b[4*i:])))
		case dataset.Float64:
			out[i] = math.Float64frombits(e.Uint64(b[8*i:]))
		default:
			return fmt.Errorf("decode: unsupported dtype %v", dt)
		}
	}
	return nil
}

// checkResult compares got (n_frames × nMasks, frame-major) with the numpy reference
// (when given) and the float64 sample: |got − ref| ≤ rtol · max|ref| of the mask. It
// returns a summary of the largest relative deviations.
func checkResult(got []float32, nMasks int, numpyRef []float32, s *sample) (string, error) {
	var summary string
	if numpyRef != nil {
		ref := make([]float64, len(numpyRef))
		for i, v := range numpyRef {
			ref[i] = float64(v)
		}
		dev, err := compare(got, nil, ref, nMasks)
		if err != nil {
			return "", fmt.Errorf("vs numpy: %w", err)
		}
		summary = fmt.Sprintf("numpy max rel dev %.1e; ", dev)
	}
	dev, err := compare(got, s.frames, s.values, nMasks)
	if err != nil {
		return "", fmt.Errorf("vs float64 reference: %w", err)
	}
	return summary + fmt.Sprintf("float64 on %d frames max rel dev %.1e", len(s.frames), dev), nil
}

// compare checks got's rows frames (all rows when frames is nil) against ref, which
// holds those rows in order; it returns the largest |Δ|/max|ref| over the masks.
func compare(got []float32, frames []int, ref []float64, nMasks int) (float64, error) {
	rows := len(ref) / nMasks
	row := func(i int) int {
		if frames == nil {
			return i
		}
		return frames[i]
	}
	if frames == nil && len(got) != len(ref) {
		return 0, fmt.Errorf("result holds %d values, reference %d", len(got), len(ref))
	}
	var worst float64
	for m := range nMasks {
		var scale float64
		for i := range rows {
			scale = max(scale, math.Abs(ref[i*nMasks+m]))
		}
		if scale == 0 {
			scale = 1
		}
		for i := range rows {
			want, have := ref[i*nMasks+m], float64(got[row(i)*nMasks+m])
			dev := math.Abs(have-want) / scale
			if !(dev <= rtol) {
				return 0, fmt.Errorf("frame %d mask %d: got %.10g, want %.10g (|Δ| = %.2g of the mask's largest value %g, tolerance %g)",
					row(i), m, have, want, dev, scale, rtol)
			}
			worst = max(worst, dev)
		}
	}
	return worst, nil
}

// cpuOnly reports whether plan has CPU workers only.
func cpuOnly(plan *planner.Plan) bool {
	return !slices.ContainsFunc(plan.Workers, func(w planner.Worker) bool { return w.Kind != planner.CPU })
}

// sink keeps the read floor's byte counts alive.
var sink uint64

// readFloor measures d's read floor (benchData.floor) under every CPU-only plan.
func readFloor(cfg *config, d *benchData, plans []namedPlan) ([]bench.Row, error) {
	var rows []bench.Row
	for _, p := range plans {
		if !cpuOnly(p.plan) {
			continue // GPU plans: the floor is the host-to-device copy, measured by the GPU check
		}
		row := bench.Row{Source: bench.ReadFloor, Dataset: d.kind, DType: d.dt.String(), MaskKind: bench.NoMasks, Plan: "read-floor/" + p.name,
			Workers: len(p.plan.Workers), Frames: d.frames(), Bytes: d.bytes()}
		for i := range cfg.repeats + 1 {
			f0, t0 := minorFaults(), time.Now()
			if err := d.floor(p.plan); err != nil {
				return nil, fmt.Errorf("read floor %s: %w", p.name, err)
			}
			if i > 0 {
				row.Seconds = append(row.Seconds, time.Since(t0).Seconds())
				row.MinorFaults += minorFaults() - f0
			}
		}
		log("read floor %-9s %-17s %d workers: %.3f GB/s", p.name, d.label(), row.Workers, row.GBps())
		rows = append(rows, row)
	}
	return rows, nil
}

// streamRead is the read floor of a frame file: plan's workers, pinned like the
// engine's, pull the same partitions from a queue and touch every byte the fastest way
// the dataset allows, as the engine reads it: in place when it is mapped
// (dataset.Viewer), else with ReadFrames into a reused tile buffer (tile frames), each
// tile swept with bytes.Count (vectorised: AVX2 on amd64).
func streamRead(ds dataset.Dataset, plan *planner.Plan, tile int) error {
	viewer, _ := ds.(dataset.Viewer)
	return onPinnedWorkers(plan, func() func(planner.Partition) (uint64, error) {
		buf := make([]byte, tile*ds.FrameBytes())
		return func(p planner.Partition) (uint64, error) {
			var count int
			for s := p.Start; s < p.End; s += tile {
				e := min(s+tile, p.End)
				frames := buf[:(e-s)*ds.FrameBytes()]
				var err error
				if viewer != nil {
					frames, err = viewer.ViewFrames(s, e)
				} else {
					err = ds.ReadFrames(s, e, frames)
				}
				if err != nil {
					return 0, err
				}
				count += bytes.Count(frames, sweepByte)
			}
			return uint64(count), nil
		}
	})
}

// onPinnedWorkers runs a read floor: plan's workers, each on a thread pinned like the
// engine's, pull plan's partitions from one queue and sweep each with the function that
// newSweep makes for the worker; what the sweeps return goes into sink, so that the
// compiler keeps them. The first error of each worker ends it.
func onPinnedWorkers(plan *planner.Plan, newSweep func() func(planner.Partition) (uint64, error)) error {
	queue := make(chan planner.Partition, len(plan.Partitions))
	for _, p := range plan.Partitions {
		queue <- p
	}
	close(queue)
	errs := make([]error, len(plan.Workers))
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i, w := range plan.Workers {
		wg.Go(func() {
			unpin, err := frontend.PinThread(w.CPU)
			if err != nil {
				errs[i] = fmt.Errorf("worker %d: %w", w.ID, err)
				return
			}
			defer unpin()
			sweep, sum := newSweep(), uint64(0)
			for p := range queue {
				v, err := sweep(p)
				if err != nil {
					errs[i] = err
					return
				}
				sum += v
			}
			mu.Lock()
			sink += sum
			mu.Unlock()
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// minorFaults is the process's minor page faults so far (getrusage, all threads).
func minorFaults() int64 {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Minflt
}

// sweepByte is the byte the read floor counts: any value makes bytes.Count read every
// byte.
var sweepByte = []byte{0x5a}

// runSum measures the sum reduction (engine.Reduce with Sum only) under every CPU-only
// plan (reductions run on CPU workers only), each run checked against a float64 sum of
// the frames.
func runSum(ctx context.Context, cfg *config, d *benchData, plans []namedPlan) ([]bench.Row, error) {
	want, err := referenceSum(d)
	if err != nil {
		return nil, err
	}
	var rows []bench.Row
	for _, p := range plans {
		if !cpuOnly(p.plan) {
			continue
		}
		name := p.name + "/stemdot"
		row := bench.Row{Source: bench.Stemdot, DType: d.dt.String(), MaskKind: bench.Sum, Plan: name,
			Workers: len(p.plan.Workers), Frames: d.frames(), Bytes: d.bytes()}
		for i := range cfg.repeats + 1 {
			t0 := time.Now()
			res, err := engine.Reduce(ctx, d.ds, p.plan, engine.ReduceOptions{Sum: true})
			elapsed := time.Since(t0).Seconds()
			if err != nil {
				return nil, fmt.Errorf("stemdot sum %s, %s: %w", name, d.dt, err)
			}
			var worst float64
			for px, w := range want {
				dev := math.Abs(res.Sum[px]-w) / max(math.Abs(w), 1)
				if !(dev <= 1e-12) {
					return nil, fmt.Errorf("RESULT CHECK FAILED: stemdot sum %s, %s, run %d: pixel %d: got %.17g, want %.17g", name, d.dt, i, px, res.Sum[px], w)
				}
				worst = max(worst, dev)
			}
			if i > 0 {
				row.Seconds = append(row.Seconds, elapsed)
			}
			row.Check = fmt.Sprintf("float64 sum of every frame, max rel dev %.1e", worst)
		}
		log("stemdot sum %-16s %-7s %d workers: %.3f GB/s (%s)", name, d.dt, row.Workers, row.GBps(), row.Check)
		rows = append(rows, row)
	}
	return rows, nil
}

// referenceSum is the sum frame of d in float64, frame by frame with ReadFrames and
// decode, independently of the engine.
func referenceSum(d *benchData) ([]float64, error) {
	px := sig[0] * sig[1]
	sum, pixels := make([]float64, px), make([]float64, px)
	buf := make([]byte, d.ds.FrameBytes())
	for f := range d.frames() {
		if err := d.ds.ReadFrames(f, f+1, buf); err != nil {
			return nil, err
		}
		if err := decode(d.dt, buf, pixels); err != nil {
			return nil, err
		}
		for i, v := range pixels {
			sum[i] += v
		}
	}
	return sum, nil
}
