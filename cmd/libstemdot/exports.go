package main

/*
#cgo CFLAGS: -I${SRCDIR} -I${SRCDIR}/../../include
#include "shim.h"
*/
import "C"

import (
	"context"
	"encoding/json"
	"math"
	"slices"
	"strings"
	"unsafe"

	"github.com/stemdot/stemdot"
	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/internal/frontend"
	"github.com/stemdot/stemdot/internal/safetext"
	"github.com/stemdot/stemdot/masks"
)

// Compile-time checks that the C enums of include/stemdot.h and the Go values agree:
// a mismatch makes a constant index negative or out of range.
var (
	_ = [1]int{}[C.STEMDOT_OK-statusOK]
	_ = [1]int{}[C.STEMDOT_ERR_INVALID_ARGUMENT-errInvalidArgument]
	_ = [1]int{}[C.STEMDOT_ERR_IO-errIO]
	_ = [1]int{}[C.STEMDOT_ERR_FORMAT-errFormat]
	_ = [1]int{}[C.STEMDOT_ERR_SHAPE-errShape]
	_ = [1]int{}[C.STEMDOT_ERR_DTYPE-errDType]
	_ = [1]int{}[C.STEMDOT_ERR_PLAN-errPlan]
	_ = [1]int{}[C.STEMDOT_ERR_CANCELLED-errCancelled]
	_ = [1]int{}[C.STEMDOT_ERR_BAD_HANDLE-errBadHandle]
	_ = [1]int{}[C.STEMDOT_ERR_CUDA_UNAVAILABLE-errCUDAUnavailable]
	_ = [1]int{}[C.STEMDOT_ERR_INTERNAL-errInternal]
	_ = [1]int{}[C.STEMDOT_ERR_FORKED-errForked]
	_ = [1]int{}[C.STEMDOT_UINT8-dataset.Uint8]
	_ = [1]int{}[C.STEMDOT_UINT16-dataset.Uint16]
	_ = [1]int{}[C.STEMDOT_UINT32-dataset.Uint32]
	_ = [1]int{}[C.STEMDOT_INT8-dataset.Int8]
	_ = [1]int{}[C.STEMDOT_INT16-dataset.Int16]
	_ = [1]int{}[C.STEMDOT_INT32-dataset.Int32]
	_ = [1]int{}[C.STEMDOT_FLOAT32-dataset.Float32]
	_ = [1]int{}[C.STEMDOT_FLOAT64-dataset.Float64]
	_ = [1]int{}[C.STEMDOT_MAX_NAV_DIMS-maxNavDims]
)

// succeed clears the calling thread's last error and returns STEMDOT_OK.
func succeed() C.stemdot_status {
	C.stemdot_capi_set_error(nil, 0)
	return C.STEMDOT_OK
}

// fail sets the calling thread's last error to "fn: message" and returns err's code.
// Go code called from C runs on the calling C thread, so the thread-local storage in
// shim.c is that thread's. Options are named by key, as the C ABI takes them; terminal
// control characters are escaped (safetext.String), as a caller prints the message.
func fail(fn string, err error) C.stemdot_status {
	msg := fn + ": " + safetext.String(frontend.OptionKeys(err.Error()))
	C.stemdot_capi_set_error((*C.char)(unsafe.Pointer(unsafe.StringData(msg))), C.size_t(len(msg)))
	return C.stemdot_status(codeOf(err))
}

// guard, deferred by every exported function, turns a panic into STEMDOT_ERR_INTERNAL
// with the panic's message instead of crashing the host process.
func guard(fn string, st *C.stemdot_status) {
	if r := recover(); r != nil {
		*st = fail(fn, panicError(r))
	}
}

// goString copies a C string; NULL gives "".
func goString(s *C.stemdot_cchar) string {
	if s == nil {
		return ""
	}
	return C.GoString((*C.char)(unsafe.Pointer(s)))
}

// maxBytes bounds the bytes of any buffer a caller passes: 2^48, the largest allocation
// of Go on 64-bit Linux (the runtime's maxAlloc), beyond the memory of any machine. A
// size past it describes no buffer; taken as one, its arithmetic would overflow, or
// unsafe.Slice and make panic.
const maxBytes = 1 << 48

