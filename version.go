package stemdot

import "github.com/stemdot/stemdot/cuda"

// Version is stemdot's version (semantic versioning): the C ABI's STEMDOT_VERSION
// (include/stemdot.h) and the Python package's version are the same string, and
// `stemdot --version` prints it.
const Version = "0.2.0"

// BuiltWithCUDA reports whether this build of stemdot can run GPU workers (built with
// the cuda tag: `make` where nvcc is found).
func BuiltWithCUDA() bool { return cuda.Built() }
