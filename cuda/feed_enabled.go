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
// small enough that one registration (under a millisecond) does not hold the driver
// longer than the tiles in flight (MappedStreams of them) keep the link busy.
var windowBytes = 32 << 20

// registrars is the number of threads that register a feed's windows at once: one
// registers about 30 GB/s of page-cached mapping on an H200 host, under the link's 55.
const registrars = 2

// ahead is how many windows past a tile's are registered in advance.
const ahead = 8

// feed registers a dataset's memory mapping with the driver for DMA, window by window:
// window k is bytes [k·windowBytes, (k+1)·windowBytes) of the mapping (the last one
// rounded up to a page). Registrar goroutines, each locked to an OS thread that the OS
// schedules freely (pinned beside the worker's thread they would delay its submissions),
// register the windows the runner will need next while the device copies the current
// ones, and unregister the windows the runner has moved past.
type feed struct {
	dev     int
	mapping []byte
	windows map[int]*window
	leaving map[int]*window // released windows, until they are unregistered
	jobs    chan func()
	done    sync.WaitGroup
}

// window is one registration; ready is closed when it is done (err says how), gone when
// it is undone.
type window struct {
	ptr   unsafe.Pointer
	size  int
	ready chan struct{}
	gone  chan struct{}
	err   error
}

func newFeed(dev int, mapping []byte) *feed {
	f := &feed{dev: dev, mapping: mapping, windows: map[int]*window{}, leaving: map[int]*window{}, jobs: make(chan func(), 256)}
	for range registrars {
		f.done.Go(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			for job := range f.jobs {
				job()
			}
		})
	}
	return f
}

// want starts registering window k unless it is registered or on its way; k outside the
// mapping is ignored.
func (f *feed) want(k int) {
	lo := k * windowBytes
	if k < 0 || lo >= len(f.mapping) || f.windows[k] != nil {
		return
	}
	page := os.Getpagesize()
	hi := min(lo+windowBytes, len(f.mapping))
	hi = (hi + page - 1) / page * page // the mapping extends to the end of its last page
	w := &window{ptr: unsafe.Pointer(unsafe.SliceData(f.mapping[lo:])), size: hi - lo, ready: make(chan struct{}), gone: make(chan struct{})}
	f.windows[k] = w
	old := f.leaving[k]
	delete(f.leaving, k)
	f.jobs <- func() {
		if old != nil {
			<-old.gone // its unregistration was queued first, so it is under way
		}
		w.err = statusError(f.dev, C.stemdot_host_register(C.int(f.dev), w.ptr, C.size_t(w.size)))
		close(w.ready)
	}
}

// wait waits until window k is registered.
func (f *feed) wait(k int) error {
	f.want(k)
	w := f.windows[k]
	<-w.ready
	if w.err != nil {
		return fmt.Errorf("%w: bytes [%d, %d): %w", ErrRegister, k*windowBytes, k*windowBytes+w.size, w.err)
	}
	return nil
}

// release unregisters window k (after the registrations asked before it have started).
// Nothing may be in flight from it.
func (f *feed) release(k int) {
	w := f.windows[k]
	delete(f.windows, k)
	f.leaving[k] = w
	f.jobs <- func() {
		<-w.ready
		if w.err == nil {
			C.stemdot_host_unregister(C.int(f.dev), w.ptr)
		}
		close(w.gone)
	}
}

// keepOnly releases every window outside [lo, hi].
func (f *feed) keepOnly(lo, hi int) {
	for k := range f.windows {
		if k < lo || k > hi {
			f.release(k)
		}
	}
}

// close releases every window and stops the registrar.
func (f *feed) close() error {
	f.keepOnly(1, 0)
	close(f.jobs)
	f.done.Wait()
	return nil
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
// Errors: ErrRegister (wrapped) when the driver refuses to register the mapping (then
// nothing was computed and the caller uses Run); a record whose header lacks the magic
// ("frame N: its header does not start with ..."); CUDA errors; ctx's error.
func (r *Runner) RunMapped(ctx context.Context, start, end int, fm dataset.FrameMap, out32 []float32, out64 []float64) error {
	if r.h == nil {
		return errors.New("cuda: RunMapped on a closed Runner")
	}
	if err := r.cfg.checkMapped(start, end, fm, out32, out64); err != nil {
		return err
	}
	if r.feed == nil || unsafe.SliceData(r.feed.mapping) != unsafe.SliceData(fm.Mapping) {
		if r.feed != nil {
			r.feed.close()
		}
		r.feed = newFeed(r.cfg.Device, fm.Mapping)
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
			f.want(k)
		}
		for k := k0; k <= k1; k++ {
			if err := f.wait(k); err != nil {
				return err
			}
		}
		last = k1
		t := C.stemdot_mapped_tile{
			n_frames:  C.int(b - a),
			stride:    C.int64_t(fm.Stride),
			header:    C.int(fm.Header),
			magic:     C.uint32_t(magic),
			magic_len: C.int(len(fm.Magic)),
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
	f.keepOnly(max(first, last), last+ahead)
	return err
}
