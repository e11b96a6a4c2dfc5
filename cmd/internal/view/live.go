package view

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stemdot/stemdot"
	"github.com/stemdot/stemdot/comfield"
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/engine"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/frontend"
	"github.com/stemdot/stemdot/internal/memlimit"
	"github.com/stemdot/stemdot/internal/safetext"
	"github.com/stemdot/stemdot/live"
	"github.com/stemdot/stemdot/masks"
)

// The live mode (NewLive, stemdot view --live): the page shows the virtual image of one
// detector filling in while a detector's acquisition arrives, and the sum, mean and max
// frames of the frames received so far.
//
// One acquisition: the server starts the receiver (its header gives the frames' shape),
// feeds a live.Scan with its frames, and runs one stemdot.Planner.ApplyLive of the
// current detector over it at a time, whose snapshots (every LiveOptions.Every) are the
// page's images. A detector moved mid-scan cancels the run and starts another over the
// same scan: it reads the frames received so far again, those kept (live.Scan.Keep, a
// budget of their payloads as the stream encodes them), then waits for the rest, so
// that its image is recomputed from them and goes on filling in. A frame received and
// not kept (the budget spent) cannot be read again: it is NaN in the images of later
// detectors, and the page says how many. Every image is Apply's for the same frames,
// bit for bit, NaN at the positions without their frame. Once the acquisition has
// ended, the frames kept are viewed as a file is: a detector moved is recomputed from
// them. The sum, mean and max frames are accumulated as the runs read each frame the
// first time (engine.Accumulator: the sums of integer frames are exact, stemdot sum's).
//
// Requests of the live mode (besides the page, and api/events as for a file, whose
// "ready" comes once the acquisition's header has arrived, after "waiting"):
//
//	GET  /TOKEN/api/info              JSON: live true, source, and once the header has
//	                                  come: detector, nav_shape, sig_shape, dtype,
//	                                  frames, warnings (the receiver's notes), spec (the
//	                                  current detector), keep (the budget in bytes)
//	GET  /TOKEN/api/frame?kind=K      the sum, mean or max frame of the frames received so
//	                                  far, float64 (X-Frames: how many)
//	GET  /TOKEN/api/pick?y=Y&x=X      the frame at scan position (Y, X) if it is kept
//	GET  /TOKEN/api/live?after=N      the newest image once it is newer than image N
//	                                  (waits up to 20 s, then answers the newest): a
//	                                  little-endian uint32 L, L bytes of JSON (liveMeta),
//	                                  zero bytes up to a multiple of 8, the image's values
//	                                  (dtype and shape in the JSON, as /api/image gives
//	                                  them)
//	POST /TOKEN/api/live/detector?spec=S
//	                                  makes S the detector (a mask spec of one detector, or
//	                                  com): JSON {gen, spec}; its images carry gen

// LiveOptions configure the live mode of a Server (NewLive).
type LiveOptions struct {
	// Source is the detector's address ("merlin://127.0.0.1:6342").
	Source string
	// NavShape is the scan's shape given (stemdot live --nav-shape); nil: the stream's,
	// else one row of the frames it announces.
	NavShape []int
	// Keep is the budget of frame payloads kept (live.Scan.Keep), in bytes, so that a
	// detector moved mid-scan is recomputed from the frames received; 0 keeps none.
	Keep int64
	// Spec is the first detector; "" a disk at the frame's centre of 1/8 of its smaller
	// side, as the page's default.
	Spec string
	// Every is the time between images while frames arrive (default 20 ms: 50 images a
	// second, a page taking the newest when it is ready); TileFrames the frames a worker
	// computes at once (default 8: at 1 kHz a frame waits at most 8 ms for its tile; any
	// tile of 2 or more gives Apply's values).
	Every      time.Duration
	TileFrames int
}

