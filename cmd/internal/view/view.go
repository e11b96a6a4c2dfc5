// Package view is the server of stemdot view: an interactive virtual detector in the
// browser for one opened dataset.
//
// A Server holds the dataset, computes its sum, mean and max frames in one first pass
// (progress reported to the page), and answers the page's requests for virtual images
// of one detector spec at a time (the CLI's mask specs, disk:CX,CY,R, ...), computed by
// the engine on the planner's pinned workers. The page (static/, embedded, no build step,
// nothing fetched from elsewhere) draws the frame and the detector on the left and the
// virtual image on the right.
//
// Requests (every path starts with /TOKEN/, the server's random token):
//
//	GET /TOKEN/                      the page (index.html, app.js, style.css beside it)
//	GET /TOKEN/api/info              JSON: file, format, nav_shape (the images': with an
//	                                 ROI, the whole scan's), roi_positions (with an ROI),
//	                                 sig_shape, dtype, frames, warnings, the CLI command's
//	                                 dataset part, workers, calibration (the file's:
//	                                 dataset.Calibration, for the scale bars)
//	GET /TOKEN/api/events            server-sent events: "progress" {done, total} of the
//	                                 first pass, then "ready" {warnings, centre} or
//	                                 "failed" {error}; centre is the direct beam's disk
//	                                 {x, y, r} in the sum frame (stemdot.FindCentre, as
//	                                 apply finds it for disk:auto), or null and
//	                                 centre_note saying why none was found
//	GET /TOKEN/api/frame?kind=K      the sum, mean or max frame (sig_y, sig_x), float64
//	GET /TOKEN/api/pick?y=Y&x=X      the frame at scan position (Y, X), float32 (float64
//	                                 for 32- and 64-bit pixels)
//	GET /TOKEN/api/image?spec=S&page=P&seq=N
//	                                 the virtual image of mask spec S, (nav_y, nav_x),
//	                                 for page P's request N (N a whole number, required
//	                                 with P),
//	                                 float32 as stemdot apply computes it; a com spec
//	                                 gives three float64 maps: shift y, shift x and their
//	                                 magnitude, as apply --com-shifts and com --magnitude;
//	                                 the auto specs (disk:auto, ...) are made about the
//	                                 centre of "ready"
//	GET /TOKEN/api/png?spec=S&part=P the image of api/image as the PNG that stemdot apply
//	                                 --png writes of it (frontend.GreyImage: 8-bit grey,
//	                                 minimum to maximum, scaled up to a short side of 256
//	                                 pixels); for com, part 0 and 1 the shifts y and x
//	                                 (apply --png --com-shifts), 2 the magnitude (stemdot
//	                                 com --png)
//
// The live mode (NewLive, stemdot view --live) serves an acquisition while it arrives
// from a detector: see live.go for its requests.
//
// Arrays travel as raw little-endian bytes, their shape in the header X-Shape ("256,256"
// or "3,64,64"), their type in X-DType ("f4" or "f8"). Errors are plain text with status
// 400 (a bad spec, position or request number), 409 (a run cancelled by a newer one),
// 410 (the dataset's file changed since it was opened), 503 (the first pass is still
// running) or 500. Messages, in errors and JSON, carry no terminal control characters
// (escaped, safetext.String: a file name or note with an escape sequence is shown as
// \x1b...).
//
// Image runs: one at a time; a page's new request cancels its run in progress or
// waiting (newest wins, the older request gets 409), as does a request whose client went
// away; another page's run is waited for (two tabs take turns). Newest is by the page's
// numbering (page P's request N): a request older than the page's run in progress or
// waiting is refused (409), so that an abandoned request that arrives late cancels
// nothing; once that run has ended, any number is taken (a stray huge one blocks no
// later request). Requests without a page are one page. The sum frames and the last
// images (up to 16 or 256 MiB) are kept, for as long as the dataset's file (its identity,
// size, modification and change times) is as it was when the server was made: every
// request for frames and images checks it, and once it differs answers 410, so that a
// file rewritten in place is never shown as the sums and images read before.
//
// Safety: the server answers only paths under /TOKEN/ (anything else: 403 without
// saying more), only requests whose Host header is an IP address, localhost or a name
// of Options.Hosts (a DNS-rebinding page has another name), and refuses a request whose
// Origin is not the server's own; only the pages of Options.FrameAncestors (none by
// default) may show it in a frame. Its page's URLs and redirects are relative: it works
// under a proxy's path prefix (jupyter-server-proxy's /proxy/PORT/TOKEN/). It reads only
// the dataset it was given. It stops when its context is cancelled (stemdot view:
// Ctrl-C, SIGTERM; stemdot_view_free) or, with Options.CloseAfter,
// when no page has held the event stream open for that long after the last one closed
// (a closed tab; a reload reconnects within it). A page holds the stream open while it
// is shown, in a background tab too (no timer to throttle, unlike a heartbeat).
package view

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"io"
	"io/fs"
	"math"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/stemdot/stemdot"
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/frontend"
	"github.com/stemdot/stemdot/internal/safetext"
	"github.com/stemdot/stemdot/masks"
)

