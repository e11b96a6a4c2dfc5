//go:build cuda

package cuda

/*
#include "stemdot_kernels.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"unsafe"

	"github.com/stemdot/stemdot/dataset"
)

// windowBytes is the size of the registration windows of the copy-free feed: large
// enough that one cudaHostRegister call (34-50 GB/s on an H200 host) is cheap per byte,
// small enough that a few windows registered ahead pin little memory.
var windowBytes = 64 << 20

// registrars is the number of threads that register a feed's windows at once: one
// registers about 30 GB/s of page-cached mapping on an H200 host, under the link's 55.
const registrars = 4

// ahead is how many windows past a tile's are registered in advance.
const ahead = 6

// A feed registers a dataset's memory mapping with the driver for DMA, window by window:
// window k is bytes [k·windowBytes, (k+1)·windowBytes) of the mapping (the last one
// rounded up to a page). Registrar goroutines, each locked to an OS thread that the OS
// schedules freely (pinned beside the worker's thread they would delay its submissions),
// register the windows the runner will need next while the device copies the current
// ones, and unregister the windows the runner has moved past.
type feed struct {
	key     feedKey
	mapping []byte
	jobs    chan func()
	done    sync.WaitGroup

	mu      sync.Mutex
	users   int             // runners using the feed
	windows map[int]*window // registered or being registered, by index
	leaving map[int]*window // dropped windows, until they are unregistered
}

// feedKey identifies a feed: one per device and mapping, shared by the runners that
// read the mapping, so that their windows are registered once (the driver refuses to
// register a range twice).
type feedKey struct {
	dev  int
	base unsafe.Pointer
	size int
}

var feeds = struct {
	sync.Mutex
	m map[feedKey]*feed
}{m: map[feedKey]*feed{}}

// window is one registration, held by refs runners; ready is closed when it is done
// (err says how), gone when it is undone.
type window struct {
	ptr   unsafe.Pointer
	size  int
	refs  int
	ready chan struct{}
	gone  chan struct{}
	err   error
}

// acquireFeed returns the feed of mapping on device dev, starting it for the first user.
func acquireFeed(dev int, mapping []byte) *feed {
	key := feedKey{dev, unsafe.Pointer(unsafe.SliceData(mapping)), len(mapping)}
	feeds.Lock()
	defer feeds.Unlock()
	f := feeds.m[key]
	if f == nil {
		f = &feed{key: key, mapping: mapping, windows: map[int]*window{}, leaving: map[int]*window{}, jobs: make(chan func(), 1024)}
		for range registrars {
			f.done.Go(func() {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				for job := range f.jobs {
					job()
				}
			})
		}
		feeds.m[key] = f
	}
	f.mu.Lock()
	f.users++
	f.mu.Unlock()
	return f
}

// leave ends one user's use of the feed (its windows dropped already); the last user
// stops the registrars once every window is unregistered.
func (f *feed) leave() {
	feeds.Lock()
	defer feeds.Unlock()
	f.mu.Lock()
	f.users--
	last := f.users == 0
	f.mu.Unlock()
	if last {
		delete(feeds.m, f.key)
		close(f.jobs)
		f.done.Wait()
	}
}

// hold takes a reference to window k, starting its registration if it has none; false
// when k lies outside the mapping.
func (f *feed) hold(k int) bool {
	lo := k * windowBytes
	if k < 0 || lo >= len(f.mapping) {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if w := f.windows[k]; w != nil {
		w.refs++
		return true
	}
	page := os.Getpagesize()
	hi := min(lo+windowBytes, len(f.mapping))
	hi = (hi + page - 1) / page * page // the mapping extends to the end of its last page
	w := &window{ptr: unsafe.Pointer(unsafe.SliceData(f.mapping[lo:])), size: hi - lo, refs: 1, ready: make(chan struct{}), gone: make(chan struct{})}
	f.windows[k] = w
	old := f.leaving[k]
	delete(f.leaving, k)
	f.jobs <- func() {
		if old != nil {
			<-old.gone // its unregistration was queued first, so it is under way
		}
		w.err = statusError(f.key.dev, C.stemdot_host_register(C.int(f.key.dev), w.ptr, C.size_t(w.size)))
		close(w.ready)
	}
	return true
}

// wait waits until window k (held by the caller) is registered.
func (f *feed) wait(k int) error {
	f.mu.Lock()
	w := f.windows[k]
	f.mu.Unlock()
	<-w.ready
	if w.err != nil {
		return fmt.Errorf("%w: bytes [%d, %d): %w", ErrRegister, k*windowBytes, k*windowBytes+w.size, w.err)
	}
	return nil
}

// drop releases a reference to window k; the last one unregisters it (after the
// registrations asked before have started). Nothing of the caller's may be in flight
// from it.
func (f *feed) drop(k int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := f.windows[k]
	if w.refs--; w.refs > 0 {
		return
	}
	delete(f.windows, k)
	f.leaving[k] = w
	f.jobs <- func() {
		<-w.ready
		if w.err == nil {
			C.stemdot_host_unregister(C.int(f.key.dev), w.ptr)
		}
		close(w.gone)
	}
}

// registerAndUnregister registers n bytes at p on device dev and undoes it (for
// measuring the driver's registration rate).
func registerAndUnregister(dev int, p unsafe.Pointer, n int) error {
	if err := statusError(dev, C.stemdot_host_register(C.int(dev), p, C.size_t(n))); err != nil {
		return err
	}
	return statusError(dev, C.stemdot_host_unregister(C.int(dev), p))
}

// releaseWindows drops the runner's windows outside [lo, hi] (all of them when lo > hi).
func (r *Runner) releaseWindows(lo, hi int) {
	for k := range r.held {
		if k < lo || k > hi {
			r.feed.drop(k)
			delete(r.held, k)
		}
	}
}

// closeFeed drops every window the runner holds and leaves its feed.
func (r *Runner) closeFeed() {
	if r.feed == nil {
		return
	}
	r.releaseWindows(1, 0)
	r.feed.leave()
	r.feed = nil
}

// RunMapped computes the mask-dot products of frames [start, end) like Run, but moves
// the frames to the device without a CPU copy: fm (from dataset.Mapper.MapFrames(start,
// end)) locates their records in the dataset's read-only memory mapping; windows of the
// mapping are registered with the driver (cudaHostRegister, read-only) ahead of use by a
// background thread and DMA'd from directly; per-frame headers are skipped, byte order is
// swapped and MIB's "MQ1," magic is checked on the device. Windows stay registered while
// the runner is likely to need them (the next ones after end) and are released on Close.
// The mapping must stay mapped until Close.
//
// Errors: ErrRegister (wrapped) when the driver refuses to register the mapping (the
// caller then computes the range again with Run); a record whose header lacks the magic
// ("frame N: its header does not start with ..."); CUDA errors; ctx's error.
func (r *Runner) RunMapped(ctx context.Context, start, end int, fm dataset.FrameMap, out32 []float32, out64 []float64) error {
	if r.h == nil {
		return errors.New("cuda: RunMapped on a closed Runner")
	}
	if err := r.cfg.checkMapped(start, end, fm, out32, out64); err != nil {
		return err
	}
	if r.feed == nil || unsafe.SliceData(r.feed.mapping) != unsafe.SliceData(fm.Mapping) || len(r.feed.mapping) != len(fm.Mapping) {
		r.closeFeed()
		r.feed, r.held = acquireFeed(r.cfg.Device, fm.Mapping), map[int]bool{}
	}
	f := r.feed
	fb := int64(r.frameBytes)
	// A tile spans at most two windows.
	tileFrames := max(1, min(r.cfg.TileFrames, 65535, windowBytes/int(fm.Stride)))
	var magic uint32
	for i := range len(fm.Magic) {
		magic |= uint32(fm.Magic[i]) << (8 * i)
	}
	swap := fm.Swapped() && r.cfg.DType.Size() > 1
	first := int(fm.Offset / int64(windowBytes))
	last := first
	submit := func(slot, a, b int) error {
		lo := fm.Offset + int64(a-start)*fm.Stride
		hi := lo + int64(b-a-1)*fm.Stride + int64(fm.Header) + fb
		k0, k1 := int(lo/int64(windowBytes)), int((hi-1)/int64(windowBytes))
		for k := k0; k <= k1+ahead; k++ {
			if !r.held[k] && f.hold(k) {
				r.held[k] = true
			}
		}
		for k := k0; k <= k1; k++ {
			if err := f.wait(k); err != nil {
				return err
			}
		}
		last = k1
		t := C.stemdot_mapped_tile{
			n_frames:    C.int(b - a),
			stride:      C.int64_t(fm.Stride),
			header:      C.int(fm.Header),
			magic:       C.uint32_t(magic),
			magic_len:   C.int(len(fm.Magic)),
			first_frame: C.int64_t(a),
		}
		if swap {
			t.swap = 1
		}
		split := min(hi, int64(k0+1)*int64(windowBytes))
		t.src[0], t.len[0] = unsafe.Pointer(&fm.Mapping[lo]), C.size_t(split-lo)
		if split < hi {
			t.src[1], t.len[1] = unsafe.Pointer(&fm.Mapping[split]), C.size_t(hi-split)
		}
		return statusError(r.cfg.Device, C.stemdot_runner_submit_mapped(r.h, C.int(slot), &t))
	}
	err := r.pipeline(ctx, start, end, tileFrames, submit, fm.Magic, out32, out64)
	// Nothing is in flight now: keep the windows of the range's end and those ahead.
	r.releaseWindows(max(first, last), last+ahead)
	return err
}
