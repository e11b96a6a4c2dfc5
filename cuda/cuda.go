// Package cuda runs the mask-dot product of 4D-STEM frames on NVIDIA GPUs.
//
// It binds (cgo) libstemdot_kernels.a, built by CMake from kernels/ (see
// kernels/stemdot_kernels.h), and links the CUDA runtime statically, so that a binary
// needs only the NVIDIA driver (libcuda.so.1) on the machine that runs it, not the
// toolkit. The bindings are compiled with the build tag cuda:
//
//	cmake -S . -B build/kernels -DCMAKE_BUILD_TYPE=Release && cmake --build build/kernels -j
//	go build -tags cuda ./...
//
// libcudart_static.a is found on the linker's default path (Debian's nvidia-cuda-dev puts
// it in /usr/lib/x86_64-linux-gnu); with NVIDIA's toolkit add
// CGO_LDFLAGS=-L/usr/local/cuda/lib64. Without the tag every function returns ErrNoCUDA
// and Built reports false.
//
// With the tags cuda and cudaemu it links build/kernels-emu/libstemdot_kernels.a instead:
// the same kernel sources compiled by the host C++ compiler against a CPU emulator of the
// CUDA runtime (kernels/emu; make kernels-emu), one emulated device, so that this package's
// GPU tests check the kernels and their host code on machines without a GPU
// (make test-cuda-emu). It is for tests only: far slower than the CPU engine.
//
// A Runner is one GPU worker: it is bound to one device, holds the mask stack there
// (uploaded once per device and shared by all runners given the same stack), and runs a
// pipeline over tiles of frames: the caller's read of tile i+1 into pinned host memory,
// the host-to-device copy of tile i, the kernel and the copy of the results back overlap
// across Streams tiles in flight. Frames cross PCIe in their native dtype (uint8, uint16,
// uint32, float32) and are converted on the device; out[f, m] = Σ_p mask[m, p]·frame[f, p]
// as LiberTEM's ApplyMasksUDF computes it, accumulated in float32 or float64. With
// per-frame shifts (RunnerConfig.Shifts, descan compensation) a kernel first builds each
// frame's shifted counterpart g_f in float32 in device memory (kernels/shift.cu), and
// the mask kernels read it.
package cuda

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/masks"
)

// ErrNoCUDA is returned by every call of a build without the cuda tag.
var ErrNoCUDA = errors.New("stemdot was built without CUDA support")

// DefaultTileBytes is the native frame bytes per tile when RunnerConfig.TileFrames is 0.
const DefaultTileBytes = 32 << 20

// DefaultStreams is the number of tiles in flight when RunnerConfig.Streams is 0: one
// being read by the host, one being copied, one in the kernel.
const DefaultStreams = 3

// MappedStreams is the number of tiles in flight that suits RunMapped: registering the
// next window holds the driver for up to a millisecond, during which the tiles already
// queued keep the link busy.
const MappedStreams = 8

// maxStreams bounds RunnerConfig.Streams (each stream holds a pinned host tile and its
// results, and a device tile).
const maxStreams = 16

// maxSparseMasks is the CUDA grid limit on the masks of a CSR stack (grid.y).
const maxSparseMasks = 65535

// Error is a failed CUDA call (or an argument the library refused).
type Error struct {
	// Device is the device index, -1 for calls not bound to a device.
	Device int
	// Call names the CUDA runtime function that failed ("cudaMemcpyAsync"), or "stemdot".
	Call string
	// Code is the cudaError_t value (> 0), or a negative stemdot argument error code.
	Code int
	// Message is the CUDA error string ("out of memory").
	Message string
}

// Error formats as "cuda device 0: cudaMemcpyAsync: out of memory".
func (e *Error) Error() string {
	if e.Device < 0 {
		return fmt.Sprintf("cuda: %s: %s", e.Call, e.Message)
	}
	return fmt.Sprintf("cuda device %d: %s: %s", e.Device, e.Call, e.Message)
}

