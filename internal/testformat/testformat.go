// Package testformat registers the test-only format "skiptest", whose options exist only
// as format options (dataset.Format.FormatOptions), for the tests of the front ends (the
// stemdot package, the CLI's flags, the C ABI's option string): a format's own options
// must reach it by key, by flag and by Go name. Only tests import it.
//
// A skiptest file (extension .skiptest) holds frames of 2×2 uint8 pixels, one after the
// other, after option skip_bytes bytes (default 0); option skip_note (a switch) adds the
// note Note. The file states no scan shape.
package testformat

import (
	"fmt"
	"strconv"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/errs"
)

// Name is the format's name, and Ext its extension.
const (
	Name = "skiptest"
	Ext  = ".skiptest"
)

// Note is the note option skip_note adds.
const Note = "a note, as asked"

func init() {
	dataset.Register(dataset.Format{Name: Name, Extensions: []string{Ext}, Open: open,
		FormatOptions: []dataset.FormatOption{
			{Key: "skip_bytes", Usage: "skiptest files: bytes before the first frame", Default: "0"},
			{Key: "skip_note", Usage: "skiptest files: add a note", Switch: true},
		}})
}

func open(path string, opt dataset.Options) (dataset.Dataset, error) {
	skip := int64(0)
	if v, ok := opt.FormatOptions["skip_bytes"]; ok {
		var err error
		if skip, err = strconv.ParseInt(v, 10, 64); err != nil || skip < 0 {
			return nil, errs.New(errs.Argument, "dataset: %s: option skip_bytes %q is not a byte count", path, v)
		}
	}
	var notes []string
	switch v := opt.FormatOptions["skip_note"]; v {
	case "true":
		notes = append(notes, Note)
	case "false", "":
	default:
		return nil, fmt.Errorf("dataset: %s: option skip_note %q is not true or false", path, v)
	}
	f, size, err := dataset.OpenFile(path)
	if err != nil {
		return nil, err
	}
	data := max(size-skip, 0)
	return dataset.OpenFlat(dataset.Flat{Format: Name, Path: path, File: f, Size: size, Offset: skip, Sig: [2]int{2, 2}, DType: dataset.Uint8},
		opt, nil, "", dataset.FileFrames{Whole: int(data / 4), CutBytes: data % 4, RecordBytes: 4, Notes: notes})
}
