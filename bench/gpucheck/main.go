//go:build cuda

// Command gpucheck measures stemdot's GPU path on the machine it runs on and prints one
// table: each case's throughput in GB/s of native frame bytes, the bound it is compared
// with, and the ratio.
//
//   - d2d copy: cudaMemcpy device to device, counted as read+write traffic (2 x bytes),
//     the device memory bandwidth a read-only kernel can reach.
//   - h2d pinned: cudaMemcpy from pinned host memory, the PCIe bound of a Runner.
//   - memcpy 1 core: Go copy() on one thread, the bound of the read into pinned memory.
//   - kernel ...: the mask-dot kernel alone on uint16 frames resident on the device
//     (Runner.KernelTime), against d2d.
//   - resident ...: one Apply of a resident dataset (cuda.Resident, -resident-gib of frames
//     held on the device), mask upload and results back included, against d2d; the name
//     gives the time of one apply (issue 12's targets for a 17 GB scan: 1 mask <= 10 ms,
//     64 masks <= 40 ms).
//   - runner ...: a Runner end to end, frames copied from host memory into the pinned
//     staging buffers, H2D, kernel, results back, against min(h2d pinned, memcpy 1 core).
//
// With -json FILE it also writes the rows as JSON (each with a fixed key, e.g.
// "kernel.dense_tiled.64", and the device's properties), for scripts/gpu-check.sh's record
// (bench/gpurecord); the file is written even when a case fails, with the rows measured
// before it and the error.
//
// Build here with `go build -tags cuda -o bin/gpucheck ./bench/gpucheck` (after the CMake
// build of libstemdot_kernels.a) and run on the GPU machine; scripts/gpu-check.sh does both.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stemdot/stemdot/cuda"
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/masks"
)

func main() {
	dev := flag.Int("device", 0, "CUDA device index")
	sig := flag.Int("sig", 256, "frames are sig x sig uint16 pixels")
	kernelFrames := flag.Int("kernel-frames", 4096, "device-resident frames per kernel launch")
	runnerFrames := flag.Int("runner-frames", 8192, "frames through the Runner end to end")
	iters := flag.Int("iters", 10, "timed repetitions")
	residentGiB := flag.Float64("resident-gib", 8, "GiB of frames held on the device for the resident rows (0: none)")
	mappedGiB := flag.Float64("mapped-gib", 4, "GiB of the page-cached file each mapped-feed row streams")
	jsonPath := flag.String("json", "", "also write the rows as JSON to this file (for bench/gpurecord)")
	flag.Parse()
	var res result
	err := run(&res, *dev, *sig, *kernelFrames, *runnerFrames, *iters, *residentGiB, *mappedGiB)
	if err != nil {
		res.Error = err.Error()
	}
	if *jsonPath != "" {
		b, jerr := json.MarshalIndent(&res, "", "  ")
		if jerr == nil {
			jerr = os.WriteFile(*jsonPath, append(b, '\n'), 0o644)
		}
		err = errors.Join(err, jerr)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpucheck:", err)
		os.Exit(1)
	}
}

// row is one measured case, as gpucheck -json writes it. Key names it for the record:
// limits.*, kernel.VARIANT.MASKS, resident.*, runner.*, mapped.*.
type row struct {
	Key   string  `json:"key"`
	Name  string  `json:"name"`
	GBps  float64 `json:"gbps"`
	Bound float64 `json:"bound,omitempty"`
	Ms    float64 `json:"ms,omitempty"` // time of one operation, where the case has one (resident applies)
	GB    float64 `json:"gb,omitempty"` // GB (10⁹ bytes) moved, where the case states it (resident load)
}

// result is what gpucheck -json writes: the device, the rows measured (in order) and the
// error that stopped the run, if any.
type result struct {
	Device *deviceInfo `json:"device,omitempty"`
	Sig    int         `json:"sig"`
	Rows   []row       `json:"rows"`
	Error  string      `json:"error,omitempty"`
}

// deviceInfo is cuda.Properties of the device measured.
type deviceInfo struct {
	Index           int     `json:"index"`
	Name            string  `json:"name"`
	SM              string  `json:"sm"`
	Multiprocessors int     `json:"multiprocessors"`
	MemoryGiB       float64 `json:"memory_gib"`
	L2MiB           int     `json:"l2_mib"`
	CopyEngines     int     `json:"copy_engines"`
	CUDARuntime     int     `json:"cuda_runtime"`
	CUDADriver      int     `json:"cuda_driver"`
}

