// Package errs classifies stemdot's errors by what went wrong, so that the front ends
// (the CLI, the C ABI's status codes, Python's exception classes) map a failure without
// guessing from its message.
//
// A classified error satisfies errors.Is(err, kind) for its Kind (errs.Format, errs.IO,
// ...); KindOf returns the kind. The packages that find a problem classify it where they
// find it: dataset (IO, Format, Shape, DType, Argument), masks (IO, Format), the root
// package stemdot (options, masks, plans: Argument, Shape, Resources, CUDA), and a
// cancelled context is Cancelled wherever it surfaces.
package errs

import (
	"context"
	"errors"
	"fmt"
)

// Kind is the class of an error. A Kind is itself an error, so that
// errors.Is(err, errs.Format) tests the class.
type Kind uint8

// The kinds. Unclassified errors are Internal: a path that stemdot did not foresee.
const (
	Internal  Kind = iota // a bug in stemdot or an unforeseen failure
	Argument              // a bad option, flag value, mask spec or request
	IO                    // a file missing or unreadable, a read or write that failed
	Format                // file content stemdot cannot read: unknown format, truncated, inconsistent
	Shape                 // sizes that do not match: nav/sig shapes, masks, buffers
	DType                 // an unsupported or wrong dtype
	Resources             // a CPU/GPU request that cannot be planned on the machine
	Cancelled             // the run was cancelled (context cancelled, Ctrl-C, stemdot_run_cancel)
	CUDA                  // GPU workers requested explicitly, but no CUDA build or no GPU
)

var kindNames = [...]string{"internal error", "invalid argument", "I/O error", "format error",
	"shape error", "dtype error", "resources error", "cancelled", "CUDA unavailable"}

// Error returns the kind's name ("format error").
func (k Kind) Error() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("errs.Kind(%d)", k)
}

// classified is an error with its kind; its message is the wrapped error's.
type classified struct {
	kind Kind
	err  error
}

func (e *classified) Error() string        { return e.err.Error() }
func (e *classified) Unwrap() error        { return e.err }
func (e *classified) Is(target error) bool { return target == e.kind }

// Wrap classifies err as kind and returns it with the same message. A nil err gives
// nil; an err that already has a kind (see KindOf) keeps it, so the first, most precise
// classification wins.
func Wrap(kind Kind, err error) error {
	if err == nil {
		return nil
	}
	var c *classified
	if errors.As(err, &c) {
		return err
	}
	return &classified{kind: kind, err: err}
}

// New returns an error of kind with a message formatted as by fmt.Errorf (%w allowed).
func New(kind Kind, format string, args ...any) error {
	return &classified{kind: kind, err: fmt.Errorf(format, args...)}
}

// KindOf returns the kind of err: the first kind in its chain, Cancelled for a
// cancelled or expired context, Internal for anything else (nil gives Internal too:
// callers test err != nil first).
func KindOf(err error) Kind {
	var c *classified
	switch {
	case errors.As(err, &c):
		return c.kind
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return Cancelled
	}
	return Internal
}