// sizeProduct multiplies sizes, counts of elements of elemBytes bytes each, failing with
// errs.Shape naming what and the sizes when a size or the product is more than maxBytes
// bytes, or, with limit > 0, the product more than limit elements. It is checked before
// the arithmetic, which cannot overflow.
func sizeProduct(what string, elemBytes, limit int, sizes ...C.size_t) (int, error) {
	most := maxBytes / elemBytes
	if limit > 0 {
		most = min(most, limit)
	}
	p := 1
	for _, s := range sizes {
		if uint64(s) > uint64(most) || s != 0 && p > most/int(s) {
			return 0, failf(errs.Shape, "%s: sizes %v make more than %d elements of %d bytes: no buffer is that large", what, sizes, most, elemBytes)
		}
		p *= int(s)
	}
	return p, nil
}

// lastError is the calling thread's last error (stemdot_last_error), for the tests.
func lastError() string { return C.GoString(C.stemdot_last_error()) }

//export stemdot_go_open
func stemdot_go_open(path, options *C.stemdot_cchar, out *C.stemdot_dataset) (st C.stemdot_status) {
	const fn = "stemdot_open"
	defer guard(fn, &st)
	if path == nil || out == nil {
		return fail(fn, failf(errs.Argument, "path and out must not be NULL"))
	}
	*out = 0 // no stale handle in *out after a failure
	ds, err := openDataset(goString(path), goString(options))
	if err != nil {
		return fail(fn, err)
	}
	*out = C.stemdot_dataset(handles.add(kindDataset, ds))
	return succeed()
}

//export stemdot_go_dataset_from_memory
func stemdot_go_dataset_from_memory(frames *C.stemdot_cvoid, framesBytes C.size_t, dtype C.stemdot_dtype,
	navNdim C.size_t, navShape *C.stemdot_csize, sigY, sigX C.size_t, out *C.stemdot_dataset) (st C.stemdot_status) {
	const fn = "stemdot_dataset_from_memory"
	defer guard(fn, &st)
	if frames == nil || navShape == nil || out == nil {
		return fail(fn, failf(errs.Argument, "frames, nav_shape and out must not be NULL"))
	}
	*out = 0 // no stale handle in *out after a failure
	if navNdim < 1 || navNdim > maxNavDims {
		return fail(fn, failf(errs.Argument, "nav_ndim %d is not in 1..%d", navNdim, maxNavDims))
	}
	dims := unsafe.Slice((*C.size_t)(unsafe.Pointer(navShape)), navNdim)
	if _, err := sizeProduct("nav_shape × sig_shape", 1, 0, append(slices.Clone(dims), sigY, sigX)...); err != nil {
		return fail(fn, err)
	}
	nav := make([]int, len(dims))
	for i, d := range dims {
		nav[i] = int(d)
	}
	n, err := sizeProduct("frames_bytes", 1, 0, framesBytes)
	if err != nil {
		return fail(fn, err)
	}
	data := unsafe.Slice((*byte)(unsafe.Pointer(frames)), n)
	ds, err := memoryDataset(data, int(dtype), nav, int(sigY), int(sigX))
	if err != nil {
		return fail(fn, err)
	}
	*out = C.stemdot_dataset(handles.add(kindDataset, ds))
	return succeed()
}

//export stemdot_go_dataset_get_info
func stemdot_go_dataset_get_info(h C.stemdot_dataset, info *C.stemdot_dataset_info) (st C.stemdot_status) {
	const fn = "stemdot_dataset_get_info"
	defer guard(fn, &st)
	if info == nil {
		return fail(fn, failf(errs.Argument, "info must not be NULL"))
	}
	ds, err := getDataset(uint64(h))
	if err != nil {
		return fail(fn, err)
	}
	nav := ds.NavShape()
	if len(nav) > maxNavDims {
		return fail(fn, failf(errs.Shape, "dataset has %d nav dimensions, more than %d", len(nav), maxNavDims))
	}
	*info = C.stemdot_dataset_info{}
	info.nav_ndim = C.size_t(len(nav))
	for i, n := range nav {
		info.nav_shape[i] = C.size_t(n)
	}
	sig := ds.SigShape()
	info.sig_shape[0], info.sig_shape[1] = C.size_t(sig[0]), C.size_t(sig[1])
	info.dtype = C.stemdot_dtype(ds.DType())
	info.n_frames = C.uint64_t(ds.NumFrames())
	return succeed()
}