// NewLive is a server of the acquisition rcv receives (not started yet: Serve starts it
// and feeds its frames; the caller closes rcv after Serve returns). opt's File names
// the source on the page; its Apply runs the images; Reduce and Command are not used.
func NewLive(rcv live.Receiver, opt Options, lo LiveOptions) (*Server, error) {
	if rcv == nil || opt.Apply == nil {
		return nil, errs.New(errs.Argument, "view: a receiver and a planner are needed")
	}
	if lo.Every <= 0 {
		lo.Every = 20 * time.Millisecond
	}
	if lo.TileFrames <= 0 {
		lo.TileFrames = 8
	}
	l := &liveView{rcv: &stampedReceiver{Receiver: rcv}, opt: lo, changed: make(chan struct{}), detChanged: make(chan struct{})}
	s, mux, err := baseServer(opt)
	if err != nil {
		return nil, err
	}
	mux.HandleFunc("GET /api/info", l.info)
	mux.HandleFunc("GET /api/frame", l.frame)
	mux.HandleFunc("GET /api/pick", l.pick)
	mux.HandleFunc("GET /api/live", l.image)
	mux.HandleFunc("POST /api/live/detector", l.setDetector)
	s.live, l.s = l, s
	s.work = l.run
	return s, nil
}

// liveView is the live mode's state.
type liveView struct {
	s   *Server
	rcv *stampedReceiver
	opt LiveOptions

	mu         sync.Mutex
	h          live.Header
	scan       *live.Scan // nil until the header has come
	data       *liveFrames
	workers    int
	startErr   error // the receiver's start failed
	fed        bool  // the acquisition has ended: feedErr says how (nil: every frame came)
	feedErr    error
	spec       string
	stack      *masks.Stack
	gen        uint64        // the detector's number, one more at each change
	cancel     func()        // cancels the current run
	runErr     error         // the current detector's run failed
	detChanged chan struct{} // closed and replaced at each detector change
	img        *liveImage    // the newest image
	seq        uint64        // images published
	firstShown []bool        // frames shown in an image already (their latency is measured once)
	shown      []shownFrames // the arrival times of the frames each recent image shows first
	changed    chan struct{} // closed and replaced at each image
}

// liveImage is one image published: of detector spec (number gen), its values as
// /api/image sends them, and what the page says about it.
type liveImage struct {
	seq, gen     uint64
	spec, dtype  string
	shape        []int
	data         []byte
	done, frames int // frames computed of the scan's
	counts       live.Counts
	rate         float64
	complete     bool    // every frame read: the image is final for this detector
	noFrame      int     // positions whose frame never came (NaN)
	notKept      int     // positions whose frame came and was not kept (NaN)
	notKeptAll   int     // frames received and not kept, of any detector's run
	published    float64 // Unix ms
}

// shownFrames are the arrival times (Unix ms) of the frames that image seq shows first.
type shownFrames struct {
	seq uint64
	at  []float64
}

// recentImages is how many images keep their frames' arrival times: 128 images are 2.6
// s at the default 20 ms.
const recentImages = 128