//go:embed static
var static embed.FS

// Options configure a Server.
type Options struct {
	// File is the dataset's path as given, shown on the page; Command is the CLI's
	// dataset part that reproduces the page's images, e.g. "stemdot apply 'scan.mib'
	// --nav-shape 64,64" (the page adds --mask SPEC --out ...).
	File, Command string
	// Apply computes the mask-dot products (pinned CPU or GPU workers, stemdot.Planner);
	// Reduce computes the first pass's sum, mean and max frames (CPU workers).
	Apply  *stemdot.Planner
	Reduce *stemdot.Planner
	// Warnings are the dataset's (stemdot.OpenWarnings), shown on the page.
	Warnings []string
	// CloseAfter, when positive, stops the server once no page has been connected for
	// that long after the last one went away (not before a first page connected);
	// zero: only the context stops it.
	CloseAfter time.Duration
	// Token is the path prefix every request needs; empty: a random one (NewToken).
	Token string
	// Hosts are host names accepted in the Host header besides IP addresses and
	// localhost, e.g. the name given to stemdot view --listen; "*" accepts any, for a
	// server reached only through a proxy that passes on the browser's Host (as
	// jupyter-server-proxy does: stemdot.view in JupyterHub), the token guarding it still.
	Hosts []string
	// FrameAncestors are the pages that may show the page in a frame: the sources of the
	// Content-Security-Policy directive frame-ancestors (CSP Level 2), separated by
	// blanks, e.g. "http://localhost:8888" or "*"; empty: 'none', no page (stemdot view).
	// stemdot.view shows the page in a notebook's IFrame.
	FrameAncestors string
}

// Server serves one dataset, or one acquisition while it arrives, to the page. Create
// it with New (NewLive), run it with Serve.
type Server struct {
	ds      dataset.Dataset
	opt     Options
	handler http.Handler

	mu       sync.Mutex
	done     int // frames of the first pass done
	red      *stemdot.Reduction
	redErr   error
	ready    chan struct{}  // closed when the first pass has ended
	runs     map[string]run // each page's newest image request, waiting or running
	runID    uint64
	cache    []cached
	file     os.FileInfo // the dataset's file as it was at New; nil: none (memory) or not a file
	clients  int
	lastSeen time.Time
	changed  chan struct{} // closed and replaced at every progress or client change
	jobs     sync.Mutex    // one image run at a time

	work func(ctx context.Context) error // what Serve runs besides the requests: the first pass, or the live mode's acquisition
	live *liveView                       // the live mode's state (NewLive); nil for a dataset

	// centre is the direct beam's disk in the sum frame of the first pass (the page's
	// default detector, disk:auto); nil: none found, centreErr says why.
	centre    *masks.Centre
	centreErr error
}

// run is a page's image request, its number seq: cancel cancels it as replaced by a
// newer one.
type run struct {
	id, seq uint64
	cancel  func()
}