//export stemdot_go_dataset_free
func stemdot_go_dataset_free(h C.stemdot_dataset) (st C.stemdot_status) {
	const fn = "stemdot_dataset_free"
	defer guard(fn, &st)
	v, err := handles.remove(uint64(h), kindDataset, nil)
	if err != nil {
		return fail(fn, err)
	}
	if err := v.(dataset.Dataset).Close(); err != nil {
		return fail(fn, errs.Wrap(errs.IO, err))
	}
	return succeed()
}

//export stemdot_go_plan_new
func stemdot_go_plan_new(cpus, gpus *C.stemdot_cchar, out *C.stemdot_plan) (st C.stemdot_status) {
	const fn = "stemdot_plan_new"
	defer guard(fn, &st)
	if out == nil {
		return fail(fn, failf(errs.Argument, "out must not be NULL"))
	}
	*out = 0 // no stale handle in *out after a failure
	p, err := newPlanner(goString(cpus), goString(gpus))
	if err != nil {
		return fail(fn, err)
	}
	*out = C.stemdot_plan(handles.add(kindPlan, p))
	return succeed()
}

//export stemdot_go_plan_new_options
func stemdot_go_plan_new_options(options *C.stemdot_cchar, out *C.stemdot_plan) (st C.stemdot_status) {
	const fn = "stemdot_plan_new_options"
	defer guard(fn, &st)
	if out == nil {
		return fail(fn, failf(errs.Argument, "out must not be NULL"))
	}
	*out = 0 // no stale handle in *out after a failure
	p, err := stemdot.ParsePlan(goString(options))
	if err != nil {
		return fail(fn, err)
	}
	pl, err := p.Planner()
	if err != nil {
		return fail(fn, err)
	}
	*out = C.stemdot_plan(handles.add(kindPlan, pl))
	return succeed()
}

//export stemdot_go_plan_describe
func stemdot_go_plan_describe(h C.stemdot_plan, dsHandle C.stemdot_dataset, buf *C.char, bufLen C.size_t, needed *C.size_t) (st C.stemdot_status) {
	const fn = "stemdot_plan_describe"
	defer guard(fn, &st)
	if needed == nil || (buf == nil && bufLen > 0) {
		return fail(fn, failf(errs.Argument, "needed must not be NULL, and buf must not be NULL when buf_len > 0"))
	}
	text, err := describePlan(uint64(h), uint64(dsHandle))
	if err != nil {
		return fail(fn, err)
	}
	return copyText(fn, frontend.OptionKeys(string(text)), "plan", buf, bufLen, needed)
}

//export stemdot_go_dataset_warnings
func stemdot_go_dataset_warnings(dsHandle C.stemdot_dataset, buf *C.char, bufLen C.size_t, needed *C.size_t) (st C.stemdot_status) {
	const fn = "stemdot_dataset_warnings"
	defer guard(fn, &st)
	return datasetText(fn, "warnings", dsHandle, buf, bufLen, needed, func(d dataset.Dataset) string {
		return safetext.String(frontend.OptionKeys(strings.Join(stemdot.OpenWarnings(d), "\n")))
	})
}

//export stemdot_go_dataset_run_notes
func stemdot_go_dataset_run_notes(dsHandle C.stemdot_dataset, first, count C.size_t, buf *C.char, bufLen C.size_t, needed *C.size_t) (st C.stemdot_status) {
	const fn = "stemdot_dataset_run_notes"
	defer guard(fn, &st)
	if needed == nil || (buf == nil && bufLen > 0) {
		return fail(fn, failf(errs.Argument, "needed must not be NULL, and buf must not be NULL when buf_len > 0"))
	}
	d, err := getDataset(uint64(dsHandle))
	if err != nil {
		return fail(fn, err)
	}
	if n := uint64(d.NumFrames()); uint64(first) > n || uint64(count) > n-uint64(first) {
		return fail(fn, failf(errs.Shape, "first %d, count %d: the frames are not within the dataset's %d frames", uint64(first), uint64(count), n))
	}
	type note struct {
		dataset.RunNote
		Warning string `json:"warning"`
	}
	notes := dataset.RunNotes(d, int(first), int(first+count))
	out := make([]note, len(notes))
	for i, w := range stemdot.RunWarnings(d, notes) {
		out[i] = note{notes[i], w}
	}
	text, err := json.Marshal(out)
	if err != nil {
		return fail(fn, errs.Wrap(errs.Internal, err))
	}
	return copyText(fn, string(text), "run notes", buf, bufLen, needed)
}