// run starts the receiver, feeds the scan and runs the detectors' images until ctx is
// cancelled; it returns the error of a start that failed (nil once cancelled).
func (l *liveView) run(ctx context.Context) error {
	h, err := l.rcv.Start(ctx)
	var scan *live.Scan
	if err == nil {
		scan, err = live.NewScan(l.rcv, h, l.opt.NavShape, l.opt.Source)
	}
	if err == nil {
		defer scan.Close()
		if nav := scan.NavShape(); len(nav) > 2 {
			err = frontend.CheckScan2D(nav, "view: the virtual images are")
		}
	}
	var data *liveFrames
	var stack *masks.Stack
	spec := l.opt.Spec
	if err == nil {
		scan.Keep = l.opt.Keep
		if spec == "" {
			m := min(h.SigShape[0], h.SigShape[1])
			spec = fmt.Sprintf("disk:%d,%d,%d", h.SigShape[1]/2, h.SigShape[0]/2, max(1, int(math.Round(float64(m)/8))))
		}
		stack, err = detector(h.SigShape, spec, nil)
	}
	workers := 1
	if err == nil {
		if p, perr := l.s.opt.Apply.Plan(scan, stack); perr == nil {
			workers = len(p.Workers)
		}
		data, err = newLiveFrames(scan, min(workers, 4))
	}
	if err != nil {
		l.s.mu.Lock()
		l.mu.Lock()
		l.startErr = err
		l.mu.Unlock()
		l.s.notify()
		l.s.mu.Unlock()
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	l.rcv.stamp(scan.NumFrames())
	l.s.mu.Lock()
	l.mu.Lock()
	l.h, l.scan, l.data, l.workers, l.spec, l.stack = h, scan, data, workers, spec, stack
	l.firstShown = make([]bool, scan.NumFrames())
	l.mu.Unlock()
	l.s.notify()
	l.s.mu.Unlock()

	fed := make(chan struct{})
	go func() {
		defer close(fed)
		err := scan.Feed(ctx)
		l.mu.Lock()
		l.fed, l.feedErr = true, err
		l.mu.Unlock()
	}()
	l.conduct(ctx)
	<-fed
	return nil
}

// conduct runs the current detector's image over the scan, and again whenever the
// detector changes, until ctx is cancelled.
func (l *liveView) conduct(ctx context.Context) {
	for ctx.Err() == nil {
		l.mu.Lock()
		gen, spec, stack := l.gen, l.spec, l.stack
		rctx, cancel := context.WithCancel(ctx)
		l.cancel = cancel
		l.mu.Unlock()
		r := &liveRun{l: l, gen: gen, spec: spec}
		l.data.startRun()
		_, err := l.s.opt.Apply.ApplyLive(rctx, l.data, stack, stemdot.LiveOptions{Every: l.opt.Every, TileFrames: l.opt.TileFrames, Snapshot: r.snapshot})
		cancel()
		l.scan.Resume()
		for {
			l.mu.Lock()
			if err != nil && l.gen == gen && ctx.Err() == nil { // shown with the image
				l.runErr, err = err, nil
				l.publishErrorLocked()
			}
			newer, ch := l.gen != gen, l.detChanged
			l.mu.Unlock()
			if newer {
				break
			}
			select {
			case <-ch:
			case <-ctx.Done():
				return
			}
		}
	}
}

// liveRun is one detector's run: its snapshots become images.
type liveRun struct {
	l         *liveView
	gen       uint64
	spec      string
	published bool
	last      live.Counts
}

// snapshot publishes the image of snapshot s (stemdot.LiveOptions.Snapshot): the values
// computed, NaN at the positions without their frame, as /api/image sends them.
func (r *liveRun) snapshot(s *stemdot.LiveSnapshot) {
	if r.published && len(s.New) == 0 && !s.Final && s.Counts == r.last {
		return // nothing new
	}
	r.published, r.last = true, s.Counts
	l := r.l
	vals := slices.Clone(s.F32)
	noFrame, notKept, notKeptAll := l.data.blank(vals, s.NMasks)
	img := &liveImage{gen: r.gen, spec: r.spec, done: s.Done, frames: len(vals) / s.NMasks, counts: s.Counts, rate: s.Rate,
		complete: s.Final, noFrame: noFrame, notKept: notKept, notKeptAll: notKeptAll}
	dtype, shape, data, err := imageOf(s.NavShape, s.NMasks, vals)
	var at []float64
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil { // com maps that do not fit in memory: an image without values says so
		l.runErr = err
	} else {
		img.dtype, img.shape, img.data = dtype, shape, data
	}
	for _, rg := range s.New {
		for f := rg[0]; f < rg[1]; f++ {
			if !l.firstShown[f] && !math.IsNaN(float64(vals[f*s.NMasks])) {
				l.firstShown[f] = true
				if t := l.rcv.arrived(f); t > 0 {
					at = append(at, t)
				}
			}
		}
	}
	l.publishLocked(img, at)
}

// publishLocked makes img the newest image, the frames shown first in it arrived at
// at, and wakes the pages waiting for one; l.mu held.
func (l *liveView) publishLocked(img *liveImage, at []float64) {
	l.seq++
	img.seq, img.published = l.seq, float64(time.Now().UnixMicro())/1000
	l.shown = append(l.shown, shownFrames{l.seq, at})
	if len(l.shown) > recentImages {
		l.shown = l.shown[len(l.shown)-recentImages:]
	}
	l.img = img
	close(l.changed)
	l.changed = make(chan struct{})
}

// publishErrorLocked publishes the current detector's newest image again (one without
// values where there is none) for the pages to show its run's error; l.mu held.
func (l *liveView) publishErrorLocked() {
	img := &liveImage{gen: l.gen, spec: l.spec, frames: l.scan.NumFrames()}
	if l.img != nil && l.img.gen == l.gen {
		*img = *l.img
	}
	l.publishLocked(img, nil)
}

// imageOf is the image of a result of nMasks masks over nav (frame f and mask m at
// f*nMasks+m): one mask's values, float32 (nav); or a com set's shift y, shift x and
// their magnitude, float64 (3, nav...), as apply --com-shifts and com --magnitude give
// them.
func imageOf(nav []int, nMasks int, vals []float32) (dtype string, shape []int, data []byte, err error) {
	if nMasks == 1 {
		return "f4", nav, f32Bytes(vals), nil
	}
	shifts, err := stemdot.COMShifts(&stemdot.Result{NavShape: nav, NMasks: nMasks, F32: vals}, 0)
	if err != nil {
		return "", nil, nil, err
	}
	ny, nx := 1, nav[len(nav)-1]
	if len(nav) == 2 {
		ny = nav[0]
	}
	f := comfield.FromShifts(shifts, ny, nx, 0, false)
	maps := append(append(append(make([]float64, 0, 3*ny*nx), f.Y...), f.X...), f.Magnitude()...)
	return "f8", append([]int{3}, nav...), f64Bytes(maps), nil
}

// detector is the stack of spec on frames of sig: one detector, or the three masks of
// one com spec (errs.Argument for others); auto specs about centre (nil: refused).
func detector(sig [2]int, spec string, centre *masks.Centre) (*masks.Stack, error) {
	stack, err := stemdot.MasksCentred(sig, centre, spec)
	if err != nil {
		return nil, err
	}
	if stack.N != 1 {
		if _, ok := frontend.FindCOM(stack.MaskNames()); !ok || stack.N != 3 {
			return nil, errs.New(errs.Argument, "spec %q makes %d masks: the view shows one detector (disk, ring, rect, point) or one com spec", spec, stack.N)
		}
	}
	return stack, nil
}

// header is the scan, once the acquisition's header has come; else it writes 503 and
// returns nil.
func (l *liveView) header(w http.ResponseWriter) *live.Scan {
	l.mu.Lock()
	scan, err := l.scan, l.startErr
	l.mu.Unlock()
	switch {
	case err != nil:
		fail(w, err)
	case scan == nil:
		http.Error(w, fmt.Sprintf("waiting for the acquisition's header from %s", safetext.String(l.opt.Source)), http.StatusServiceUnavailable)
	}
	return scan
}

func (l *liveView) info(w http.ResponseWriter, r *http.Request) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := map[string]any{"live": true, "file": safetext.String(l.s.opt.File), "source": safetext.String(l.opt.Source), "keep": l.opt.Keep,
		"command": "", "version": stemdot.Version, "warnings": []string{}}
	if l.scan != nil {
		h := l.h
		m["format"], m["nav_shape"], m["sig_shape"], m["dtype"] = safetext.String(h.Detector), l.scan.NavShape(), h.SigShape[:], h.DType.String()
		m["frames"], m["bytes"], m["warnings"], m["spec"], m["workers"] = l.scan.NumFrames(), int64(l.scan.NumFrames())*int64(h.FrameBytes()), flagNames(h.Notes), l.spec, l.workers
	}
	writeJSON(w, m)
}

