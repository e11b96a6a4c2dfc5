package stemdot

import (
	"context"
	"errors"
	"math"
	"slices"

	"github.com/stemdot/stemdot/engine"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/live"
	"github.com/stemdot/stemdot/masks"
	"github.com/stemdot/stemdot/planner"
)

// liveShared is Live's run of a share of a stream (LiveOptions.Shared), from the
// acquisition h that rcv's Start announced. The scan's positions are arrival slots
// (live.Scan.Arrival): the engine computes slot after slot as frames come. Once the
// stream has ended after K frames, slots [K, n) would read as blank frames: the run is
// stopped as soon as rows [0, K) are written, and those are the result.
func (pl *Planner) liveShared(ctx context.Context, rcv live.Receiver, h live.Header, masksFor func(h live.Header) (*masks.Stack, error), opt LiveOptions) (*LiveResult, error) {
	scan, err := newLiveScan(rcv, h, opt.NavShape, opt)
	if err != nil {
		return nil, err
	}
	defer scan.Close()
	scan.Arrival = true
	stack, err := masksFor(scan.Header())
	if err != nil {
		return nil, err
	}
	j, err := pl.newLiveJob(scan, stack, opt)
	if err != nil {
		return nil, err
	}
	n, nm := scan.NumFrames(), stack.N
	pub := newPublisher(scan, nm, opt)
	pub.scan = scan
	if opt.Float64 {
		pub.out64 = make([]float64, n*nm)
	} else {
		pub.out32 = make([]float32, n*nm)
	}

	feedCtx, stopFeed := context.WithCancel(ctx)
	defer stopFeed()
	fed := make(chan error, 1)
	go func() { fed <- scan.Feed(feedCtx) }()

	// The rows written so far: slots [0, prefix) all done. A range reported done is cut
	// to the slots received by then: those beyond are blank (the stream has ended).
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	written := make([]bool, n)
	prefix := 0
	progress := make(chan int, 1)
	done := func(start, end int) {
		end = min(end, scan.Received())
		if start >= end {
			return
		}
		pub.done(start, end)
		pub.mu.Lock() // one call at a time (engine.Options.Done); the lock orders prefix's reads
		for i := start; i < end; i++ {
			written[i] = true
		}
		for prefix < n && written[prefix] {
			prefix++
		}
		p := prefix
		pub.mu.Unlock()
		select {
		case <-progress:
		default:
		}
		progress <- p
	}
	ran := make(chan struct{})
	var feedErr error
	watched := make(chan struct{})
	go func() { // stops the run once the stream has ended and its frames' rows are written
		defer close(watched)
		select {
		case feedErr = <-fed:
		case <-ran:
			stopFeed()
			feedErr = <-fed
			return
		}
		k := scan.Received()
		pub.mu.Lock()
		p := prefix
		pub.mu.Unlock()
		for p < k {
			select {
			case p = <-progress:
			case <-ran:
				return
			}
		}
		stopRun()
	}()
	go pub.loop(ran)
	_, err = engine.ApplyMasks(runCtx, scan, stack, j.plan, engine.Options{Float64: opt.Float64, TileFrames: opt.TileFrames,
		MaxTileFrames: liveTileFrames, Out32: pub.out32, Out64: pub.out64, Done: done})
	close(ran)
	<-pub.stopped
	<-watched
	k := scan.Received()
	switch {
	case ctx.Err() != nil:
		return nil, errs.Wrap(errs.Cancelled, ctx.Err())
	case err != nil && runCtx.Err() == nil:
		return nil, err
	case feedErr != nil && !errors.Is(feedErr, live.ErrEnded):
		return nil, feedErr
	}
	// Slots beyond the frames received hold no result.
	if opt.Float64 {
		for i := k * nm; i < n*nm; i++ {
			pub.out64[i] = math.NaN()
		}
	} else {
		for i := k * nm; i < n*nm; i++ {
			pub.out32[i] = float32(math.NaN())
		}
	}
	res := &Result{NavShape: []int{k}, NMasks: nm, Names: stack.MaskNames(), Warnings: append(OpenWarnings(scan), j.plan.Warnings...)}
	res.Stats.Workers = len(j.plan.Workers)
	for _, w := range j.plan.Workers {
		if w.Kind == planner.GPU {
			res.Stats.GPUWorkers++
		}
	}
	res.Stats.CPUWorkers = res.Stats.Workers - res.Stats.GPUWorkers
	if opt.Float64 {
		res.F64 = pub.out64[:k*nm]
	} else {
		res.F32 = pub.out32[:k*nm]
	}
	res.Info = newResultInfo(scan, res)
	c := scan.Counts()
	lr := &LiveResult{Result: res, Counts: c, EndErr: feedErr, Partial: feedErr != nil, Indices: scan.IndicesFrom(0)[:k]}
	res.Info.Live = &LiveInfo{Source: opt.Source, Detector: h.Detector, Partial: lr.Partial, Received: c.Received,
		Surplus: c.Surplus, Repeated: c.Repeated, Stalls: c.Stalls}
	if feedErr != nil {
		res.Info.Live.EndedBy = feedErr.Error()
	}
	if opt.Snapshot != nil {
		s := LiveSnapshot{NavShape: scan.NavShape(), NMasks: nm, F32: pub.out32, F64: pub.out64, Counts: c, Final: true,
			Indices: lr.Indices}
		pub.mu.Lock()
		s.Done, s.New = pub.doneN, slices.Clone(pub.pending)
		pub.mu.Unlock()
		opt.Snapshot(&s)
	}
	return lr, nil
}
