package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/stemdot/stemdot/bench"
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/planner"
)

// sparseMasks are the dense mask counts measured on the raw_csr file.
var sparseMasks = []int{1, 4, 16}

// sparseScans is how many times the uint16 scan's frames the raw_csr file holds (its
// first nav axis that many times longer): 258 MB of events for the quick nav (64, 128),
// so that a run's fixed costs (plan, the masks' pixel-major table: 1-5 ms) weigh little
// beside its events, as in a real counted scan. Rows compare frames/s with the dense file.
const sparseScans = 8

// sparseRepeats multiplies -repeats for the raw_csr rows: a run takes some 50-300 ms,
// which a shared machine's noise swamps in a median of 3.
const sparseRepeats = 5

// csrFiles are the three arrays of a raw_csr file, mapped read-only: indptr (int64,
// frames+1), indices (int32) and data (uint16), host order (little endian: amd64, arm64).
type csrFiles struct {
	maps    [][]byte
	indptr  []int64
	indices []int32
	data    []uint16
}

func (c *csrFiles) bytes() int64 {
	return int64(8*len(c.indptr) + 4*len(c.indices) + 2*len(c.data))
}

func (c *csrFiles) close() {
	for _, m := range c.maps {
		_ = unix.Munmap(m)
	}
}

// runSparse measures counted frames of dense's sig shape as a raw_csr file of
// sparseScans times dense's frames (nav_shape (sparseScans·nav[0], nav[1])): 1% of the pixels of each frame hit (655 of 256×256 at distinct random pixels,
// in pixel order, as scipy's canonical CSR holds them; PCG seed (1, 1)), counts 1-20 in
// uint16, indptr int64 and indices int32 (8, 4 and 2 bytes an entry, as
// engine.BenchmarkGatherTargets holds them in memory). The file is read once before
// timing like the raw files; its rows count the sparse bytes (indptr, indices, data)
// and are checked against a float64 product of every frame's events, computed here
// from the mapped arrays. Its read floor is a sweep summing indptr, indices and data of
// the plan's partitions on the plan's workers, pinned the same way (as the gather
// benchmark's floor). Each row takes sparseRepeats × -repeats timed runs. Only CPU-only
// plans: GPU workers densify the events. The gather views the events in place, in
// uint16 (package csr).
func runSparse(ctx context.Context, cfg *config, env *machine, dense *benchData, mcs []*caseMasks, rep *bench.Report) ([]bench.Row, error) {
	var cases []*caseMasks
	for _, mc := range mcs {
		if mc.Kind == bench.Dense && slices.Contains(sparseMasks, mc.N) {
			cases = append(cases, mc)
		}
	}
	if len(cases) == 0 {
		log("raw_csr: none of the dense mask counts %v among -masks: no raw_csr rows", sparseMasks)
		return nil, nil
	}
	nav := []int{sparseScans * dense.nav[0], dense.nav[1]}
	toml, err := writeCSR(cfg.scratch, nav)
	if err != nil {
		return nil, err
	}
	files, cached, err := mapCSR(toml)
	if err != nil {
		return nil, err
	}
	defer files.close()
	ds, err := dataset.Open(toml, dataset.Options{})
	if err != nil {
		return nil, err
	}
	defer ds.Close()
	d := &benchData{path: toml, kind: bench.DatasetCSR, dt: dataset.Uint16, nav: nav, ds: ds, nbytes: files.bytes(), cached: cached,
		floor: func(plan *planner.Plan) error { return sweepCSR(files, plan) }}
	if ds.NumFrames() != nav[0]*nav[1] {
		return nil, fmt.Errorf("%s holds %d frames, want %d", toml, ds.NumFrames(), nav[0]*nav[1])
	}
	desc := d.describe()
	desc["format"], desc["events"] = "raw_csr", len(files.indices)
	desc["model"] = "1% of the pixels hit at distinct random pixels in pixel order, counts 1-20 (uint16), PCG seed (1, 1); indptr int64, indices int32"
	rep.Datasets = append(rep.Datasets, desc)
	log("%s: %s, nav %v, %d events, %.1f MB of sparse bytes", d.label(), toml, d.nav, len(files.indices), float64(d.bytes())/1e6)
	var plans []namedPlan
	for _, p := range env.plans(d, &rep.Skipped) {
		if cpuOnly(p.plan) {
			plans = append(plans, p)
		}
	}
	more := *cfg
	more.repeats *= sparseRepeats
	var rows []bench.Row
	for _, mc := range cases {
		s := csrReference(files, mc)
		out := make([]float32, d.frames()*mc.N)
		for _, p := range plans {
			row, err := measureStemdot(ctx, &more, d, mc, p, "", nil, nil, s, out)
			if err != nil {
				return nil, err
			}
			rows = append(rows, row)
		}
	}
	floors, err := readFloor(&more, d, plans)
	return append(rows, floors...), err
}