// Props are the properties of one CUDA device.
type Props struct {
	// Device is the device index.
	Device int
	// Name is the product name ("NVIDIA H200").
	Name string
	// PCIBusID is the PCI address ("0000:3b:00.0").
	PCIBusID string
	// Major, Minor is the compute capability (9, 0 for Hopper).
	Major, Minor int
	// Multiprocessors is the SM count.
	Multiprocessors int
	// AsyncEngines is the number of copy engines (2: H2D and D2H copies run at once).
	AsyncEngines int
	// L2Bytes is the L2 cache size in bytes.
	L2Bytes int
	// MemoryBusBits is the memory bus width in bits; MemoryClockKHz its peak clock in kHz.
	MemoryBusBits, MemoryClockKHz int
	// TotalMemory is the global memory in bytes.
	TotalMemory int64
	// RuntimeVersion is the CUDA runtime version stemdot was built with (11080 = 11.8);
	// DriverVersion the newest CUDA version the driver supports.
	RuntimeVersion, DriverVersion int
}

// RunnerConfig configures a Runner.
type RunnerConfig struct {
	// Device is the CUDA device index.
	Device int
	// DType is the native dtype of the frames: Uint8, Uint16, Uint32 or Float32; with
	// Shifts also Int8, Int16, Int32 or Float64 (the kernel that builds g_f converts them).
	DType dataset.DType
	// Pixels is sig_y*sig_x, the pixels of one frame; NMasks the masks in the stack.
	Pixels, NMasks int
	// Masks is the dense stack, NMasks*Pixels float32 weights, C order (mask m, pixel p
	// at Masks[m*Pixels+p]), as masks.Stack.Data. Runners on one device given the same
	// slice (same backing array and length) share one device copy; it must not change
	// while they live. Ignored when Sparse is set.
	Masks []float32
	// Sparse, when not nil, is the stack in CSR form (N == NMasks, Pixels == Pixels, at
	// most 65535 masks), applied by the gather kernel. Runners given the same *CSR on one
	// device share one device copy.
	Sparse *masks.CSR
	// TileFrames is the frames per tile (0: DefaultTileBytes of native frames, at least 1).
	TileFrames int
	// Streams is the number of tiles in flight, 1 to 16 (0: DefaultStreams). Two or more
	// overlap the host read, the copies and the kernel.
	Streams int
	// Float64 accumulates in float64 and writes float64 results (Run's out64); otherwise
	// float32 (out32).
	Float64 bool
	// RecordStride, for RunMapped on records that need unpacking on the device (a
	// per-frame header, a footer or the other byte order: MIB), is their stride in bytes;
	// the runner then holds a device buffer of TileFrames records per stream. 0: RunMapped
	// takes only packed host-order frames (raw, NPY).
	RecordStride int64
	// LoPairs, with Float64, says that the stack is masks.Stack.LoPairs of a stack of
	// NMasks/2 masks: float32 weights, then their Lo parts. The runner then writes
	// NMasks/2 results per frame, result m the sum in float64 of the products with masks
	// m and NMasks/2+m: weights given in float64 count at float64 precision, not rounded
	// to float32 (the kernels take float32 weights).
	LoPairs bool
	// Shifts, when not nil, shifts the masks per frame (descan compensation, as
	// engine.Options.Shifts): Shifts[2f], Shifts[2f+1] are the (dy, dx) of frame f in
	// pixels, finite, for every frame that Run and RunMapped will be given (their frame
	// indices index Shifts). They are copied to the device once, by NewRunner; the frames
	// travel as without shifts (native dtype, copy-free where mapped), and a kernel builds
	// each frame's g_f in float32 in device memory, the frame read at the shifted
	// positions with bilinear weights (engine/shift.go gives the identity with the
	// shifted masks), before the mask kernels read it. Not with Float64 (the CPU workers
	// build g_f in float64 for float64 results). Needs SigX.
	Shifts []float64
	// SigX is the frame's width (sig_x; Pixels/SigX rows), with Shifts.
	SigX int
}

// Results is the number of results per frame: NMasks, or NMasks/2 with LoPairs.
func (cfg *RunnerConfig) Results() int {
	if cfg.LoPairs {
		return cfg.NMasks / 2
	}
	return cfg.NMasks
}

