package main

/*
#include "shim.h"
*/
import "C"

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/stemdot/stemdot"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/frontend"
	"github.com/stemdot/stemdot/internal/npy"
	"github.com/stemdot/stemdot/internal/safetext"
	"github.com/stemdot/stemdot/live"
	_ "github.com/stemdot/stemdot/live/detectors" // merlin://, dectris://
	"github.com/stemdot/stemdot/masks"
)

// kindLive is the handle kind of a live run (stemdot_live_start).
const kindLive = "live"

// liveSnapshotSize is sizeof(stemdot_live_snapshot), for the tests' mirror of it.
const liveSnapshotSize = C.sizeof_stemdot_live_snapshot

// maxPollTimeout bounds stemdot_live_poll's timeout, in seconds (stemdot_live_wait
// waits without a bound).
const maxPollTimeout = 3600

// liveRun is a live run handle: one acquisition received and computed on its own
// goroutine (stemdot.Planner.Live), its latest snapshot kept for polls from any thread.
type liveRun struct {
	source  string
	float64 bool
	cancel  context.CancelFunc
	ended   chan struct{} // closed when the run has ended (lr or err set)

	mu      sync.Mutex
	changed chan struct{}        // closed, and replaced, at each snapshot and at the end
	seq     uint64               // snapshots published, the end included
	polled  uint64               // seq of the snapshot that poll returned last
	snap    stemdot.LiveSnapshot // the latest; its values are owned here
	lr      *stemdot.LiveResult  // the result of a run that ended with one
	err     error                // the error of a run that failed

	// A run of a shared stream (option shared): its receiver, the ranges of rows
	// computed and not taken yet (stemdot_live_take), their frame indices.
	sharer  live.Sharer
	rows    [][2]int
	indices []int
}

// startLive opens source with the options of stemdot_live_start (stemdot.ParseLiveOptions)
// and starts receiving and computing its acquisition with stack on pl's workers, on a
// goroutine of its own. Errors of the source and options come at once; those of the
// acquisition (connection refused, a malformed stream, masks of another sig shape) end
// the run, and poll and wait return them.
func startLive(source, options string, stack *masks.Stack, pl *stemdot.Planner) (*liveRun, error) {
	if source == "" {
		return nil, failf(errs.Argument, "empty source: want SCHEME://HOST[:PORT], e.g. merlin://127.0.0.1")
	}
	lo, opt, err := stemdot.ParseLiveOptions(options)
	if err != nil {
		return nil, err
	}
	if len(opt.NavShape) > maxNavDims {
		return nil, failf(errs.Shape, "option nav_shape has %d sizes, more than %d", len(opt.NavShape), maxNavDims)
	}
	rcv, name, err := live.Open(source, lo)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &liveRun{source: name, float64: opt.Float64, cancel: cancel, ended: make(chan struct{}), changed: make(chan struct{})}
	if opt.Shared {
		var ok bool
		if l.sharer, ok = rcv.(live.Sharer); !ok {
			rcv.Close()
			return nil, failf(errs.Argument, "%s: this receiver cannot share its stream: leave out option shared", name)
		}
	}
	opt.Source, opt.Snapshot = name, l.publish
	go func() {
		defer close(l.ended)
		var lr *stemdot.LiveResult
		err := func() (err error) {
			defer func() {
				if r := recover(); r != nil {
					err = panicError(r)
				}
			}()
			defer rcv.Close()
			lr, err = pl.Live(ctx, rcv, func(live.Header) (*masks.Stack, error) { return stack, nil }, opt)
			return err
		}()
		if err != nil && ctx.Err() != nil {
			err = failf(errs.Cancelled, "the live run on %s was cancelled (stemdot_live_cancel)", name)
		}
		l.finish(lr, err)
	}()
	return l, nil
}