// events writes the state of the acquisition's start to the event stream: "waiting",
// then "ready" once its header has come (final), or "failed".
func (l *liveView) events(w io.Writer) (final bool) {
	l.mu.Lock()
	scan, err := l.scan, l.startErr
	l.mu.Unlock()
	switch {
	case err != nil:
		fmt.Fprintf(w, "event: failed\ndata: %s\n\n", mustJSON(map[string]string{"error": message(err.Error())}))
		return true
	case scan != nil:
		fmt.Fprintf(w, "event: ready\ndata: %s\n\n", mustJSON(map[string]any{"warnings": flagNames(scan.Notes())}))
		return true
	}
	fmt.Fprintf(w, "event: waiting\ndata: %s\n\n", mustJSON(map[string]string{"source": safetext.String(l.opt.Source)}))
	return false
}

// frame sends the sum, mean or max frame of the frames received so far (X-Frames: how
// many), float64; with none yet, a zero sum and NaN mean and max, as stemdot sum's of
// no frame.
func (l *liveView) frame(w http.ResponseWriter, r *http.Request) {
	scan := l.header(w)
	if scan == nil {
		return
	}
	kind := r.URL.Query().Get("kind")
	if kind != "sum" && kind != "mean" && kind != "max" {
		http.Error(w, fmt.Sprintf("kind %q: want sum, mean or max", kind), http.StatusBadRequest)
		return
	}
	red := l.data.reduction()
	f := map[string][]float64{"sum": red.Sum, "mean": red.Mean, "max": red.Max}[kind]
	if red.Frames == 0 {
		sig := scan.SigShape()
		f = make([]float64, sig[0]*sig[1])
		if kind != "sum" {
			for i := range f {
				f[i] = math.NaN()
			}
		}
	}
	w.Header().Set("X-Frames", strconv.Itoa(red.Frames))
	sendF64(w, []int{red.SigShape[0], red.SigShape[1]}, f)
}

