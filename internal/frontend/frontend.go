// Package frontend is the plumbing that stemdot's front ends share and a Go user of the
// library does not call: the CLI (cmd/stemdot, cmd/internal/cli), the C ABI (cmd/libstemdot),
// the viewer (cmd/internal/view) and the bench name options and parse shapes the same way
// through it.
//
// The functions that read the root package's private tables (the options' names, the
// output checks, the PNG drawing) are variables that package stemdot sets when it is
// initialised: a front end imports package stemdot (each does) and calls them here.
package frontend

import (
	"errors"
	"fmt"
	"image"
	"strconv"
	"strings"

	"github.com/stemdot/stemdot/affinity"
	"github.com/stemdot/stemdot/errs"
)

// Set by package stemdot (frontend.go) at init.
var (
	// FlagNames rewrites the options named in an error message, by key ("give option
	// sig_shape") or by Go name ("give Options.SigShape", as package stemdot's errors
	// name them), as the CLI's flags ("give --sig-shape"). Only known options are
	// rewritten.
	FlagNames func(msg string) string

	// OptionKeys rewrites the Go names of options in a message ("give
	// Options.SigShape", as package stemdot's errors and warnings name them) as "option
	// KEY" ("give option sig_shape"): the C ABI and Python name options by key.
	OptionKeys func(msg string) string

	// CheckShiftsFile reports, before any work, why stemdot.SaveShifts cannot write
	// path (option out): a path not ending in .npy after a file name (errs.Argument), or
	// one that atomicfile refuses: one of inputs (the run's input files), a directory, a
	// file that cannot be replaced (errs.IO).
	CheckShiftsFile func(path string, inputs ...string) error

	// CheckScan2D refuses a nav shape of more than 2 axes for what (a phrase such as
	// "view: the virtual images are"), which is of 1-D and 2-D scans only (images of the
	// scan): errs.Shape naming option nav_shape that reads the scan as a 2-D one, without
	// its axes of size 1 ((2, 2, 1) → 2,2), else its planes one below the other ((nav_z,
	// nav_y, nav_x) → nav_z·nav_y,nav_x).
	CheckScan2D func(nav []int, what string) error

	// GreyImage is the PNG image that stemdot.Outputs.PNGPrefix writes of one image:
	// values laid out as nav (C order, rows of its last axis; a 1-D nav shape as one
	// row), 8-bit grey from the finite minimum (black) to the finite maximum (white), NaN
	// black, scaled up by a whole factor to a short side of at least 256 pixels (the long
	// side at most 4096). stemdot view exports its images as this PNG.
	GreyImage func(nav []int, values []float64) *image.Gray
)

// FlagName turns an option key into the CLI's flag: "sig_shape" → "--sig-shape".
func FlagName(key string) string { return "--" + strings.ReplaceAll(key, "_", "-") }

// ParseKeyValues calls set for each item of "key=value;key=value" (keys case-insensitive,
// lowercased; empty items skipped); an item without "=" (named as what) and a key given
// twice are errs.Argument, as is what set returns.
func ParseKeyValues(s, what string, set func(key, value string) error) error {
	seen := map[string]bool{}
	for item := range strings.SplitSeq(s, ";") {
		if strings.TrimSpace(item) == "" {
			continue
		}
		key, value, ok := strings.Cut(item, "=")
		key = strings.ToLower(strings.TrimSpace(key))
		switch {
		case !ok || key == "":
			return errs.New(errs.Argument, "%s %q is not key=value", what, strings.TrimSpace(item))
		case seen[key]:
			return errs.New(errs.Argument, "option %s given twice", key)
		}
		seen[key] = true
		if err := set(key, value); err != nil {
			return err
		}
	}
	return nil
}

// ParseShape parses a shape "256,256", optionally in parentheses or brackets ("(2, 4)",
// "[2,4]", as Python prints tuples and lists), into positive sizes, rows first; ndim > 0
// requires exactly that many. An empty string gives nil. Errors are errs.Shape and say
// the form wanted: sizes are separated by commas only ("64x64" is refused, as an x
// reads as width×height as often as rows×columns).
func ParseShape(s string, ndim int) ([]int, error) {
	t := strings.TrimSpace(s)
	if len(t) >= 2 && (t[0] == '(' && t[len(t)-1] == ')' || t[0] == '[' && t[len(t)-1] == ']') {
		t = t[1 : len(t)-1]
	}
	t = strings.TrimSuffix(strings.TrimSpace(t), ",") // "(5,)"
	if t == "" {
		if strings.TrimSpace(s) == "" {
			return nil, nil
		}
		return nil, errs.New(errs.Shape, "empty shape %q", s)
	}
	fields := strings.Split(t, ",")
	shape := make([]int, len(fields))
	for i, f := range fields {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if errors.Is(err, strconv.ErrRange) && !strings.HasPrefix(strings.TrimSpace(f), "-") {
			return nil, errs.New(errs.Shape, "size %q is too large", strings.TrimSpace(f))
		}
		if err != nil {
			return nil, errs.New(errs.Shape, "want %s", shapeForm(ndim))
		}
		if n <= 0 {
			return nil, errs.New(errs.Shape, "%q is not a positive size", strings.TrimSpace(f))
		}
		shape[i] = n
	}
	if ndim > 0 && len(fields) != ndim {
		return nil, errs.New(errs.Shape, "want %d comma-separated sizes, got %d", ndim, len(fields))
	}
	return shape, nil
}

// shapeForm says how a shape of ndim sizes (0: any number) is written, for messages.
func shapeForm(ndim int) string {
	switch ndim {
	case 0:
		return "whole sizes separated by commas, rows first: Y,X (e.g. 64,64), N (e.g. 4096) or Z,Y,X (e.g. 8,64,64)"
	case 2:
		return "Y,X: two whole sizes separated by a comma, rows first (e.g. 256,256)"
	}
	return fmt.Sprintf("%d whole sizes separated by commas", ndim)
}

// FindCOM returns the index of the first centre-of-mass set in names: the masks
// "com_sum", "com_y", "com_x" in a row, as the com spec makes them (masks.COM), the
// index stemdot.COMShifts takes.
func FindCOM(names []string) (sum int, ok bool) {
	for i := 0; i+2 < len(names); i++ {
		if names[i] == "com_sum" && names[i+1] == "com_y" && names[i+2] == "com_x" {
			return i, true
		}
	}
	return 0, false
}

// PinThread locks the calling goroutine to its OS thread and pins that thread to the
// logical CPU cpu (affinity.Pin), as the engine pins its workers; unpin restores the
// thread's previous affinity and unlocks it. Errors are errs.Resources. For tools that
// measure the machine the way the workers use it (the bench's read floor).
func PinThread(cpu int) (unpin func() error, err error) {
	unpin, err = affinity.Pin([]int{cpu})
	return unpin, errs.Wrap(errs.Resources, err)
}
