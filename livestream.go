package stemdot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/engine"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/live"
	"github.com/stemdot/stemdot/masks"
	"github.com/stemdot/stemdot/planner"
)

// LiveOptions tune one Live run; the zero value computes float32 and publishes no
// snapshots.
type LiveOptions struct {
	// Source names the detector's address in messages and the result's sidecar
	// ("merlin://127.0.0.1:6342").
	Source string
	// NavShape is the scan's shape; nil takes the stream's (live.Header.NavShape), else
	// (frames,) when the stream announces its number of frames. Its positions must be
	// the acquisition's frames (errs.Shape), or, in a continuous run, as many or fewer
	// (an acquisition of more frames, or of an unknown number, is cut into scans).
	NavShape []int
	// Float64 and Shifts are as in ApplyOptions (Shifts: 2 values, or 2 per scan
	// position of NavShape).
	Float64 bool
	Shifts  []float64
	// Every is the time between snapshots (default 100 ms).
	Every time.Duration
	// Snapshot, when set, is called every Every while frames arrive, at the end of each
	// scan of a continuous run, and once at the end, from one goroutine, with the run
	// so far. The snapshot and its buffers are valid until Snapshot returns; copy what
	// is kept.
	Snapshot func(*LiveSnapshot)
	// Record, when set, is the file that the frames received are recorded to, as the
	// receiver's protocol records them (live.Recordable: a Merlin .mib with its .hdr, a
	// DECTRIS .npy), which stemdot opens to give the same result; errs.Argument for a
	// receiver that cannot record, or a continuous run. LiveResult.Info.Live.Record
	// names the file written.
	Record string
	// MaxBacklog bounds the bytes of frames received and not yet computed (default
	// live.DefaultBacklog): beyond, the receiver stops reading and the detector's sender
	// waits (counted as stalls).
	MaxBacklog int64
	// TileFrames, when positive, is the number of frames a CPU worker reads and computes
	// at once (engine.Options.TileFrames; default Apply's, e.g. 32 frames of 256×256
	// uint16 for a few dense masks, at most liveTileFrames). A frame is computed once its
	// whole tile has come, so a smaller tile shows frames sooner at low frame rates. Tiles of 2 frames or
	// more give Apply's result bit for bit (the kernels pair a tile's odd last frame with
	// itself: a frame's sums do not depend on where tiles are cut); 1-frame tiles take
	// the one-frame kernels.
	TileFrames int
	// Continuous receives scan after scan until ctx is cancelled or the stream ends,
	// keeping the last complete scan: see Live.
	Continuous bool
	// OnScan, when set, is called in a continuous run with the result of each complete
	// scan as it completes, from the goroutine of Live; the result is the caller's to
	// keep. The next scan's frames wait while it runs (back-pressure, as MaxBacklog):
	// hand slow work, such as writing the result, to another goroutine. Its error ends
	// the run with that error.
	OnScan func(*LiveResult) error
	// Shared computes this receiver's share of a stream that several receivers share
	// (live.Options.Shared, rcv a live.Sharer; stemdot.dask.live runs one per node):
	// the frames it gets, in the order they come (live.Scan.Arrival), until its
	// receiver's end (the caller ends the others' with live.Sharer.EndShared). The
	// result holds one row per frame received, LiveResult.Indices their frame indices;
	// snapshots hold the rows computed so far in the same order (NaN beyond), with
	// LiveSnapshot.Indices. Frame gaps are not missing and an early end of the stream
	// is no error (Partial): which frames no receiver got is known where their results
	// are merged. NavShape bounds the frame indices (the scan's positions). Record,
	// Continuous and Shifts are refused (errs.Argument).
	Shared bool
}

// liveTileFrames bounds a live run's default tile: Apply's of small frames is hundreds of
// them (4 MiB), which a stream shared by several receivers, or a slow one, fills only
// after seconds, and the snapshots show nothing of them until then.
const liveTileFrames = 64

