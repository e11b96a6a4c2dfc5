package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/stemdot/stemdot/dataset"
	stemnpy "github.com/stemdot/stemdot/internal/npy"
	"github.com/stemdot/stemdot/masks"
	"github.com/stemdot/stemdot/planner"
	"github.com/stemdot/stemdot/synth"
)

// sig is the frame shape of every bench dataset, (sig_y, sig_x) in pixels.
var sig = [2]int{256, 256}

// navX is the scan width; the scan height follows from the dataset size.
const navX = 128

// benchData is one page-cached raw file of synthetic frames.
type benchData struct {
	path   string
	dt     dataset.DType
	nav    []int
	ds     dataset.Dataset
	cached float64 // fraction of the file's pages resident before the runs
}

func (d *benchData) frames() int  { return d.ds.NumFrames() }
func (d *benchData) bytes() int64 { return int64(d.frames()) * int64(d.ds.FrameBytes()) }

func (d *benchData) describe() map[string]any {
	return map[string]any{"path": d.path, "format": "raw", "dtype": d.dt.String(), "nav_shape": d.nav,
		"sig_shape": sig, "frames": d.frames(), "bytes": d.bytes(), "page_cached": d.cached,
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
	cached, err := pageCache(path)
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
	return &benchData{path: path, dt: dt, nav: nav, ds: ds, cached: cached}, nil
}

// pageCache reads the whole file once and returns the fraction of its pages that are
// resident in the page cache afterwards (mincore of a read-only mapping).
func pageCache(path string) (float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if _, err := io.CopyBuffer(io.Discard, f, make([]byte, 8<<20)); err != nil {
		return 0, fmt.Errorf("read %s: %w", path, err)
	}
	st, err := f.Stat()
	if err != nil || st.Size() == 0 {
		return 0, err
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return 0, fmt.Errorf("mmap %s: %w", path, err)
	}
	defer unix.Munmap(m)
	page := os.Getpagesize()
	vec := make([]byte, (len(m)+page-1)/page)
	_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0])))
	if errno != 0 {
		return 0, fmt.Errorf("mincore %s: %w", path, errno)
	}
	resident := 0
	for _, v := range vec {
		resident += int(v & 1)
	}
	return float64(resident) / float64(len(vec)), nil
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