type cached struct {
	spec  string
	dtype string
	shape []int
	data  []byte
}

// Cache bounds: the last images kept, by count and bytes.
const cacheImages, cacheBytes = 16, 256 << 20

// NewToken is a random token of 128 bits, hex.
func NewToken() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// New is a server of ds. Its token is opt.Token, or a random one. A scan of planes (a nav
// shape of 3 axes) is refused (errs.Shape), naming the nav shape that reads it as a 2-D
// scan: the page draws 2-D images.
func New(ds dataset.Dataset, opt Options) (*Server, error) {
	if ds == nil || opt.Apply == nil || opt.Reduce == nil {
		return nil, errs.New(errs.Argument, "view: a dataset and both planners are needed")
	}
	if scan, _ := dataset.ScanPositions(ds); len(scan) > 2 {
		return nil, frontend.CheckScan2D(scan, "view: the virtual images are")
	}
	s, mux, err := baseServer(opt)
	if err != nil {
		return nil, err
	}
	mux.HandleFunc("GET /api/info", s.info)
	mux.HandleFunc("GET /api/frame", s.frame)
	mux.HandleFunc("GET /api/pick", s.pick)
	mux.HandleFunc("GET /api/image", s.image)
	mux.HandleFunc("GET /api/png", s.pngExport)
	s.ds, s.work = ds, s.firstPass
	if fi, err := os.Stat(ds.Path()); ds.Path() != "" && err == nil {
		s.file = fi
	}
	return s, nil
}

// baseServer is a server of the event stream and the page, and its mux, to which the
// caller adds the other requests.
func baseServer(opt Options) (*Server, *http.ServeMux, error) {
	if opt.Token == "" {
		opt.Token = NewToken()
	}
	if opt.FrameAncestors == "" {
		opt.FrameAncestors = "'none'"
	} else if i := strings.IndexFunc(opt.FrameAncestors, func(r rune) bool { return r < ' ' || r > '~' || r == ';' || r == ',' }); i >= 0 {
		return nil, nil, errs.New(errs.Argument, "view: frame ancestors %q: want CSP sources separated by blanks, e.g. http://localhost:8888 or *, without %q", opt.FrameAncestors, opt.FrameAncestors[i:i+1])
	}
	s := &Server{opt: opt, ready: make(chan struct{}), changed: make(chan struct{})}
	sub, err := fs.Sub(static, "static")
	if err != nil {
		return nil, nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/events", s.events)
	mux.Handle("GET /", http.FileServerFS(sub))
	s.handler = mux
	return s, mux, nil
}

// Token is the server's token: every path starts with /TOKEN/.
func (s *Server) Token() string { return s.opt.Token }

// Serve computes the first pass (NewLive: receives the acquisition) and serves the page
// on ln until ctx is cancelled or, with Options.CloseAfter, no page has been connected
// for that long; it then shuts the server down (runs in progress cancelled, waited for)
// and returns nil, or the listener's error. In the live mode, an acquisition that does
// not start (the receiver's Start failed: the detector cannot be reached, its header is
// malformed or does not fit the nav shape) stops the server, and Serve returns that
// error. Serve runs once per Server.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	var werr error
	worked := make(chan struct{})
	go func() {
		defer close(worked)
		if werr = s.work(ctx); werr != nil {
			stop()
		}
	}()
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute, BaseContext: func(net.Listener) context.Context { return ctx }}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	if s.opt.CloseAfter > 0 {
		go s.closeWhenIdle(ctx, stop)
	}
	select {
	case err := <-errc:
		stop()
		<-worked
		return err
	case <-ctx.Done():
	}
	// Every request's context ends with ctx (BaseContext): event streams, runs and picks
	// return promptly; Shutdown waits for them, and the first pass (the live mode's
	// acquisition) is waited for, so that nothing reads the dataset (the receiver) once
	// Serve has returned (the caller closes it).
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv.Shutdown(sctx)
	<-worked
	s.jobs.Lock()
	s.jobs.Unlock()
	return werr
}