// withDefaults returns cfg with TileFrames and Streams filled in, or an error naming the
// first invalid field.
func (cfg RunnerConfig) withDefaults() (RunnerConfig, error) {
	switch cfg.DType {
	case dataset.Uint8, dataset.Uint16, dataset.Uint32, dataset.Float32:
	case dataset.Int8, dataset.Int16, dataset.Int32, dataset.Float64:
		if cfg.Shifts == nil {
			return cfg, fmt.Errorf("cuda: dtype %s is not supported on the GPU without Shifts (want uint8, uint16, uint32 or float32)", cfg.DType)
		}
	default:
		return cfg, fmt.Errorf("cuda: dtype %s is not supported on the GPU (want uint8, uint16, uint32 or float32)", cfg.DType)
	}
	if cfg.Device < 0 {
		return cfg, fmt.Errorf("cuda: device %d: must be >= 0", cfg.Device)
	}
	if cfg.Pixels < 1 || cfg.NMasks < 1 {
		return cfg, fmt.Errorf("cuda: %d pixels and %d masks: both must be >= 1", cfg.Pixels, cfg.NMasks)
	}
	if cfg.Shifts != nil {
		if err := cfg.checkShifts(); err != nil {
			return cfg, err
		}
	}
	if cfg.LoPairs && (!cfg.Float64 || cfg.NMasks%2 != 0) {
		return cfg, fmt.Errorf("cuda: LoPairs needs Float64 and an even number of masks (float64: %v, %d masks)", cfg.Float64, cfg.NMasks)
	}
	if cfg.Sparse != nil {
		if err := checkCSR(cfg.Sparse, cfg.NMasks, cfg.Pixels); err != nil {
			return cfg, err
		}
	} else if len(cfg.Masks) != cfg.NMasks*cfg.Pixels {
		return cfg, fmt.Errorf("cuda: mask stack holds %d weights, want %d masks x %d pixels = %d",
			len(cfg.Masks), cfg.NMasks, cfg.Pixels, cfg.NMasks*cfg.Pixels)
	}
	switch {
	case cfg.TileFrames < 0:
		return cfg, fmt.Errorf("cuda: TileFrames %d: must be >= 0", cfg.TileFrames)
	case cfg.TileFrames == 0:
		cfg.TileFrames = max(1, DefaultTileBytes/(cfg.Pixels*cfg.DType.Size()))
	}
	if cfg.RecordStride < 0 || cfg.RecordStride > 0 && cfg.RecordStride < int64(cfg.Pixels*cfg.DType.Size()) {
		return cfg, fmt.Errorf("cuda: RecordStride %d: want 0 or at least the %d bytes of a frame", cfg.RecordStride, cfg.Pixels*cfg.DType.Size())
	}
	switch {
	case cfg.Streams < 0 || cfg.Streams > maxStreams:
		return cfg, fmt.Errorf("cuda: Streams %d: want 1 to %d (0 for %d)", cfg.Streams, maxStreams, DefaultStreams)
	case cfg.Streams == 0:
		cfg.Streams = DefaultStreams
	}
	return cfg, nil
}

// checkShifts validates Shifts and SigX.
func (cfg *RunnerConfig) checkShifts() error {
	switch {
	case cfg.Float64:
		return errors.New("cuda: Shifts with Float64: shifted masks accumulate in float32 on the GPU")
	case cfg.SigX < 1 || cfg.Pixels%cfg.SigX != 0:
		return fmt.Errorf("cuda: SigX %d does not divide the %d pixels of a frame", cfg.SigX, cfg.Pixels)
	case len(cfg.Shifts) < 2 || len(cfg.Shifts)%2 != 0:
		return fmt.Errorf("cuda: Shifts hold %d values, want a (dy, dx) pair per frame", len(cfg.Shifts))
	}
	for i, v := range cfg.Shifts {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("cuda: shift %s of frame %d is %v: shifts must be finite", [2]string{"dy", "dx"}[i%2], i/2, v)
		}
	}
	return nil
}

// checkCSR validates a CSR stack against the runner's shape.
func checkCSR(c *masks.CSR, nMasks, pixels int) error {
	if c.N > maxSparseMasks {
		return fmt.Errorf("cuda: CSR stack has %d masks, at most %d supported", c.N, maxSparseMasks)
	}
	if err := c.Validate(nMasks, pixels); err != nil {
		return fmt.Errorf("cuda: %w", err)
	}
	return nil
}

// checkRun validates the arguments of Runner.Run.
func (cfg *RunnerConfig) checkRun(start, end int, read func([]byte, int, int) error, out32 []float32, out64 []float64) error {
	if read == nil {
		return errors.New("cuda: Run needs a read function")
	}
	return cfg.checkOut(start, end, out32, out64)
}

