package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/engine"
	stemnpy "github.com/stemdot/stemdot/internal/npy"
	"github.com/stemdot/stemdot/masks"
	"github.com/stemdot/stemdot/planner"
	"github.com/stemdot/stemdot/synth"
)

// sig is the frame shape of every bench dataset, (sig_y, sig_x) in pixels.
var sig = [2]int{256, 256}

// navX is the scan width; the scan height follows from the dataset size.
const navX = 128

// benchData is one page-cached file of synthetic frames: a raw file of each dtype, or
// beside the uint16 one a raw_csr file of counted frames or a compressed HDF5 file (kind).
type benchData struct {
	path   string
	kind   string // bench.Row.Dataset: "" for the raw file
	dt     dataset.DType
	nav    []int
	ds     dataset.Dataset
	nbytes int64   // the bytes a row counts per run: frame bytes, for raw_csr the sparse bytes
	cached float64 // fraction of the file's pages resident before the runs
	huge   float64 // fraction of the file mapped in 2 MiB pages after pageCache read it
	// floor is the read floor of the file under a CPU-only plan (nil: none measured).
	floor func(*planner.Plan) error
}

func (d *benchData) frames() int  { return d.ds.NumFrames() }
func (d *benchData) bytes() int64 { return d.nbytes }

// label names the data in the log: "uint16", "uint16 raw_csr".
func (d *benchData) label() string { return strings.TrimSpace(d.dt.String() + " " + d.kind) }

func (d *benchData) describe() map[string]any {
	return map[string]any{"path": d.path, "format": "raw", "dtype": d.dt.String(), "nav_shape": d.nav,
		"sig_shape": sig, "frames": d.frames(), "bytes": d.bytes(), "page_cached": d.cached, "huge_pages": d.huge,
		"model": "synth package defaults, seed 1 (disc, ring, background, Poisson noise)"}
}

// datasetBytes is the size of each dataset: -size, or auto: 4× the last-level cache, at
// least 1 GiB, at most RAM/8; -quick caps it at 1 GiB.
func datasetBytes(cfg *config, env *machine) (int64, error) {
	var size int64
	if cfg.size == "auto" {
		size = max(4*env.llcBytes, 1<<30)
		size = min(size, env.ramBytes/8)
	} else {
		b, err := planner.ParseBytes(cfg.size)
		if err != nil {
			return 0, fmt.Errorf("-size: %w", err)
		}
		size = int64(b)
	}
	if cfg.quick {
		size = min(size, 1<<30)
	}
	return size, nil
}

// prepareData writes (or reuses) the raw file of dtype dt holding about size bytes of
// frames, opens it and makes sure it is in the page cache.
func prepareData(cfg *config, dt dataset.DType, size int64) (*benchData, error) {
	frameBytes := int64(sig[0] * sig[1] * dt.Size())
	rows := int(size / frameBytes / navX)
	if rows < 1 {
		return nil, fmt.Errorf("dataset size %d bytes holds less than one scan row of %d %s frames of %d×%d", size, navX, dt, sig[0], sig[1])
	}
	nav := []int{rows, navX}
	if err := os.MkdirAll(cfg.scratch, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(cfg.scratch, fmt.Sprintf("synth_%s_%dx%dx%dx%d.raw", dt, nav[0], nav[1], sig[0], sig[1]))
	want := int64(rows*navX) * frameBytes
	if st, err := os.Stat(path); err != nil || st.Size() != want {
		log("writing %s (%.2f GB) with the synth package", path, float64(want)/1e9)
		opt := synth.Options{NavShape: nav, SigShape: sig, DType: dt, Format: "raw", Seed: 1}
		if _, err := synth.Write(context.Background(), path, opt); err != nil {
			return nil, err
		}
	}
	cached, huge, err := pageCache(path)
	if err != nil {
		return nil, err
	}
	if cached < 0.99 {
		log("warning: only %.1f%% of %s stays in the page cache: the runs read partly from disk", 100*cached, path)
	}
	ds, err := dataset.Open(path, dataset.Options{Format: "raw", NavShape: nav, SigShape: sig[:], DType: dt})
	if err != nil {
		return nil, err
	}
	tile := engine.AutoTileFrames(ds.FrameBytes())
	return &benchData{path: path, dt: dt, nav: nav, ds: ds, nbytes: want, cached: cached, huge: huge,
		floor: func(plan *planner.Plan) error { return streamRead(ds, plan, tile) }}, nil
}

// pageCache puts the file in the page cache as stemdot reads a file from disk, and
// returns the fraction of its pages resident afterwards (mincore) and the fraction
// mapped in 2 MiB pages (FilePmdMapped in /proc/self/smaps). It drops the file from the
// cache first (written back, then posix_fadvise DONTNEED), then reads it through a
// mapping advised MADV_HUGEPAGE, as the dataset package maps files: the cache then holds
// the file in 2 MiB folios, as after stemdot's first read of a file from disk. A file
// left in the cache by its writer may be held in 4-128 KiB folios instead, which every
// run maps again at a cost (see dataset.mapReadOnly): the runs here measure the first
// case.
func pageCache(path string) (resident, huge float64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || st.Size() == 0 {
		return 0, 0, err
	}
	if err := f.Sync(); err != nil {
		return 0, 0, fmt.Errorf("fsync %s: %w", path, err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		return 0, 0, fmt.Errorf("fadvise %s: %w", path, err)
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return 0, 0, fmt.Errorf("mmap %s: %w", path, err)
	}
	defer unix.Munmap(m)
	_ = unix.Madvise(m, unix.MADV_HUGEPAGE) // advice, as in the dataset package
	sink += uint64(bytes.Count(m, sweepByte))
	page := os.Getpagesize()
	vec := make([]byte, (len(m)+page-1)/page)
	_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0])))
	if errno != 0 {
		return 0, 0, fmt.Errorf("mincore %s: %w", path, errno)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return float64(n) / float64(len(vec)), float64(pmdMapped(uintptr(unsafe.Pointer(&m[0])))) / float64(len(m)), nil
}

