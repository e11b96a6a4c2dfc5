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
	"sync"
	"unsafe"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/masks"
)

// Resident is a dataset held in the memory of one device: its frames, in native dtype,
// loaded once by LoadResident; Apply then runs any mask stack on them with only the
// results crossing PCIe. Its methods may be called from several goroutines (they run one
// at a time).
type Resident struct {
	mu         sync.Mutex
	h          *C.stemdot_frames
	dev        int
	dtype      dataset.DType
	pixels     int
	nFrames    int
	frameBytes int
}

// LoadResident copies every frame of ds (ReadFrames, through two 32 MiB pinned staging
// buffers: the read of one overlaps the copy of the other) into the memory of device dev.
// The dtype must be uint8, uint16, uint32 or float32. A dataset whose frames
// (NumFrames × FrameBytes bytes) and ResidentReserve do not fit in the device's free
// memory is refused before anything is allocated, with a *MemoryError. A read error or
// ctx's cancellation frees what was loaded and is returned.
func LoadResident(ctx context.Context, dev int, ds dataset.Dataset) (*Resident, error) {
	dt := ds.DType()
	switch dt {
	case dataset.Uint8, dataset.Uint16, dataset.Uint32, dataset.Float32:
	default:
		return nil, fmt.Errorf("cuda: dtype %s is not supported on the GPU (want uint8, uint16, uint32 or float32)", dt)
	}
	sig := ds.SigShape()
	r := &Resident{dev: dev, dtype: dt, pixels: sig[0] * sig[1], nFrames: ds.NumFrames(), frameBytes: ds.FrameBytes()}
	if dev < 0 || r.nFrames < 1 || r.pixels < 1 {
		return nil, fmt.Errorf("cuda: resident dataset of %d frames of %d pixels on device %d: need a device >= 0 and at least one frame", r.nFrames, r.pixels, dev)
	}
	need := int64(r.nFrames) * int64(r.frameBytes)
	if err := r.checkMemory(need); err != nil {
		return nil, err
	}
	st := C.stemdot_frames_create(C.int(dev), cDType(dt), C.int64_t(r.pixels), C.int64_t(r.nFrames), &r.h)
	if st.code == C.STEMDOT_ERR_DEVICE_MEMORY { // freed memory was taken meanwhile
		if err := r.checkMemory(need); err != nil {
			return nil, err
		}
	}
	if err := statusError(dev, st); err != nil {
		return nil, err
	}
	if err := r.load(ctx, ds); err != nil {
		return nil, errors.Join(err, r.Close())
	}
	return r, nil
}

// checkMemory returns a *MemoryError when need bytes of frames and ResidentReserve do not
// fit in the device's free memory.
func (r *Resident) checkMemory(need int64) error {
	var free, total C.size_t
	if err := statusError(r.dev, C.stemdot_device_memory(C.int(r.dev), &free, &total)); err != nil {
		return err
	}
	if need > int64(free)-ResidentReserve {
		return &MemoryError{Device: r.dev, Need: need, Reserve: ResidentReserve, Free: int64(free), Total: int64(total)}
	}
	return nil
}

// load reads the frames into the staging slots in turn and uploads them.
func (r *Resident) load(ctx context.Context, ds dataset.Dataset) error {
	slot := 0
	for a := 0; a < r.nFrames; slot ^= 1 {
		if err := ctx.Err(); err != nil {
			return err
		}
		var p unsafe.Pointer
		var capacity C.int
		if err := statusError(r.dev, C.stemdot_frames_stage(r.h, C.int(slot), &p, &capacity)); err != nil {
			return err
		}
		b := min(r.nFrames, a+int(capacity))
		if err := ds.ReadFrames(a, b, unsafe.Slice((*byte)(p), (b-a)*r.frameBytes)); err != nil {
			return err
		}
		if err := statusError(r.dev, C.stemdot_frames_upload(r.h, C.int(slot), C.int64_t(a), C.int(b-a))); err != nil {
			return err
		}
		a = b
	}
	return statusError(r.dev, C.stemdot_frames_finish(r.h))
}

// Device is the device index the frames are on.
func (r *Resident) Device() int { return r.dev }

// Bytes is the device memory the frames take.
func (r *Resident) Bytes() int64 { return int64(r.nFrames) * int64(r.frameBytes) }

// Apply computes the mask-dot products of resident frames [start, end) with stack (its
// pixels sig_y·sig_x equal to the frames'; in CSR form when stack.PreferSparse(), as the
// engine does) and writes them to out32[f*N+m], or out64 when out64 is not nil (float64
// accumulation), for every frame f in the range; other elements are untouched. The stack
// is uploaded for the call (shared with Runners holding the same stack) and released
// after it. With out64, weights given in float64 (a stack with Lo parts) count at float64
// precision (RunnerConfig.LoPairs).
func (r *Resident) Apply(stack *masks.Stack, start, end int, out32 []float32, out64 []float64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.h == nil {
		return ErrClosed
	}
	if stack == nil || stack.N < 1 || stack.Pixels() != r.pixels {
		return fmt.Errorf("cuda: the mask stack must hold at least one mask of the frames' %d pixels", r.pixels)
	}
	pairs := out64 != nil && !stack.Exact()
	if pairs {
		stack = stack.LoPairs()
	}
	cfg := RunnerConfig{Device: r.dev, DType: r.dtype, Pixels: r.pixels, NMasks: stack.N, Masks: stack.Data, Float64: out64 != nil, LoPairs: pairs}
	if stack.PreferSparse() {
		cfg.Sparse = stack.ToCSR()
		if err := checkCSR(cfg.Sparse, cfg.NMasks, cfg.Pixels); err != nil {
			return err
		}
	} else if len(stack.Data) != stack.N*r.pixels {
		return fmt.Errorf("cuda: mask stack holds %d weights, want %d masks x %d pixels", len(stack.Data), stack.N, r.pixels)
	}
	if end > r.nFrames {
		return fmt.Errorf("cuda: frame range [%d, %d) exceeds the %d resident frames", start, end, r.nFrames)
	}
	if err := cfg.checkOut(start, end, out32, out64); err != nil || end == start {
		return err
	}
	h, err := acquireMasks(&cfg)
	if err != nil {
		return err
	}
	var dst unsafe.Pointer
	var res []float64 // with LoPairs: the products with both halves of the stack
	f64 := C.int(0)
	switch {
	case pairs:
		res = make([]float64, (end-start)*stack.N)
		dst, f64 = unsafe.Pointer(&res[0]), 1
	case cfg.Float64:
		dst, f64 = unsafe.Pointer(&out64[start*stack.N]), 1
	default:
		dst = unsafe.Pointer(&out32[start*stack.N])
	}
	err = statusError(r.dev, C.stemdot_frames_apply(r.h, h, f64, C.int64_t(start), C.int64_t(end-start), dst))
	if err == nil && pairs {
		addLoPairs(out64[start*stack.N/2:end*stack.N/2], res, stack.N/2)
	}
	return errors.Join(err, releaseMasks(&cfg))
}

// Close frees the frames on the device. Closing twice is a no-op.
func (r *Resident) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.h == nil {
		return nil
	}
	err := statusError(r.dev, C.stemdot_frames_destroy(r.h))
	r.h = nil
	return err
}