// checkMapped validates the arguments of Runner.RunMapped.
func (cfg *RunnerConfig) checkMapped(start, end int, fm dataset.FrameMap, out32 []float32, out64 []float64) error {
	fb := int64(cfg.Pixels * cfg.DType.Size())
	switch {
	case fm.Stride < fb || fm.Header < 0 || int64(fm.Header) > fm.Stride-fb || len(fm.Magic) > min(4, fm.Header):
		return fmt.Errorf("cuda: frame map with stride %d, header %d and magic %q does not hold frames of %d bytes", fm.Stride, fm.Header, fm.Magic, fb)
	case !fm.Packed(fb) && fm.Stride > cfg.RecordStride:
		return fmt.Errorf("cuda: records of %d bytes need unpacking, but the runner was made for RecordStride %d", fm.Stride, cfg.RecordStride)
	case end > start && (fm.Offset < 0 || fm.Offset+int64(end-start-1)*fm.Stride+int64(fm.Header)+fb > int64(len(fm.Mapping))):
		return fmt.Errorf("cuda: frames [%d, %d) lie outside the %d-byte mapping", start, end, len(fm.Mapping))
	}
	return cfg.checkOut(start, end, out32, out64)
}

// checkOut validates a frame range and the result buffers.
func (cfg *RunnerConfig) checkOut(start, end int, out32 []float32, out64 []float64) error {
	if start < 0 || end < start {
		return fmt.Errorf("cuda: frame range [%d, %d) is invalid", start, end)
	}
	if cfg.Shifts != nil && end > len(cfg.Shifts)/2 {
		return fmt.Errorf("cuda: frames [%d, %d): Shifts hold the shifts of %d frames", start, end, len(cfg.Shifts)/2)
	}
	need := end * cfg.Results()
	if cfg.Float64 && len(out64) < need {
		return fmt.Errorf("cuda: out64 holds %d values, frames [%d, %d) x %d masks need %d", len(out64), start, end, cfg.Results(), need)
	}
	if !cfg.Float64 && len(out32) < need {
		return fmt.Errorf("cuda: out32 holds %d values, frames [%d, %d) x %d masks need %d", len(out32), start, end, cfg.Results(), need)
	}
	return nil
}

// ErrRegister wraps a failure to register a memory mapping for the copy-free feed
// (cudaHostRegister refused it, or the device cannot register read-only memory):
// RunMapped computed nothing, and the caller falls back to Run.
var ErrRegister = errors.New("cuda: cannot register the memory mapping for DMA")

// ErrNotReady is returned by WaitReady when the caller stopped waiting.
var ErrNotReady = errors.New("the run ended before the device was ready")

// devInit is the background creation of one device's CUDA context.
type devInit struct {
	done chan struct{}
	err  error
}

var inits sync.Map // device index -> *devInit

// Prewarm starts creating the CUDA context of each given device in the background (the
// 0.1-0.3 s of a device's first CUDA call), once per device and process, so that GPU
// workers created later start at once. It returns immediately; the goroutine it starts
// belongs to the package and ends when the context exists (or failed). A build without
// CUDA does nothing.
func Prewarm(devs ...int) {
	for _, d := range devs {
		if d < 0 {
			continue
		}
		v, loaded := inits.LoadOrStore(d, &devInit{done: make(chan struct{})})
		if loaded {
			continue
		}
		in := v.(*devInit)
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			in.err = deviceInit(d)
			close(in.done)
		}()
	}
}

// WaitReady waits until device dev's context exists, starting its creation if Prewarm
// was not called, and returns the creation's error; or returns ErrNotReady as soon as
// cancel is closed.
func WaitReady(dev int, cancel <-chan struct{}) error {
	Prewarm(dev)
	v, ok := inits.Load(dev)
	if !ok {
		return fmt.Errorf("cuda: device %d: must be >= 0", dev)
	}
	in := v.(*devInit)
	select {
	case <-in.done:
		return in.err
	case <-cancel:
		return ErrNotReady
	}
}

// CopyKind is a copy measured by CopyTime.
type CopyKind int

// Copy kinds.
const (
	// HostToDevicePinned copies pinned (page-locked) host memory to the device.
	HostToDevicePinned CopyKind = 1
	// DeviceToDevice copies within device memory (reads and writes the bytes).
	DeviceToDevice CopyKind = 2
)

// addLoPairs sets dst[f·n+m] = res[f·2n+m] + res[f·2n+n+m] for the len(dst)/n frames of
// res, the results of a LoPairs stack of 2n masks (see RunnerConfig.LoPairs).
func addLoPairs(dst, res []float64, n int) {
	for f := range len(dst) / n {
		for m := range n {
			dst[f*n+m] = res[f*2*n+m] + res[f*2*n+n+m]
		}
	}
}
