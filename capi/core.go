package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"runtime/cgo"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/stemdot/stemdot/affinity"
	"github.com/stemdot/stemdot/cuda"
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/engine"
	"github.com/stemdot/stemdot/masks"
	"github.com/stemdot/stemdot/planner"
)

// status mirrors stemdot_status of include/stemdot.h (exports.go checks at compile time
// that the values agree).
type status int

// The status codes, in the order of the C enum.
const (
	statusOK status = iota
	errInvalidArgument
	errIO
	errFormat
	errShape
	errDType
	errPlan
	errCancelled
	errBadHandle
	errCUDAUnavailable
	errInternal
)

// apiError is an error with the status code the C ABI returns for it.
type apiError struct {
	code status
	err  error
}

func (e *apiError) Error() string { return e.err.Error() }
func (e *apiError) Unwrap() error { return e.err }

// failf returns an apiError with code and a formatted message.
func failf(code status, format string, args ...any) error {
	return &apiError{code: code, err: fmt.Errorf(format, args...)}
}

// withCode wraps err (nil stays nil) with code.
func withCode(code status, err error) error {
	if err == nil {
		return nil
	}
	return &apiError{code: code, err: err}
}

// codeOf is the status code of err: the code of an apiError in its chain, cancelled for
// a context cancellation, internal for anything else (a path the ABI did not classify).
func codeOf(err error) status {
	var ae *apiError
	switch {
	case err == nil:
		return statusOK
	case errors.As(err, &ae):
		return ae.code
	case errors.Is(err, context.Canceled):
		return errCancelled
	}
	return errInternal
}

// Handle kinds, as named in error messages.
const (
	kindDataset = "dataset"
	kindPlan    = "plan"
	kindRun     = "run"
)

// handleRegistry records the live handles given to C. A runtime/cgo.Handle's Value
// panics on a freed or unknown handle, so every use is checked here first: unknown,
// freed and wrong-kind handles become errBadHandle errors.
type handleRegistry struct {
	mu    sync.Mutex
	live  map[cgo.Handle]string // handle → kind
	users map[cgo.Handle]int    // handle → applies using it now (see acquire)
}

var handles = handleRegistry{live: make(map[cgo.Handle]string), users: make(map[cgo.Handle]int)}

// add registers v under a new handle of kind.
func (r *handleRegistry) add(kind string, v any) uint64 {
	h := cgo.NewHandle(v)
	r.mu.Lock()
	r.live[h] = kind
	r.mu.Unlock()
	return uint64(h)
}

// checkLocked returns the handle for id after checking it is live and of kind.
func (r *handleRegistry) checkLocked(id uint64, kind string) (cgo.Handle, error) {
	h := cgo.Handle(id)
	got, ok := r.live[h]
	switch {
	case id == 0:
		return 0, failf(errBadHandle, "%s handle is 0 (none)", kind)
	case !ok:
		return 0, failf(errBadHandle, "%s handle %d is not valid (never created, or already freed)", kind, id)
	case got != kind:
		return 0, failf(errBadHandle, "handle %d is a %s handle, not a %s handle", id, got, kind)
	}
	return h, nil
}

// get returns the value of a live handle of kind.
func (r *handleRegistry) get(id uint64, kind string) (any, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h, err := r.checkLocked(id, kind)
	if err != nil {
		return nil, err
	}
	return h.Value(), nil
}

// acquire returns the value of a live handle of kind and marks it in use until release
// is called: remove refuses a handle in use, so that freeing a dataset on one thread
// cannot unmap or drop frames that an apply on another thread is reading.
func (r *handleRegistry) acquire(id uint64, kind string) (v any, release func(), err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h, err := r.checkLocked(id, kind)
	if err != nil {
		return nil, nil, err
	}
	r.users[h]++
	return h.Value(), func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.users[h]--; r.users[h] == 0 {
			delete(r.users, h)
		}
	}, nil
}

// remove unregisters a live handle of kind and returns its value. It fails while the
// handle is in use (acquire). release, when not nil, runs first under the registry lock
// and may refuse the removal with an error.
func (r *handleRegistry) remove(id uint64, kind string, release func(v any) error) (any, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h, err := r.checkLocked(id, kind)
	if err != nil {
		return nil, err
	}
	if r.users[h] > 0 {
		return nil, failf(errInvalidArgument, "%s handle %d is in use by a running apply: free it after the apply returns", kind, id)
	}
	v := h.Value()
	if release != nil {
		if err := release(v); err != nil {
			return nil, err
		}
	}
	delete(r.live, h)
	h.Delete()
	return v, nil
}