// publish is LiveOptions.Snapshot: it keeps a copy of s. The final snapshot's values are
// kept too, but published by finish, with the run's outcome.
func (l *liveRun) publish(s *stemdot.LiveSnapshot) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.snap.NavShape == nil {
		l.snap.NavShape, l.snap.NMasks = slices.Clone(s.NavShape), s.NMasks
		l.snap.F32, l.snap.F64 = make([]float32, len(s.F32)), make([]float64, len(s.F64))
	}
	copy(l.snap.F32, s.F32)
	copy(l.snap.F64, s.F64)
	if l.sharer != nil {
		l.rows = append(l.rows, s.New...)
		if len(s.Indices) > len(l.indices) {
			l.indices = append(l.indices, s.Indices[len(l.indices):]...)
		}
	}
	l.snap.Done, l.snap.Counts, l.snap.Elapsed, l.snap.Rate = s.Done, s.Counts, s.Elapsed, s.Rate
	if !s.Final {
		l.notifyLocked()
	}
}

// finish records the run's outcome and publishes it.
func (l *liveRun) finish(lr *stemdot.LiveResult, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lr, l.err = lr, err
	if lr != nil {
		l.snap.Counts, l.snap.Final = lr.Counts, true
	}
	l.notifyLocked()
}

func (l *liveRun) notifyLocked() {
	l.seq++
	close(l.changed)
	l.changed = make(chan struct{})
}

// done reports whether the run has ended.
func (l *liveRun) done() bool {
	select {
	case <-l.ended:
		return true
	default:
		return false
	}
}

// poll waits up to timeout for a snapshot newer than the one poll returned last (not at
// all once the run has ended), then copies the latest into snap and, once the first
// snapshot is out, its values into out: a []float32 or []float64 of exactly n_frames ×
// n_masks values, the run's dtype. The run's error, when it failed, is returned after
// snap is filled.
func (l *liveRun) poll(timeout time.Duration, snap *C.stemdot_live_snapshot, out any) error {
	l.mu.Lock()
	if l.seq == l.polled && timeout > 0 && !l.done() {
		changed := l.changed
		l.mu.Unlock()
		t := time.NewTimer(timeout)
		select {
		case <-changed:
		case <-t.C:
		}
		t.Stop()
		l.mu.Lock()
	}
	defer l.mu.Unlock()
	l.polled = l.seq
	return l.fillLocked(snap, out)
}

// wait waits for the end of the run and fills snap and out as poll does.
func (l *liveRun) wait(snap *C.stemdot_live_snapshot, out any) error {
	<-l.ended
	l.mu.Lock()
	defer l.mu.Unlock()
	l.polled = l.seq
	return l.fillLocked(snap, out)
}

func (l *liveRun) fillLocked(snap *C.stemdot_live_snapshot, out any) error {
	s := &l.snap
	*snap = C.stemdot_live_snapshot{}
	snap.seq = C.uint64_t(l.seq)
	snap.nav_ndim, snap.n_masks = C.size_t(len(s.NavShape)), C.size_t(s.NMasks)
	for i, n := range s.NavShape {
		snap.nav_shape[i] = C.size_t(n)
	}
	if s.NavShape != nil {
		snap.n_frames = C.uint64_t(product(s.NavShape))
	}
	c := s.Counts
	snap.done, snap.received, snap.missing, snap.late = C.uint64_t(s.Done), C.uint64_t(c.Received), C.uint64_t(c.Missing), C.uint64_t(c.Late)
	snap.surplus, snap.repeated, snap.stalls = C.uint64_t(c.Surplus), C.uint64_t(c.Repeated), C.uint64_t(c.Stalls)
	snap.elapsed, snap.rate = C.double(s.Elapsed.Seconds()), C.double(s.Rate)
	if l.lr != nil {
		snap.final = 1
		if l.lr.Partial {
			snap.partial = 1
		}
	}
	if l.err != nil {
		return l.err
	}
	if s.NavShape == nil {
		return nil // no snapshot yet: out is left as it is
	}
	switch o := out.(type) {
	case []float32:
		return copyValues(o, s.F32, s.NavShape, s.NMasks)
	case []float64:
		return copyValues(o, s.F64, s.NavShape, s.NMasks)
	}
	return nil
}

// copyValues copies the snapshot's values src into the caller's out, which must hold as
// many.
func copyValues[T float32 | float64](out, src []T, nav []int, nMasks int) error {
	if len(out) != len(src) {
		return failf(errs.Shape, "out holds %d values, but the result of nav_shape %s × %d masks has %d", len(out), npy.ShapeString(nav), nMasks, len(src))
	}
	copy(out, src)
	return nil
}

