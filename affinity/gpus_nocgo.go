//go:build !cgo

package affinity

// nvmlGPUs finds no GPU: loading NVML needs cgo (dlopen); a build without cgo cannot run
// GPU workers anyway.
func nvmlGPUs() ([]GPU, error) { return nil, nil }