func getDataset(id uint64) (dataset.Dataset, error) {
	v, err := handles.get(id, kindDataset)
	if err != nil {
		return nil, err
	}
	return v.(dataset.Dataset), nil
}

func getPlan(id uint64) (*planSpec, error) {
	v, err := handles.get(id, kindPlan)
	if err != nil {
		return nil, err
	}
	return v.(*planSpec), nil
}

func getRun(id uint64) (*run, error) {
	v, err := handles.get(id, kindRun)
	if err != nil {
		return nil, err
	}
	return v.(*run), nil
}

// parseFormatOptions parses the option string of stemdot_open, "key=value;key=value"
// with keys format, nav_shape, sig_shape, dtype, byte_order and offset (see
// include/stemdot.h), into dataset.Options.
func parseFormatOptions(s string) (dataset.Options, error) {
	var opt dataset.Options
	seen := map[string]bool{}
	for item := range strings.SplitSeq(s, ";") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		key, value, ok := strings.Cut(item, "=")
		key, value = strings.ToLower(strings.TrimSpace(key)), strings.TrimSpace(value)
		if !ok || key == "" {
			return opt, failf(errInvalidArgument, "format option %q is not key=value", item)
		}
		if seen[key] {
			return opt, failf(errInvalidArgument, "format option %q given twice", key)
		}
		seen[key] = true
		var err error
		switch key {
		case "format":
			opt.Format = strings.ToLower(value)
		case "nav_shape":
			opt.NavShape, err = parseShape(key, value, 0)
		case "sig_shape":
			opt.SigShape, err = parseShape(key, value, 2)
		case "dtype":
			if opt.DType, err = dataset.ParseDType(value); err != nil {
				err = withCode(errDType, fmt.Errorf("format option dtype: %w", err))
			}
		case "byte_order":
			switch strings.ToLower(value) {
			case "little":
				opt.BigEndian = false
			case "big":
				opt.BigEndian = true
			default:
				err = failf(errInvalidArgument, "format option byte_order=%q: want little or big", value)
			}
		case "offset":
			opt.Offset, err = strconv.ParseInt(value, 10, 64)
			if err != nil || opt.Offset < 0 {
				err = failf(errInvalidArgument, "format option offset=%q: want a non-negative byte count", value)
			}
		default:
			err = failf(errInvalidArgument, "unknown format option %q (known: format, nav_shape, sig_shape, dtype, byte_order, offset)", key)
		}
		if err != nil {
			return opt, err
		}
	}
	return opt, nil
}

// parseShape parses "256,256" (optionally in parentheses) into positive sizes; ndim > 0
// requires exactly that many.
func parseShape(key, value string, ndim int) ([]int, error) {
	fields := strings.Split(strings.Trim(value, "()[] "), ",")
	shape := make([]int, 0, len(fields))
	for _, f := range fields {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, failf(errShape, "format option %s=%q: %q is not a positive size", key, value, strings.TrimSpace(f))
		}
		shape = append(shape, n)
	}
	if ndim > 0 && len(shape) != ndim {
		return nil, failf(errShape, "format option %s=%q: want %d sizes, got %d", key, value, ndim, len(shape))
	}
	return shape, nil
}

// openDataset opens path with the stemdot_open option string. Missing or unreadable
// files are errIO; everything else dataset.Open rejects (unknown format, a size that is
// not a whole number of frames, inconsistent headers, nav shape vs frame count) is
// errFormat.
func openDataset(path, options string) (dataset.Dataset, error) {
	if path == "" {
		return nil, failf(errInvalidArgument, "empty dataset path")
	}
	opt, err := parseFormatOptions(options)
	if err != nil {
		return nil, err
	}
	ds, err := dataset.Open(path, opt)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) || errors.Is(err, fs.ErrNotExist) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, withCode(errIO, err)
		}
		return nil, withCode(errFormat, err)
	}
	return ds, nil
}

// memoryDataset wraps caller-owned frames (host byte order, C order, no copy) as a
// dataset; dtype is a stemdot_dtype value.
func memoryDataset(frames []byte, dtype int, nav []int, sigY, sigX int) (dataset.Dataset, error) {
	dt := dataset.DType(dtype)
	if dtype <= 0 || dt.Size() == 0 {
		return nil, failf(errDType, "invalid frame dtype %d (want STEMDOT_UINT8 .. STEMDOT_FLOAT64, 1..8)", dtype)
	}
	if len(nav) < 1 || len(nav) > maxNavDims {
		return nil, failf(errInvalidArgument, "nav_ndim %d is not in 1..%d", len(nav), maxNavDims)
	}
	ds, err := dataset.FromMemory(frames, nav, [2]int{sigY, sigX}, dt)
	return ds, withCode(errShape, err)
}

