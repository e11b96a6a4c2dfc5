package main

import (
	"fmt"

	"github.com/stemdot/stemdot/errs"
)

// status mirrors stemdot_status of include/stemdot.h (exports.go checks at compile time
// that the values agree).
type status int

// The status codes, in the order of the C enum.
const (
	statusOK status = iota
	errInvalidArgument
	errIO
	errFormat
	errShape
	errDType
	errPlan
	errCancelled
	errBadHandle
	errCUDAUnavailable
	errInternal
	// errForked is returned by the C wrappers of abi.c alone (in a forked child, Go is
	// never entered); no error kind maps to it.
	errForked
)

// kindStatus is the status of each error kind (package errs): one table, no guessing.
var kindStatus = map[errs.Kind]status{
	errs.Internal:  errInternal,
	errs.Argument:  errInvalidArgument,
	errs.IO:        errIO,
	errs.Format:    errFormat,
	errs.Shape:     errShape,
	errs.DType:     errDType,
	errs.Resources: errPlan,
	errs.Cancelled: errCancelled,
	errs.CUDA:      errCUDAUnavailable,
}

// badHandle is the C ABI's own error class: a handle unknown, freed or of another kind.
type badHandle struct{ error }

// failf returns an error of kind with a formatted message.
func failf(kind errs.Kind, format string, args ...any) error { return errs.New(kind, format, args...) }

// badHandlef returns a bad-handle error.
func badHandlef(format string, args ...any) error { return badHandle{fmt.Errorf(format, args...)} }

// codeOf is the status code of err: errBadHandle for a bad handle, else its kind's.
func codeOf(err error) status {
	if err == nil {
		return statusOK
	}
	if _, ok := err.(badHandle); ok {
		return errBadHandle
	}
	return kindStatus[errs.KindOf(err)]
}

// panicError turns a recovered panic value into an errs.Internal error.
func panicError(r any) error {
	return failf(errs.Internal, "internal error (recovered panic): %v", r)
}