// LiveSnapshot is a live run at one moment.
type LiveSnapshot struct {
	// NavShape and NMasks are the result's shape: NavShape + (NMasks,).
	NavShape []int
	NMasks   int
	// F32 (or F64 for a float64 run) holds the result of the frames computed so far,
	// frame f and mask m at f*NMasks+m, NaN at the positions not computed yet.
	F32 []float32
	F64 []float64
	// Done is the number of frames computed; Counts are the receiver's counts (frames
	// received, missing, surplus, repeated, stalls).
	Done   int
	Counts live.Counts
	// Elapsed is the time since the acquisition's header arrived; Rate the frames
	// computed per second since the previous snapshot.
	Elapsed time.Duration
	Rate    float64
	// New are the ranges of frames [start, end) computed since the previous snapshot, in
	// the order they were done (a consumer that keeps its own copy updates those rows).
	New [][2]int
	// Scan is, in a continuous run, the number of the scan in progress, from 1, and
	// ScansComplete and ScansDropped the scans before it that were complete and that
	// were dropped (see ContinuousInfo); in the final snapshot, the number of the last
	// complete scan, which it shows, and the run's counts. All 0 in a run of one
	// acquisition.
	Scan, ScansComplete, ScansDropped int
	// Final is true for the last snapshot, published when the run ends.
	Final bool
	// Indices are, in a Shared run, the frame indices of the rows received so far, row
	// by row: row k of F32 (or F64), once computed, is frame Indices[k]'s. Nil
	// otherwise.
	Indices []int
}

// LiveResult is the outcome of Live: the result of the scan's frames as Apply gives it
// for a file, NaN at the scan positions whose frame never arrived.
type LiveResult struct {
	*Result
	// Partial is true when the acquisition ended before every frame arrived: Missing
	// lists the positions (flat indices in C order over NavShape) without a frame, and
	// EndErr says why it ended.
	Partial bool
	Missing []int
	EndErr  error
	// Counts are the receiver's final counts.
	Counts live.Counts
	// Stopped is, in the result of a continuous run, why the run ended: an error
	// wrapping context.Canceled (ctx was cancelled), io.EOF (the stream ended), or the
	// error that ended it (a stream that failed or changed its frames' shape). Where the
	// scan stands in the run is Info.Live.Continuous.
	Stopped error
	// Indices are, in a Shared run, the frame index of each row of Result (whose
	// NavShape is (rows,)): the frames this receiver got, in the order they came.
	Indices []int
}

// Live receives one acquisition from rcv and applies a mask stack to its frames as they
// arrive, on the workers plan asks for: the stack masksFor makes for the acquisition's
// header (its sig shape is known once the stream starts). The result is Apply's for the
// same frames (bit for bit: the same kernels, the same tiles), updated in place and
// published as snapshots (LiveOptions.Snapshot) while the scan runs; a worker waits for
// a whole tile of frames (engine's default: about 4 MiB, at least 32 frames), which
// bounds how far the snapshots lag behind the stream. The receiver's socket is read on
// its own goroutine; the workers decode the frames (live.Receiver.Decode).
//
// An acquisition that ends early (aborted, the connection lost, fewer frames than the
// scan) ends the run with the frames received: the result is returned with Partial set,
// NaN at the positions without a frame, and no error. Errors: those of rcv.Start
// (errs.IO, errs.Format), of the job (errs.Shape, errs.Argument: masks or nav shape that
// do not fit the stream), those of masksFor, errs.Cancelled when ctx is cancelled.
//
// With LiveOptions.Continuous, Live receives scan after scan (live.Continuous): each
// acquisition of the scan's positions is a scan (rcv's next one comes through
// live.Continuer: in active mode Live starts each), and an acquisition of more frames or
// of an unknown number (an unbounded stream) is cut into scans of consecutive frames.
// Each scan is computed as one acquisition is; a complete scan is kept as the result
// (OnScan gets it) and snapshots show the scan in progress; a scan that ends early is
// dropped. The run ends when ctx is cancelled (the scan in progress is dropped), when
// the stream ends, or when it fails or changes its frames' shape, and returns the last
// complete scan's result, all of it, never a part of the one in progress: Stopped says
// why it ended, a warning and Info.Live.Continuous what was dropped. Without a complete
// scan by then the run's end is an error (errs.Cancelled wrapping ctx's error, errs.IO
// for a stream that ended, or the stream's failure).
func Live(ctx context.Context, rcv live.Receiver, masksFor func(h live.Header) (*masks.Stack, error), plan Plan, opt LiveOptions) (lr *LiveResult, err error) {
	defer goErrs(&err)
	pl, err := plan.Planner()
	if err != nil {
		return nil, err
	}
	return pl.Live(ctx, rcv, masksFor, opt)
}