// maxNavDims is STEMDOT_MAX_NAV_DIMS.
const maxNavDims = 8

// parseMask builds the masks of a CLI --mask spec for frames of sigY × sigX pixels.
func parseMask(spec string, sigY, sigX int) (*masks.Stack, error) {
	if sigY <= 0 || sigX <= 0 {
		return nil, failf(errShape, "sig shape (%d, %d) has a non-positive size", sigY, sigX)
	}
	s, err := masks.Parse(spec, [2]int{sigY, sigX})
	return s, withCode(errInvalidArgument, err)
}

// planSpec is a plan handle: a resource request checked against this machine. The
// partitions are planned per dataset at each apply.
type planSpec struct {
	topo *affinity.Topology
	gpus []affinity.GPU
	req  planner.Request
}

// newPlanSpec parses the cpus and gpus request strings of the CLI ("" = default) and
// checks the request by planning it without a dataset.
func newPlanSpec(cpus, gpus string) (*planSpec, error) {
	p := &planSpec{req: planner.Request{CUDA: cuda.Built()}}
	if strings.TrimSpace(cpus) != "" {
		if err := p.req.ParseCPUs(cpus); err != nil {
			return nil, withCode(errInvalidArgument, err)
		}
	}
	if strings.TrimSpace(gpus) != "" {
		if err := p.req.ParseGPUs(gpus); err != nil {
			return nil, withCode(errInvalidArgument, err)
		}
	}
	wantGPUs := p.req.GPUs > 0 || len(p.req.GPUList) > 0 || p.req.GPUAuto
	if wantGPUs && !p.req.CUDA {
		return nil, failf(errCUDAUnavailable, "GPU workers requested (gpus=%q), but stemdot was built without CUDA support", gpus)
	}
	var err error
	if p.topo, err = affinity.Detect(); err != nil {
		return nil, withCode(errPlan, err)
	}
	if wantGPUs {
		if p.gpus, err = affinity.DiscoverGPUs(); err != nil {
			return nil, withCode(errCUDAUnavailable, err)
		}
		if len(p.gpus) == 0 {
			return nil, failf(errCUDAUnavailable, "GPU workers requested (gpus=%q), but no GPU was found", gpus)
		}
	}
	if _, err := p.plan(nil); err != nil {
		return nil, err
	}
	return p, nil
}

// plan makes the plan for a dataset of shape (nil: workers only, no partitions).
func (p *planSpec) plan(shape *planner.Shape) (*planner.Plan, error) {
	pl, err := planner.Make(p.topo, p.gpus, p.req, shape)
	return pl, withCode(errPlan, err)
}

// run is a run handle: it lets another thread cancel the apply running on it.
type run struct {
	mu        sync.Mutex
	busy      bool
	cancelled bool
	cancel    context.CancelFunc
}

// start marks the run busy and returns the context of one apply, or an error when the
// run is busy or cancelled.
func (r *run) start() (context.Context, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.busy {
		return nil, failf(errInvalidArgument, "run is already in use by another apply")
	}
	if r.cancelled {
		return nil, failf(errCancelled, "run was cancelled (reset it with stemdot_run_reset to reuse it)")
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.busy, r.cancel = true, cancel
	return ctx, nil
}

// finish ends the apply started by start; it reports whether the run was cancelled
// meanwhile.
func (r *run) finish() (cancelled bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cancel()
	r.busy, r.cancel = false, nil
	return r.cancelled
}

// stop cancels the running apply, if any, and every later one until reset.
func (r *run) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cancelled = true
	if r.cancel != nil {
		r.cancel()
	}
}

// reset clears a cancellation; it fails while an apply runs.
func (r *run) reset() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.busy {
		return failf(errInvalidArgument, "cannot reset a run while an apply is running on it")
	}
	r.cancelled = false
	return nil
}

// idle fails while an apply runs (used before freeing the handle).
func (r *run) idle() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.busy {
		return failf(errInvalidArgument, "cannot free a run while an apply is running on it (cancel it and wait for the apply to return)")
	}
	return nil
}