// closeWhenIdle calls stop once no client has been connected for CloseAfter.
func (s *Server) closeWhenIdle(ctx context.Context, stop context.CancelFunc) {
	tick := time.NewTicker(min(s.opt.CloseAfter/4, time.Second))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		s.mu.Lock()
		idle := s.clients == 0 && !s.lastSeen.IsZero() && time.Since(s.lastSeen) >= s.opt.CloseAfter
		s.mu.Unlock()
		if idle {
			stop()
			return
		}
	}
}

// firstPass computes the sum, mean and max frames, and finds the direct beam's disk in
// the sum frame (the page's default detector, disk:auto); its error goes to the page.
func (s *Server) firstPass(ctx context.Context) error {
	opt := stemdot.ReduceOptions{Sum: true, Mean: true, Max: true, Progress: func(done, total int) {
		s.mu.Lock()
		s.done = done
		s.notify()
		s.mu.Unlock()
	}}
	red, err := s.opt.Reduce.Reduce(ctx, s.ds, opt)
	var centre *masks.Centre
	var centreErr error
	if err == nil {
		var c masks.Centre
		if c, centreErr = stemdot.FindCentre(red.Sum, s.ds.SigShape()); centreErr == nil {
			centre = &c
		}
	}
	s.mu.Lock()
	s.red, s.redErr, s.centre, s.centreErr = red, err, centre, centreErr
	s.notify()
	s.mu.Unlock()
	close(s.ready)
	return nil
}

// notify wakes the event streams; s.mu held.
func (s *Server) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// ServeHTTP checks the token, Host and Origin of r and serves it.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' blob: data:; connect-src 'self'; style-src 'self'; script-src 'self'; frame-ancestors "+s.opt.FrameAncestors)
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	if why := checkHost(r, s.opt.Hosts); why != "" {
		http.Error(w, why, http.StatusForbidden)
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/")
	tok, rest, _ := strings.Cut(rest, "/")
	if !ok || subtle.ConstantTimeCompare([]byte(tok), []byte(s.opt.Token)) != 1 {
		http.Error(w, "forbidden: open the URL stemdot view printed (with its token)", http.StatusForbidden)
		return
	}
	if rest == "" && !strings.HasSuffix(r.URL.Path, "/") {
		// A relative Location (http.Redirect would make it absolute): under a proxy's
		// path prefix (/proxy/PORT/TOKEN) it stays under the prefix.
		h.Set("Location", tok+"/")
		w.WriteHeader(http.StatusFound)
		return
	}
	r2 := r.Clone(r.Context())
	r2.URL.Path = "/" + rest
	r2.URL.RawPath = ""
	s.handler.ServeHTTP(w, r2)
}

// checkHost says why r's Host or Origin is refused, "" when they are accepted: the Host
// must be an IP address, localhost or one of hosts (any port; the listener decides which
// addresses reach the server), the Origin, when given, http:// and the Host.
func checkHost(r *http.Request, hosts []string) string {
	host := r.Host
	name := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		name = h
	}
	name = strings.TrimSuffix(strings.TrimPrefix(name, "["), "]")
	if net.ParseIP(name) == nil && !strings.EqualFold(name, "localhost") && !slices.ContainsFunc(hosts, func(h string) bool { return h == "*" || strings.EqualFold(h, name) }) {
		return "forbidden: Host " + strconv.Quote(host) + " is not an IP address, localhost or a name given to stemdot view --listen (DNS rebinding?): open the URL stemdot view printed, from another machine with this machine's IP address in it, or start stemdot view with --listen " + name + ":PORT to open it by that name"
	}
	if o := r.Header.Get("Origin"); o != "" && o != "http://"+host {
		return "forbidden: request from another origin " + strconv.Quote(o)
	}
	return ""
}

