//go:build nohdf5

package hdf5

import "github.com/stemdot/stemdot/errs"

// EventFile of a build without libhdf5 (tag nohdf5): OpenEvents refuses every file.
type EventFile struct{}

// OpenEvents refuses the file: this build has no HDF5.
func OpenEvents(path string) (*EventFile, error) {
	return nil, errs.New(errs.Format, "dataset: %s: this stemdot was built without HDF5 (build tag nohdf5): install the HDF5 C library "+
		"(Debian, Ubuntu: apt-get install libhdf5-dev pkg-config) and build again (make) to read HDF5 files", path)
}

func (f *EventFile) Close() error                                { return nil }
func (f *EventFile) Exists(string) bool                          { return false }
func (f *EventFile) IntAttr(string, string) (int64, bool, error) { return 0, false, nil }
func (f *EventFile) Ints(string, int) ([]int64, error)           { return nil, nil }
func (f *EventFile) VLen(string) (*VLenRows, error)              { return nil, nil }

// VLenRows of a build without libhdf5: never opened.
type VLenRows struct{}

func (v *VLenRows) Len() int                                       { return 0 }
func (v *VLenRows) Close()                                         {}
func (v *VLenRows) Read(int, int, func(int, []uint32) error) error { return nil }
