package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/stemdot/stemdot/dataset"
)

// datasetFlags are the options that say how to read a dataset file.
type datasetFlags struct {
	format    string
	navShape  string
	sigShape  string
	dtype     string
	byteOrder string
	offset    int64
}

func (f *datasetFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.format, "format", "", "file format: raw, npy or mib (default: detected from extension and content)")
	fs.StringVar(&f.navShape, "nav-shape", "", "navigation (scan) shape Y,X (or N); overrides the file's when the frame count matches (default: from the file, else 1,N)")
	fs.StringVar(&f.sigShape, "sig-shape", "", "raw files: signal (frame) shape Y,X in pixels")
	fs.StringVar(&f.dtype, "dtype", "", "raw files: pixel dtype (uint8, uint16, uint32, int8, int16, int32, float32, float64)")
	fs.StringVar(&f.byteOrder, "byte-order", "little", "raw files: byte order, little or big")
	fs.Int64Var(&f.offset, "offset", 0, "raw files: bytes to skip at the start of the file")
}

func (f *datasetFlags) open(path string) (dataset.Dataset, error) {
	opt := dataset.Options{Format: f.format, Offset: f.offset}
	var err error
	if opt.NavShape, err = parseShape("--nav-shape", f.navShape, 0); err != nil {
		return nil, err
	}
	if len(opt.NavShape) > 2 {
		return nil, fmt.Errorf("--nav-shape %q: want Y,X or N", f.navShape)
	}
	if opt.SigShape, err = parseShape("--sig-shape", f.sigShape, 2); err != nil {
		return nil, err
	}
	if f.dtype != "" {
		if opt.DType, err = dataset.ParseDType(f.dtype); err != nil {
			return nil, err
		}
	}
	switch strings.ToLower(f.byteOrder) {
	case "little", "le", "<":
	case "big", "be", ">":
		opt.BigEndian = true
	default:
		return nil, fmt.Errorf("--byte-order %q: want little or big", f.byteOrder)
	}
	return dataset.Open(path, opt)
}

// parseShape parses "Y,X" (or any number of comma-separated positive integers when
// ndim is 0). An empty string gives nil.
func parseShape(flag, s string, ndim int) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	if ndim > 0 && len(parts) != ndim {
		return nil, fmt.Errorf("%s %q: want %d comma-separated sizes", flag, s, ndim)
	}
	shape := make([]int, len(parts))
	for i, p := range parts {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%s %q: %q is not a positive integer", flag, s, p)
		}
		shape[i] = n
	}
	return shape, nil
}

func shapeString(s []int) string {
	parts := make([]string, len(s))
	for i, n := range s {
		parts[i] = strconv.Itoa(n)
	}
	return "(" + strings.Join(parts, ", ") + ")"
}
