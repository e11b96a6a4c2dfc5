//go:build !cgo

package affinity

// nvmlGPUs finds no GPU: NVML bindings need cgo.
func nvmlGPUs() ([]GPU, error) { return nil, nil }