// Live is the package's Live on the planner's workers.
func (pl *Planner) Live(ctx context.Context, rcv live.Receiver, masksFor func(h live.Header) (*masks.Stack, error), opt LiveOptions) (lr *LiveResult, err error) {
	defer goErrs(&err)
	if opt.Source == "" {
		opt.Source = "the detector stream"
	}
	if opt.Continuous && opt.Record != "" {
		return nil, errs.New(errs.Argument, "%s: a continuous run records nothing: leave out LiveOptions.Record", opt.Source)
	}
	if opt.Shared && (opt.Record != "" || opt.Continuous || opt.Shifts != nil) {
		return nil, errs.New(errs.Argument, "%s: a run of a shared stream takes one acquisition, records nothing and moves no masks: leave out options record, continuous and shifts", opt.Source)
	}
	h, err := rcv.Start(ctx)
	if err != nil {
		return nil, err
	}
	if opt.Shared {
		return pl.liveShared(ctx, rcv, h, masksFor, opt)
	}
	if opt.Continuous {
		return pl.liveContinuous(ctx, rcv, h, masksFor, opt)
	}
	scan, err := newLiveScan(rcv, h, opt.NavShape, opt)
	if err != nil {
		return nil, err
	}
	defer scan.Close()
	stack, err := masksFor(scan.Header())
	if err != nil {
		return nil, err
	}
	j, err := pl.newLiveJob(scan, stack, opt)
	if err != nil {
		return nil, err
	}
	if opt.Record != "" {
		r, ok := rcv.(live.Recordable)
		if !ok {
			return nil, errs.New(errs.Argument, "%s: this receiver cannot record what it receives: leave out LiveOptions.Record", opt.Source)
		}
		if scan.Record, err = r.NewRecorder(opt.Record); err != nil {
			return nil, err
		}
		defer func() {
			if err != nil {
				scan.Record.Abort()
			}
		}()
	}
	pub := newPublisher(scan, j.stack.N, opt)
	if lr, err = j.receive(ctx, scan, pub); err != nil {
		return nil, err
	}
	if scan.Record != nil {
		if err := scan.Record.Close(lr.EndErr); err != nil {
			return nil, err
		}
		lr.Info.Live.Record = scan.Record.Path()
	}
	pub.final(lr.Result, lr.Counts, true)
	return lr, nil
}

// newLiveScan is the scan of the acquisition h that rcv announced.
func newLiveScan(rcv live.Receiver, h live.Header, nav []int, opt LiveOptions) (*live.Scan, error) {
	scan, err := live.NewScan(rcv, h, nav, opt.Source)
	if err == nil && opt.MaxBacklog > 0 {
		scan.MaxBacklog = opt.MaxBacklog
	}
	return scan, err
}

// ApplyLive applies stack to ds as Live applies its masks to the scan it receives, for a
// caller that runs the receiver itself: ds is a live.Scan whose Feed the caller runs (or
// a dataset that reads one), read in acquisition order, snapshots published every
// opt.Every (their Counts those of ds's Counts method, where it has one). It returns
// once every frame has been read (frames that never came read as the scan reads them:
// blank), Apply's result for the same frames, bit for bit, and publishes it as the
// final snapshot; the caller labels the positions without a frame. opt's NavShape,
// Source, Record, MaxBacklog and Continuous are not used (they are the scan's and the
// caller's). Several runs over one scan follow each other (live.Scan.Resume after an
// interrupted one), each reading the frames received again: those kept (live.Scan.Keep);
// a frame read and not kept fails the run, so a dataset over the scan reads it
// otherwise (stemdot view --live: blank, NaN in its image, live.Scan.Decoded telling
// which). Errors: as Live's once the stream has started; errs.Cancelled when ctx is
// cancelled.
func (pl *Planner) ApplyLive(ctx context.Context, ds dataset.Dataset, stack *masks.Stack, opt LiveOptions) (res *Result, err error) {
	defer goErrs(&err)
	j, err := pl.newLiveJob(ds, stack, opt)
	if err != nil {
		return nil, err
	}
	pub := newPublisher(ds, stack.N, opt)
	if res, err = j.compute(ctx, pub); err != nil {
		return nil, err
	}
	pub.final(res, pub.counts(), true)
	return res, nil
}