func run(res *result, dev, sig, kernelFrames, runnerFrames, iters int, residentGiB, mappedGiB float64) error {
	res.Sig = sig
	var rows []row
	// Every row measured so far goes into the JSON, also when a later case fails.
	defer func() { res.Rows = rows }()
	n, err := cuda.DeviceCount()
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("no CUDA device")
	}
	p, err := cuda.Properties(dev)
	if err != nil {
		return err
	}
	fmt.Printf("device %d: %s (sm_%d%d, %d SMs, %.1f GiB, L2 %d MiB, %d copy engines), CUDA runtime %d, driver %d\n",
		dev, p.Name, p.Major, p.Minor, p.Multiprocessors, float64(p.TotalMemory)/(1<<30), p.L2Bytes>>20,
		p.AsyncEngines, p.RuntimeVersion, p.DriverVersion)
	res.Device = &deviceInfo{dev, p.Name, fmt.Sprintf("%d%d", p.Major, p.Minor), p.Multiprocessors,
		float64(p.TotalMemory) / (1 << 30), int(p.L2Bytes >> 20), p.AsyncEngines, p.RuntimeVersion, p.DriverVersion}

	const copyBytes = 1 << 30
	d, err := cuda.CopyTime(dev, cuda.DeviceToDevice, copyBytes, iters)
	if err != nil {
		return err
	}
	d2d := gbps(2*copyBytes, d)
	rows = append(rows, row{Key: "limits.d2d", Name: "d2d copy (read+write)", GBps: d2d})
	d, err = cuda.CopyTime(dev, cuda.HostToDevicePinned, copyBytes/4, iters)
	if err != nil {
		return err
	}
	h2d := gbps(copyBytes/4, d)
	rows = append(rows, row{Key: "limits.h2d_pinned", Name: "h2d pinned", GBps: h2d})
	mc := memcpyOneCore(copyBytes/4, iters)
	rows = append(rows, row{Key: "limits.memcpy_1core", Name: "memcpy 1 core", GBps: mc})

	pixels := sig * sig
	frameBytes := pixels * dataset.Uint16.Size()
	rng := rand.New(rand.NewPCG(1, 2))
	ring, err := masks.Ring([2]int{sig, sig}, float64(sig)/2, float64(sig)/2, float64(sig)*90/256, float64(sig)*100/256)
	if err != nil {
		return err
	}
	for _, c := range []struct {
		key, name string
		nMasks    int
		sparse    *masks.Stack
		float64   bool
		tiled     bool
	}{
		{"dense.1", "dense 1 mask", 1, nil, false, false},
		{"dense.4", "dense 4 masks", 4, nil, false, false},
		{"dense.16", "dense 16 masks", 16, nil, false, false},
		{"dense_tiled.16", "dense 16 masks, tiled kernel", 16, nil, false, true},
		{"dense.32", "dense 32 masks", 32, nil, false, false},
		{"dense_tiled.32", "dense 32 masks, tiled kernel", 32, nil, false, true},
		{"dense.64", "dense 64 masks", 64, nil, false, false},
		{"dense_tiled.64", "dense 64 masks, tiled kernel", 64, nil, false, true},
		{"dense_f64.4", "dense 4 masks f64", 4, nil, true, false},
		// The plans' ring (ring:128,128,90,100 on 256x256), which the engine runs sparse.
		{"sparse.ring", "sparse ring", 1, ring, false, false},
		{"sparse.disc+ring", "sparse disk+ring", 2, discAndRing(sig), false, false},
	} {
		cuda.UseTiledDense(c.tiled)
		cfg := cuda.RunnerConfig{Device: dev, DType: dataset.Uint16, Pixels: pixels, NMasks: c.nMasks, Float64: c.float64}
		if c.sparse != nil {
			cfg.Sparse = c.sparse.ToCSR()
		} else {
			cfg.Masks = randomMasks(rng, c.nMasks*pixels)
		}
		r, err := cuda.NewRunner(cfg)
		if err != nil {
			return err
		}
		d, err := r.KernelTime(kernelFrames, iters)
		cuda.UseTiledDense(false)
		if cerr := r.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		rows = append(rows, row{Key: "kernel." + c.key, Name: "kernel " + c.name, GBps: gbps(kernelFrames*frameBytes, d), Bound: d2d})
	}

	if residentGiB > 0 {
		resRows, err := residentRows(dev, sig, int(residentGiB*(1<<30))/frameBytes, iters, rng, d2d)
		if err != nil {
			return err
		}
		rows = append(rows, resRows...)
	}

	host := make([]byte, runnerFrames*frameBytes)
	for i := range host {
		host[i] = byte(i * 7)
	}
	stack := randomMasks(rng, 4*pixels)
	for _, streams := range []int{1, 3} {
		r, err := cuda.NewRunner(cuda.RunnerConfig{Device: dev, DType: dataset.Uint16, Pixels: pixels, NMasks: 4,
			Masks: stack, Streams: streams})
		if err != nil {
			return err
		}
		out := make([]float32, runnerFrames*4)
		read := func(dst []byte, a, b int) error {
			copy(dst, host[a*frameBytes:b*frameBytes])
			return nil
		}
		// Warm-up run (first touch of pinned pages, kernel load), then the timed ones.
		err = r.Run(context.Background(), 0, min(runnerFrames, r.Config().TileFrames), read, out, nil)
		t0 := time.Now()
		for i := 0; i < iters && err == nil; i++ {
			err = r.Run(context.Background(), 0, runnerFrames, read, out, nil)
		}
		el := time.Since(t0) / time.Duration(iters)
		if cerr := r.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		rows = append(rows, row{Key: fmt.Sprintf("runner.staged_%d_streams", streams),
			Name: fmt.Sprintf("runner 4 masks, %d stream(s), tile %d", streams, r.Config().TileFrames),
			GBps: gbps(len(host), el), Bound: min(h2d, mc)})
	}

	mapped, err := mappedRows(dev, sig, frameBytes, int(mappedGiB*(1<<30)), stack, h2d)
	if err != nil {
		return err
	}
	rows = append(rows, mapped...)

	fmt.Printf("\n%-52s %10s %10s %7s\n", "case ("+fmt.Sprint(sig)+"x"+fmt.Sprint(sig)+" uint16)", "GB/s", "bound", "ratio")
	for _, r := range rows {
		if r.Bound == 0 {
			fmt.Printf("%-52s %10.1f %10s %7s\n", r.Name, r.GBps, "", "")
			continue
		}
		fmt.Printf("%-52s %10.1f %10.1f %7.2f\n", r.Name, r.GBps, r.Bound, r.GBps/r.Bound)
	}
	return nil
}