// info is the dataset's description.
func (s *Server) info(w http.ResponseWriter, r *http.Request) {
	sig := s.ds.SigShape()
	scan, pos := dataset.ScanPositions(s.ds)
	var roi any
	if dataset.IsROI(s.ds) {
		roi = len(pos)
	}
	workers := 0
	if p, err := s.opt.Apply.Plan(s.ds, nil); err == nil {
		workers = len(p.Workers)
	}
	writeJSON(w, map[string]any{
		"file": safetext.String(s.opt.File), "format": s.ds.Format(), "nav_shape": scan, "roi_positions": roi, "sig_shape": sig[:],
		"dtype": s.ds.DType().String(), "frames": s.ds.NumFrames(), "bytes": int64(s.ds.NumFrames()) * int64(s.ds.FrameBytes()),
		"warnings": flagNames(s.opt.Warnings), "command": s.opt.Command, "workers": workers, "version": stemdot.Version,
		"calibration": calibration(s.ds),
	})
}

// calibration is the dataset's calibration for the page (scale bars, the readouts under
// the cursor): dataset.Calibration's JSON, units escaped (safetext.String).
func calibration(ds dataset.Dataset) dataset.Calibration {
	c := dataset.CalibrationOf(ds)
	for _, axes := range [][]dataset.Axis{c.Nav, c.Sig} {
		for i := range axes {
			axes[i].Units = safetext.String(axes[i].Units)
		}
	}
	return c
}

// flagNames are the messages ws as the CLI says them (message), never nil.
func flagNames(ws []string) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = message(w)
	}
	return out
}

// message is msg as the CLI says it (frontend.FlagNames: "give --nav-shape", not "give
// Options.NavShape"), its terminal control characters escaped (safetext.String).
func message(msg string) string { return safetext.String(frontend.FlagNames(msg)) }

// fail answers with err's message and status.
func fail(w http.ResponseWriter, err error) { http.Error(w, message(err.Error()), status(err)) }

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// events streams the first pass's progress, then "ready" or "failed"; a page holds it
// open while it is shown (Options.CloseAfter counts from the last one closed).
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	s.mu.Lock()
	s.clients++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.clients--
		s.lastSeen = time.Now()
		s.mu.Unlock()
	}()
	w.Header().Set("Content-Type", "text/event-stream")
	sent := -1
	final := false
	ping := time.NewTicker(15 * time.Second)
	defer ping.Stop()
	for {
		s.mu.Lock()
		changed := s.changed
		s.mu.Unlock()
		if !final {
			if s.live != nil {
				final = s.live.events(w)
			} else {
				final = s.firstPassEvents(w, &sent)
			}
			fl.Flush()
		}
		select {
		case <-r.Context().Done():
			return
		case <-changed:
		case <-ping.C:
			fmt.Fprint(w, ": ping\n\n")
			fl.Flush()
		}
	}
}