// liveJob is what a live run computes: a stack over the frames of ds, planned once for
// scan after scan of one shape (receive sets ds to each).
type liveJob struct {
	ds     dataset.Dataset
	opt    LiveOptions
	stack  *masks.Stack
	plan   *planner.Plan
	shifts []float64
}

// newLiveJob checks the job of stack over ds's frames and plans it: partitions in
// acquisition order (inOrder).
func (pl *Planner) newLiveJob(ds dataset.Dataset, stack *masks.Stack, opt LiveOptions) (*liveJob, error) {
	p, shifts, err := pl.planJob(ds, stack, opt.applyOptions())
	if err != nil {
		return nil, err
	}
	p.Partitions = inOrder(ds.NumFrames(), ds.FrameBytes())
	return &liveJob{ds: ds, opt: opt, stack: stack, plan: p, shifts: shifts}, nil
}

func (o LiveOptions) applyOptions() ApplyOptions {
	return ApplyOptions{Float64: o.Float64, Shifts: o.Shifts}
}

// compute runs the job over j.ds, publishing snapshots through pub while it runs (but
// not the last); errors wrap errs.Cancelled when ctx was cancelled.
func (j *liveJob) compute(ctx context.Context, pub *publisher) (*Result, error) {
	run := func(shifts []float64, out32 []float32, out64 []float64) (*engine.Result, []dataset.RunNote, error) {
		pub.out32, pub.out64 = out32, out64
		if out32 == nil && out64 == nil {
			n := j.ds.NumFrames() * j.stack.N
			if j.opt.Float64 {
				pub.out64 = make([]float64, n)
			} else {
				pub.out32 = make([]float32, n)
			}
		}
		ran := make(chan struct{})
		go pub.loop(ran)
		res, err := engine.ApplyMasks(ctx, j.ds, j.stack, j.plan, engine.Options{Float64: j.opt.Float64, Shifts: shifts,
			TileFrames: j.opt.TileFrames, MaxTileFrames: liveTileFrames, Out32: pub.out32, Out64: pub.out64, Done: pub.done})
		close(ran)
		<-pub.stopped
		if err != nil {
			return nil, nil, err
		}
		return res, dataset.RunNotes(j.ds, 0, j.ds.NumFrames()), nil
	}
	res, err := runJob(j.ds, j.stack, j.opt.applyOptions(), j.shifts, append(OpenWarnings(j.ds), j.plan.Warnings...), run)
	if err != nil && ctx.Err() != nil {
		return nil, errs.Wrap(errs.Cancelled, err)
	}
	return res, err
}

// receive receives scan's frames and computes them, publishing snapshots through pub
// (but not the scan's last). The result of a scan that ended early is Partial; other
// ends of the feed are errors.
func (j *liveJob) receive(ctx context.Context, scan *live.Scan, pub *publisher) (*LiveResult, error) {
	j.ds = scan
	feedCtx, stopFeed := context.WithCancel(ctx)
	defer stopFeed()
	fed := make(chan error, 1)
	go func() { fed <- scan.Feed(feedCtx) }()
	res, err := j.compute(ctx, pub)
	if err != nil {
		stopFeed()
		<-fed
		return nil, err
	}
	feedErr := <-fed
	lr := &LiveResult{Result: res, Counts: scan.Counts(), EndErr: feedErr}
	if feedErr != nil {
		if !errors.Is(feedErr, live.ErrEnded) {
			if ctx.Err() != nil { // cancelled before a worker waited for a frame
				return nil, errs.Wrap(errs.Cancelled, feedErr)
			}
			return nil, feedErr
		}
		lr.Partial, lr.Missing = true, scan.MissingPositions()
		blank(res, lr.Missing)
		res.Warnings = append(res.Warnings, partialWarning(j.opt.Source, feedErr, lr.Missing, scan.NumFrames()))
	}
	c := lr.Counts
	res.Info.Live = &LiveInfo{Source: j.opt.Source, Detector: scan.Header().Detector, Partial: lr.Partial, Received: c.Received, Missing: c.Missing,
		Late: c.Late, Surplus: c.Surplus, Repeated: c.Repeated, Stalls: c.Stalls, PositionsWithoutFrame: runs(lr.Missing)}
	if feedErr != nil {
		res.Info.Live.EndedBy = feedErr.Error()
	}
	return lr, nil
}

