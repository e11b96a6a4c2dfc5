package main

import (
	"runtime/cgo"
	"sync"

	"github.com/stemdot/stemdot"
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
)

// Handle kinds, as named in error messages.
const (
	kindDataset = "dataset"
	kindPlan    = "plan"
	kindRun     = "run"
	kindMasks   = "masks"
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
		return 0, badHandlef("%s handle is 0 (none)", kind)
	case !ok:
		return 0, badHandlef("%s handle %d is not valid (never created, or already freed)", kind, id)
	case got != kind:
		return 0, badHandlef("handle %d is a %s handle, not a %s handle", id, got, kind)
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
// handle is in use (acquire: an apply, a viewer's server). release, when not nil, runs
// first under the registry lock and may refuse the removal with an error.
func (r *handleRegistry) remove(id uint64, kind string, release func(v any) error) (any, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h, err := r.checkLocked(id, kind)
	if err != nil {
		return nil, err
	}
	if r.users[h] > 0 {
		return nil, failf(errs.Argument, "%s handle %d is in use by a running apply or a viewer: free it after the apply returns, or after stemdot_view_free", kind, id)
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

func getPlan(id uint64) (*stemdot.Planner, error) {
	v, err := handles.get(id, kindPlan)
	if err != nil {
		return nil, err
	}
	return v.(*stemdot.Planner), nil
}

func getRun(id uint64) (*run, error) {
	v, err := handles.get(id, kindRun)
	if err != nil {
		return nil, err
	}
	return v.(*run), nil
}

// jobOf acquires the dataset of a C call that runs a job (release it when done) and
// looks up its plan, the default plan (CPU workers on every usable core) for handle 0,
// and its run, nil (not cancellable) for handle 0.
func jobOf(dsHandle, planHandle, runHandle uint64) (ds dataset.Dataset, pl *stemdot.Planner, r *run, release func(), err error) {
	v, release, err := handles.acquire(dsHandle, kindDataset)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	if planHandle != 0 {
		pl, err = getPlan(planHandle)
	} else {
		pl, err = newPlanner("", "")
	}
	if err == nil && runHandle != 0 {
		r, err = getRun(runHandle)
	}
	if err != nil {
		release()
		return nil, nil, nil, nil, err
	}
	return v.(dataset.Dataset), pl, r, release, nil
}
