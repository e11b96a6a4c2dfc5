//go:build !cuda

package cuda

import (
	"context"
	"time"

	"github.com/stemdot/stemdot/dataset"
)

// Built reports whether stemdot was built with CUDA support (build tag cuda).
func Built() bool { return false }

// UseTiledDense does nothing: this build has no CUDA support.
func UseTiledDense(on bool) {}

// DeviceCount returns ErrNoCUDA: this build has no CUDA support.
func DeviceCount() (int, error) { return 0, ErrNoCUDA }

// Properties returns ErrNoCUDA: this build has no CUDA support.
func Properties(dev int) (Props, error) { return Props{}, ErrNoCUDA }

// CopyTime returns ErrNoCUDA: this build has no CUDA support.
func CopyTime(dev int, kind CopyKind, n, iters int) (time.Duration, error) { return 0, ErrNoCUDA }

// Runner is a GPU worker; this build has none (see the cuda build tag).
type Runner struct{}

// NewRunner returns ErrNoCUDA: this build has no CUDA support.
func NewRunner(cfg RunnerConfig) (*Runner, error) { return nil, ErrNoCUDA }

// Config returns the zero configuration: this build has no runners.
func (r *Runner) Config() RunnerConfig { return RunnerConfig{} }

// Run returns ErrNoCUDA: this build has no CUDA support.
func (r *Runner) Run(ctx context.Context, start, end int, read func(dst []byte, start, end int) error, out32 []float32, out64 []float64) error {
	return ErrNoCUDA
}

// RunMapped returns ErrNoCUDA: this build has no CUDA support.
func (r *Runner) RunMapped(ctx context.Context, start, end int, fm dataset.FrameMap, out32 []float32, out64 []float64) error {
	return ErrNoCUDA
}

func deviceInit(dev int) error { return ErrNoCUDA }

// KernelTime returns ErrNoCUDA: this build has no CUDA support.
func (r *Runner) KernelTime(frames, iters int) (time.Duration, error) { return 0, ErrNoCUDA }

// Close returns ErrNoCUDA: this build has no CUDA support.
func (r *Runner) Close() error { return ErrNoCUDA }