//export stemdot_go_dataset_format
func stemdot_go_dataset_format(dsHandle C.stemdot_dataset, buf *C.char, bufLen C.size_t, needed *C.size_t) (st C.stemdot_status) {
	const fn = "stemdot_dataset_format"
	defer guard(fn, &st)
	return datasetText(fn, "format", dsHandle, buf, bufLen, needed, dataset.Dataset.Format)
}

//export stemdot_go_dataset_path
func stemdot_go_dataset_path(dsHandle C.stemdot_dataset, buf *C.char, bufLen C.size_t, needed *C.size_t) (st C.stemdot_status) {
	const fn = "stemdot_dataset_path"
	defer guard(fn, &st)
	return datasetText(fn, "path", dsHandle, buf, bufLen, needed, dataset.Dataset.Path)
}

//export stemdot_go_dataset_calibration
func stemdot_go_dataset_calibration(dsHandle C.stemdot_dataset, buf *C.char, bufLen C.size_t, needed *C.size_t) (st C.stemdot_status) {
	const fn = "stemdot_dataset_calibration"
	defer guard(fn, &st)
	return datasetText(fn, "calibration", dsHandle, buf, bufLen, needed, func(d dataset.Dataset) string {
		c := dataset.CalibrationOf(d)
		if c.IsZero() {
			return "{}"
		}
		text, _ := json.Marshal(c) // of numbers and strings: cannot fail
		return string(text)
	})
}

// datasetText is C call fn that writes text(d) of the dataset d of dsHandle, as copyText
// (what names the text): needed NULL, or buf NULL with bufLen > 0, is errs.Argument,
// checked before the handle.
func datasetText(fn, what string, dsHandle C.stemdot_dataset, buf *C.char, bufLen C.size_t, needed *C.size_t,
	text func(d dataset.Dataset) string) C.stemdot_status {
	if needed == nil || (buf == nil && bufLen > 0) {
		return fail(fn, failf(errs.Argument, "needed must not be NULL, and buf must not be NULL when buf_len > 0"))
	}
	d, err := getDataset(uint64(dsHandle))
	if err != nil {
		return fail(fn, err)
	}
	return copyText(fn, text(d), what, buf, bufLen, needed)
}

// copyText writes text as it is (messages have their options named by key by the
// caller: frontend.OptionKeys) and a NUL into buf (bufLen bytes) and its length into
// *needed; buf NULL with bufLen 0 only asks for the length; a buffer too small is
// errs.Shape naming what (with *needed set).
func copyText(fn, text, what string, buf *C.char, bufLen C.size_t, needed *C.size_t) C.stemdot_status {
	*needed = C.size_t(len(text))
	if buf == nil && bufLen == 0 { // the length query
		return succeed()
	}
	if uint64(bufLen) < uint64(len(text))+1 {
		return fail(fn, failf(errs.Shape, "buffer of %d bytes is too small for the %d-byte %s and its NUL", bufLen, len(text), what))
	}
	dst := unsafe.Slice((*byte)(unsafe.Pointer(buf)), len(text)+1)
	copy(dst, text)
	dst[len(text)] = 0
	return succeed()
}

//export stemdot_go_plan_free
func stemdot_go_plan_free(h C.stemdot_plan) (st C.stemdot_status) {
	const fn = "stemdot_plan_free"
	defer guard(fn, &st)
	if _, err := handles.remove(uint64(h), kindPlan, nil); err != nil {
		return fail(fn, err)
	}
	return succeed()
}

//export stemdot_go_run_new
func stemdot_go_run_new(out *C.stemdot_run) (st C.stemdot_status) {
	const fn = "stemdot_run_new"
	defer guard(fn, &st)
	if out == nil {
		return fail(fn, failf(errs.Argument, "out must not be NULL"))
	}
	*out = C.stemdot_run(handles.add(kindRun, &run{}))
	return succeed()
}

//export stemdot_go_run_cancel
func stemdot_go_run_cancel(h C.stemdot_run) (st C.stemdot_status) {
	const fn = "stemdot_run_cancel"
	defer guard(fn, &st)
	r, err := getRun(uint64(h))
	if err != nil {
		return fail(fn, err)
	}
	r.stop()
	return succeed()
}

