package main

/*
#include "shim.h"
*/
import "C"

import (
	"unsafe"

	"github.com/stemdot/stemdot"
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
)

//export stemdot_go_dataset_select
func stemdot_go_dataset_select(dsHandle C.stemdot_dataset, roi *C.stemdot_cchar, out *C.stemdot_dataset) (st C.stemdot_status) {
	const fn = "stemdot_dataset_select"
	defer guard(fn, &st)
	if roi == nil || out == nil {
		return fail(fn, failf(errs.Argument, "roi and out must not be NULL"))
	}
	*out = 0 // no stale handle in *out after a failure
	r, err := dataset.ParseROI(goString(roi))
	if err != nil {
		return fail(fn, errs.Wrap(errs.Argument, err))
	}
	var view dataset.Dataset
	// The view owns the dataset: its handle goes, unless Select refuses the ROI.
	if _, err := handles.remove(uint64(dsHandle), kindDataset, func(v any) (err error) {
		view, err = dataset.Select(v.(dataset.Dataset), r)
		return err
	}); err != nil {
		return fail(fn, err)
	}
	*out = C.stemdot_dataset(handles.add(kindDataset, view))
	return succeed()
}

//export stemdot_go_dataset_scan
func stemdot_go_dataset_scan(dsHandle C.stemdot_dataset, isROI *C.int, scanNdim *C.size_t, scanShape *C.size_t,
	positions *C.uint64_t, positionsLen C.size_t) (st C.stemdot_status) {
	const fn = "stemdot_dataset_scan"
	defer guard(fn, &st)
	if isROI == nil || scanNdim == nil || scanShape == nil {
		return fail(fn, failf(errs.Argument, "is_roi, scan_ndim and scan_shape must not be NULL"))
	}
	ds, err := getDataset(uint64(dsHandle))
	if err != nil {
		return fail(fn, err)
	}
	scan, pos := dataset.ScanPositions(ds)
	if len(scan) > maxNavDims {
		return fail(fn, failf(errs.Shape, "the scan has %d nav dimensions, more than %d", len(scan), maxNavDims))
	}
	if positions != nil && int(positionsLen) != len(pos) {
		return fail(fn, failf(errs.Shape, "positions holds %d values, but the dataset has %d frames", positionsLen, len(pos)))
	}
	*isROI = 0
	if dataset.IsROI(ds) {
		*isROI = 1
	}
	*scanNdim = C.size_t(len(scan))
	shape := unsafe.Slice((*C.size_t)(unsafe.Pointer(scanShape)), maxNavDims)
	clear(shape)
	for i, n := range scan {
		shape[i] = C.size_t(n)
	}
	if positions != nil {
		dst := unsafe.Slice((*C.uint64_t)(unsafe.Pointer(positions)), len(pos))
		for i, p := range pos {
			dst[i] = C.uint64_t(p)
		}
	}
	return succeed()
}

//export stemdot_go_dataset_blanks
func stemdot_go_dataset_blanks(dsHandle C.stemdot_dataset, runs *C.uint64_t, runsLen C.size_t, nRuns *C.size_t) (st C.stemdot_status) {
	const fn = "stemdot_dataset_blanks"
	defer guard(fn, &st)
	if nRuns == nil {
		return fail(fn, failf(errs.Argument, "n_runs must not be NULL"))
	}
	ds, err := getDataset(uint64(dsHandle))
	if err != nil {
		return fail(fn, err)
	}
	return writeRuns(fn, stemdot.BlankPositions(ds), runs, runsLen, nRuns)
}

// writeRuns writes runs of positions, (first, count) pairs, into the C buffer runs of
// runsLen values and their number into *nRuns (stemdot_dataset_blanks,
// stemdot_live_missing): runs NULL with runsLen 0 asks for *nRuns only; a buffer too
// small is errs.Shape.
func writeRuns(fn string, pos [][2]int, runs *C.uint64_t, runsLen C.size_t, nRuns *C.size_t) C.stemdot_status {
	*nRuns = C.size_t(len(pos))
	switch {
	case runs == nil && runsLen == 0:
		return succeed()
	case runs == nil:
		return fail(fn, failf(errs.Argument, "runs is NULL but runs_len is %d: give both, or NULL and 0 to ask for n_runs", runsLen))
	case uint64(runsLen) < 2*uint64(len(pos)):
		return fail(fn, failf(errs.Shape, "runs holds %d values, but the %d runs of positions without a frame need %d", runsLen, len(pos), 2*len(pos)))
	}
	dst := unsafe.Slice((*C.uint64_t)(unsafe.Pointer(runs)), 2*len(pos))
	for i, r := range pos {
		dst[2*i], dst[2*i+1] = C.uint64_t(r[0]), C.uint64_t(r[1])
	}
	return succeed()
}