// pick sends the frame at scan position (y, x) when it has come and is kept, in the
// dtype /api/pick sends a file's.
func (l *liveView) pick(w http.ResponseWriter, r *http.Request) {
	scan := l.header(w)
	if scan == nil {
		return
	}
	nav := scan.NavShape()
	q := r.URL.Query()
	flat := 0
	var at []string
	for a, k := range []string{"y", "x"}[2-len(nav):] {
		v, err := strconv.Atoi(q.Get(k))
		if err != nil || v < 0 || v >= nav[a] {
			http.Error(w, fmt.Sprintf("scan position %s=%q: want a whole number from 0 to %d", k, q.Get(k), nav[a]-1), http.StatusBadRequest)
			return
		}
		flat = flat*nav[a] + v
		at = append(at, strconv.Itoa(v))
	}
	pos := strings.Join(at, ", ")
	read, kept := scan.Decoded(flat)
	switch {
	case read && !kept:
		http.Error(w, fmt.Sprintf("the frame at scan position (%s) was not kept: the budget of %s (stemdot view --keep) was spent", pos, memlimit.Size(l.opt.Keep)), http.StatusNotFound)
		return
	case !read:
		http.Error(w, fmt.Sprintf("no frame at scan position (%s) yet: not received or not computed yet (or it never came)", pos), http.StatusNotFound)
		return
	}
	buf := make([]byte, scan.FrameBytes())
	if err := scan.ReadFrames(flat, flat+1, buf); err != nil {
		fail(w, err)
		return
	}
	ds, err := dataset.FromMemory(buf, []int{1}, scan.SigShape(), scan.DType())
	if err != nil {
		fail(w, err)
		return
	}
	sendPicked(w, r.Context(), ds, []int{0})
}

// setDetector makes the spec given the detector, cancelling the current detector's run.
func (l *liveView) setDetector(w http.ResponseWriter, r *http.Request) {
	scan := l.header(w)
	if scan == nil {
		return
	}
	spec := strings.TrimSpace(r.URL.Query().Get("spec"))
	stack, err := detector(scan.SigShape(), spec, nil)
	if err != nil {
		fail(w, err)
		return
	}
	l.mu.Lock()
	if spec != l.spec {
		l.spec, l.stack, l.runErr = spec, stack, nil
		l.gen++
		if l.cancel != nil {
			l.cancel()
		}
		close(l.detChanged)
		l.detChanged = make(chan struct{})
	}
	gen := l.gen
	l.mu.Unlock()
	writeJSON(w, map[string]any{"gen": gen, "spec": spec})
}

// liveWait is how long an image request waits for a newer image before it answers the
// newest (a page's request then goes again: no proxy times it out).
const liveWait = 20 * time.Second

// image sends the newest image once it is newer than the page's (after), with what the
// page shows about it (liveMeta).
func (l *liveView) image(w http.ResponseWriter, r *http.Request) {
	if l.header(w) == nil {
		return
	}
	after, err := strconv.ParseUint(r.URL.Query().Get("after"), 10, 64)
	if err != nil {
		http.Error(w, fmt.Sprintf("after=%q: want the number of the image shown, 0 for none", r.URL.Query().Get("after")), http.StatusBadRequest)
		return
	}
	timeout := time.NewTimer(liveWait)
	defer timeout.Stop()
	for {
		l.mu.Lock()
		img, changed := l.img, l.changed
		if img != nil && (img.seq > after || after > l.seq) {
			body := l.bodyLocked(img, after)
			l.mu.Unlock()
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			w.Write(body)
			return
		}
		l.mu.Unlock()
		select {
		case <-changed:
		case <-timeout.C:
			after = 0 // the newest, shown already: the page asks again
		case <-r.Context().Done():
			return
		}
	}
}