// firstPassEvents writes the first pass's progress since sent (frames done), and
// "ready" or "failed" (final) once it has ended.
func (s *Server) firstPassEvents(w io.Writer, sent *int) (final bool) {
	s.mu.Lock()
	done, red, rerr, centre, centreErr := s.done, s.red, s.redErr, s.centre, s.centreErr
	s.mu.Unlock()
	total := s.ds.NumFrames()
	switch {
	case rerr != nil:
		fmt.Fprintf(w, "event: failed\ndata: %s\n\n", mustJSON(map[string]string{"error": message(rerr.Error())}))
		return true
	case red != nil:
		fmt.Fprintf(w, "event: progress\ndata: %s\n\n", mustJSON(map[string]int{"done": total, "total": total}))
		ready := map[string]any{"warnings": flagNames(red.Warnings), "centre": nil}
		if centre != nil {
			ready["centre"] = map[string]float64{"x": centre.X, "y": centre.Y, "r": centre.R}
		} else {
			ready["centre_note"] = message(fmt.Sprintf("no direct beam's disk found in the sum frame (%v): the detector starts at the frame's centre, not at disk:auto; drag it onto the beam", centreErr))
		}
		fmt.Fprintf(w, "event: ready\ndata: %s\n\n", mustJSON(ready))
		return true
	case done != *sent:
		fmt.Fprintf(w, "event: progress\ndata: %s\n\n", mustJSON(map[string]int{"done": done, "total": total}))
		*sent = done
	}
	return false
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// reduction waits for the first pass; it writes the error and returns nil when it
// failed or has not ended (503: the page waits for "ready"), or when the dataset's file
// has changed since (410, unchanged).
func (s *Server) reduction(w http.ResponseWriter) *stemdot.Reduction {
	select {
	case <-s.ready:
	default:
		http.Error(w, "the first pass (sum frame) is still running", http.StatusServiceUnavailable)
		return nil
	}
	if s.redErr != nil {
		http.Error(w, message(s.redErr.Error()), http.StatusInternalServerError)
		return nil
	}
	if err := s.unchanged(); err != nil {
		fail(w, err)
		return nil
	}
	return s.red
}

// errChanged ends the error of a request after the dataset's file changed.
var errChanged = errors.New("restart stemdot view to read it again")

// unchanged returns nil while the dataset's file is the one the server was made with:
// the same file (device and inode), size, modification and change times. Otherwise an
// error (errChanged) saying that its sums and images are those of the file as it was.
func (s *Server) unchanged() error {
	if s.file == nil {
		return nil
	}
	fi, err := os.Stat(s.ds.Path())
	if err == nil && os.SameFile(fi, s.file) && fi.Size() == s.file.Size() && fi.ModTime().Equal(s.file.ModTime()) && ctime(fi) == ctime(s.file) {
		return nil
	}
	what := "was rewritten (its size, modification or change time differs)"
	if err != nil {
		what = "cannot be read: " + err.Error()
	} else if !os.SameFile(fi, s.file) {
		what = "was replaced by another file"
	}
	return fmt.Errorf("%s %s since stemdot view opened it: its sum frame and images are of the file as it was; %w", s.ds.Path(), what, errChanged)
}

// ctime is fi's change time (Linux's st_ctim), which no program sets back; zero where
// the system does not give it.
func ctime(fi os.FileInfo) syscall.Timespec {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ctim
	}
	return syscall.Timespec{}
}

// frame sends the sum, mean or max frame, float64.
func (s *Server) frame(w http.ResponseWriter, r *http.Request) {
	red := s.reduction(w)
	if red == nil {
		return
	}
	kind := r.URL.Query().Get("kind")
	f := red.Frame(kind)
	if f == nil || kind == "std" {
		http.Error(w, fmt.Sprintf("kind %q: want sum, mean or max", kind), http.StatusBadRequest)
		return
	}
	sendF64(w, []int{red.SigShape[0], red.SigShape[1]}, f)
}

// pick sends the frame at scan position (y, x) of the images (a 1-D nav shape: x; with
// an ROI, a position of the whole scan that the ROI selects), float32 where the pixels
// fit exactly, else float64.
func (s *Server) pick(w http.ResponseWriter, r *http.Request) {
	if err := s.unchanged(); err != nil {
		fail(w, err)
		return
	}
	q := r.URL.Query()
	scan, pos := dataset.ScanPositions(s.ds) // of 1 or 2 axes (New)
	var at []int
	flat := 0
	for a, k := range []string{"y", "x"}[2-len(scan):] {
		v, err := strconv.Atoi(q.Get(k))
		if err != nil {
			http.Error(w, fmt.Sprintf("scan position %s=%q: want a whole number", k, q.Get(k)), http.StatusBadRequest)
			return
		}
		if v < 0 || v >= scan[a] {
			http.Error(w, fmt.Sprintf("scan position %s=%d is outside the scan's nav shape %v", k, v, scan), http.StatusBadRequest)
			return
		}
		at = append(at, v)
		flat = flat*scan[a] + v
	}
	if dataset.IsROI(s.ds) { // the dataset's frames are the positions selected, one row
		k, ok := slices.BinarySearch(pos, flat)
		if !ok {
			http.Error(w, fmt.Sprintf("scan position %v is outside the ROI (--roi): no frame read there", at), http.StatusBadRequest)
			return
		}
		at = []int{k}
		if len(s.ds.NavShape()) == 2 {
			at = []int{k / s.ds.NavShape()[1], k % s.ds.NavShape()[1]}
		}
	}
	sendPicked(w, r.Context(), s.ds, at)
}

