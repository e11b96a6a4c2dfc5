package engine

import (
	"context"
	"fmt"

	"github.com/stemdot/stemdot/cuda"
	"github.com/stemdot/stemdot/planner"
)

// gpuWorker computes partitions on one CUDA device through a cuda.Runner, which reads
// each tile into pinned host memory and overlaps the reads, host-to-device copies,
// kernels and result copies of consecutive tiles on several streams. Runners on one
// device share the job's mask upload (the same Masks slice or *CSR). In a build without
// CUDA, creating one fails with cuda.ErrNoCUDA.
type gpuWorker struct {
	job    *Job
	runner *cuda.Runner
}

func newGPUWorker(spec planner.Worker, job *Job) (Worker, error) {
	r, err := cuda.NewRunner(cuda.RunnerConfig{
		Device:  spec.GPU,
		DType:   job.Dataset.DType(),
		Pixels:  job.Masks.Pixels(),
		NMasks:  job.NMasks,
		Masks:   job.Masks.Data,
		Sparse:  job.Sparse,
		Float64: job.Float64,
	})
	if err != nil {
		return nil, fmt.Errorf("GPU worker on device %d: %w", spec.GPU, err)
	}
	return &gpuWorker{job: job, runner: r}, nil
}

func (w *gpuWorker) Process(ctx context.Context, p planner.Partition, out Output, progress func(int)) error {
	read := func(dst []byte, start, end int) error { return w.job.Dataset.ReadFrames(start, end, dst) }
	if err := w.runner.Run(ctx, p.Start, p.End, read, out.F32, out.F64); err != nil {
		return err
	}
	progress(p.Frames())
	return nil
}

func (w *gpuWorker) Close() error { return w.runner.Close() }