//export stemdot_go_run_reset
func stemdot_go_run_reset(h C.stemdot_run) (st C.stemdot_status) {
	const fn = "stemdot_run_reset"
	defer guard(fn, &st)
	r, err := getRun(uint64(h))
	if err != nil {
		return fail(fn, err)
	}
	if err := r.reset(); err != nil {
		return fail(fn, err)
	}
	return succeed()
}

//export stemdot_go_run_free
func stemdot_go_run_free(h C.stemdot_run) (st C.stemdot_status) {
	const fn = "stemdot_run_free"
	defer guard(fn, &st)
	_, err := handles.remove(uint64(h), kindRun, func(v any) error { return v.(*run).idle() })
	if err != nil {
		return fail(fn, err)
	}
	return succeed()
}

//export stemdot_go_mask_parse
func stemdot_go_mask_parse(spec *C.stemdot_cchar, sigY, sigX C.size_t, out *C.float, outLen C.size_t, nMasks *C.size_t) (st C.stemdot_status) {
	const fn = "stemdot_mask_parse"
	defer guard(fn, &st)
	return maskParse(fn, spec, sigY, sigX, nil, out, outLen, nMasks)
}

// maskParse is stemdot_mask_parse, and stemdot_mask_parse_centred with the direct
// beam's centre for the auto specs.
func maskParse(fn string, spec *C.stemdot_cchar, sigY, sigX C.size_t, centre *masks.Centre, out *C.float, outLen C.size_t, nMasks *C.size_t) C.stemdot_status {
	if spec == nil || nMasks == nil {
		return fail(fn, failf(errs.Argument, "spec and n_masks must not be NULL"))
	}
	if _, err := sizeProduct("sig_shape", 4, masks.MaxWeights, sigY, sigX); err != nil {
		return fail(fn, err)
	}
	if sigY == 0 || sigX == 0 {
		return fail(fn, failf(errs.Shape, "sig shape (%d, %d) has a non-positive size", sigY, sigX))
	}
	stack, err := stemdot.MasksCentred([2]int{int(sigY), int(sigX)}, centre, goString(spec))
	if err != nil {
		return fail(fn, err)
	}
	*nMasks = C.size_t(stack.N)
	if out == nil {
		return succeed()
	}
	dense := stack.Dense()
	if uint64(outLen) < uint64(len(dense)) {
		return fail(fn, failf(errs.Shape, "out holds %d floats, but %d masks of %d×%d pixels need %d", outLen, stack.N, sigY, sigX, len(dense)))
	}
	copy(unsafe.Slice((*float32)(unsafe.Pointer(out)), len(dense)), dense)
	return succeed()
}

//export stemdot_go_mask_stack
func stemdot_go_mask_stack(files *C.stemdot_cstring, nFiles C.size_t, specs *C.stemdot_cstring, nSpecs C.size_t,
	sigY, sigX C.size_t, centre *C.stemdot_cdouble, out unsafe.Pointer, outDType C.stemdot_dtype, outLen C.size_t, nMasks *C.size_t,
	names *C.char, namesLen C.size_t, namesNeeded *C.size_t) (st C.stemdot_status) {
	const fn = "stemdot_mask_stack"
	defer guard(fn, &st)
	if nMasks == nil || (names != nil || namesLen > 0) && namesNeeded == nil {
		return fail(fn, failf(errs.Argument, "n_masks must not be NULL, and names_needed not NULL when names is given"))
	}
	fileList, err := goStrings("files", files, nFiles)
	if err != nil {
		return fail(fn, err)
	}
	specList, err := goStrings("specs", specs, nSpecs)
	if err != nil {
		return fail(fn, err)
	}
	if len(fileList)+len(specList) == 0 {
		return fail(fn, failf(errs.Argument, "no masks: give NPY mask files (files, n_files) or mask specs (specs, n_specs)"))
	}
	if _, err := sizeProduct("sig_shape", 4, masks.MaxWeights, sigY, sigX); err != nil {
		return fail(fn, err)
	}
	stack, err := masksFrom(fileList, specList, int(sigY), int(sigX), goCentre(centre))
	if err != nil {
		return fail(fn, err)
	}
	*nMasks = C.size_t(stack.N)
	if namesNeeded != nil {
		if code := copyText(fn, strings.Join(stack.MaskNames(), "\n"), "names", names, namesLen, namesNeeded); code != C.STEMDOT_OK {
			return code
		}
	}
	if out != nil {
		n := stack.N * stack.Pixels()
		if uint64(outLen) < uint64(n) {
			return fail(fn, failf(errs.Shape, "out holds %d elements, but %d masks of %d×%d pixels need %d", outLen, stack.N, sigY, sigX, n))
		}
		switch outDType {
		case C.STEMDOT_FLOAT32:
			copy(unsafe.Slice((*float32)(out), n), stack.Dense())
		case C.STEMDOT_FLOAT64:
			copy(unsafe.Slice((*float64)(out), n), stack.Dense64())
		default:
			return fail(fn, failf(errs.DType, "out dtype %d is not STEMDOT_FLOAT32 (%d) or STEMDOT_FLOAT64 (%d)", outDType, C.STEMDOT_FLOAT32, C.STEMDOT_FLOAT64))
		}
	}
	return succeed()
}