// liveMeta is what the page shows about an image, the JSON before its values.
type liveMeta struct {
	// Seq is the image's number, Gen its detector's (the answer of api/live/detector),
	// Spec the detector; DType ("f4", "f8", or "" for an image without values: see
	// Error) and Shape are its values'.
	Seq   uint64 `json:"seq"`
	Gen   uint64 `json:"gen"`
	Spec  string `json:"spec"`
	DType string `json:"dtype"`
	Shape []int  `json:"shape"`
	// Done frames of the scan's Frames are computed for this detector; Complete: all.
	Done     int  `json:"done"`
	Frames   int  `json:"frames"`
	Complete bool `json:"complete"`
	// The receiver's counts, and the frames computed per second.
	Received int     `json:"received"`
	Missing  int     `json:"missing"`
	Late     int     `json:"late"`
	Surplus  int     `json:"surplus"`
	Repeated int     `json:"repeated"`
	Stalls   int     `json:"stalls"`
	Rate     float64 `json:"rate"`
	// Positions NaN in this image: their frame never came, or came and was not kept;
	// NotKeptAll: frames received and not kept (NaN in the image of a detector moved
	// now); Keep: the budget.
	NoFrame    int   `json:"no_frame"`
	NotKept    int   `json:"not_kept"`
	NotKeptAll int   `json:"not_kept_all"`
	Keep       int64 `json:"keep"`
	// Acquisition is "receiving", "complete" or "ended" (early: End says why).
	Acquisition string `json:"acquisition"`
	End         string `json:"end,omitempty"`
	// Error is the failure of this detector's run.
	Error string `json:"error,omitempty"`
	// Arrivals are the arrival times (Unix ms) of the frames that the images after the
	// page's show first, for the page to measure the latency to its image; Published is
	// this image's time (Unix ms).
	Arrivals  []float64 `json:"arrivals"`
	Published float64   `json:"published"`
}

// bodyLocked is the answer of image img to a page that shows image after; l.mu held.
func (l *liveView) bodyLocked(img *liveImage, after uint64) []byte {
	c := img.counts
	m := liveMeta{Seq: img.seq, Gen: img.gen, Spec: img.spec, DType: img.dtype, Shape: img.shape, Done: img.done, Frames: img.frames,
		Complete: img.complete, Received: c.Received, Missing: c.Missing, Late: c.Late, Surplus: c.Surplus, Repeated: c.Repeated,
		Stalls: c.Stalls, Rate: img.rate, NoFrame: img.noFrame, NotKept: img.notKept, NotKeptAll: img.notKeptAll, Keep: l.opt.Keep,
		Acquisition: "receiving", Arrivals: []float64{}, Published: img.published}
	if l.fed {
		m.Acquisition = "complete"
		if l.feedErr != nil {
			m.Acquisition, m.End = "ended", message(l.feedErr.Error())
		}
	}
	if l.runErr != nil && img.gen == l.gen {
		m.Error = message(l.runErr.Error())
	}
	for _, s := range l.shown {
		if s.seq > after && s.seq <= img.seq {
			m.Arrivals = append(m.Arrivals, s.at...)
		}
	}
	meta, _ := json.Marshal(m)
	head := (4 + len(meta) + 7) / 8 * 8
	body := make([]byte, head+len(img.data))
	binary.LittleEndian.PutUint32(body, uint32(len(meta)))
	copy(body[4:], meta)
	copy(body[head:], img.data)
	return body
}

// stampedReceiver is a receiver that notes when each frame arrived (Next returned it),
// for the latency from a frame's arrival to the page's image that shows it.
type stampedReceiver struct {
	live.Receiver
	at atomic.Pointer[[]atomic.Int64] // Unix µs by frame, 0 until it arrives
}

// stamp starts noting the arrival of frames 0 to n-1.
func (r *stampedReceiver) stamp(n int) {
	at := make([]atomic.Int64, n)
	r.at.Store(&at)
}

func (r *stampedReceiver) Next(ctx context.Context, dst []live.Frame) ([]live.Frame, error) {
	k := len(dst)
	dst, err := r.Receiver.Next(ctx, dst)
	if at := r.at.Load(); at != nil {
		now := time.Now().UnixMicro()
		for _, f := range dst[k:] {
			if f.Index >= 0 && f.Index < len(*at) {
				(*at)[f.Index].CompareAndSwap(0, now)
			}
		}
	}
	return dst, err
}

// arrived is frame f's arrival time in Unix ms, 0 if unknown.
func (r *stampedReceiver) arrived(f int) float64 {
	if at := r.at.Load(); at != nil {
		return float64((*at)[f].Load()) / 1000
	}
	return 0
}

// liveFrames is the scan as the runs read it: a frame read the first time is added to
// the sum, mean and max frames; a frame read before and not kept reads as blank, as one
// that never came does, and both are marked for the run (NaN in its image).
type liveFrames struct {
	*live.Scan
	shards []accShard

	mu         sync.Mutex
	marks      []uint8 // of the current run: noFrame or notKept
	notKeptAll int     // frames received and not kept
}

