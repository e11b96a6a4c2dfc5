package planner

import (
	"fmt"
	"math"
)

// partitions splits shape's frames for nWorkers workers at about target bytes of
// float32 frames per partition; it also returns the float32 bytes of one frame.
func partitions(shape Shape, nWorkers int, target int64) ([]Partition, int64, error) {
	if shape.NumFrames < 1 || shape.SigY < 1 || shape.SigX < 1 {
		return nil, 0, fmt.Errorf("planner: dataset shape %d frames of %dx%d pixels: want at least 1 frame of 1x1", shape.NumFrames, shape.SigY, shape.SigX)
	}
	if int64(shape.SigY) > math.MaxInt64/4/int64(shape.SigX) {
		return nil, 0, fmt.Errorf("planner: frame of %dx%d pixels is too large", shape.SigY, shape.SigX)
	}
	frameBytes := int64(shape.SigY) * int64(shape.SigX) * 4
	if int64(shape.NumFrames) > math.MaxInt64/frameBytes {
		return nil, 0, fmt.Errorf("planner: dataset of %d frames of %dx%d pixels is too large", shape.NumFrames, shape.SigY, shape.SigX)
	}
	total := int64(shape.NumFrames) * frameBytes
	frames := shape.NumFrames

	n := frames
	if frames >= nWorkers {
		n = int(min(total/target+btoi64(total%target != 0), int64(frames)))
		n = (n + nWorkers - 1) / nWorkers * nWorkers // at least nWorkers since n >= 1
		n = min(n, frames/nWorkers*nWorkers)
	}
	parts := make([]Partition, n)
	start := 0
	for i := range parts {
		end := start + frames/n + btoi(i < frames%n)
		parts[i] = Partition{Start: start, End: end}
		start = end
	}
	return parts, frameBytes, nil
}

func btoi64(b bool) int64 { return int64(btoi(b)) }