// goStrings copies the n C strings of list (what names it in errors); list may be NULL
// when n is 0.
func goStrings(what string, list *C.stemdot_cstring, n C.size_t) ([]string, error) {
	if n == 0 {
		return nil, nil
	}
	if list == nil {
		return nil, failf(errs.Argument, "%s is NULL, but n_%s is %d", what, what, n)
	}
	if _, err := sizeProduct("n_"+what, 8, math.MaxInt32, n); err != nil {
		return nil, err
	}
	out := make([]string, n)
	for i, s := range unsafe.Slice((**C.char)(unsafe.Pointer(list)), int(n)) {
		if s == nil {
			return nil, failf(errs.Argument, "%s[%d] is NULL", what, i)
		}
		out[i] = C.GoString(s)
	}
	return out, nil
}

//export stemdot_go_apply
func stemdot_go_apply(dsHandle C.stemdot_dataset, maskData *C.stemdot_cfloat, nMasks, sigY, sigX C.size_t,
	planHandle C.stemdot_plan, runHandle C.stemdot_run, progress C.stemdot_progress_fn, progressUser unsafe.Pointer,
	out unsafe.Pointer, outDType C.stemdot_dtype, outLen C.size_t) (st C.stemdot_status) {
	const fn = "stemdot_apply"
	defer guard(fn, &st)
	return applyC(fn, dsHandle, unsafe.Pointer(maskData), false, nMasks, sigY, sigX, planHandle, runHandle, progress, progressUser, out, outDType, outLen, nil)
}

//export stemdot_go_apply64
func stemdot_go_apply64(dsHandle C.stemdot_dataset, maskData *C.stemdot_cdouble, nMasks, sigY, sigX C.size_t,
	planHandle C.stemdot_plan, runHandle C.stemdot_run, progress C.stemdot_progress_fn, progressUser unsafe.Pointer,
	out unsafe.Pointer, outDType C.stemdot_dtype, outLen C.size_t) (st C.stemdot_status) {
	const fn = "stemdot_apply64"
	defer guard(fn, &st)
	return applyC(fn, dsHandle, unsafe.Pointer(maskData), true, nMasks, sigY, sigX, planHandle, runHandle, progress, progressUser, out, outDType, outLen, nil)
}

//export stemdot_go_apply_shifted
func stemdot_go_apply_shifted(dsHandle C.stemdot_dataset, maskData *C.stemdot_cvoid, maskDType C.stemdot_dtype, nMasks, sigY, sigX C.size_t,
	shifts *C.stemdot_cdouble, nShifts C.size_t, planHandle C.stemdot_plan, runHandle C.stemdot_run, progress C.stemdot_progress_fn, progressUser unsafe.Pointer,
	out unsafe.Pointer, outDType C.stemdot_dtype, outLen C.size_t) (st C.stemdot_status) {
	const fn = "stemdot_apply_shifted"
	defer guard(fn, &st)
	if shifts == nil {
		return fail(fn, failf(errs.Argument, "shifts must not be NULL (stemdot_apply applies the masks unshifted)"))
	}
	n, err := sizeProduct("n_shifts", 8, 0, nShifts)
	if err != nil {
		return fail(fn, err)
	}
	f64, err := masksDType(maskDType)
	if err != nil {
		return fail(fn, err)
	}
	// Copied: the engine holds the shifts for the whole run, the caller's buffer only
	// during the call.
	sh := slices.Clone(unsafe.Slice((*float64)(unsafe.Pointer(shifts)), n))
	if sh == nil {
		sh = []float64{}
	}
	return applyC(fn, dsHandle, unsafe.Pointer(maskData), f64, nMasks, sigY, sigX, planHandle, runHandle, progress, progressUser, out, outDType, outLen, sh)
}