// applyRequest is one stemdot_apply call, its buffers already wrapped as Go slices.
type applyRequest struct {
	ds    dataset.Dataset
	masks []float32 // n × sig_y × sig_x
	n     int
	sig   [2]int
	plan  *planSpec // nil: the default plan
	run   *run      // nil: not cancellable
	out32 []float32 // exactly one of out32, out64 is set
	out64 []float64
	// progress, when set, is called on the goroutine that called apply (so on the C
	// thread that called stemdot_apply), with strictly increasing done, and with done ==
	// total at the end of a successful run.
	progress func(done, total uint64)
}

// apply checks the request, plans it and runs the engine.
func apply(req applyRequest) error {
	nFrames := req.ds.NumFrames()
	sig := req.ds.SigShape()
	if req.sig != sig {
		return failf(errShape, "masks of sig shape (%d, %d) do not match the dataset's sig shape (%d, %d)", req.sig[0], req.sig[1], sig[0], sig[1])
	}
	stack, err := masks.New(req.n, sig[0], sig[1], req.masks, nil)
	if err != nil {
		return withCode(errInvalidArgument, err)
	}
	if want, got := nFrames*req.n, len(req.out32)+len(req.out64); got != want {
		return failf(errShape, "result buffer holds %d values, but %d frames × %d masks need %d", got, nFrames, req.n, want)
	}
	spec := req.plan
	if spec == nil {
		if spec, err = newPlanSpec("", ""); err != nil {
			return err
		}
	}
	plan, err := spec.plan(&planner.Shape{NumFrames: nFrames, SigY: sig[0], SigX: sig[1]})
	if err != nil {
		return err
	}

	ctx := context.Background()
	if req.run != nil {
		if ctx, err = req.run.start(); err != nil {
			return err
		}
	}
	opt := engine.Options{Float64: req.out64 != nil, Out32: req.out32, Out64: req.out64}
	err = runEngine(ctx, req.ds, stack, plan, opt, req.progress)
	// A cancel issued at any time during the call returns errCancelled, also when the
	// engine finished meanwhile: callers see one outcome per cancel, deterministically.
	if req.run != nil && req.run.finish() {
		return failf(errCancelled, "apply cancelled")
	}
	var ae *apiError
	switch {
	case err == nil, errors.As(err, &ae):
		return err
	case errors.Is(err, context.Canceled):
		return withCode(errCancelled, err)
	}
	// A worker failed during the run: reading frames, or pinning its thread.
	return withCode(errIO, err)
}

// runEngine runs engine.ApplyMasks. Without progress it runs on the calling goroutine;
// with progress the engine runs on another goroutine while the calling one relays the
// workers' progress to the callback, so that a C callback runs on the thread that
// called stemdot_apply and a slow callback never stalls a worker.
func runEngine(ctx context.Context, ds dataset.Dataset, stack *masks.Stack, plan *planner.Plan, opt engine.Options, progress func(done, total uint64)) error {
	if progress == nil {
		_, err := engine.ApplyMasks(ctx, ds, stack, plan, opt)
		return err
	}
	total := uint64(ds.NumFrames())
	var latest atomic.Uint64
	wake := make(chan struct{}, 1)
	opt.Progress = func(done, _ int) {
		latest.Store(uint64(done))
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	finished := make(chan error, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				finished <- panicError(r)
			}
		}()
		_, err := engine.ApplyMasks(ctx, ds, stack, plan, opt)
		finished <- err
	}()
	var reported uint64
	report := func(done uint64) {
		if done > reported {
			reported = done
			progress(done, total)
		}
	}
	for {
		select {
		case <-wake:
			report(latest.Load())
		case err := <-finished:
			if err == nil {
				report(total)
			}
			return err
		}
	}
}

// panicError turns a recovered panic value into an errInternal error.
func panicError(r any) error {
	return failf(errInternal, "internal error (recovered panic): %v", r)
}

// describePlan is the JSON of plan h, with partitions for dataset ds (0: none).
func describePlan(h, ds uint64) ([]byte, error) {
	p, err := getPlan(h)
	if err != nil {
		return nil, err
	}
	var shape *planner.Shape
	if ds != 0 {
		d, err := getDataset(ds)
		if err != nil {
			return nil, err
		}
		sig := d.SigShape()
		shape = &planner.Shape{NumFrames: d.NumFrames(), SigY: sig[0], SigX: sig[1]}
	}
	pl, err := p.plan(shape)
	if err != nil {
		return nil, err
	}
	text, err := json.Marshal(pl)
	return text, withCode(errInternal, err)
}