type accShard struct {
	mu  sync.Mutex
	acc *engine.Accumulator
}

const (
	noFrame = 1 + iota // the frame never came
	notKept            // the frame came and was not kept
)

// newLiveFrames is scan read with its frames accumulated in n accumulators (workers
// take the first one free).
func newLiveFrames(scan *live.Scan, n int) (*liveFrames, error) {
	d := &liveFrames{Scan: scan, shards: make([]accShard, max(n, 1)), marks: make([]uint8, scan.NumFrames())}
	for i := range d.shards {
		acc, err := engine.NewAccumulator(scan.SigShape(), scan.DType(), engine.ReduceOptions{Sum: true, Mean: true, Max: true})
		if err != nil {
			return nil, errs.Wrap(errs.DType, err)
		}
		d.shards[i].acc = acc
	}
	return d, nil
}

// startRun clears the marks for a new run.
func (d *liveFrames) startRun() {
	d.mu.Lock()
	clear(d.marks)
	d.mu.Unlock()
}

// ReadFrames implements dataset.Dataset: frames [start, end) as the scan reads them,
// blank where they cannot be read again; those read the first time are accumulated.
func (d *liveFrames) ReadFrames(start, end int, dst []byte) error {
	fb := d.FrameBytes()
	if start < 0 || end > d.NumFrames() || start > end || len(dst) < (end-start)*fb {
		return d.Scan.ReadFrames(start, end, dst) // its error
	}
	first := -1 // the start of frames read the first time, not accumulated yet
	add := func(to int) {
		if first >= 0 {
			d.add(dst[(first-start)*fb : (to-start)*fb])
			first = -1
		}
	}
	defer func() { add(end) }()
	for i := start; i < end; i++ {
		frame := dst[(i-start)*fb : (i-start+1)*fb]
		read, kept := d.Decoded(i)
		if read && !kept {
			add(i)
			clear(frame)
			d.mark(i, notKept, false)
			continue
		}
		if err := d.Scan.ReadFrames(i, i+1, frame); err != nil {
			add(i)
			return err
		}
		if read {
			add(i)
			continue
		}
		switch now, kept := d.Decoded(i); {
		case !now: // never came: blank
			add(i)
			d.mark(i, noFrame, false)
		default:
			if first < 0 {
				first = i
			}
			if !kept {
				d.mark(i, 0, true)
			}
		}
	}
	return nil
}

// mark marks frame i for the current run (mark 0: none), and counts a frame not kept
// after its first read.
func (d *liveFrames) mark(i int, mark uint8, dropped bool) {
	d.mu.Lock()
	if mark != 0 {
		d.marks[i] = mark
	}
	if dropped {
		d.notKeptAll++
	}
	d.mu.Unlock()
}

// add accumulates frames, in the first accumulator free.
func (d *liveFrames) add(frames []byte) {
	for i := range d.shards {
		if sh := &d.shards[i]; sh.mu.TryLock() {
			sh.acc.Add(frames)
			sh.mu.Unlock()
			return
		}
	}
	sh := &d.shards[0]
	sh.mu.Lock()
	sh.acc.Add(frames)
	sh.mu.Unlock()
}

// reduction is the sum, mean and max frames of the frames accumulated so far.
func (d *liveFrames) reduction() *engine.Reduction {
	accs := make([]*engine.Accumulator, len(d.shards))
	for i := range d.shards {
		d.shards[i].mu.Lock()
		defer d.shards[i].mu.Unlock()
		accs[i] = d.shards[i].acc
	}
	return engine.Merge(accs...)
}

// blank sets the rows of vals (nMasks values a frame) of the current run's marked
// frames to NaN, and returns how many frames never came and were not kept, and how
// many were received and not kept in all.
func (d *liveFrames) blank(vals []float32, nMasks int) (noFrames, notKepts, notKeptAll int) {
	nan := float32(math.NaN())
	d.mu.Lock()
	defer d.mu.Unlock()
	for f, m := range d.marks {
		if m == 0 {
			continue
		}
		if m == noFrame {
			noFrames++
		} else {
			notKepts++
		}
		for k := range nMasks {
			vals[f*nMasks+k] = nan
		}
	}
	return noFrames, notKepts, d.notKeptAll
}