// sendPicked sends the frame of ds at position at (of its nav shape), float32 where the
// pixels fit exactly, else float64.
func sendPicked(w http.ResponseWriter, ctx context.Context, ds dataset.Dataset, at []int) {
	fr, err := stemdot.Pick(ctx, ds, [][]int{at})
	if err != nil {
		fail(w, err)
		return
	}
	sig := []int{fr.SigShape[0], fr.SigShape[1]}
	vals := fr.Pixels(0)
	switch fr.DType {
	case dataset.Uint8, dataset.Int8, dataset.Uint16, dataset.Int16, dataset.Float32:
		f := make([]float32, len(vals))
		for i, v := range vals {
			f[i] = float32(v)
		}
		sendF32(w, sig, f)
	default:
		sendF64(w, sig, vals)
	}
}

// image sends the virtual image of spec, computing it unless cached.
func (s *Server) image(w http.ResponseWriter, r *http.Request) {
	if s.reduction(w) == nil {
		return
	}
	q := r.URL.Query()
	spec := strings.TrimSpace(q.Get("spec"))
	page := q.Get("page")
	seq, err := strconv.ParseUint(q.Get("seq"), 10, 64)
	if page != "" && err != nil {
		http.Error(w, fmt.Sprintf("seq=%q: a page's request needs its number, a whole number from 0 to 2^64-1 (the page counts its requests)", q.Get("seq")), http.StatusBadRequest)
		return
	}
	if c, ok := s.cached(spec); ok {
		send(w, c.dtype, c.shape, c.data)
		return
	}
	c, err := s.compute(r.Context(), spec, page, seq)
	if err != nil {
		fail(w, err)
		return
	}
	send(w, c.dtype, c.shape, c.data)
}

// pngExport sends the image of spec (a com spec's map part: 0 shift y, 1 shift x, 2
// magnitude) as the PNG that stemdot apply --png writes of it (frontend.GreyImage),
// computing it unless cached.
func (s *Server) pngExport(w http.ResponseWriter, r *http.Request) {
	if s.reduction(w) == nil {
		return
	}
	q := r.URL.Query()
	spec := strings.TrimSpace(q.Get("spec"))
	c, ok := s.cached(spec)
	if !ok {
		var err error
		if c, err = s.compute(r.Context(), spec, "", 0); err != nil {
			fail(w, err)
			return
		}
	}
	nav, size, parts := c.shape, 4, 1
	if c.dtype == "f8" { // com: the maps (3, nav...)
		nav, size, parts = c.shape[1:], 8, c.shape[0]
	}
	part := 0
	if p := q.Get("part"); p != "" || parts > 1 {
		v, err := strconv.Atoi(p)
		if err != nil || v < 0 || v >= parts {
			http.Error(w, fmt.Sprintf("part=%q: spec %q has maps 0 to %d", p, spec, parts-1), http.StatusBadRequest)
			return
		}
		part = v
	}
	vals := make([]float64, len(c.data)/size/parts)
	for i := range vals {
		b := c.data[(part*len(vals)+i)*size:]
		if size == 4 {
			vals[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(b)))
		} else {
			vals[i] = math.Float64frombits(binary.LittleEndian.Uint64(b))
		}
	}
	w.Header().Set("Content-Type", "image/png")
	png.Encode(w, frontend.GreyImage(nav, vals))
}

// errStale is the error of a run cancelled by a newer request.
var errStale = errs.New(errs.Cancelled, "cancelled: a newer request replaced this one")