// result returns the result of a run that has ended, its error for one that failed, or an
// error for one still running.
func (l *liveRun) result() (*stemdot.LiveResult, error) {
	if !l.done() {
		return nil, failf(errs.Argument, "the live run on %s has not ended: wait for its end (stemdot_live_wait, or stemdot_live_poll until final), or cancel it", l.source)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lr, l.err
}

// stop cancels the run and waits for its goroutine to end (promptly: the receiver's
// waits and the engine's end at the cancellation).
func (l *liveRun) stop() {
	l.cancel()
	<-l.ended
}

func getLive(id uint64) (*liveRun, error) {
	v, err := handles.get(id, kindLive)
	if err != nil {
		return nil, err
	}
	return v.(*liveRun), nil
}

//export stemdot_go_live_start
func stemdot_go_live_start(source, options *C.stemdot_cchar, maskData *C.stemdot_cvoid, maskDType C.stemdot_dtype,
	nMasks, sigY, sigX C.size_t, planHandle C.stemdot_plan, out *C.stemdot_live) (st C.stemdot_status) {
	const fn = "stemdot_live_start"
	defer guard(fn, &st)
	if source == nil || maskData == nil || out == nil {
		return fail(fn, failf(errs.Argument, "source, masks and out must not be NULL"))
	}
	*out = 0 // no stale handle in *out after a failure
	f64, err := masksDType(maskDType)
	if err != nil {
		return fail(fn, err)
	}
	stack, err := prepareMasks(unsafe.Pointer(maskData), f64, nMasks, sigY, sigX)
	if err != nil {
		return fail(fn, err)
	}
	var pl *stemdot.Planner
	if planHandle != 0 {
		pl, err = getPlan(uint64(planHandle))
	} else {
		pl, err = newPlanner("", "")
	}
	if err != nil {
		return fail(fn, err)
	}
	l, err := startLive(goString(source), goString(options), stack, pl)
	if err != nil {
		return fail(fn, err)
	}
	*out = C.stemdot_live(handles.add(kindLive, l))
	return succeed()
}

// liveValues checks the out arguments of stemdot_live_poll and stemdot_live_wait against
// run l and returns out as a slice (nil for NULL).
func liveValues(l *liveRun, out unsafe.Pointer, outDType C.stemdot_dtype, outLen C.size_t) (any, error) {
	n, err := sizeProduct("out_len", 8, 0, outLen) // float32 or float64: at most 8 bytes
	if err != nil {
		return nil, err
	}
	want, name := C.stemdot_dtype(C.STEMDOT_FLOAT32), "STEMDOT_FLOAT32"
	if l.float64 {
		want, name = C.STEMDOT_FLOAT64, "STEMDOT_FLOAT64 (option float64)"
	}
	switch {
	case out == nil:
		return nil, nil
	case outDType != want:
		return nil, failf(errs.DType, "out_dtype %d is not the run's result dtype, %s", outDType, name)
	case l.float64:
		return unsafe.Slice((*float64)(out), n), nil
	}
	return unsafe.Slice((*float32)(out), n), nil
}

//export stemdot_go_live_poll
func stemdot_go_live_poll(h C.stemdot_live, timeout C.double, snap *C.stemdot_live_snapshot, out unsafe.Pointer,
	outDType C.stemdot_dtype, outLen C.size_t) (st C.stemdot_status) {
	const fn = "stemdot_live_poll"
	defer guard(fn, &st)
	if snap == nil {
		return fail(fn, failf(errs.Argument, "snap must not be NULL"))
	}
	if !(timeout >= 0 && timeout <= maxPollTimeout) {
		return fail(fn, failf(errs.Argument, "timeout %g: want seconds from 0 to %d (stemdot_live_wait waits for the end)", float64(timeout), maxPollTimeout))
	}
	l, err := getLive(uint64(h))
	if err != nil {
		return fail(fn, err)
	}
	vals, err := liveValues(l, out, outDType, outLen)
	if err != nil {
		return fail(fn, err)
	}
	if err := l.poll(time.Duration(float64(timeout)*float64(time.Second)), snap, vals); err != nil {
		return fail(fn, err)
	}
	return succeed()
}

//export stemdot_go_live_wait
func stemdot_go_live_wait(h C.stemdot_live, snap *C.stemdot_live_snapshot, out unsafe.Pointer, outDType C.stemdot_dtype,
	outLen C.size_t) (st C.stemdot_status) {
	const fn = "stemdot_live_wait"
	defer guard(fn, &st)
	if snap == nil {
		return fail(fn, failf(errs.Argument, "snap must not be NULL"))
	}
	l, err := getLive(uint64(h))
	if err != nil {
		return fail(fn, err)
	}
	vals, err := liveValues(l, out, outDType, outLen)
	if err != nil {
		return fail(fn, err)
	}
	if err := l.wait(snap, vals); err != nil {
		return fail(fn, err)
	}
	return succeed()
}

//export stemdot_go_live_cancel
func stemdot_go_live_cancel(h C.stemdot_live) (st C.stemdot_status) {
	const fn = "stemdot_live_cancel"
	defer guard(fn, &st)
	l, err := getLive(uint64(h))
	if err != nil {
		return fail(fn, err)
	}
	l.cancel()
	return succeed()
}

//export stemdot_go_live_missing
func stemdot_go_live_missing(h C.stemdot_live, runs *C.uint64_t, runsLen C.size_t, nRuns *C.size_t) (st C.stemdot_status) {
	const fn = "stemdot_live_missing"
	defer guard(fn, &st)
	if nRuns == nil {
		return fail(fn, failf(errs.Argument, "n_runs must not be NULL"))
	}
	lr, err := liveResult(h)
	if err != nil {
		return fail(fn, err)
	}
	return writeRuns(fn, lr.Info.Live.PositionsWithoutFrame, runs, runsLen, nRuns)
}

//export stemdot_go_live_warnings
func stemdot_go_live_warnings(h C.stemdot_live, buf *C.char, bufLen C.size_t, needed *C.size_t) (st C.stemdot_status) {
	const fn = "stemdot_live_warnings"
	defer guard(fn, &st)
	return liveText(fn, "warnings", h, buf, bufLen, needed, func(lr *stemdot.LiveResult) (string, error) {
		return safetext.String(frontend.OptionKeys(strings.Join(lr.Warnings, "\n"))), nil
	})
}

//export stemdot_go_live_info
func stemdot_go_live_info(h C.stemdot_live, buf *C.char, bufLen C.size_t, needed *C.size_t) (st C.stemdot_status) {
	const fn = "stemdot_live_info"
	defer guard(fn, &st)
	return liveText(fn, "info", h, buf, bufLen, needed, func(lr *stemdot.LiveResult) (string, error) {
		b, err := lr.Info.JSON()
		return string(b), errs.Wrap(errs.Internal, err)
	})
}

// liveText is C call fn that writes text(the result) of the live run of h, as copyText
// (what names the text), once the run has ended.
func liveText(fn, what string, h C.stemdot_live, buf *C.char, bufLen C.size_t, needed *C.size_t,
	text func(lr *stemdot.LiveResult) (string, error)) C.stemdot_status {
	if needed == nil || (buf == nil && bufLen > 0) {
		return fail(fn, failf(errs.Argument, "needed must not be NULL, and buf must not be NULL when buf_len > 0"))
	}
	lr, err := liveResult(h)
	if err != nil {
		return fail(fn, err)
	}
	s, err := text(lr)
	if err != nil {
		return fail(fn, err)
	}
	return copyText(fn, s, what, buf, bufLen, needed)
}

// liveResult is the result of the live run of h once it has ended.
func liveResult(h C.stemdot_live) (*stemdot.LiveResult, error) {
	l, err := getLive(uint64(h))
	if err != nil {
		return nil, err
	}
	return l.result()
}

//export stemdot_go_live_free
func stemdot_go_live_free(h C.stemdot_live) (st C.stemdot_status) {
	const fn = "stemdot_live_free"
	defer guard(fn, &st)
	v, err := handles.remove(uint64(h), kindLive, nil)
	if err != nil {
		return fail(fn, err)
	}
	v.(*liveRun).stop()
	return succeed()
}