// writeCSR writes (or reuses) the raw_csr file of nav's counted frames in dir and
// returns the path of its TOML file, written last.
func writeCSR(dir string, nav []int) (string, error) {
	base := filepath.Join(dir, fmt.Sprintf("csr_uint16_%dx%dx%dx%d", nav[0], nav[1], sig[0], sig[1]))
	toml := base + ".toml"
	if _, err := os.Stat(toml); err == nil {
		return toml, nil
	}
	frames := nav[0] * nav[1]
	log("writing %s (raw_csr, %d frames, 1%% of the pixels hit)", toml, frames)
	names := []string{base + ".indptr", base + ".indices", base + ".data"}
	var ws []*bufio.Writer
	var fs []*os.File
	for _, name := range names {
		f, err := os.Create(name)
		if err != nil {
			return "", err
		}
		defer f.Close()
		fs, ws = append(fs, f), append(ws, bufio.NewWriterSize(f, 1<<20))
	}
	le := binary.LittleEndian
	var b [8]byte
	rng := rand.New(rand.NewPCG(1, 1))
	pixels := sig[0] * sig[1]
	frame := make([]uint16, pixels)
	var events int64
	_, _ = ws[0].Write(le.AppendUint64(b[:0], 0))
	for range frames {
		for n := 0; n < pixels/100; {
			if p := rng.IntN(pixels); frame[p] == 0 {
				frame[p] = uint16(1 + rng.IntN(20))
				n++
			}
		}
		for p, v := range frame {
			if v != 0 {
				_, _ = ws[1].Write(le.AppendUint32(b[:0], uint32(p)))
				_, _ = ws[2].Write(le.AppendUint16(b[:0], v))
				events++
			}
		}
		clear(frame)
		_, _ = ws[0].Write(le.AppendUint64(b[:0], uint64(events)))
	}
	for i, w := range ws {
		if err := errors.Join(w.Flush(), fs[i].Close()); err != nil {
			return "", err
		}
	}
	text := fmt.Sprintf(`[params]
filetype = "raw_csr"
nav_shape = [%d, %d]
sig_shape = [%d, %d]

[raw_csr]
indptr_file = %q
indptr_dtype = "<i8"
indices_file = %q
indices_dtype = "<i4"
data_file = %q
data_dtype = "<u2"
`, nav[0], nav[1], sig[0], sig[1], filepath.Base(names[0]), filepath.Base(names[1]), filepath.Base(names[2]))
	return toml, os.WriteFile(toml, []byte(text), 0o644)
}

// mapCSR puts the arrays of the raw_csr file that writeCSR wrote in the page cache
// (pageCache) and maps them; cached is the smallest fraction of a file's pages resident.
func mapCSR(toml string) (c *csrFiles, cached float64, err error) {
	base := strings.TrimSuffix(toml, ".toml")
	c, cached = &csrFiles{}, 1
	for _, ext := range []string{".indptr", ".indices", ".data"} {
		path := base + ext
		resident, _, err := pageCache(path)
		if err != nil {
			c.close()
			return nil, 0, err
		}
		if resident < 0.99 {
			log("warning: only %.1f%% of %s stays in the page cache", 100*resident, path)
		}
		cached = min(cached, resident)
		m, err := mapFile(path)
		if err != nil {
			c.close()
			return nil, 0, err
		}
		c.maps = append(c.maps, m)
	}
	c.indptr = unsafe.Slice((*int64)(unsafe.Pointer(&c.maps[0][0])), len(c.maps[0])/8)
	c.indices = unsafe.Slice((*int32)(unsafe.Pointer(&c.maps[1][0])), len(c.maps[1])/4)
	c.data = unsafe.Slice((*uint16)(unsafe.Pointer(&c.maps[2][0])), len(c.maps[2])/2)
	return c, cached, nil
}

// mapFile maps the file path read-only.
func mapFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() == 0 {
		return nil, fmt.Errorf("%s is empty", path)
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap %s: %w", path, err)
	}
	return m, nil
}

// csrReference is the mask-dot product of every frame in float64, from the events with
// plain loops (a sample of all frames).
func csrReference(c *csrFiles, mc *caseMasks) *sample {
	n := len(c.indptr) - 1
	s := &sample{frames: make([]int, n), values: make([]float64, n*mc.N)}
	for f := range n {
		s.frames[f] = f
		for m := range mc.N {
			mask := mc.stack.Mask(m)
			var sum float64
			for k := c.indptr[f]; k < c.indptr[f+1]; k++ {
				sum += float64(mask[c.indices[k]]) * float64(c.data[k])
			}
			s.values[f*mc.N+m] = sum
		}
	}
	return s
}

// sweepCSR is the raw_csr file's read floor: plan's workers, pinned like the engine's,
// pull the plan's partitions from a queue and sum each one's indptr entries and its
// events' indices and data from the mapped files (two sums in flight, as the gather
// benchmark's floor).
func sweepCSR(c *csrFiles, plan *planner.Plan) error {
	return onPinnedWorkers(plan, func() func(planner.Partition) (uint64, error) {
		return func(p planner.Partition) (uint64, error) {
			var s0, s1, s2 uint64
			for _, v := range c.indptr[p.Start : p.End+1] {
				s0 += uint64(v)
			}
			a, e := c.indptr[p.Start], c.indptr[p.End]
			idx, data := c.indices[a:e], c.data[a:e]
			k := 0
			for ; k+2 <= len(idx); k += 2 {
				s1 += uint64(idx[k]) + uint64(data[k])
				s2 += uint64(idx[k+1]) + uint64(data[k+1])
			}
			for ; k < len(idx); k++ {
				s1 += uint64(idx[k]) + uint64(data[k])
			}
			return s0 + s1 + s2, nil
		}
	})
}