// liveContinuous is Live's continuous run, from the acquisition h that rcv's Start
// announced.
func (pl *Planner) liveContinuous(ctx context.Context, rcv live.Receiver, h live.Header, masksFor func(h live.Header) (*masks.Stack, error), opt LiveOptions) (*LiveResult, error) {
	nav := opt.NavShape
	if len(nav) == 0 {
		nav = h.NavShape
	}
	if len(nav) == 0 && h.Frames > 0 {
		nav = []int{h.Frames}
	}
	if len(nav) == 0 {
		return nil, errs.New(errs.Argument, "live: %s: the stream gives neither the scan shape nor its number of frames: give option nav_shape", opt.Source)
	}
	cr := live.NewContinuous(rcv, h, product(nav))
	first := h
	h, _ = cr.Start(ctx)
	scan, err := newLiveScan(cr, h, nav, opt)
	if err != nil {
		return nil, err
	}
	stack, err := masksFor(scan.Header())
	if err != nil {
		scan.Close()
		return nil, err
	}
	j, err := pl.newLiveJob(scan, stack, opt)
	if err != nil {
		scan.Close()
		return nil, err
	}
	var last *LiveResult
	var at ContinuousInfo // the scan in progress: its number, the scans complete and dropped before it
	var stop error
	var dropped string // the scan in progress when the run stopped
	for {
		at.Scan++
		pub := newPublisher(scan, j.stack.N, opt)
		pub.at = at
		lr, err := j.receive(ctx, scan, pub)
		received, n := scan.Received(), scan.NumFrames()
		scan.Close()
		switch {
		case err != nil:
			stop = err
			if received > 0 {
				at.Dropped++
				dropped = fmt.Sprintf("; scan %d, in progress (%d of %d frames received), is dropped", at.Scan, received, n)
			}
		case lr.Partial && received == 0: // the stream ended between scans
			at.Scan--
		case lr.Partial:
			at.Dropped++
		default:
			at.Complete++
			pub.final(lr.Result, lr.Counts, false)
			info := at
			lr.Info.Live.Continuous = &info
			last = lr
			if opt.OnScan != nil {
				if err := opt.OnScan(lr); err != nil {
					return nil, err
				}
			}
		}
		if stop == nil && ctx.Err() != nil {
			stop = ctx.Err()
		}
		if stop != nil {
			break
		}
		next, err := cr.Continue(ctx)
		if err != nil {
			stop = err
			break
		}
		if next.SigShape != first.SigShape || next.DType != first.DType {
			stop = errs.New(errs.Shape, "live: %s: scan %d's frames are %d×%d %v, the run's %d×%d %v: a continuous run keeps one frame shape",
				opt.Source, at.Scan+1, next.SigShape[0], next.SigShape[1], next.DType, first.SigShape[0], first.SigShape[1], first.DType)
			break
		}
		if scan, err = newLiveScan(cr, next, nav, opt); err != nil {
			stop = err
			break
		}
	}
	return continuousEnd(ctx, last, at, stop, dropped, opt)
}