// patternFrames is a dataset of uint16 frames whose reads fill a repeating byte pattern,
// so that a dataset of many GiB needs no host memory of that size.
type patternFrames struct{ sig, frames int }

func (patternFrames) Format() string       { return "memory" }
func (patternFrames) Path() string         { return "" }
func (p patternFrames) NavShape() []int    { return []int{p.frames} }
func (p patternFrames) SigShape() [2]int   { return [2]int{p.sig, p.sig} }
func (patternFrames) DType() dataset.DType { return dataset.Uint16 }
func (p patternFrames) NumFrames() int     { return p.frames }
func (p patternFrames) FrameBytes() int    { return 2 * p.sig * p.sig }
func (patternFrames) Close() error         { return nil }
func (p patternFrames) ReadFrames(start, end int, dst []byte) error {
	for i := range dst[:(end-start)*p.FrameBytes()] {
		dst[i] = byte(i*7 + start)
	}
	return nil
}

// residentRows loads frames uint16 frames onto the device and times one Apply of 1 and 64
// dense masks and of a sparse disc and ring (the mean of iters after one warm-up).
func residentRows(dev, sig, frames, iters int, rng *rand.Rand, d2d float64) ([]row, error) {
	t0 := time.Now()
	r, err := cuda.LoadResident(context.Background(), dev, patternFrames{sig, frames})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	gb := float64(r.Bytes()) / 1e9
	rows := []row{{Key: "resident.load", Name: fmt.Sprintf("resident load %.1f GB (read + h2d)", gb), GBps: gb / time.Since(t0).Seconds(), GB: gb}}
	pixels := sig * sig
	for _, c := range []struct {
		key, name string
		stack     *masks.Stack
	}{
		{"1", "1 mask", &masks.Stack{N: 1, SigY: sig, SigX: sig, Data: randomMasks(rng, pixels)}},
		{"64", "64 masks", &masks.Stack{N: 64, SigY: sig, SigX: sig, Data: randomMasks(rng, 64*pixels)}},
		{"sparse_disc+ring", "sparse disk+ring", discAndRing(sig)},
	} {
		out := make([]float32, frames*c.stack.N)
		err := r.Apply(c.stack, 0, frames, out, nil)
		t0 := time.Now()
		for i := 0; i < iters && err == nil; i++ {
			err = r.Apply(c.stack, 0, frames, out, nil)
		}
		if err != nil {
			return nil, err
		}
		el := time.Since(t0) / time.Duration(iters)
		rows = append(rows, row{Key: "resident." + c.key, Name: fmt.Sprintf("resident %s: %.2f ms per apply", c.name, el.Seconds()*1e3),
			GBps: gb / el.Seconds(), Bound: d2d, Ms: el.Seconds() * 1e3, GB: gb})
	}
	return rows, nil
}

