package main

import (
	"context"
	"sync"

	"github.com/stemdot/stemdot/errs"
)

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
		return nil, failf(errs.Argument, "run is already in use by another apply")
	}
	if r.cancelled {
		return nil, failf(errs.Cancelled, "run was cancelled (reset it with stemdot_run_reset to reuse it)")
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
		return failf(errs.Argument, "cannot reset a run while an apply is running on it")
	}
	r.cancelled = false
	return nil
}

// idle fails while an apply runs (used before freeing the handle).
func (r *run) idle() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.busy {
		return failf(errs.Argument, "cannot free a run while an apply is running on it (cancel it and wait for the apply to return)")
	}
	return nil
}
