package masks

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Parse builds the mask stack described by spec, the CLI --mask syntax, for frames of
// sig_shape sig = (sig_y, sig_x). Coordinates and radii are in pixels (see the package
// doc for the coordinate convention and pixel-inclusion rules):
//
//	disk:CX,CY,R         Disk, virtual bright field
//	ring:CX,CY,RI,RO     Ring, annular dark field, 0 ≤ RI < RO
//	point:X,Y            Point, integer pixel
//	rect:X,Y,W,H         Rect, integers
//	com                  COM about (sig_y//2, sig_x//2), whole frame
//	com:CX,CY[,R]        COM about (CX, CY), within radius R (whole frame if omitted)
//
// It returns an error naming spec for an unknown kind, a wrong number of arguments, an
// argument that is not a (finite, or for point and rect integer) number, and every error
// of the generators (non-positive radii but RI 0, RI ≥ RO, a point outside the frame,
// masks that select no pixel; a mask partly outside the frame keeps its part inside).
//
// The auto specs (disk:auto, ring:auto,RI,RO, com:auto, ...) need the direct beam's
// centre: see ParseCentred; Parse refuses them, saying so.
func Parse(spec string, sig [2]int) (*Stack, error) {
	return ParseCentred(spec, sig, nil)
}

// ParseCentred is Parse that also takes the auto specs, about the direct beam's centre
// c (FindCentre of the scan's sum frame):
//
//	disk:auto            Disk about (c.X, c.Y) of radius c.R
//	disk:auto,R          Disk about (c.X, c.Y) of radius R
//	ring:auto,RI,RO      Ring about (c.X, c.Y)
//	com:auto             COM about (c.X, c.Y), whole frame
//	com:auto,R           COM about (c.X, c.Y), within radius R
//
// With c nil, an auto spec is an error that says it needs the centre and how to find
// it. Other specs ignore c.
func ParseCentred(spec string, sig [2]int, c *Centre) (*Stack, error) {
	s, err := parse(spec, sig, c)
	if err != nil {
		return nil, fmt.Errorf("mask %q: %w", spec, err)
	}
	return s, nil
}

// NeedsCentre reports whether spec is an auto spec (disk:auto, ...), which needs the
// direct beam's centre (ParseCentred).
func NeedsCentre(spec string) bool {
	_, argText, _ := strings.Cut(spec, ":")
	first, _, _ := strings.Cut(argText, ",")
	return strings.EqualFold(strings.TrimSpace(first), "auto")
}

func parse(spec string, sig [2]int, c *Centre) (*Stack, error) {
	kind, argText, hasArgs := strings.Cut(strings.TrimSpace(spec), ":")
	kind = strings.ToLower(strings.TrimSpace(kind))
	var args []string
	if strings.TrimSpace(argText) != "" {
		args = strings.Split(argText, ",")
	}
	if NeedsCentre(spec) {
		return parseAuto(kind, args[1:], sig, c)
	}
	switch kind {
	case "disk":
		v, err := floats(args, 3, 3, "disk:CX,CY,R")
		if err != nil {
			return nil, err
		}
		return Disk(sig, v[0], v[1], v[2])
	case "ring":
		v, err := floats(args, 4, 4, "ring:CX,CY,RI,RO")
		if err != nil {
			return nil, err
		}
		return Ring(sig, v[0], v[1], v[2], v[3])
	case "point":
		v, err := ints(args, 2, "point:X,Y")
		if err != nil {
			return nil, err
		}
		return Point(sig, v[0], v[1])
	case "rect":
		v, err := ints(args, 4, "rect:X,Y,W,H")
		if err != nil {
			return nil, err
		}
		return Rect(sig, v[0], v[1], v[2], v[3])
	case "com":
		if !hasArgs {
			return COM(sig, float64(sig[1]/2), float64(sig[0]/2), 0)
		}
		v, err := floats(args, 2, 3, "com or com:CX,CY[,R]")
		if err != nil {
			return nil, err
		}
		if len(v) == 2 {
			return COM(sig, v[0], v[1], 0)
		}
		if !(v[2] > 0) || math.IsInf(v[2], 0) {
			return nil, fmt.Errorf("com: radius must be positive and finite, got %v (leave R out for the whole frame: com:CX,CY)", v[2])
		}
		return COM(sig, v[0], v[1], v[2])
	}
	return nil, fmt.Errorf("unknown mask kind %q (want disk, ring, point, rect or com)", kind)
}

// parseAuto builds the auto spec of kind with the arguments after "auto", about c.
func parseAuto(kind string, args []string, sig [2]int, c *Centre) (*Stack, error) {
	var usage string
	var lo, hi int
	switch kind {
	case "disk":
		usage, lo, hi = "disk:auto or disk:auto,R", 0, 1
	case "ring":
		usage, lo, hi = "ring:auto,RI,RO", 2, 2
	case "com":
		usage, lo, hi = "com:auto or com:auto,R", 0, 1
	default:
		return nil, fmt.Errorf("%s:auto: only disk, ring and com masks take the direct beam's centre (auto)", kind)
	}
	v, err := floats(args, lo, hi, usage)
	if err != nil {
		return nil, err
	}
	if c == nil {
		return nil, fmt.Errorf("auto needs the direct beam's centre, found from the scan's sum frame (stemdot info --centre; FindCentre in Go, find_centre in Python): give it with the spec (Go: masks.ParseCentred; Python: mask(spec, sig_shape, centre=...)), or write the centre's coordinates in the spec (%s:CX,CY,...)", kind)
	}
	switch {
	case kind == "disk" && len(v) == 0:
		return Disk(sig, c.X, c.Y, c.R)
	case kind == "disk":
		return Disk(sig, c.X, c.Y, v[0])
	case kind == "ring":
		return Ring(sig, c.X, c.Y, v[0], v[1])
	case len(v) == 0:
		return COM(sig, c.X, c.Y, 0)
	}
	if !(v[0] > 0) {
		return nil, fmt.Errorf("com: radius must be positive and finite, got %v (leave R out for the whole frame: com:auto)", v[0])
	}
	return COM(sig, c.X, c.Y, v[0])
}

// floats parses between lo and hi comma-separated finite numbers; usage is the syntax
// shown in errors.
func floats(args []string, lo, hi int, usage string) ([]float64, error) {
	if len(args) < lo || len(args) > hi {
		return nil, fmt.Errorf("got %d arguments, want %s", len(args), usage)
	}
	v := make([]float64, len(args))
	for i, a := range args {
		f, err := strconv.ParseFloat(strings.TrimSpace(a), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("argument %d %q is not a finite number (%s)", i+1, a, usage)
		}
		v[i] = f
	}
	return v, nil
}

// ints parses exactly n comma-separated integers; usage is the syntax shown in errors.
func ints(args []string, n int, usage string) ([]int, error) {
	if len(args) != n {
		return nil, fmt.Errorf("got %d arguments, want %s", len(args), usage)
	}
	v := make([]int, n)
	for i, a := range args {
		k, err := strconv.Atoi(strings.TrimSpace(a))
		if err != nil {
			return nil, fmt.Errorf("argument %d %q is not an integer (%s)", i+1, a, usage)
		}
		v[i] = k
	}
	return v, nil
}