// compute runs the job of spec, cancelling the page's run in progress or waiting (newest
// wins) and waiting for other pages' runs, and keeps its image. A page numbers its
// requests (seq, with its id page): one older than the page's run in progress or waiting
// (an abandoned request still on its way) is refused at once as stale, so that it cannot
// cancel the newer one. The numbers are compared with that run's only: a request after
// it has ended runs whatever its number.
func (s *Server) compute(ctx context.Context, spec, page string, seq uint64) (cached, error) {
	if s.centre == nil && masks.NeedsCentre(spec) {
		return cached{}, errs.New(errs.Argument, "mask %q: no direct beam's disk was found in the sum frame for the auto specs (%v): give the centre's numbers, e.g. disk:CX,CY,R", spec, s.centreErr)
	}
	stack, err := detector(s.ds.SigShape(), spec, s.centre)
	if err != nil {
		return cached{}, err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	s.mu.Lock()
	// Newest wins within a page: its request replaces its older one, waiting or running.
	// Another page's run is waited for, not cancelled (two tabs would cancel each
	// other's requests in turn).
	if r, ok := s.runs[page]; ok {
		if page != "" && seq <= r.seq {
			s.mu.Unlock()
			return cached{}, errStale
		}
		r.cancel()
	}
	s.runID++
	id := s.runID
	if s.runs == nil {
		s.runs = map[string]run{}
	}
	s.runs[page] = run{id, seq, func() { cancel(errStale) }}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		if s.runs[page].id == id {
			delete(s.runs, page)
		}
		s.mu.Unlock()
	}()
	s.jobs.Lock()
	defer s.jobs.Unlock()
	if ctx.Err() != nil {
		return cached{}, cancelled(ctx)
	}
	res, err := s.opt.Apply.Apply(ctx, s.ds, stack, stemdot.ApplyOptions{})
	if err != nil {
		if ctx.Err() != nil {
			return cached{}, cancelled(ctx)
		}
		return cached{}, err
	}
	c := cached{spec: spec}
	if c.dtype, c.shape, c.data, err = imageOf(res.NavShape, stack.N, res.F32); err != nil {
		return cached{}, err
	}
	s.keep(c)
	return c, nil
}

// cancelled is the error of a cancelled run: errStale, or the client's.
func cancelled(ctx context.Context) error {
	if c := context.Cause(ctx); errors.Is(c, errStale) {
		return errStale
	}
	return errs.New(errs.Cancelled, "cancelled: the request was abandoned")
}

func (s *Server) cached(spec string) (cached, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, c := range s.cache {
		if c.spec == spec {
			s.cache = append(append(s.cache[:i:i], s.cache[i+1:]...), c) // newest last
			return c, true
		}
	}
	return cached{}, false
}

func (s *Server) keep(c cached) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cache = append(s.cache, c)
	n := 0
	for _, c := range s.cache {
		n += len(c.data)
	}
	for len(s.cache) > 1 && (len(s.cache) > cacheImages || n > cacheBytes) {
		n -= len(s.cache[0].data)
		s.cache = s.cache[1:]
	}
}

// status is the HTTP status of err: 400 for bad input, 409 for a cancelled run, 410 for
// a dataset whose file changed, 500 otherwise.
func status(err error) int {
	switch {
	case errors.Is(err, errChanged):
		return http.StatusGone
	case errors.Is(err, errs.Argument), errors.Is(err, errs.Shape):
		return http.StatusBadRequest
	case errors.Is(err, errs.Cancelled):
		return http.StatusConflict
	}
	return http.StatusInternalServerError
}

func f32Bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func f64Bytes(v []float64) []byte {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(x))
	}
	return b
}

func sendF32(w http.ResponseWriter, shape []int, v []float32) { send(w, "f4", shape, f32Bytes(v)) }
func sendF64(w http.ResponseWriter, shape []int, v []float64) { send(w, "f8", shape, f64Bytes(v)) }

func send(w http.ResponseWriter, dtype string, shape []int, data []byte) {
	parts := make([]string, len(shape))
	for i, n := range shape {
		parts[i] = strconv.Itoa(n)
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("X-DType", dtype)
	h.Set("X-Shape", strings.Join(parts, ","))
	h.Set("Content-Length", strconv.Itoa(len(data)))
	w.Write(data)
}
