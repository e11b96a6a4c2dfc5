//go:build cuda

package cuda

/*
#cgo CFLAGS: -I${SRCDIR}/../kernels
#include <stdlib.h>
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
	"time"
	"unsafe"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/masks"
)

// init asks the CUDA runtime to load each kernel when it is first launched instead of
// all of them when a context is created (CUDA 11.7+), which shortens a GPU worker's
// start-up; a value the user set is kept.
func init() {
	if os.Getenv("CUDA_MODULE_LOADING") == "" {
		os.Setenv("CUDA_MODULE_LOADING", "LAZY")
	}
}

// UseTiledDense selects, process-wide, the register- and shared-memory-tiled dense
// kernel for groups of 16 to 64 masks instead of the streaming kernel. It is off by
// default: the tiled kernel has not yet been checked and timed on a GPU. Call it while no
// runner is running.
func UseTiledDense(on bool) {
	v := C.int(0)
	if on {
		v = 1
	}
	C.stemdot_use_tiled_dense(v)
}

// Built reports whether stemdot was built with CUDA support (build tag cuda).
func Built() bool { return true }

// statusError converts a library status into an *Error (nil on success).
func statusError(dev int, st C.stemdot_status) error {
	if st.code == 0 {
		return nil
	}
	return &Error{
		Device:  dev,
		Call:    C.GoString(st.call),
		Code:    int(st.code),
		Message: C.GoString(C.stemdot_error_string(st.code)),
	}
}

// DeviceCount returns the number of CUDA devices. A machine without a GPU or without the
// NVIDIA driver has 0 devices and no error.
func DeviceCount() (int, error) {
	var n C.int
	if err := statusError(-1, C.stemdot_device_count(&n)); err != nil {
		return 0, err
	}
	return int(n), nil
}

// Properties returns the properties of device dev.
func Properties(dev int) (Props, error) {
	var p C.stemdot_props
	if err := statusError(dev, C.stemdot_device_props(C.int(dev), &p)); err != nil {
		return Props{}, err
	}
	return Props{
		Device:          dev,
		Name:            C.GoString(&p.name[0]),
		PCIBusID:        C.GoString(&p.pci_bus_id[0]),
		Major:           int(p.major),
		Minor:           int(p.minor),
		Multiprocessors: int(p.multiprocessors),
		AsyncEngines:    int(p.async_engines),
		L2Bytes:         int(p.l2_bytes),
		MemoryBusBits:   int(p.memory_bus_bits),
		MemoryClockKHz:  int(p.memory_clock_khz),
		TotalMemory:     int64(p.total_memory),
		RuntimeVersion:  int(p.runtime_version),
		DriverVersion:   int(p.driver_version),
	}, nil
}

// CopyTime measures a copy of n bytes of the given kind on device dev: one warm-up copy,
// then iters copies timed with CUDA events. It returns the mean time of one copy.
func CopyTime(dev int, kind CopyKind, n, iters int) (time.Duration, error) {
	if n < 1 || iters < 1 {
		return 0, fmt.Errorf("cuda: CopyTime of %d bytes x %d: both must be >= 1", n, iters)
	}
	var sec C.double
	if err := statusError(dev, C.stemdot_copy_time(C.int(dev), C.int(kind), C.size_t(n), C.int(iters), &sec)); err != nil {
		return 0, err
	}
	return time.Duration(float64(sec) * float64(time.Second)), nil
}

// maskKey identifies a mask stack on a device: the Go arrays (kept alive by the key
// while the entry exists) and the shape.
type maskKey struct {
	dev           int
	dense         unsafe.Pointer
	sparse        *masks.CSR
	nMasks, pixel int
}

// deviceMasks are the mask stacks uploaded so far, one per (device, stack); each entry
// holds one library reference per Runner using it.
var deviceMasks = struct {
	sync.Mutex
	m map[maskKey]*C.stemdot_masks
}{m: map[maskKey]*C.stemdot_masks{}}

func keyOf(cfg *RunnerConfig) maskKey {
	k := maskKey{dev: cfg.Device, nMasks: cfg.NMasks, pixel: cfg.Pixels}
	if cfg.Sparse != nil {
		k.sparse = cfg.Sparse
	} else {
		k.dense = unsafe.Pointer(unsafe.SliceData(cfg.Masks))
	}
	return k
}

// acquireMasks returns the device copy of cfg's stack, uploading it on first use, with
// one more reference.
func acquireMasks(cfg *RunnerConfig) (*C.stemdot_masks, error) {
	k := keyOf(cfg)
	deviceMasks.Lock()
	defer deviceMasks.Unlock()
	if h, ok := deviceMasks.m[k]; ok {
		C.stemdot_masks_retain(h)
		return h, nil
	}
	var h *C.stemdot_masks
	var st C.stemdot_status
	if c := cfg.Sparse; c != nil {
		var col *C.int32_t
		var val *C.float
		if len(c.Col) > 0 {
			col = (*C.int32_t)(unsafe.Pointer(&c.Col[0]))
			val = (*C.float)(unsafe.Pointer(&c.Val[0]))
		}
		st = C.stemdot_masks_create_csr(C.int(cfg.Device), C.int(c.N), C.int64_t(c.Pixels),
			(*C.int32_t)(unsafe.Pointer(&c.RowPtr[0])), col, val, &h)
	} else {
		st = C.stemdot_masks_create_dense(C.int(cfg.Device), (*C.float)(unsafe.Pointer(&cfg.Masks[0])),
			C.int(cfg.NMasks), C.int64_t(cfg.Pixels), &h)
	}
	if err := statusError(cfg.Device, st); err != nil {
		return nil, err
	}
	deviceMasks.m[k] = h
	return h, nil
}

// releaseMasks drops one reference; the last frees the device copy.
func releaseMasks(cfg *RunnerConfig) error {
	k := keyOf(cfg)
	deviceMasks.Lock()
	defer deviceMasks.Unlock()
	var left C.int
	if err := statusError(cfg.Device, C.stemdot_masks_release(deviceMasks.m[k], &left)); err != nil {
		return err // the C side still holds its references: keep the entry
	}
	if left == 0 {
		delete(deviceMasks.m, k)
	}
	return nil
}

func deviceInit(dev int) error { return statusError(dev, C.stemdot_device_init(C.int(dev))) }

// Runner is a GPU worker bound to one device: the device copy of the mask stack, pinned
// host staging buffers (made on the first Run) and Streams tiles in flight, and for
// RunMapped the registered windows of the dataset's mapping. A Runner is used by one
// goroutine at a time.
type Runner struct {
	cfg        RunnerConfig
	frameBytes int
	h          *C.stemdot_runner
	staged     bool
	feed       *feed
	held       map[int]bool // the feed's windows this runner holds
}

// NewRunner validates cfg (filling TileFrames and Streams defaults), uploads the mask
// stack unless a Runner on the same device already holds it, and allocates the pinned
// and device buffers: 2·Streams tiles of TileFrames·Pixels·DType.Size() bytes plus the
// results; with Shifts, the shifts (16 bytes per frame) and a device tile of
// TileFrames·Pixels float32 g_f per stream.
func NewRunner(cfg RunnerConfig) (*Runner, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	h, err := acquireMasks(&cfg)
	if err != nil {
		return nil, err
	}
	c := C.stemdot_runner_config{
		device:        C.int(cfg.Device),
		masks:         h,
		dtype:         cDType(cfg.DType),
		tile_frames:   C.int(cfg.TileFrames),
		slots:         C.int(cfg.Streams),
		record_stride: C.int64_t(cfg.RecordStride),
	}
	if cfg.Float64 {
		c.float64 = 1
	}
	if cfg.Shifts != nil {
		// The library copies the shifts before it returns; pinned meanwhile, as cgo
		// wants of a Go pointer held in memory passed to C.
		var pin runtime.Pinner
		pin.Pin(unsafe.SliceData(cfg.Shifts))
		defer pin.Unpin()
		c.shifts = (*C.double)(unsafe.Pointer(unsafe.SliceData(cfg.Shifts)))
		c.shift_frames = C.int64_t(len(cfg.Shifts) / 2)
		c.sig_x = C.int(cfg.SigX)
	}
	r := &Runner{cfg: cfg, frameBytes: cfg.Pixels * cfg.DType.Size()}
	if err := statusError(cfg.Device, C.stemdot_runner_create(&c, &r.h)); err != nil {
		return nil, errors.Join(err, releaseMasks(&cfg))
	}
	return r, nil
}

// cDType maps a dataset dtype to the library's code (validated by withDefaults).
func cDType(d dataset.DType) C.int {
	switch d {
	case dataset.Uint8:
		return C.STEMDOT_UINT8
	case dataset.Uint16:
		return C.STEMDOT_UINT16
	case dataset.Uint32:
		return C.STEMDOT_UINT32
	case dataset.Int8:
		return C.STEMDOT_INT8
	case dataset.Int16:
		return C.STEMDOT_INT16
	case dataset.Int32:
		return C.STEMDOT_INT32
	case dataset.Float32:
		return C.STEMDOT_FLOAT32
	case dataset.Float64:
		return C.STEMDOT_FLOAT64
	}
	panic("cuda: dtype " + d.String() + " passed RunnerConfig validation") // withDefaults rejects it first
}

// Config returns the runner's configuration with defaults filled in.
func (r *Runner) Config() RunnerConfig { return r.cfg }

// Run computes the mask-dot products of frames [start, end) and writes them to
// out32[f*NMasks+m] (or out64 with Float64) for every frame f in the range; other
// elements are untouched. read(dst, a, b) must fill dst with frames [a, b) in native
// dtype, host byte order (as dataset.Dataset.ReadFrames); dst is pinned C memory, valid
// only during the call. Up to Streams tiles are in flight: the read of one tile overlaps
// the copies and kernels of the previous ones. Run stops at the first error (of read, of
// CUDA, or ctx's) after waiting for the tiles in flight.
func (r *Runner) Run(ctx context.Context, start, end int, read func(dst []byte, start, end int) error, out32 []float32, out64 []float64) error {
	if r.h == nil {
		return errors.New("cuda: Run on a closed Runner")
	}
	if err := r.cfg.checkRun(start, end, read, out32, out64); err != nil {
		return err
	}
	if !r.staged {
		if err := statusError(r.cfg.Device, C.stemdot_runner_stage(r.h)); err != nil {
			return err
		}
		r.staged = true
	}
	submit := func(slot, a, b int) error {
		dst := unsafe.Slice((*byte)(C.stemdot_runner_input(r.h, C.int(slot))), (b-a)*r.frameBytes)
		if err := read(dst, a, b); err != nil {
			return err
		}
		return statusError(r.cfg.Device, C.stemdot_runner_submit(r.h, C.int(slot), C.int64_t(a), C.int(b-a)))
	}
	return r.pipeline(ctx, start, end, r.cfg.TileFrames, submit, "", out32, out64)
}

// pipeline runs frames [start, end) through the runner's slots in tiles of tileFrames:
// submit(slot, a, b) fills and enqueues tile [a, b) on a free slot; the results of
// finished tiles are copied into out32/out64, oldest first. With a magic, each finished
// tile's device check of its records' headers is read too. It stops at the first error
// (of submit, of CUDA, of a header, or ctx's) after waiting for the tiles in flight.
func (r *Runner) pipeline(ctx context.Context, start, end, tileFrames int, submit func(slot, a, b int) error, magic string, out32 []float32, out64 []float64) error {
	nm := r.cfg.NMasks
	slots := r.cfg.Streams
	type tile struct{ start, end int }
	inFlight := make([]tile, slots) // zero: the slot is idle
	collect := func(s int) error {
		t := inFlight[s]
		inFlight[s] = tile{}
		if err := statusError(r.cfg.Device, C.stemdot_runner_wait(r.h, C.int(s))); err != nil {
			return err
		}
		if magic != "" {
			if f := int(C.stemdot_runner_bad_frame(r.h, C.int(s))); f >= 0 {
				return fmt.Errorf("frame %d: its header does not start with %q: the file is corrupt or was cut", t.start+f, magic)
			}
		}
		src := unsafe.Pointer(C.stemdot_runner_output(r.h, C.int(s)))
		n := (t.end - t.start) * nm
		switch {
		case r.cfg.LoPairs:
			h := nm / 2
			addLoPairs(out64[t.start*h:t.end*h], unsafe.Slice((*float64)(src), n), h)
		case r.cfg.Float64:
			copy(out64[t.start*nm:t.end*nm], unsafe.Slice((*float64)(src), n))
		default:
			copy(out32[t.start*nm:t.end*nm], unsafe.Slice((*float32)(src), n))
		}
		return nil
	}

	var err error
	slot := 0
	for a := start; a < end; a += tileFrames {
		if err = ctx.Err(); err != nil {
			break
		}
		b := min(end, a+tileFrames)
		if inFlight[slot].end > inFlight[slot].start {
			if err = collect(slot); err != nil {
				break
			}
		}
		if err = submit(slot, a, b); err != nil {
			break
		}
		inFlight[slot] = tile{a, b}
		slot = (slot + 1) % slots
	}
	// Oldest first: the slot after the last submitted one.
	for i := range slots {
		s := (slot + i) % slots
		if inFlight[s].end > inFlight[s].start {
			if e := collect(s); e != nil && err == nil {
				err = e
			}
		}
	}
	return err
}

// KernelTime measures the kernel alone on frames resident on the device (filled with a
// constant pattern): one warm-up launch, then iters launches timed with CUDA events. It
// returns the mean time of one launch over the given number of frames. For a runner with
// Shifts, the mask kernel on float32 g_f frames (the kernel that builds them is not
// timed).
func (r *Runner) KernelTime(frames, iters int) (time.Duration, error) {
	if r.h == nil {
		return 0, errors.New("cuda: KernelTime on a closed Runner")
	}
	if frames < 1 || iters < 1 {
		return 0, fmt.Errorf("cuda: KernelTime of %d frames x %d: both must be >= 1", frames, iters)
	}
	var sec C.double
	if err := statusError(r.cfg.Device, C.stemdot_runner_time_kernel(r.h, C.int64_t(frames), C.int(iters), &sec)); err != nil {
		return 0, err
	}
	return time.Duration(float64(sec) * float64(time.Second)), nil
}

// Close waits for the runner's work, frees its buffers and releases its masks (freed
// with the last runner using them). Closing twice is a no-op.
func (r *Runner) Close() error {
	if r.h == nil {
		return nil
	}
	err := statusError(r.cfg.Device, C.stemdot_runner_destroy(r.h))
	r.h = nil
	r.closeFeed()
	return errors.Join(err, releaseMasks(&r.cfg))
}