// mappedRows measures Runner.RunMapped, the copy-free feed, over a page-cached file of
// fileBytes (-mapped-gib) of sig x sig frames: packed frames (raw/NPY) and MIB-like records (384-byte
// headers, big-endian pixels), these also with shifted masks (RunnerConfig.Shifts: a
// sub-pixel descan plane, g_f built on the device); every run registers its windows
// anew, as a GPU worker does.
func mappedRows(dev, sig, frameBytes, fileBytes int, stack []float32, h2d float64) ([]row, error) {
	pixels := sig * sig
	var rows []row
	for _, c := range []struct {
		key, name string
		header    int
		shifted   bool
	}{{"raw", "packed", 0, false}, {"mib", "mib records", 384, false}, {"mib_shifted", "mib records, shifted", 384, true}} {
		stride := frameBytes + c.header
		n := fileBytes / stride
		f, err := os.CreateTemp("", "gpucheck-*.bin")
		if err != nil {
			return nil, err
		}
		defer os.Remove(f.Name())
		rec := make([]byte, 1024*stride)
		for i := 0; i < len(rec); i += stride {
			copy(rec[i:], "MQ1,")
		}
		for w := 0; w < n; w += 1024 {
			if _, err := f.Write(rec[:min(1024, n-w)*stride]); err != nil {
				return nil, err
			}
		}
		data, err := unix.Mmap(int(f.Fd()), 0, n*stride, unix.PROT_READ, unix.MAP_SHARED)
		f.Close()
		if err != nil {
			return nil, err
		}
		fm := dataset.FrameMap{Mapping: data, Stride: int64(stride), Header: c.header}
		cfg := cuda.RunnerConfig{Device: dev, DType: dataset.Uint16, Pixels: pixels, NMasks: 4, Masks: stack, Streams: cuda.MappedStreams}
		if c.header > 0 {
			fm.BigEndian, fm.Magic, cfg.RecordStride = true, "MQ1,", int64(stride)
		}
		if c.shifted {
			cfg.Shifts, cfg.SigX = make([]float64, 2*n), sig
			for f := range n {
				cfg.Shifts[2*f], cfg.Shifts[2*f+1] = 0.25+2*float64(f)/float64(n), -0.5-3*float64(f)/float64(n)
			}
		}
		r, err := cuda.NewRunner(cfg)
		if err != nil {
			unix.Munmap(data)
			return nil, err
		}
		out := make([]float32, n*4)
		best := time.Duration(1<<63 - 1)
		for range 3 {
			t0 := time.Now()
			if err = r.RunMapped(context.Background(), 0, n, fm, out, nil); err != nil {
				break
			}
			best = min(best, time.Since(t0))
		}
		err = errors.Join(err, r.Close(), unix.Munmap(data))
		if err != nil {
			return nil, err
		}
		rows = append(rows, row{Key: "mapped." + c.key, Name: fmt.Sprintf("runner mapped %s, 4 masks, %.3g GiB", c.name, float64(n*stride)/(1<<30)), GBps: gbps(n*frameBytes, best), Bound: h2d})
	}
	return rows, nil
}

func gbps(bytes int, d time.Duration) float64 { return float64(bytes) / d.Seconds() / 1e9 }

// memcpyOneCore measures Go's copy() of n bytes on one locked OS thread (best of iters).
func memcpyOneCore(n, iters int) float64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	src, dst := make([]byte, n), make([]byte, n)
	for i := range src {
		src[i] = byte(i)
	}
	copy(dst, src) // first touch
	best := time.Duration(1<<63 - 1)
	for range iters {
		t0 := time.Now()
		copy(dst, src)
		best = min(best, time.Since(t0))
	}
	return gbps(n, best)
}

func randomMasks(rng *rand.Rand, n int) []float32 {
	m := make([]float32, n)
	for i := range m {
		m[i] = float32(rng.NormFloat64())
	}
	return m
}

// discAndRing is a virtual bright field (disc of radius sig/8) and an annular dark field
// (sig/4 < r <= sig/2.5) around the frame centre.
func discAndRing(sig int) *masks.Stack {
	s := &masks.Stack{N: 2, SigY: sig, SigX: sig, Data: make([]float32, 2*sig*sig)}
	c := float64(sig-1) / 2
	for y := range sig {
		for x := range sig {
			r2 := (float64(x)-c)*(float64(x)-c) + (float64(y)-c)*(float64(y)-c)
			rd, ri, ro := float64(sig)/8, float64(sig)/4, float64(sig)/2.5
			if r2 <= rd*rd {
				s.Data[y*sig+x] = 1
			}
			if r2 > ri*ri && r2 <= ro*ro {
				s.Data[sig*sig+y*sig+x] = 1
			}
		}
	}
	return s
}
