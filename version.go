package stemdot

import (
	"github.com/stemdot/stemdot/cuda"
	"github.com/stemdot/stemdot/dataset/hdf5"
)

// Version is stemdot's version (semantic versioning): the C ABI's STEMDOT_VERSION
// (include/stemdot.h) and the Python package's version are the same string, and
// `stemdot --version` prints it.
const Version = "0.3.0"

// BuiltWithCUDA reports whether this build of stemdot can run GPU workers (built with
// the cuda tag: `make` where nvcc is found).
func BuiltWithCUDA() bool { return cuda.Built() }

// BuiltWithHDF5 reports whether this build of stemdot reads HDF5 files (built without
// the nohdf5 tag: `make` where pkg-config finds libhdf5) and the version of the HDF5 C
// library it runs with, as "1.10.8" ("" when not built with it).
func BuiltWithHDF5() (libVersion string, ok bool) { return hdf5.Library() }