//export stemdot_go_descan_fit
func stemdot_go_descan_fit(dsHandle C.stemdot_dataset, com *C.stemdot_cchar, planHandle C.stemdot_plan, coeffs *C.double, shifts *C.double, shiftsLen C.size_t, used *C.size_t) (st C.stemdot_status) {
	const fn = "stemdot_descan_fit"
	defer guard(fn, &st)
	if coeffs == nil {
		return fail(fn, failf(errs.Argument, "coeffs must not be NULL (8 doubles)"))
	}
	ds, pl, _, release, err := jobOf(uint64(dsHandle), uint64(planHandle), 0)
	if err != nil {
		return fail(fn, err)
	}
	defer release()
	var n int
	scan, _ := dataset.ScanPositions(ds) // the whole scan, also of an ROI or a frames range
	if shifts != nil {
		if n, err = sizeProduct("shifts_len", 8, 0, shiftsLen); err != nil {
			return fail(fn, err)
		}
		if want := 2 * product(scan); n != want {
			return fail(fn, failf(errs.Shape, "shifts_len is %d, want 2 per scan position = %d", n, want))
		}
	}
	spec := ""
	if com != nil {
		spec = C.GoString(com)
	}
	p, err := pl.DescanFit(context.Background(), ds, spec)
	if err != nil {
		return fail(fn, err)
	}
	copy(unsafe.Slice((*float64)(unsafe.Pointer(coeffs)), 8), []float64{p.Y.A, p.Y.B, p.Y.C, p.X.A, p.X.B, p.X.C, p.RMS[0], p.RMS[1]})
	if shifts != nil {
		s, err := p.Eval(scan)
		if err != nil {
			return fail(fn, err)
		}
		copy(unsafe.Slice((*float64)(unsafe.Pointer(shifts)), n), s)
	}
	if used != nil {
		*used = C.size_t(p.Used)
	}
	return succeed()
}

// applyC is stemdot_apply (masks of float) and stemdot_apply64 (masks of double, f64),
// and stemdot_apply_shifted (shifts not nil).
func applyC(fn string, dsHandle C.stemdot_dataset, maskData unsafe.Pointer, f64 bool, nMasks, sigY, sigX C.size_t,
	planHandle C.stemdot_plan, runHandle C.stemdot_run, progress C.stemdot_progress_fn, progressUser unsafe.Pointer,
	out unsafe.Pointer, outDType C.stemdot_dtype, outLen C.size_t, shifts []float64) C.stemdot_status {
	if maskData == nil || out == nil {
		return fail(fn, failf(errs.Argument, "masks and out must not be NULL"))
	}
	stack, err := maskStack(maskData, f64, nMasks, sigY, sigX)
	if err != nil {
		return fail(fn, err)
	}
	return applyStack(fn, dsHandle, stack, planHandle, runHandle, progress, progressUser, out, outDType, outLen, shifts)
}

// applyStack is applyC, and stemdot_apply_masks, with the stack built.
func applyStack(fn string, dsHandle C.stemdot_dataset, stack *masks.Stack, planHandle C.stemdot_plan, runHandle C.stemdot_run,
	progress C.stemdot_progress_fn, progressUser unsafe.Pointer, out unsafe.Pointer, outDType C.stemdot_dtype, outLen C.size_t, shifts []float64) C.stemdot_status {
	if out == nil {
		return fail(fn, failf(errs.Argument, "out must not be NULL"))
	}
	req := applyRequest{stack: stack, shifts: shifts}
	var release func()
	var err error
	if req.ds, req.plan, req.run, release, err = jobOf(uint64(dsHandle), uint64(planHandle), uint64(runHandle)); err != nil {
		return fail(fn, err)
	}
	defer release()
	n, err := sizeProduct("out_len", 8, 0, outLen) // float32 or float64: at most 8 bytes
	if err != nil {
		return fail(fn, err)
	}
	switch outDType {
	case C.STEMDOT_FLOAT32:
		req.out32 = unsafe.Slice((*float32)(out), n)
	case C.STEMDOT_FLOAT64:
		req.out64 = unsafe.Slice((*float64)(out), n)
	default:
		return fail(fn, failf(errs.DType, "result dtype %d is not STEMDOT_FLOAT32 (%d) or STEMDOT_FLOAT64 (%d)", outDType, C.STEMDOT_FLOAT32, C.STEMDOT_FLOAT64))
	}
	if progress != nil {
		req.progress = func(done, total uint64) {
			C.stemdot_capi_call_progress(progress, C.uint64_t(done), C.uint64_t(total), progressUser)
		}
	}
	if err := apply(req); err != nil {
		return fail(fn, err)
	}
	return succeed()
}

