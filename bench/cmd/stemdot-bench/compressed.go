package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/stemdot/stemdot/bench"
	"github.com/stemdot/stemdot/dataset"
)

// compressedRows is the scan rows of the compressed HDF5 files: the first 16 rows of the
// uint16 raw file (2,048 frames of 256×256, 268 MB decoded), so that every file holds
// more than a 32 MiB last-level cache compressed and a run of one worker takes about a
// second.
const compressedRows = 16

// runCompressed measures the first compressedRows scan rows of the uint16 raw file
// dense written as HDF5, one frame per chunk, with shuffle and deflate and with
// bitshuffle-LZ4 (writeHDF5), with 1 dense mask under the CPU-only plans. Each file is
// read once before timing like the raw files; its rows count the decoded frame bytes
// and are checked against the numpy peer's result of the raw file's same frames (when
// it ran) and the float64 sample of those frames read from the raw file. No read floor:
// decoding is the work measured (ratio_uncompressed compares with the raw file's row,
// scaling cpu-all with cpu-1).
func runCompressed(ctx context.Context, cfg *config, env *machine, dense *benchData, mcs []*caseMasks, rep *bench.Report) ([]bench.Row, error) {
	var mc *caseMasks
	for _, c := range mcs {
		if c.Kind == bench.Dense && c.N == 1 {
			mc = c
		}
	}
	if mc == nil {
		log("hdf5: no case of 1 dense mask among -masks: no compressed HDF5 rows")
		return nil, nil
	}
	nav := []int{min(compressedRows, dense.nav[0]), dense.nav[1]}
	n := nav[0] * nav[1]
	numpyRef, err := loadReference(mc.reference, dense.frames()*mc.N)
	if err != nil {
		return nil, err
	}
	if numpyRef != nil {
		numpyRef = numpyRef[:n*mc.N]
	}
	s, err := sampledReference(dense.ds, dense.dt, n, mc)
	if err != nil {
		return nil, err
	}
	var frames []byte // read from the raw file when a compressed file is written
	var rows []bench.Row
	for _, kind := range []string{bench.DatasetGzip, bench.DatasetBSLZ4} {
		// Named after the raw file whose first frames it holds: the synth model's frames
		// depend on the scan shape, so another raw file's first frames differ.
		path := fmt.Sprintf("%s_first%d_%s.h5", strings.TrimSuffix(dense.path, filepath.Ext(dense.path)), n, strings.TrimPrefix(kind, "hdf5-"))
		if _, err := os.Stat(path); err != nil {
			if frames == nil {
				frames = make([]byte, n*dense.ds.FrameBytes())
				if err := dense.ds.ReadFrames(0, n, frames); err != nil {
					return nil, err
				}
			}
			log("writing %s (%s, %d frames of %s)", path, kind, n, dense.path)
			tmp := path + ".tmp"
			if err := writeHDF5(tmp, kind, frames, nav); err != nil {
				os.Remove(tmp)
				rep.Skipped = append(rep.Skipped, bench.Skip{What: kind, Reason: err.Error()})
				log("skipped %s: %v", kind, err)
				continue
			}
			if err := os.Rename(tmp, path); err != nil {
				return nil, err
			}
		}
		st, err := os.Stat(path)
		if err != nil {
			return nil, err
		}
		cached, huge, err := pageCache(path)
		if err != nil {
			return nil, err
		}
		ds, err := dataset.Open(path, dataset.Options{})
		if err != nil {
			return nil, err
		}
		d := &benchData{path: path, kind: kind, dt: dataset.Uint16, nav: nav, ds: ds, nbytes: int64(n) * int64(ds.FrameBytes()), cached: cached, huge: huge}
		if ds.NumFrames() != n || ds.DType() != dataset.Uint16 {
			ds.Close()
			return nil, fmt.Errorf("%s holds %d %s frames, want %d uint16", path, ds.NumFrames(), ds.DType(), n)
		}
		desc := d.describe()
		desc["format"], desc["file_bytes"], desc["compression_ratio"] = kind, st.Size(), float64(d.bytes())/float64(st.Size())
		desc["model"] = fmt.Sprintf("the first %d frames of %s, one frame per chunk", n, dense.path)
		rep.Datasets = append(rep.Datasets, desc)
		log("%s: %s, %.1f MB (%.2f× smaller than its %.1f MB of frames)", d.label(), path, float64(st.Size())/1e6, float64(d.bytes())/float64(st.Size()), float64(d.bytes())/1e6)
		out := make([]float32, n*mc.N)
		for _, p := range env.plans(d, &rep.Skipped) {
			if !cpuOnly(p.plan) {
				continue
			}
			row, err := measureStemdot(ctx, cfg, d, mc, p, "", nil, numpyRef, s, out)
			if err != nil {
				ds.Close()
				return nil, err
			}
			rows = append(rows, row)
		}
		if err := ds.Close(); err != nil {
			return nil, err
		}
	}
	return rows, nil
}
