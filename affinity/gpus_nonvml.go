//go:build !cgo || nonvml

package affinity

// nvmlGPUs finds no GPU: this build has no NVML bindings. They need cgo, and the nonvml
// tag leaves them out of CPU-only shared libraries (libstemdot.so), whose NVML symbols
// would otherwise stay unresolved for the programs that link them; such a build cannot
// run GPU workers anyway.
func nvmlGPUs() ([]GPU, error) { return nil, nil }