// continuousEnd is the outcome of a continuous run that stop ended: the last complete
// scan's result (a copy: OnScan's is the caller's), its Stopped and
// Info.Live.Continuous saying why and what was dropped (at: the run's counts; dropped:
// the scan in progress, if any, when it stopped), or an error without one.
func continuousEnd(ctx context.Context, last *LiveResult, at ContinuousInfo, stop error, dropped string, opt LiveOptions) (*LiveResult, error) {
	var why string
	switch {
	case ctx.Err() != nil:
		stop = ctx.Err()
		why = "stopped (cancelled)"
	case errors.Is(stop, io.EOF):
		stop = io.EOF
		why = "the stream ended"
	default:
		why = fmt.Sprintf("the stream failed: %v", stop)
	}
	if last == nil {
		switch {
		case errors.Is(stop, context.Canceled), errors.Is(stop, context.DeadlineExceeded):
			return nil, errs.Wrap(errs.Cancelled, fmt.Errorf("live: %s: %s before a scan was complete: no result: %w", opt.Source, why, stop))
		case stop == io.EOF:
			return nil, errs.New(errs.IO, "live: %s: %s before a scan was complete (%d dropped): no result", opt.Source, why, at.Dropped)
		}
		return nil, stop
	}
	res, li := *last.Result, *last.Info.Live
	info := *li.Continuous
	info.Complete, info.Dropped, info.Stopped = at.Complete, at.Dropped, why+dropped
	li.Continuous, res.Info.Live = &info, &li
	last = &LiveResult{Result: &res, Counts: last.Counts, Stopped: stop}
	if opt.Snapshot != nil {
		opt.Snapshot(&LiveSnapshot{NavShape: last.NavShape, NMasks: last.NMasks, F32: last.F32, F64: last.F64, Done: product(last.NavShape),
			Counts: last.Counts, Scan: info.Scan, ScansComplete: info.Complete, ScansDropped: info.Dropped, Final: true})
	}
	last.Warnings = append(slices.Clip(last.Warnings), fmt.Sprintf("%s: continuous run of %d complete scans and %d dropped; the result is scan %d, the last complete one; %s",
		opt.Source, at.Complete, at.Dropped, info.Scan, info.Stopped))
	return last, nil
}

// inOrder cuts frames [0, n) into partitions of about 8 MiB of frames in acquisition
// order: workers take them in turn (engine's scheduler: the next partition nobody has
// started), so that all of them compute the frames just received instead of one
// waiting at each partition's start for frames still to come.
func inOrder(n, frameBytes int) []planner.Partition {
	size := max(1, (8<<20)/max(frameBytes, 1))
	parts := make([]planner.Partition, 0, (n+size-1)/size)
	for s := 0; s < n; s += size {
		parts = append(parts, planner.Partition{Start: s, End: min(s+size, n)})
	}
	return parts
}

// blank sets the rows of the positions without a frame to NaN.
func blank(res *Result, pos []int) {
	n := res.NMasks
	for _, p := range pos {
		for m := range n {
			if res.F64 != nil {
				res.F64[p*n+m] = math.NaN()
			} else {
				res.F32[p*n+m] = float32(math.NaN())
			}
		}
	}
}

// runs writes ascending flat positions as [first, count] runs.
func runs(pos []int) [][2]int {
	var out [][2]int
	for _, p := range pos {
		if n := len(out); n > 0 && out[n-1][0]+out[n-1][1] == p {
			out[n-1][1]++
		} else {
			out = append(out, [2]int{p, 1})
		}
	}
	return out
}

// partialWarning says that the acquisition ended early and which positions have no
// frame.
func partialWarning(source string, why error, missing []int, n int) string {
	return fmt.Sprintf("%s: %v: partial result, %d of %d scan positions have no frame (NaN): %s",
		source, why, len(missing), n, positionRanges(missing))
}

// positionRanges writes ascending flat positions as ranges, at most 8 of them:
// "0-9, 12, 40-63 (and 5 more ranges)".
func positionRanges(pos []int) string {
	var out []string
	more := 0
	for i := 0; i < len(pos); {
		j := i
		for j+1 < len(pos) && pos[j+1] == pos[j]+1 {
			j++
		}
		if len(out) < 8 {
			if j > i {
				out = append(out, fmt.Sprintf("%d-%d", pos[i], pos[j]))
			} else {
				out = append(out, fmt.Sprint(pos[i]))
			}
		} else {
			more++
		}
		i = j + 1
	}
	s := ""
	for i, r := range out {
		if i > 0 {
			s += ", "
		}
		s += r
	}
	if more > 0 {
		s += fmt.Sprintf(" (and %d more ranges)", more)
	}
	return s
}