// pmdMapped returns the FilePmdMapped bytes of this process's mapping that starts at
// addr (/proc/self/smaps), 0 where it cannot be read.
func pmdMapped(addr uintptr) int64 {
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return 0
	}
	in := false
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
		case !strings.HasSuffix(f[0], ":"): // a mapping's first line: "lo-hi perms ..."
			lo, _, _ := strings.Cut(f[0], "-")
			v, err := strconv.ParseUint(lo, 16, 64)
			in = err == nil && uintptr(v) == addr
		case in && f[0] == "FilePmdMapped:" && len(f) > 1:
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// maskCase is one mask stack to apply: N dense masks, or the sparse ring.
type maskCase struct {
	N    int
	Kind string // bench.Dense or bench.SparseRing
}

func (m maskCase) String() string {
	if m.Kind == sparseRing {
		return "ring"
	}
	return strconv.Itoa(m.N)
}

func parseMaskCase(s string) (maskCase, error) {
	s = strings.TrimSpace(s)
	if s == "ring" {
		return maskCase{N: 1, Kind: sparseRing}, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return maskCase{}, fmt.Errorf("mask case %q: want a positive count of dense masks or ring", s)
	}
	return maskCase{N: n, Kind: dense}, nil
}

func joinCases(cs []maskCase) string {
	s := make([]string, len(cs))
	for i, c := range cs {
		s[i] = c.String()
	}
	return strings.Join(s, ",")
}

// caseMasks is a mask case with its stack, its NPY file and the numpy peer's result.
type caseMasks struct {
	maskCase
	stack     *masks.Stack
	npyPath   string
	reference string // numpy peer's result for the current dataset
}

// prepareMasks builds every case's stack and writes it as NPY for the peers. Dense
// masks have weights uniform in [0, 1) (seeded by the mask index), so every pixel
// counts and no sum cancels; the ring selects radii 60 < r ≤ 72 px around the frame
// centre, about 7.6% of the pixels, below masks.DefaultSparseDensity.
func prepareMasks(cfg *config, d *benchData) ([]*caseMasks, error) {
	var out []*caseMasks
	for _, c := range cfg.cases {
		var stack *masks.Stack
		var err error
		if c.Kind == sparseRing {
			stack, err = masks.Ring(sig, float64(sig[1])/2, float64(sig[0])/2, 60, 72)
		} else {
			data := make([]float32, c.N*sig[0]*sig[1])
			for m := range c.N {
				rng := rand.New(rand.NewPCG(uint64(m), 7))
				for i := range sig[0] * sig[1] {
					data[m*sig[0]*sig[1]+i] = rng.Float32()
				}
			}
			stack, err = masks.New(c.N, sig[0], sig[1], data, nil)
		}
		if err != nil {
			return nil, err
		}
		if c.Kind == sparseRing && !stack.PreferSparse() {
			return nil, fmt.Errorf("ring mask has density %.3f, not below the sparse threshold %g", stack.Density(), masks.DefaultSparseDensity)
		}
		abs, err := filepath.Abs(filepath.Join(cfg.scratch, fmt.Sprintf("masks_%s.npy", c)))
		if err != nil {
			return nil, err
		}
		if err := stemnpy.WriteFile(abs, []int{stack.N, sig[0], sig[1]}, stack.Dense()); err != nil {
			return nil, err
		}
		ref := filepath.Join(filepath.Dir(abs), fmt.Sprintf("result_%s_%s_numpy.npy", d.dt, c))
		out = append(out, &caseMasks{maskCase: c, stack: stack, npyPath: abs, reference: ref})
	}
	return out, nil
}

// cpuModel is the "model name" of /proc/cpuinfo.
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}