// maskStack is the stack of nMasks masks of sigY×sigX weights at data: float, or double
// (f64: float32 weights and Lo parts, masks.New64).
func maskStack(data unsafe.Pointer, f64 bool, nMasks, sigY, sigX C.size_t) (*masks.Stack, error) {
	elemBytes := 4
	if f64 {
		elemBytes = 8
	}
	weights, err := sizeProduct("masks", elemBytes, masks.MaxWeights, nMasks, sigY, sigX)
	if err != nil {
		return nil, err
	}
	n, sy, sx := int(nMasks), int(sigY), int(sigX)
	if f64 {
		return newStack(masks.New64(n, sy, sx, unsafe.Slice((*float64)(data), weights), nil))
	}
	return newStack(masks.New(n, sy, sx, unsafe.Slice((*float32)(data), weights), nil))
}

// masksDType tells whether a masks_dtype is STEMDOT_FLOAT64 (else STEMDOT_FLOAT32).
func masksDType(dt C.stemdot_dtype) (f64 bool, err error) {
	switch dt {
	case C.STEMDOT_FLOAT32:
		return false, nil
	case C.STEMDOT_FLOAT64:
		return true, nil
	}
	return false, failf(errs.DType, "mask dtype %d is not STEMDOT_FLOAT32 (%d) or STEMDOT_FLOAT64 (%d)", dt, C.STEMDOT_FLOAT32, C.STEMDOT_FLOAT64)
}

// newStack classifies a refused stack as an invalid argument.
func newStack(s *masks.Stack, err error) (*masks.Stack, error) {
	return s, errs.Wrap(errs.Argument, err)
}

//export stemdot_go_com_shifts
func stemdot_go_com_shifts(result *C.stemdot_cvoid, resultDType C.stemdot_dtype, nFrames, nMasks, sumMask C.size_t, shifts *C.double) (st C.stemdot_status) {
	const fn = "stemdot_com_shifts"
	defer guard(fn, &st)
	if result == nil || shifts == nil {
		return fail(fn, failf(errs.Argument, "result and shifts must not be NULL"))
	}
	n, err := sizeProduct("result", 8, 0, nFrames, nMasks) // float32 or float64: at most 8 bytes
	if err != nil {
		return fail(fn, err)
	}
	if _, err := sizeProduct("shifts", 8, 0, nFrames, 2); err != nil {
		return fail(fn, err)
	}
	res := &stemdot.Result{}
	res.NMasks, res.NavShape = int(nMasks), []int{int(nFrames)}
	switch resultDType {
	case C.STEMDOT_FLOAT32:
		res.F32 = unsafe.Slice((*float32)(unsafe.Pointer(result)), n)
	case C.STEMDOT_FLOAT64:
		res.F64 = unsafe.Slice((*float64)(unsafe.Pointer(result)), n)
	default:
		return fail(fn, failf(errs.DType, "result dtype %d is not STEMDOT_FLOAT32 (%d) or STEMDOT_FLOAT64 (%d)", resultDType, C.STEMDOT_FLOAT32, C.STEMDOT_FLOAT64))
	}
	if uint64(sumMask) > math.MaxInt32 {
		return fail(fn, failf(errs.Argument, "sum_mask %d is out of range", sumMask))
	}
	out, err := stemdot.COMShifts(res, int(sumMask))
	if err != nil {
		return fail(fn, err)
	}
	copy(unsafe.Slice((*float64)(unsafe.Pointer(shifts)), len(out)), out)
	return succeed()
}

// product is the number of positions of shape.
func product(shape []int) int {
	n := 1
	for _, s := range shape {
		n *= s
	}
	return n
}