// publisher keeps the snapshot of a live run: the rows of the frames the engine reports
// done (engine.Options.Done) are copied into it at every tick.
type publisher struct {
	ds     dataset.Dataset
	counts func() live.Counts
	nMasks int
	opt    LiveOptions
	start  time.Time
	at     ContinuousInfo // in a continuous run, the scan's place in it

	out32 []float32 // the engine's result buffer
	out64 []float64
	scan  *live.Scan // a Shared run's: the snapshots' Indices

	mu      sync.Mutex
	pending [][2]int // frame ranges done since the last tick
	doneN   int

	snap     LiveSnapshot
	lastDone int
	lastTick time.Time
	stopped  chan struct{}
}

func newPublisher(ds dataset.Dataset, nMasks int, opt LiveOptions) *publisher {
	if opt.Every <= 0 {
		opt.Every = 100 * time.Millisecond
	}
	now := time.Now()
	counts := func() live.Counts { return live.Counts{} }
	if c, ok := ds.(interface{ Counts() live.Counts }); ok {
		counts = c.Counts
	}
	return &publisher{ds: ds, counts: counts, nMasks: nMasks, opt: opt, start: now, lastTick: now, stopped: make(chan struct{})}
}

// done is engine.Options.Done: the rows of frames [start, end) are written.
func (p *publisher) done(start, end int) {
	p.mu.Lock()
	p.pending = append(p.pending, [2]int{start, end})
	p.doneN += end - start
	p.mu.Unlock()
}

// loop publishes a snapshot every tick until ran is closed.
func (p *publisher) loop(ran <-chan struct{}) {
	defer close(p.stopped)
	if p.opt.Snapshot == nil {
		<-ran
		return
	}
	n := p.ds.NumFrames() * p.nMasks
	p.snap = LiveSnapshot{NavShape: p.ds.NavShape(), NMasks: p.nMasks, Scan: p.at.Scan, ScansComplete: p.at.Complete, ScansDropped: p.at.Dropped}
	if p.out64 != nil {
		p.snap.F64 = slices.Repeat([]float64{math.NaN()}, n)
	} else {
		p.snap.F32 = slices.Repeat([]float32{float32(math.NaN())}, n)
	}
	t := time.NewTicker(p.opt.Every)
	defer t.Stop()
	for {
		select {
		case <-ran:
			return
		case <-t.C:
			p.tick()
		}
	}
}

// tick copies the rows done since the last tick into the snapshot and publishes it.
func (p *publisher) tick() {
	p.mu.Lock()
	for _, r := range p.pending {
		a, b := r[0]*p.nMasks, r[1]*p.nMasks
		if p.out64 != nil {
			copy(p.snap.F64[a:b], p.out64[a:b])
		} else {
			copy(p.snap.F32[a:b], p.out32[a:b])
		}
	}
	p.snap.New = append(p.snap.New[:0], p.pending...)
	p.pending = p.pending[:0]
	done := p.doneN
	p.mu.Unlock()
	if p.scan != nil { // after the rows: every row copied has its index
		p.snap.Indices = append(p.snap.Indices, p.scan.IndicesFrom(len(p.snap.Indices))...)
	}
	now := time.Now()
	p.snap.Done, p.snap.Counts, p.snap.Elapsed = done, p.counts(), now.Sub(p.start)
	if dt := now.Sub(p.lastTick).Seconds(); dt > 0 {
		p.snap.Rate = float64(done-p.lastDone) / dt
	}
	p.lastDone, p.lastTick = done, now
	p.opt.Snapshot(&p.snap)
}

// final publishes the scan's last snapshot: the whole result; final: the run's last.
func (p *publisher) final(res *Result, c live.Counts, final bool) {
	if p.opt.Snapshot == nil {
		return
	}
	now := time.Now()
	s := LiveSnapshot{NavShape: res.NavShape, NMasks: res.NMasks, F32: res.F32, F64: res.F64, Done: p.doneN, Counts: c,
		New: p.pending, Elapsed: now.Sub(p.start), Scan: p.at.Scan, ScansComplete: p.at.Complete, ScansDropped: p.at.Dropped, Final: final}
	if dt := now.Sub(p.lastTick).Seconds(); dt > 0 {
		s.Rate = float64(p.doneN-p.lastDone) / dt
	}
	p.opt.Snapshot(&s)
}
